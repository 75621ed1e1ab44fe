package framework

import (
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// APICall is what a request to the apiserver does, as far as a test that
// counts, holds or breaks requests cares.
type APICall struct {
	// Verb is "watch", "list", "get", "create", "update", "patch",
	// "delete" or "" for requests that are not for resources.
	Verb                                   string
	Resource, Namespace, Name, Subresource string
	// InitialEvents: a watch that starts with the current state, which
	// is how informers list.
	InitialEvents bool
}

// ParseRequest finds the resource, namespace, name and subresource of a
// request such as PUT /apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/a/status.
func ParseRequest(req *http.Request) APICall {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	default:
		return APICall{}
	}
	var call APICall
	if len(parts) > 2 && parts[0] == "namespaces" {
		call.Namespace, parts = parts[1], parts[2:]
	}
	if len(parts) == 0 {
		return APICall{}
	}
	call.Resource = parts[0]
	if len(parts) > 1 {
		call.Name = parts[1]
	}
	if len(parts) > 2 {
		call.Subresource = parts[2]
	}
	query := req.URL.Query()
	switch req.Method {
	case http.MethodGet:
		switch {
		case query.Get("watch") == "true" || query.Get("watch") == "1":
			call.Verb = "watch"
			call.InitialEvents = query.Get("sendInitialEvents") == "true"
		case call.Name == "":
			call.Verb = "list"
		default:
			call.Verb = "get"
		}
	case http.MethodPost:
		call.Verb = "create"
	case http.MethodPut:
		call.Verb = "update"
	case http.MethodPatch:
		call.Verb = "patch"
	case http.MethodDelete:
		call.Verb = "delete"
	}
	return call
}

// Writes matches requests that change something.
func Writes(call APICall) bool {
	return call.Verb == "create" || call.Verb == "update" || call.Verb == "patch" || call.Verb == "delete"
}

// ClaimWrites matches requests that change a ResourceClaim.
func ClaimWrites(call APICall) bool { return Writes(call) && call.Resource == "resourceclaims" }

// ClaimStatusUpdates matches the writes of claim allocations and
// reservations.
func ClaimStatusUpdates(call APICall) bool {
	return call.Verb == "update" && call.Resource == "resourceclaims" && call.Subresource == "status"
}

// PodDeletions matches the deletions of pods, by which preemption evicts
// its victims.
func PodDeletions(call APICall) bool {
	return call.Verb == "delete" && call.Resource == "pods" && call.Subresource == ""
}

// RequestGate holds back requests, to stop, kill or cut off a scheduler at
// a point of its work that the test chooses: a test that waits for "some
// progress" and then strikes tests how fast the machine is; one that
// strikes while the gate holds the N-th write knows what the scheduler had
// done. It counts the requests that count matches, holds the n-th of them
// (counted from 1) and, with all, every later request that match matches,
// until Release. With land, the n-th request reaches the apiserver and
// takes effect, and only its answer is held: the scheduler never learns
// that it did. A client that gives up on a held request (its context
// ends, its process is killed) loses it: a held request never reaches the
// apiserver, a held answer never reaches the client.
//
// Wrap applies the gate to an in-process client; a proxy in front of a
// process asks Hold.
type RequestGate struct {
	count, match func(APICall) bool
	from         int
	all, land    bool

	// mutex guards seen and arrivedAt.
	mutex sync.Mutex
	// seen counts the requests count matched.
	seen      int
	arrivedAt time.Time
	// arrived is closed when the n-th request comes; release lets the
	// held ones go on.
	arrived, release chan struct{}
	once             sync.Once
}

// HoldFrom holds the n-th request that count matches, and after it every
// request that match matches, until Release. With land, the n-th reaches
// the apiserver and only its answer is held.
func HoldFrom(n int, count func(APICall) bool, land bool, match func(APICall) bool) *RequestGate {
	return newGate(&RequestGate{count: count, match: match, from: n, all: true, land: land})
}

// HoldNext holds the next request that matches until Release; later ones
// pass.
func HoldNext(match func(APICall) bool) *RequestGate {
	return newGate(&RequestGate{count: match, match: match, from: 1})
}

func newGate(g *RequestGate) *RequestGate {
	g.arrived, g.release = make(chan struct{}), make(chan struct{})
	return g
}

// Arrived is closed when the gate holds its first request (or answer).
func (g *RequestGate) Arrived() <-chan struct{} { return g.arrived }

// ArrivedAt is when the first held request came; zero before.
func (g *RequestGate) ArrivedAt() time.Time {
	g.mutex.Lock()
	defer g.mutex.Unlock()
	return g.arrivedAt
}

// Released is closed once Release was called.
func (g *RequestGate) Released() <-chan struct{} { return g.release }

// Release lets the held requests go on and opens the gate for later ones;
// it may be called more than once.
func (g *RequestGate) Release() { g.once.Do(func() { close(g.release) }) }

// GateAction is what a gate does with a request.
type GateAction int

const (
	// Pass: the request goes on.
	Pass GateAction = iota
	// HoldRequest: the request waits for Release before it is forwarded.
	HoldRequest
	// HoldAnswer: the request is forwarded; its answer waits for Release.
	HoldAnswer
)

// Hold says what the gate does with a request, counting it.
func (g *RequestGate) Hold(call APICall) GateAction {
	select {
	case <-g.release:
		return Pass
	default:
	}
	g.mutex.Lock()
	defer g.mutex.Unlock()
	if g.seen >= g.from {
		if g.all && g.match(call) {
			return HoldRequest
		}
		return Pass
	}
	if !g.count(call) {
		return Pass
	}
	g.seen++
	if g.seen < g.from {
		return Pass
	}
	g.arrivedAt = time.Now()
	close(g.arrived)
	if g.land {
		return HoldAnswer
	}
	return HoldRequest
}

// Wrap applies the gate to the requests of clients made from config; for
// SchedulerOptions.WrapConfig.
func (g *RequestGate) Wrap(config *rest.Config) {
	config.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &gateTransport{gate: g, next: rt} })
}

type gateTransport struct {
	gate *RequestGate
	next http.RoundTripper
}

func (t *gateTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	switch t.gate.Hold(ParseRequest(req)) {
	case HoldRequest:
		select {
		case <-t.gate.release:
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	case HoldAnswer:
		resp, err := t.next.RoundTrip(req)
		select {
		case <-t.gate.release:
			return resp, err
		case <-req.Context().Done():
			if err == nil {
				_ = resp.Body.Close()
			}
			return nil, req.Context().Err()
		}
	}
	return t.next.RoundTrip(req)
}
