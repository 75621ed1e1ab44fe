package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"github.com/google/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
)

// Restartable is a control plane whose kube-apiserver can be stopped and
// started again on the same etcd, as when it crashes or is upgraded, for
// tests of what its clients do across a restart: broken watches, a re-list
// from a fresh watch cache, writes whose answer never came.
//
// Every start of kube-apiserver brings a new port, serving certificate and
// admin token, which clients configured once could not follow. So clients
// talk to a front proxy in this process instead, whose address stays: it
// forwards each request to the apiserver running at that moment,
// authenticated as its admin (impersonation headers pass through), and
// drops the connection while none runs, as a dead apiserver would.
type Restartable struct {
	// ControlPlane's Config and Client talk to the front proxy; its Stop
	// stops the apiserver, the proxy and etcd.
	*ControlPlane

	tb      *processTB
	etcdURL string
	prefix  string
	proxy   *http.Server

	// mutex guards server, forward and cut, which are nil while no
	// apiserver runs.
	mutex   sync.Mutex
	server  *kubeapiservertesting.TestServer
	forward http.Handler
	// cut ends the requests forwarded to server.
	cut    context.Context
	cutAll context.CancelFunc
}

// StartRestartable starts etcd, kube-apiserver and the front proxy, and
// returns when the apiserver is healthy.
func StartRestartable(ctx context.Context) (r *Restartable, err error) {
	if err := setUpProcess(); err != nil {
		return nil, err
	}
	etcdURL, stopEtcd, err := startEtcd()
	if err != nil {
		return nil, err
	}
	r = &Restartable{
		tb:      &processTB{name: "restartable-control-plane", logToStderr: *controlPlaneLog},
		etcdURL: etcdURL,
		prefix:  uuid.New().String(),
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		stopEtcd()
		return nil, fmt.Errorf("listen for the front proxy: %w", err)
	}
	r.proxy = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: time.Minute}
	go func() { _ = r.proxy.Serve(listener) }()

	stopAll := func() error {
		r.StopAPIServer()
		_ = r.proxy.Close()
		r.tb.runCleanups()
		stopEtcd()
		if r.tb.hasFailed() {
			return errors.New("the control plane reported errors, see its log")
		}
		return nil
	}
	if err := r.StartAPIServer(); err != nil {
		_ = stopAll()
		return nil, err
	}
	config := &rest.Config{Host: "http://" + listener.Addr().String(), QPS: 1000, Burst: 10000}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		_ = stopAll()
		return nil, fmt.Errorf("create client: %w", err)
	}
	r.ControlPlane = &ControlPlane{Config: config, Client: client, stop: stopAll}
	return r, nil
}

// StartAPIServer starts kube-apiserver on the control plane's etcd, with
// the objects it had, and returns when it is healthy; from then on the
// front proxy forwards to it. It does nothing if one runs.
func (r *Restartable) StartAPIServer() error {
	r.mutex.Lock()
	defer r.mutex.Unlock()
	if r.server != nil {
		return nil
	}
	server, err := startAPIServer(r.tb, storageConfig(r.etcdURL, r.prefix))
	if err != nil {
		return err
	}
	target, err := url.Parse(server.ClientConfig.Host)
	if err != nil {
		server.TearDownFn()
		return fmt.Errorf("parse apiserver address: %w", err)
	}
	// The admin's TLS settings and token, as if the clients had them.
	transport, err := rest.TransportFor(server.ClientConfig)
	if err != nil {
		server.TearDownFn()
		return fmt.Errorf("create transport to the apiserver: %w", err)
	}
	r.server = &server
	r.cut, r.cutAll = context.WithCancel(context.Background())
	r.forward = &httputil.ReverseProxy{
		Rewrite:   func(req *httputil.ProxyRequest) { req.SetURL(target) },
		Transport: transport,
		// Watch events go out as they come in.
		FlushInterval: -1,
		ErrorHandler:  dropConnection,
	}
	return nil
}

// StopAPIServer stops kube-apiserver as if it crashed: the front proxy
// drops the connections of requests under way at once, and those of new
// requests until StartAPIServer. It does nothing if none runs.
func (r *Restartable) StopAPIServer() {
	r.mutex.Lock()
	server, cutAll := r.server, r.cutAll
	r.server, r.forward, r.cut, r.cutAll = nil, nil, nil, nil
	r.mutex.Unlock()
	if server == nil {
		return
	}
	// A graceful shutdown would also wait up to a minute for the watches
	// to end.
	cutAll()
	server.TearDownFn()
}

func (r *Restartable) serve(w http.ResponseWriter, req *http.Request) {
	r.mutex.Lock()
	forward, cut := r.forward, r.cut
	r.mutex.Unlock()
	if forward == nil {
		dropConnection(w, req, nil)
	}
	ctx, cancel := context.WithCancel(req.Context())
	defer cancel()
	stop := context.AfterFunc(cut, cancel)
	defer stop()
	forward.ServeHTTP(w, req.WithContext(ctx))
}

// dropConnection closes the client's connection without an answer, which
// is what clients of an apiserver that is down or goes down see.
func dropConnection(http.ResponseWriter, *http.Request, error) {
	panic(http.ErrAbortHandler)
}
