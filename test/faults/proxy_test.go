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
	gate  *requestGate
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

// requestGate holds back requests, to stop a process at a known point: it counts
// the requests that count matches, holds the from-th of them (counted from
// 1) and, with all, every later request that match matches, until
// Release. With land, the from-th request reaches the apiserver and takes
// effect, and only its answer is held: the process never learns that it
// did. A process killed while the gate holds its requests loses them: a
// held request never reaches the apiserver, a held answer never reaches
// the process.
type requestGate struct {
	count, match func(apiCall) bool
	from         int
	all, land    bool

	// seen counts the requests count matched; the proxy's mutex guards
	// it.
	seen int
	// arrived is closed when the from-th request comes; release lets the
	// held ones go on.
	arrived   chan struct{}
	release   chan struct{}
	arrivedAt time.Time
	once      sync.Once
}

// Release lets the held requests go on and opens the gate for later ones;
// it may be called more than once.
func (g *requestGate) Release() { g.once.Do(func() { close(g.release) }) }

// hold says what the gate does with a request: pass it, hold it before it
// is forwarded, or forward it and hold its answer. It is called with the
// proxy's mutex held.
func (g *requestGate) hold(call apiCall) gateAction {
	select {
	case <-g.release:
		return pass
	default:
	}
	if g.seen >= g.from {
		if g.all && g.match(call) {
			return holdRequest
		}
		return pass
	}
	if !g.count(call) {
		return pass
	}
	g.seen++
	if g.seen < g.from {
		return pass
	}
	g.arrivedAt = time.Now()
	close(g.arrived)
	if g.land {
		return holdAnswer
	}
	return holdRequest
}

type gateAction int

const (
	pass gateAction = iota
	holdRequest
	holdAnswer
)

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
		g, action := p.gateFor(call)
		if action == holdRequest {
			select {
			case <-g.release:
			case <-req.Context().Done():
				return
			}
		}
		i := p.record(proxiedRequest{call: call, method: req.Method, path: req.URL.Path, start: time.Now()})
		if action == holdAnswer {
			answer := httptest.NewRecorder()
			forward.ServeHTTP(answer, req)
			p.finish(i, answer.Code)
			select {
			case <-g.release:
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

// holdNext holds the next request that matches until Release is called on
// the result; later ones pass.
func (p *apiProxy) holdNext(match func(apiCall) bool) *requestGate {
	return p.setGate(&requestGate{count: match, match: match, from: 1})
}

// holdFrom holds the n-th request that count matches, and after it every
// request that match matches, until Release is called on the result. With
// land, the n-th reaches the apiserver and only its answer is held.
func (p *apiProxy) holdFrom(n int, count func(apiCall) bool, land bool, match func(apiCall) bool) *requestGate {
	return p.setGate(&requestGate{count: count, match: match, from: n, all: true, land: land})
}

func (p *apiProxy) setGate(g *requestGate) *requestGate {
	g.arrived, g.release = make(chan struct{}), make(chan struct{})
	p.mutex.Lock()
	defer p.mutex.Unlock()
	p.gate = g
	return g
}

func (p *apiProxy) gateFor(call apiCall) (*requestGate, gateAction) {
	p.mutex.Lock()
	defer p.mutex.Unlock()
	if p.gate == nil {
		return nil, pass
	}
	return p.gate, p.gate.hold(call)
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

// claimStatusUpdates matches the writes of claim allocations and
// reservations.
func claimStatusUpdates(call apiCall) bool { return call.isClaimStatusUpdate() }

// podDeletions matches the deletions of pods, by which preemption evicts
// its victims.
func podDeletions(call apiCall) bool {
	return call.verb == "delete" && call.resource == "pods" && call.subresource == ""
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
