package controlplane

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ktestinglog "k8s.io/klog/v2/ktesting"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
)

var controlPlaneLog = flag.Bool("control-plane-log", false, "show the logs of the in-process kube-apiserver and etcd (on stderr)")

// ControlPlane is a kube-apiserver with an embedded etcd, both running in
// this process.
type ControlPlane struct {
	// Config is an admin (loopback) config with high QPS limits.
	Config *rest.Config
	// Client uses Config.
	Client kubernetes.Interface

	stopOnce sync.Once
	stopErr  error
	stop     func() error
}

// StartControlPlane starts etcd and kube-apiserver with the DRA feature
// gates of Features and returns when the apiserver is healthy. Stop tears
// both down; most tests use the shared instance from Shared instead.
//
// The feature gates are process-wide: the scheduler and the claim controller
// started in the same process see the same gates as the apiserver.
func StartControlPlane(ctx context.Context) (cp *ControlPlane, err error) {
	if err := setUpProcess(); err != nil {
		return nil, err
	}
	etcdURL, stopEtcd, err := startEtcd()
	if err != nil {
		return nil, err
	}
	tb := &processTB{name: "control-plane", logToStderr: *controlPlaneLog}
	stopAll := func() error {
		tb.runCleanups()
		stopEtcd()
		if tb.hasFailed() {
			return errors.New("the control plane reported errors, see its log")
		}
		return nil
	}
	defer func() {
		if err != nil {
			_ = stopAll()
		}
	}()

	server, err := startAPIServer(tb, storageConfig(etcdURL, uuid.New().String()))
	if err != nil {
		return nil, err
	}
	tb.Cleanup(server.TearDownFn)

	client, err := kubernetes.NewForConfig(server.ClientConfig)
	if err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}
	return &ControlPlane{Config: server.ClientConfig, Client: client, stop: stopAll}, nil
}

// setUpProcess prepares the process for a control plane: klog output and
// the feature gates of Features.
func setUpProcess() error {
	if !*controlPlaneLog {
		// kube-apiserver logs through klog's global logger as well as its
		// context; the scheduler and the claim controller log contextually
		// to their test.
		klog.SetOutput(io.Discard)
		klog.LogToStderr(false)
	}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(Features); err != nil {
		return fmt.Errorf("set feature gates: %w", err)
	}
	return nil
}

// storageConfig is the storage configuration of an apiserver on etcd,
// with its keys under prefix: apiservers started with the same prefix see
// the same objects.
func storageConfig(etcdURL, prefix string) *storagebackend.Config {
	storage := storagebackend.NewDefaultConfig(path.Join(prefix, "registry"), nil)
	storage.Transport.ServerList = []string{etcdURL}
	return storage
}

// startAPIServer starts kube-apiserver on the storage and returns when it
// is healthy. The caller tears it down.
func startAPIServer(tb *processTB, storage *storagebackend.Config) (kubeapiservertesting.TestServer, error) {
	flags := []string{
		// No ServiceAccount controller runs, so pods could not get a token.
		// TaintNodesByCondition would taint every new node as not ready,
		// and no node lifecycle controller runs to remove the taint.
		"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
		// As in a cluster: a scheduler that runs as its ServiceAccount gets
		// exactly the permissions of its roles, owner references to pods
		// need pods/finalizers (extended resource claims have them), and a
		// kubelet's credentials (system:node:<name>) get what the Node
		// authorizer and NodeRestriction allow them, so that tests of what
		// a taken-over node can write see what a cluster does.
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction,OwnerReferencesPermissionEnforcement",
		"--runtime-config=" + RuntimeConfig,
	}
	options := kubeapiservertesting.NewDefaultTestServerOptions()
	// The invariant checks scrape apiserver metrics for problems of the
	// apiserver itself; this suite tests the scheduler.
	disableInvariantChecks(options)

	var server kubeapiservertesting.TestServer
	if err := tb.run(func() error {
		var err error
		server, err = kubeapiservertesting.StartTestServer(tb, options, flags, storage)
		return err
	}); err != nil {
		return server, fmt.Errorf("start kube-apiserver: %w", err)
	}
	return server, nil
}

// Stop tears down the apiserver and etcd. It may be called more than once.
func (cp *ControlPlane) Stop() error {
	cp.stopOnce.Do(func() { cp.stopErr = cp.stop() })
	return cp.stopErr
}

// startEtcd runs an embedded etcd on free localhost ports with a temporary
// data directory, so that tests need no etcd binary.
func startEtcd() (clientURL string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "drasched-etcd")
	if err != nil {
		return "", nil, fmt.Errorf("create etcd data directory: %w", err)
	}
	ports, err := freePorts(2)
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	client := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
	peer := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))}

	cfg := embed.NewConfig()
	cfg.Name = "drasched-test"
	cfg.Dir = dir
	// A single throwaway member: durability buys nothing, fsync costs seconds.
	cfg.UnsafeNoFsync = true
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	if *controlPlaneLog {
		cfg.LogLevel = "info"
		cfg.LogOutputs = []string{"stderr"}
	} else {
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("start etcd: %w", err)
	}
	stop = func() {
		e.Close()
		_ = os.RemoveAll(dir)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		stop()
		return "", nil, fmt.Errorf("start etcd: %w", err)
	case <-time.After(time.Minute):
		stop()
		return "", nil, errors.New("etcd did not become ready within a minute")
	}
	return client.String(), stop, nil
}

// freePorts asks the kernel for n free ports. Another process could take one
// before etcd binds it; on a test machine that is rare enough.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		// Held until all are picked, so that no port comes up twice.
		defer func() { _ = l.Close() }()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

var shared struct {
	once sync.Once
	cp   *ControlPlane
	err  error
}

// Shared returns the control plane shared by all tests of this test binary,
// starting it on first use. Main stops it after the tests.
func Shared(t testing.TB) *ControlPlane {
	t.Helper()
	shared.once.Do(func() {
		start := time.Now()
		shared.cp, shared.err = StartControlPlane(context.Background())
		if shared.err == nil {
			t.Logf("started the shared control plane in %s", time.Since(start).Round(time.Millisecond))
		}
	})
	if shared.err != nil {
		t.Fatalf("start the shared control plane: %v", shared.err)
	}
	return shared.cp
}

// Main runs the tests of a package that uses Shared; call it from TestMain.
// Test logs default to verbosity 2 (-testing.v overrides it): the scheduler's
// V(5) output for hundreds of pods would drown a failure.
func Main(m *testing.M) {
	flag.Parse()
	verbositySet := false
	flag.Visit(func(f *flag.Flag) { verbositySet = verbositySet || f.Name == "testing.v" })
	if !verbositySet {
		if err := ktestinglog.DefaultConfig.Verbosity().Set("2"); err != nil {
			fmt.Fprintf(os.Stderr, "set test log verbosity: %v\n", err)
			os.Exit(2)
		}
	}

	code := m.Run()
	if shared.cp != nil {
		if err := shared.cp.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop the shared control plane: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}
