//go:build faults

package faults

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/drasched/drasched/test/integration/framework"
)

// fault is what the caller of a forwarded request gets instead of the
// apiserver's answer. The request itself reaches the apiserver and takes
// effect: the caller cannot know whether it did.
type fault string

const (
	// gatewayTimeout is the 504 of a proxy or load balancer that gave up
	// waiting for the answer.
	gatewayTimeout fault = "504"
	// unexpectedEOF is a connection that broke while the answer was on its
	// way.
	unexpectedEOF fault = "unexpected EOF"
	// connectionReset is a connection the peer reset.
	connectionReset fault = "connection reset"
)

// answer is what the caller sees.
func (f fault) answer(req *http.Request) (*http.Response, error) {
	switch f {
	case gatewayTimeout:
		body := `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"injected: gateway timeout","reason":"Timeout","code":504}`
		return &http.Response{
			Status:        "504 Gateway Timeout",
			StatusCode:    http.StatusGatewayTimeout,
			Proto:         "HTTP/1.1",
			ProtoMajor:    1,
			ProtoMinor:    1,
			Header:        http.Header{"Content-Type": []string{"application/json"}},
			Body:          io.NopCloser(strings.NewReader(body)),
			ContentLength: int64(len(body)),
			Request:       req,
		}, nil
	case unexpectedEOF:
		return nil, io.ErrUnexpectedEOF
	case connectionReset:
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	}
	return nil, fmt.Errorf("unknown fault %q", f)
}

// injection records one injected fault.
type injection struct {
	claim string // namespace/name
	fault fault
	// status is the apiserver's real answer, which the caller never saw; 0
	// if the request failed on the way.
	status int
	err    error
	at     time.Time
}

func (i injection) String() string {
	answer := fmt.Sprintf("apiserver answered %d", i.status)
	if i.err != nil {
		answer = fmt.Sprintf("request failed: %v", i.err)
	}
	return fmt.Sprintf("%s at %s for the status update of claim %s (%s)", i.fault, i.at.Format("15:04:05.000"), i.claim, answer)
}

// faults is a plan of faults for a scheduler's client: a fault for the
// first status update of chosen claims, and a delay for each piece of
// every ResourceClaim watch. Delays are drawn from a seeded source, so a
// scenario sees the same sequence every run. Its methods are safe for
// concurrent use.
type faults struct {
	// minDelay and maxDelay bound the delay of watch data; zero: none.
	minDelay, maxDelay time.Duration

	// mutex guards random, statusFaults, nthFaults, statusUpdates,
	// injected and failures.
	mutex  sync.Mutex
	random *rand.Rand
	// statusFaults maps namespace/name of a claim to the fault for its
	// next status update; an entry is removed when the fault is injected.
	statusFaults map[string]fault
	// nthFaults maps n to the fault for the n-th claim status update
	// (counted from 1), whichever claim it is for.
	nthFaults     map[int]fault
	statusUpdates int
	injected      []injection
	// injections receives injections as they happen, for tests that act
	// right after one.
	injections chan injection

	// failures counts the requests that failed on the way.
	failures int

	// counts of requests by kind, for the log of a scenario.
	counts requestCounts
}

func newFaults(seed uint64, minDelay, maxDelay time.Duration) *faults {
	return &faults{
		minDelay:     minDelay,
		maxDelay:     maxDelay,
		random:       rand.New(rand.NewPCG(seed, seed)),
		statusFaults: map[string]fault{},
		nthFaults:    map[int]fault{},
		injections:   make(chan injection, 1000),
	}
}

// failStatusUpdate makes the next status update of the claim a fault.
func (f *faults) failStatusUpdate(namespace, name string, fault fault) {
	f.mutex.Lock()
	defer f.mutex.Unlock()
	f.statusFaults[namespace+"/"+name] = fault
}

// failNthStatusUpdate makes the n-th claim status update a fault.
func (f *faults) failNthStatusUpdate(n int, fault fault) {
	f.mutex.Lock()
	defer f.mutex.Unlock()
	f.nthFaults[n] = fault
}

// take counts a status update of the claim and returns the fault planned
// for it, if any.
func (f *faults) take(claim string) (fault, bool) {
	f.mutex.Lock()
	defer f.mutex.Unlock()
	f.statusUpdates++
	if fault, ok := f.statusFaults[claim]; ok {
		delete(f.statusFaults, claim)
		return fault, true
	}
	fault, ok := f.nthFaults[f.statusUpdates]
	return fault, ok
}

func (f *faults) record(i injection) {
	f.mutex.Lock()
	f.injected = append(f.injected, i)
	f.mutex.Unlock()
	select {
	case f.injections <- i:
	default:
		// Nobody waits for this many; Injected has them all.
	}
}

// Injected returns what was injected so far.
func (f *faults) Injected() []injection {
	f.mutex.Lock()
	defer f.mutex.Unlock()
	return append([]injection(nil), f.injected...)
}

// failed counts a request that failed on the way.
func (f *faults) failed() {
	f.mutex.Lock()
	defer f.mutex.Unlock()
	f.failures++
}

// Failures returns how many requests failed on the way.
func (f *faults) Failures() int {
	f.mutex.Lock()
	defer f.mutex.Unlock()
	return f.failures
}

// delay draws the delay of the next piece of watch data.
func (f *faults) delay() time.Duration {
	if f.maxDelay <= f.minDelay {
		return f.minDelay
	}
	f.mutex.Lock()
	defer f.mutex.Unlock()
	return f.minDelay + time.Duration(f.random.Int64N(int64(f.maxDelay-f.minDelay)))
}

// wrap makes a client configuration use the faults; for
// framework.SchedulerOptions.WrapConfig.
func (f *faults) wrap(config *rest.Config) {
	config.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &faultTransport{faults: f, next: rt} })
}

// faultTransport injects faults into the requests of one client.
type faultTransport struct {
	faults *faults
	next   http.RoundTripper
}

func (t *faultTransport) RoundTrip(req *http.Request) (resp *http.Response, err error) {
	call := framework.ParseRequest(req)
	t.faults.counts.add(call)
	defer func() {
		if err != nil {
			t.faults.failed()
		}
	}()
	if framework.ClaimStatusUpdates(call) {
		if fault, ok := t.faults.take(call.Namespace + "/" + call.Name); ok {
			// The write goes through; only its answer is lost.
			i := injection{claim: call.Namespace + "/" + call.Name, fault: fault}
			resp, err := t.next.RoundTrip(req)
			if err != nil {
				i.err = err
			} else {
				i.status = resp.StatusCode
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
			i.at = time.Now()
			t.faults.record(i)
			return fault.answer(req)
		}
	}
	resp, err = t.next.RoundTrip(req)
	if err == nil && call.Verb == "watch" && call.Resource == "resourceclaims" && t.faults.maxDelay > 0 {
		resp.Body = newDelayedBody(resp.Body, t.faults.delay)
	}
	return resp, err
}

// requestCounts counts requests by verb and resource; a watch with initial
// events counts as a list too.
type requestCounts struct {
	mutex  sync.Mutex
	counts map[string]int
}

func (c *requestCounts) add(call framework.APICall) {
	if call.Verb == "" {
		return
	}
	c.mutex.Lock()
	defer c.mutex.Unlock()
	if c.counts == nil {
		c.counts = map[string]int{}
	}
	c.counts[call.Verb+" "+call.Resource]++
	if call.InitialEvents {
		c.counts["list "+call.Resource]++
	}
}

// get returns the number of requests with this verb for this resource.
func (c *requestCounts) get(verb, resource string) int {
	c.mutex.Lock()
	defer c.mutex.Unlock()
	return c.counts[verb+" "+resource]
}

// errBodyClosed is what a read of a closed delayed body returns.
var errBodyClosed = errors.New("delayed body closed")

// delayedBody hands out the data of a response body late: each piece read
// from the original body is released to the reader a delay after it
// arrived, never before the piece that arrived before it, so the stream
// stays intact and in order, just late. That is what a client sees behind
// a slow or congested network or an overloaded apiserver's watch: events
// arrive seconds after the writes that made them.
type delayedBody struct {
	body   io.ReadCloser
	pieces chan delayedPiece
	done   chan struct{}
	once   sync.Once

	// pending and err are the current piece; only Read uses them.
	pending []byte
	err     error
}

type delayedPiece struct {
	data []byte
	err  error
	at   time.Time
}

func newDelayedBody(body io.ReadCloser, delay func() time.Duration) *delayedBody {
	d := &delayedBody{
		body: body,
		// A watch that produces more than this within the delay stalls
		// the reads from the original body; that only delays it more.
		pieces: make(chan delayedPiece, 4096),
		done:   make(chan struct{}),
	}
	go d.pump(delay)
	return d
}

// pump reads the original body as fast as it delivers and stamps each
// piece with its release time.
func (d *delayedBody) pump(delay func() time.Duration) {
	var last time.Time
	for {
		buf := make([]byte, 32*1024)
		n, err := d.body.Read(buf)
		at := time.Now().Add(delay())
		if at.Before(last) {
			at = last
		}
		last = at
		select {
		case d.pieces <- delayedPiece{data: buf[:n], err: err, at: at}:
		case <-d.done:
			return
		}
		if err != nil {
			return
		}
	}
}

func (d *delayedBody) Read(p []byte) (int, error) {
	for len(d.pending) == 0 {
		if d.err != nil {
			return 0, d.err
		}
		var piece delayedPiece
		select {
		case piece = <-d.pieces:
		case <-d.done:
			return 0, errBodyClosed
		}
		if wait := time.Until(piece.at); wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
			case <-d.done:
				timer.Stop()
				return 0, errBodyClosed
			}
		}
		d.pending, d.err = piece.data, piece.err
	}
	n := copy(p, d.pending)
	d.pending = d.pending[n:]
	return n, nil
}

func (d *delayedBody) Close() error {
	d.once.Do(func() { close(d.done) })
	return d.body.Close()
}

// The fault transport on its own, against a fake apiserver: a faulted
// status update reaches the server once and its caller gets the fault, the
// next goes through, and a delayed watch delivers all its data, in order,
// no earlier than the delay.
func TestFaultTransport(t *testing.T) {
	var mutex sync.Mutex
	updates := 0
	const watchData = "event-1\nevent-2\nevent-3\n"
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch framework.ParseRequest(req).Verb {
		case "update":
			mutex.Lock()
			updates++
			mutex.Unlock()
			_, _ = io.WriteString(w, `{}`)
		case "watch":
			for _, line := range strings.SplitAfter(watchData, "\n") {
				_, _ = io.WriteString(w, line)
				w.(http.Flusher).Flush()
				time.Sleep(10 * time.Millisecond)
			}
		default:
			http.NotFound(w, req)
		}
	}))
	t.Cleanup(server.Close)

	const delay = 200 * time.Millisecond
	for name, fault := range map[string]fault{"504": gatewayTimeout, "eof": unexpectedEOF, "reset": connectionReset} {
		t.Run(name, func(t *testing.T) {
			mutex.Lock()
			updates = 0
			mutex.Unlock()
			f := newFaults(1, delay, delay)
			f.failStatusUpdate("ns", "a", fault)
			config := &rest.Config{Host: server.URL}
			f.wrap(config)
			transport, err := rest.TransportFor(config)
			if err != nil {
				t.Fatal(err)
			}
			client := &http.Client{Transport: transport}
			statusURL := server.URL + "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/a/status"

			for attempt, wantFault := range []bool{true, false} {
				req, _ := http.NewRequest(http.MethodPut, statusURL, strings.NewReader(`{}`))
				resp, err := client.Do(req)
				gotFault := err != nil || resp.StatusCode != http.StatusOK
				if resp != nil {
					_ = resp.Body.Close()
				}
				if gotFault != wantFault {
					t.Errorf("status update %d: fault %v (err %v), want %v", attempt, gotFault, err, wantFault)
				}
			}
			mutex.Lock()
			if updates != 2 {
				t.Errorf("the server got %d status updates, want 2: the faulted one must reach it", updates)
			}
			mutex.Unlock()
			if injected := f.Injected(); len(injected) != 1 || injected[0].status != http.StatusOK {
				t.Errorf("injected %v, want one fault over an answer 200", injected)
			}

			start := time.Now()
			resp, err := client.Get(server.URL + "/apis/resource.k8s.io/v1/resourceclaims?watch=true")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			first := make([]byte, 1)
			if _, err := io.ReadFull(resp.Body, first); err != nil {
				t.Fatal(err)
			}
			if elapsed := time.Since(start); elapsed < delay {
				t.Errorf("first watch byte after %s, want at least %s", elapsed, delay)
			}
			remainder, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(first) + string(remainder); got != watchData {
				t.Errorf("watch data %q, want %q", got, watchData)
			}
		})
	}
}
