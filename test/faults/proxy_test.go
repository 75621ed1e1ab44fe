//go:build faults

package faults

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/drasched/drasched/test/integration/framework"
)

// apiProxy stands between a scheduler process and the apiserver: the
// process talks plain HTTP to it without credentials, and it forwards every
// request with the identity of its upstream configuration (the scheduler's
// ServiceAccount, by impersonation). It records what the process sends and
// can hold requests back (a gate), to stop or kill the process at an exact
// point of its work: a test that waits for "some progress" and then kills
// tests how fast the machine is, one that kills while the proxy holds the
// N-th write knows what the process had done.
type apiProxy struct {
	name   string
	server *httptest.Server

	// mutex guards log and gate.
	mutex sync.Mutex
	log   []proxiedRequest
	gate  *framework.RequestGate
}

// proxiedRequest is one request the process sent.
type proxiedRequest struct {
	call       framework.APICall
	method     string
	path       string
	start, end time.Time
	// status is the apiserver's answer; 0 while there is none, or if the
	// request failed.
	status int
}

func (r proxiedRequest) String() string {
	return fmt.Sprintf("%s %s %s -> %d", r.start.Format("15:04:05.000"), r.method, r.path, r.status)
}

func newAPIProxy(t *testing.T, name string, upstream *rest.Config) *apiProxy {
	t.Helper()
	target, err := url.Parse(upstream.Host)
	if err != nil {
		t.Fatalf("parse apiserver address: %v", err)
	}
	transport, err := rest.TransportFor(upstream)
	if err != nil {
		t.Fatalf("create transport: %v", err)
	}
	p := &apiProxy{name: name}
	forward := &httputil.ReverseProxy{
		Rewrite:   func(req *httputil.ProxyRequest) { req.SetURL(target) },
		Transport: transport,
		// Watch events go out as they come in.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			// What a client of an unreachable apiserver sees.
			panic(http.ErrAbortHandler)
		},
	}
	p.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		call := framework.ParseRequest(req)
		g, action := p.gateFor(call)
		if action == framework.HoldRequest {
			select {
			case <-g.Released():
			case <-req.Context().Done():
				return
			}
		}
		i := p.record(proxiedRequest{call: call, method: req.Method, path: req.URL.Path, start: time.Now()})
		if action == framework.HoldAnswer {
			answer := httptest.NewRecorder()
			forward.ServeHTTP(answer, req)
			p.finish(i, answer.Code)
			select {
			case <-g.Released():
			case <-req.Context().Done():
				return
			}
			maps.Copy(w.Header(), answer.Header())
			w.WriteHeader(answer.Code)
			_, _ = w.Write(answer.Body.Bytes())
			return
		}
		recorder := &statusRecorder{ResponseWriter: w}
		defer func() { p.finish(i, recorder.status) }()
		forward.ServeHTTP(recorder, req)
	}))
	t.Cleanup(func() {
		p.releaseGate()
		// Close would wait for the long requests (watches) of a process
		// that still runs; those are cut.
		p.server.CloseClientConnections()
		p.server.Close()
	})
	return p
}

// URL is the address the process talks to.
func (p *apiProxy) URL() string { return p.server.URL }

// hold applies a gate to the process' requests from now on.
func (p *apiProxy) hold(g *framework.RequestGate) *framework.RequestGate {
	p.mutex.Lock()
	defer p.mutex.Unlock()
	p.gate = g
	return g
}

func (p *apiProxy) gateFor(call framework.APICall) (*framework.RequestGate, framework.GateAction) {
	p.mutex.Lock()
	g := p.gate
	p.mutex.Unlock()
	if g == nil {
		return nil, framework.Pass
	}
	return g, g.Hold(call)
}

func (p *apiProxy) releaseGate() {
	p.mutex.Lock()
	g := p.gate
	p.mutex.Unlock()
	if g != nil {
		g.Release()
	}
}

func (p *apiProxy) record(r proxiedRequest) int {
	p.mutex.Lock()
	defer p.mutex.Unlock()
	p.log = append(p.log, r)
	return len(p.log) - 1
}

func (p *apiProxy) finish(i, status int) {
	p.mutex.Lock()
	defer p.mutex.Unlock()
	p.log[i].status, p.log[i].end = status, time.Now()
}

// requests returns the requests that started at or after since and match.
func (p *apiProxy) requests(since time.Time, match func(framework.APICall) bool) []proxiedRequest {
	p.mutex.Lock()
	defer p.mutex.Unlock()
	var result []proxiedRequest
	for _, r := range p.log {
		if !r.start.Before(since) && match(r.call) {
			result = append(result, r)
		}
	}
	return result
}

func describeRequests(requests []proxiedRequest) string {
	lines := make([]string, 0, len(requests))
	for _, r := range requests {
		lines = append(lines, r.String())
	}
	return strings.Join(lines, "\n")
}

// statusRecorder remembers the status code of a response and passes
// flushes on, which the watch streams need.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

func (r *statusRecorder) Write(data []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(data)
}

func (r *statusRecorder) Flush() {
	if flusher, ok := r.ResponseWriter.(http.Flusher); ok {
		flusher.Flush()
	}
}
