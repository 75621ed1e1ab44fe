// Package leaderfence keeps a scheduler that may have lost its leader lease
// from writing allocations, and a new leader from allocating before the old
// leader's last writes are visible.
//
// The Kubernetes API has no fencing token: an update of a ResourceClaim is
// accepted from any client whose resourceVersion precondition holds. A
// kube-scheduler that was paused (SIGSTOP, a long GC pause, a frozen VM)
// past its lease resumes with its binding goroutines running; they can
// write an allocation before its leader elector notices the lost lease and
// exits the process, while the new leader, which never saw that allocation
// in flight, gives the same devices to another claim.
//
// A Fence wraps the leader elector's resource lock and remembers when the
// last renewal of this process's lease was sent, and wraps the transport of
// the clients the scheduler writes with. No other candidate can
// acquire the lease until LeaseDuration after it observed that renewal, so
// as long as less than LeaseDuration minus a margin has passed, this
// process is still the only leader; Check says so. A new leader waits the
// margin after acquiring before its first allocation (WaitHandover), so
// that a write the old leader sent just before its fence closed has landed
// and reached the new leader's informer.
//
// What remains is the time between Check and the write reaching etcd: a
// pause longer than the margin exactly there, or a request delayed in the
// network by more than the margin, is not caught. docs/scheduler.md
// ("Leader election") describes the fence for operators, and
// docs/design/2026-11-23-claim-state.md has the measurements.
package leaderfence

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// DefaultMargin is the share of the lease kept back for a write in transit
// and for the new leader's informer.
const DefaultMargin = 2 * time.Second

// ErrNotLeader is returned by Check when the process does not hold a lease
// it renewed recently enough.
var ErrNotLeader = errors.New("not the leader, or the leader lease may have expired")

// Fence tracks this process's lease renewals. A Fence that guards no lock
// (no leader election: the scheduler is the only one) and a nil *Fence
// allow every write.
type Fence struct {
	margin time.Duration
	now    func() time.Time

	// mutex guards the fields below.
	mutex sync.Mutex
	// leaseDuration is the lease's duration; zero until Wrap.
	leaseDuration time.Duration
	// renewed is when the last successful acquisition or renewal of this
	// process's lease was sent; zero when it does not hold it.
	renewed time.Time
	// acquired is when this process first acquired the lease.
	acquired time.Time
}

// New returns a Fence that keeps margin of the lease back. It guards
// nothing until Wrap.
func New(margin time.Duration) *Fence {
	return &Fence{margin: margin, now: time.Now}
}

// Wrap turns the fence on for the lease of lock and returns a resource
// lock that reports this process's acquisitions and renewals to it.
func (f *Fence) Wrap(lock resourcelock.Interface, leaseDuration time.Duration) (resourcelock.Interface, error) {
	if f.margin <= 0 || f.margin >= leaseDuration {
		return nil, fmt.Errorf("leader fence: margin %v must be positive and shorter than the lease duration %v", f.margin, leaseDuration)
	}
	f.mutex.Lock()
	defer f.mutex.Unlock()
	f.leaseDuration = leaseDuration
	return &fencedLock{Interface: lock, fence: f}, nil
}

// Check returns nil if a write sent now reaches the API server while this
// process is still certainly the leader.
func (f *Fence) Check() error {
	if f == nil {
		return nil
	}
	f.mutex.Lock()
	defer f.mutex.Unlock()
	if f.leaseDuration == 0 {
		return nil
	}
	if f.renewed.IsZero() {
		return ErrNotLeader
	}
	// The monotonic clock measures a paused process; the wall clock also
	// moves on while a frozen VM's monotonic clock may not.
	now := f.now()
	age := max(now.Sub(f.renewed), now.Round(0).Sub(f.renewed.Round(0)))
	if age > f.leaseDuration-f.margin {
		return fmt.Errorf("%w: last renewal sent %v ago, lease duration %v", ErrNotLeader, age.Round(time.Millisecond), f.leaseDuration)
	}
	return nil
}

// WaitHandover blocks until the margin has passed since this process
// acquired the lease.
func (f *Fence) WaitHandover(ctx context.Context) error {
	if f == nil {
		return nil
	}
	f.mutex.Lock()
	guarding, acquired := f.leaseDuration != 0, f.acquired
	f.mutex.Unlock()
	if !guarding {
		return nil
	}
	if acquired.IsZero() {
		return ErrNotLeader
	}
	wait := f.margin - f.now().Sub(acquired)
	if wait <= 0 {
		return nil
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// WrapTransport returns a round tripper that refuses to send a request that
// writes (any method but GET and HEAD) while Check fails: a client built on
// it cannot write after its process may have lost the lease, whichever
// code path writes. The check runs right before the request goes out.
func (f *Fence) WrapTransport(rt http.RoundTripper) http.RoundTripper {
	return roundTripper{fence: f, next: rt}
}

type roundTripper struct {
	fence *Fence
	next  http.RoundTripper
}

func (r roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		if err := r.fence.Check(); err != nil {
			return nil, fmt.Errorf("%s %s refused: %w", req.Method, req.URL.Path, err)
		}
	}
	return r.next.RoundTrip(req)
}

func (f *Fence) record(sent time.Time, ours bool) {
	f.mutex.Lock()
	defer f.mutex.Unlock()
	if !ours {
		// Released (an empty holder) or written for someone else.
		f.renewed = time.Time{}
		return
	}
	f.renewed = sent
	if f.acquired.IsZero() {
		f.acquired = sent
	}
}

// fencedLock records successful writes of the lease record and refuses to
// release a lease that another candidate holds.
//
// client-go's LeaderElector releases the lease (ReleaseOnCancel, which
// kube-scheduler sets) when it stops leading, also when it stopped because
// it failed to renew: it reads the lease, then decides from the record it
// observed before, not from what it just read, that it is the holder, and
// writes an empty holder with the resourceVersion it just read. An old
// leader that resumes after a pause longer than the lease thus releases the
// new leader's lease, and a third candidate may acquire it while the new
// leader still works. The lock passes on the record that Get returned;
// Update refuses a release unless that record names this process.
type fencedLock struct {
	resourcelock.Interface
	fence *Fence

	// mutex guards holder.
	mutex sync.Mutex
	// holder is the holder in the record the last Get returned.
	holder string
}

// errNotHolder is returned by Update for a release of a lease held by
// another candidate.
var errNotHolder = errors.New("leader fence: not releasing a lease another candidate holds")

func (l *fencedLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	record, raw, err := l.Interface.Get(ctx)
	if err == nil && record != nil {
		l.mutex.Lock()
		l.holder = record.HolderIdentity
		l.mutex.Unlock()
	}
	return record, raw, err
}

func (l *fencedLock) Create(ctx context.Context, record resourcelock.LeaderElectionRecord) error {
	sent := l.fence.now()
	err := l.Interface.Create(ctx, record)
	if err == nil {
		l.fence.record(sent, record.HolderIdentity == l.Identity())
	}
	return err
}

func (l *fencedLock) Update(ctx context.Context, record resourcelock.LeaderElectionRecord) error {
	if record.HolderIdentity == "" {
		l.mutex.Lock()
		holder := l.holder
		l.mutex.Unlock()
		// The lock writes with the resourceVersion of the last Get: if the
		// lease changed since, the write fails with a conflict anyway.
		if holder != "" && holder != l.Identity() {
			return fmt.Errorf("%w (%s is held by %q)", errNotHolder, l.Describe(), holder)
		}
	}
	sent := l.fence.now()
	err := l.Interface.Update(ctx, record)
	if err == nil {
		l.fence.record(sent, record.HolderIdentity == l.Identity())
	}
	return err
}
