//go:build faults

package faults

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// apiProxy stands between a scheduler process and the apiserver: the
// process talks plain HTTP to it without credentials, and it forwards every
// request with the identity of its upstream configuration (the scheduler's
// ServiceAccount, by impersonation). It records what the process sends and
// can hold one request back, to stop the process at an exact point of its
// work.
type apiProxy struct {
	name   string
	server *httptest.Server

	// mutex guards log and hold.
	mutex sync.Mutex
	log   []proxiedRequest
	hold  *heldRequest
}

// proxiedRequest is one request the process sent.
type proxiedRequest struct {
	call       apiCall
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

// heldRequest is a request the proxy holds until released.
type heldRequest struct {
	match func(apiCall) bool
	// arrived is closed when the request comes; release lets it go on to
	// the apiserver.
	arrived   chan struct{}
	release   chan struct{}
	arrivedAt time.Time
	once      sync.Once
}

// Release lets the held request go on; it may be called more than once.
func (h *heldRequest) Release() { h.once.Do(func() { close(h.release) }) }

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
		call := parseRequest(req)
		if h := p.holdIfMatch(call); h != nil {
			select {
			case <-h.release:
			case <-req.Context().Done():
				return
			}
		}
		i := p.record(proxiedRequest{call: call, method: req.Method, path: req.URL.Path, start: time.Now()})
		recorder := &statusRecorder{ResponseWriter: w}
		defer func() { p.finish(i, recorder.status) }()
		forward.ServeHTTP(recorder, req)
	}))
	t.Cleanup(func() {
		p.releaseHold()
		// Close would wait for the long requests (watches) of a process
		// that still runs; those are cut.
		p.server.CloseClientConnections()
		p.server.Close()
	})
	return p
}

// URL is the address the process talks to.
func (p *apiProxy) URL() string { return p.server.URL }

// holdNext holds the next request that matches until Release is called on
// the result.
func (p *apiProxy) holdNext(match func(apiCall) bool) *heldRequest {
	p.mutex.Lock()
	defer p.mutex.Unlock()
	p.hold = &heldRequest{match: match, arrived: make(chan struct{}), release: make(chan struct{})}
	return p.hold
}

func (p *apiProxy) holdIfMatch(call apiCall) *heldRequest {
	p.mutex.Lock()
	defer p.mutex.Unlock()
	h := p.hold
	if h == nil || !h.match(call) {
		return nil
	}
	p.hold = nil
	h.arrivedAt = time.Now()
	close(h.arrived)
	return h
}

func (p *apiProxy) releaseHold() {
	p.mutex.Lock()
	h := p.hold
	p.hold = nil
	p.mutex.Unlock()
	if h != nil {
		h.Release()
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
func (p *apiProxy) requests(since time.Time, match func(apiCall) bool) []proxiedRequest {
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

// writes matches requests that change something.
func writes(call apiCall) bool {
	return call.verb == "create" || call.verb == "update" || call.verb == "patch" || call.verb == "delete"
}

// claimWrites matches requests that change a ResourceClaim.
func claimWrites(call apiCall) bool { return writes(call) && call.resource == "resourceclaims" }

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
