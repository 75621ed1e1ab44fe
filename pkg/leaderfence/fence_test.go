package leaderfence

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// lock is a resource lock that accepts or fails writes as told and
// returns the record last written or set.
type lock struct {
	identity string
	fail     error
	record   *resourcelock.LeaderElectionRecord
}

func (l *lock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	if l.record == nil {
		return nil, nil, errors.New("no lease")
	}
	return l.record, nil, nil
}
func (l *lock) Create(_ context.Context, record resourcelock.LeaderElectionRecord) error {
	return l.write(record)
}
func (l *lock) Update(_ context.Context, record resourcelock.LeaderElectionRecord) error {
	return l.write(record)
}
func (l *lock) write(record resourcelock.LeaderElectionRecord) error {
	if l.fail == nil {
		l.record = &record
	}
	return l.fail
}
func (l *lock) RecordEvent(string) {}
func (l *lock) Identity() string   { return l.identity }
func (l *lock) Describe() string   { return "test/lease" }

// clock is a settable time source.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time          { return c.now }
func (c *clock) advance(d time.Duration) { c.now = c.now.Add(d) }
func record(holder string) resourcelock.LeaderElectionRecord {
	return resourcelock.LeaderElectionRecord{HolderIdentity: holder}
}

func setup(t *testing.T) (*Fence, resourcelock.Interface, *lock, *clock) {
	t.Helper()
	c := &clock{now: time.Unix(1_800_000_000, 0)}
	f := New(2 * time.Second)
	f.now = c.Now
	inner := &lock{identity: "me"}
	wrapped, err := f.Wrap(inner, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return f, wrapped, inner, c
}

func TestCheck(t *testing.T) {
	ctx := context.Background()
	f, wrapped, inner, c := setup(t)

	if err := f.Check(); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("before acquiring: %v, want ErrNotLeader", err)
	}
	if err := wrapped.Create(ctx, record("me")); err != nil {
		t.Fatal(err)
	}
	if err := f.Check(); err != nil {
		t.Fatalf("right after acquiring: %v", err)
	}
	// Renewals every 2 s keep the fence open.
	for range 10 {
		c.advance(2 * time.Second)
		if err := wrapped.Update(ctx, record("me")); err != nil {
			t.Fatal(err)
		}
		if err := f.Check(); err != nil {
			t.Fatalf("while renewing: %v", err)
		}
	}
	// Renewals fail (API server unreachable, or the process was paused):
	// open until 13 s after the last renewal was sent, closed after.
	inner.fail = errors.New("unreachable")
	c.advance(13 * time.Second)
	if err := wrapped.Update(ctx, record("me")); err == nil {
		t.Fatal("the failing lock succeeded")
	}
	if err := f.Check(); err != nil {
		t.Fatalf("13 s after the last renewal: %v", err)
	}
	c.advance(time.Millisecond)
	if err := f.Check(); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("past lease minus margin: %v, want ErrNotLeader", err)
	}
	// Renewed again: open.
	inner.fail = nil
	if err := wrapped.Update(ctx, record("me")); err != nil {
		t.Fatal(err)
	}
	if err := f.Check(); err != nil {
		t.Fatalf("after renewing again: %v", err)
	}
	// Released (empty holder) or handed to someone else: closed at once.
	if err := wrapped.Update(ctx, record("")); err != nil {
		t.Fatal(err)
	}
	if err := f.Check(); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("after releasing: %v, want ErrNotLeader", err)
	}
}

// TestRelease: client-go's elector releases the lease when it stops
// leading, after reading it but judging from the record it observed
// earlier. The lock lets a release through only if the lease it read
// names this process.
func TestRelease(t *testing.T) {
	ctx := context.Background()
	f, wrapped, inner, _ := setup(t)
	if err := wrapped.Create(ctx, record("me")); err != nil {
		t.Fatal(err)
	}

	// Another candidate took the lease while this process was paused.
	inner.record = &resourcelock.LeaderElectionRecord{HolderIdentity: "other"}
	if _, _, err := wrapped.Get(ctx); err != nil {
		t.Fatal(err)
	}
	err := wrapped.Update(ctx, record(""))
	if !errors.Is(err, errNotHolder) {
		t.Fatalf("releasing the lease of another: %v, want errNotHolder", err)
	}
	if inner.record.HolderIdentity != "other" {
		t.Fatalf("the lease now names %q, want other", inner.record.HolderIdentity)
	}
	// A renewal is not a release: it goes out (and fails on its stale
	// resourceVersion in a real lock).
	if err := wrapped.Update(ctx, record("me")); err != nil {
		t.Fatalf("renewing: %v", err)
	}

	// Its own lease: released, and the fence closes.
	if _, _, err := wrapped.Get(ctx); err != nil {
		t.Fatal(err)
	}
	if err := wrapped.Update(ctx, record("")); err != nil {
		t.Fatalf("releasing its own lease: %v", err)
	}
	if inner.record.HolderIdentity != "" {
		t.Fatalf("the lease names %q after the release", inner.record.HolderIdentity)
	}
	if err := f.Check(); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("after releasing: %v, want ErrNotLeader", err)
	}
}

// TestCheckWallClock: a frozen VM's monotonic clock may stand still while
// the wall clock moves on; the fence closes on either.
func TestCheckWallClock(t *testing.T) {
	f, wrapped, _, c := setup(t)
	c.now = time.Now() // with a monotonic reading
	if err := wrapped.Update(context.Background(), record("me")); err != nil {
		t.Fatal(err)
	}
	// The same monotonic reading, the wall clock 20 s later.
	c.now = c.now.Add(20 * time.Second)
	c.now = time.Unix(0, c.now.UnixNano()).Round(0)
	if err := f.Check(); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("20 s of wall clock later: %v, want ErrNotLeader", err)
	}
}

func TestWaitHandover(t *testing.T) {
	ctx := context.Background()
	f := New(50 * time.Millisecond)
	if err := f.WaitHandover(ctx); err != nil {
		t.Fatalf("without a lease (no leader election): %v", err)
	}
	wrapped, err := f.Wrap(&lock{identity: "me"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.WaitHandover(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("before acquiring: %v, want ErrNotLeader", err)
	}
	start := time.Now()
	if err := wrapped.Create(ctx, record("me")); err != nil {
		t.Fatal(err)
	}
	if err := f.WaitHandover(ctx); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Fatalf("waited %v after acquiring, want at least the margin", waited)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := f.WaitHandover(cancelled); err != nil {
		t.Fatalf("after the margin, even with a cancelled context: %v", err)
	}
}

func TestNilAndUnwrapped(t *testing.T) {
	var none *Fence
	if err := none.Check(); err != nil {
		t.Errorf("nil fence: %v", err)
	}
	if err := New(time.Second).Check(); err != nil {
		t.Errorf("fence without a lock (no leader election): %v", err)
	}
	if _, err := New(time.Second).Wrap(&lock{}, time.Second); err == nil {
		t.Error("a margin as long as the lease was accepted")
	}
	if _, err := New(0).Wrap(&lock{}, time.Second); err == nil {
		t.Error("a zero margin was accepted")
	}
}

// TestWrapTransport: a client on the wrapped transport reads at any time
// and writes only while the fence is open.
func TestWrapTransport(t *testing.T) {
	var mutex sync.Mutex
	var received []string
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mutex.Lock()
		defer mutex.Unlock()
		received = append(received, r.Method)
	}))
	defer server.Close()
	f, wrapped, _, c := setup(t)
	client := &http.Client{Transport: f.WrapTransport(http.DefaultTransport)}
	send := func(method string) error {
		req, err := http.NewRequest(method, server.URL+"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c/status", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}

	if err := wrapped.Create(context.Background(), record("me")); err != nil {
		t.Fatal(err)
	}
	for _, method := range []string{http.MethodGet, http.MethodPut, http.MethodPatch, http.MethodPost, http.MethodDelete} {
		if err := send(method); err != nil {
			t.Fatalf("%s while leading: %v", method, err)
		}
	}
	c.advance(14 * time.Second)
	if err := send(http.MethodGet); err != nil {
		t.Fatalf("GET after the lease: %v", err)
	}
	for _, method := range []string{http.MethodPut, http.MethodPatch, http.MethodPost, http.MethodDelete} {
		if err := send(method); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("%s after the lease: %v, want ErrNotLeader", method, err)
		}
	}
	mutex.Lock()
	defer mutex.Unlock()
	if want := []string{"GET", "PUT", "PATCH", "POST", "DELETE", "GET"}; !slices.Equal(received, want) {
		t.Fatalf("the server received %v, want %v", received, want)
	}
}
