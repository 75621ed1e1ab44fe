package tracker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drasched/drasched/internal/minor/schedminor"
)

// Interface is what the StructuredDRA plugin needs of claim state. Tracker
// implements it on the scheduler's SharedDRAManager; unit tests of the
// plugin use a fake. All methods are safe for concurrent use.
type Interface interface {
	// Claim returns the scheduler's newest version of a claim: the
	// informer's, or the one PreBind wrote if the informer has not
	// delivered it yet.
	Claim(namespace, name string) (*resourceapi.ResourceClaim, error)
	// Claims lists the scheduler's newest versions of all claims.
	Claims() ([]*resourceapi.ResourceClaim, error)
	// Slices returns all ResourceSlices with DeviceTaintRules applied,
	// as the same list while the set of slices does not change.
	Slices() ([]*resourceapi.ResourceSlice, error)
	// DeviceClasses lists and gets DeviceClasses.
	DeviceClasses() structured.DeviceClassLister
	// AllocatedState returns the devices taken by allocated claims and by
	// allocations in flight, as one consistent snapshot owned by the
	// caller.
	AllocatedState(ctx context.Context) (*structured.AllocatedState, error)
	// PendingAllocation returns the allocation in flight for a claim, or
	// nil.
	PendingAllocation(uid types.UID) *resourceapi.AllocationResult
	// Reserve puts the allocation of claim (a copy with
	// Status.Allocation set) in flight under claim.UID, with one share.
	Reserve(claim *resourceapi.ResourceClaim) error
	// Share adds a share to the allocation of claim in flight, which no
	// write has touched yet: another pod of the same pod group scheduling
	// cycle uses the claim too. If a pod of the group wrote the allocation
	// already, there is nothing to hold: held is false, and PreBind adds
	// the pod's reservation to the written claim.
	Share(claim *resourceapi.ResourceClaim) (held bool, err error)
	// Unreserve drops one share of the allocation in flight under key,
	// unless a write of it succeeded or may have succeeded; the last
	// share takes the allocation with it. It reports whether it dropped
	// the allocation.
	Unreserve(key types.UID) bool
	// Written records that PreBind wrote the allocation in flight under
	// key (or, with an empty key, only a reservation): written is what
	// the API server returned.
	Written(ctx context.Context, key types.UID, written *resourceapi.ResourceClaim)
	// WriteUnknown records that a write of the allocation in flight under
	// key, based on the claim version base, failed with an unknown
	// outcome.
	WriteUnknown(ctx context.Context, key types.UID, base *resourceapi.ResourceClaim)
	// InFlight returns the keys of the allocations in flight.
	InFlight() []types.UID
	// Nominations are the preemptors' nominated allocations.
	Nominations() *Nominations
}

// Options configure a Tracker.
type Options struct {
	// Manager is the scheduler's SharedDRAManager: its claim cache, slice
	// lister and class lister are the tracker's.
	Manager fwk.SharedDRAManager
	// Client reads claims from the API server to settle writes with an
	// unknown outcome.
	Client kubernetes.Interface
	// Activate requeues pods that wait for devices, after the tracker
	// freed devices that no claim event announces. Optional.
	Activate func(logger klog.Logger)
	// UnknownGrace is how long an allocation whose write had an unknown
	// outcome stays in flight while the API server still shows the claim
	// as it was before the write; zero means DefaultUnknownGrace.
	UnknownGrace time.Duration
	// NominationEnded is called for every nomination that ends.
	// Optional.
	NominationEnded func(n *Nomination, reason EndReason)
}

// DefaultUnknownGrace covers a write that kube-apiserver is still
// processing when the client has already given up on it: its handler runs
// on after a 504 until its own request timeout (60 s by default) cancels
// the storage call.
const DefaultUnknownGrace = 70 * time.Second

// settleBackoff paces the worker's checks of an entry: first against the
// claim cache, which catches up within milliseconds, then, for unknown
// outcomes, against the API server.
var settleBackoff = workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](20*time.Millisecond, 5*time.Second)

// Tracker implements Interface on a SharedDRAManager.
type Tracker struct {
	claims       fwk.ResourceClaimTracker
	sliceLister  fwk.ResourceSliceLister
	classes      fwk.DeviceClassLister
	client       kubernetes.Interface
	activate     func(klog.Logger)
	unknownGrace time.Duration

	// slicesMutex guards lastSlices and lastSliceSet: the list Slices
	// returned last, and its elements.
	slicesMutex  sync.Mutex
	lastSlices   []*resourceapi.ResourceSlice
	lastSliceSet map[*resourceapi.ResourceSlice]struct{}

	// mutex guards entries.
	mutex sync.Mutex
	// entries are the allocations this tracker put in flight, by the UID
	// they are in flight under.
	entries map[types.UID]*entry
	// queue holds the keys of entries waiting to be settled.
	queue workqueue.TypedRateLimitingInterface[types.UID]

	// nominations are the preemptors' nominated allocations.
	nominations *Nominations
}

var _ Interface = &Tracker{}

// phase is where an allocation in flight stands.
type phase int

const (
	// reserved: allocated in Reserve, not written.
	reserved phase = iota
	// written: written; waits until the claim cache holds target or
	// something newer.
	written
	// unknown: a write based on target failed with an unknown outcome.
	unknown
)

type entry struct {
	// claim is the claim put in flight, with its allocation.
	claim *resourceapi.ResourceClaim
	phase phase
	// shares counts the pods that hold the allocation while it is
	// reserved: one, or the pods of one pod group scheduling cycle that
	// share the claim.
	shares int
	// target is the written claim (written) or the version the failed
	// write was based on (unknown).
	target *resourceapi.ResourceClaim
	// since is when the write with the unknown outcome failed.
	since time.Time
}

// New returns a Tracker on the manager and starts its worker, which runs
// until ctx is done.
func New(ctx context.Context, opts Options) (*Tracker, error) {
	if opts.Manager == nil {
		return nil, errors.New("claim tracker needs the scheduler's SharedDRAManager")
	}
	t := &Tracker{
		claims:       opts.Manager.ResourceClaims(),
		sliceLister:  opts.Manager.ResourceSlices(),
		classes:      opts.Manager.DeviceClasses(),
		client:       opts.Client,
		activate:     opts.Activate,
		unknownGrace: opts.UnknownGrace,
		entries:      make(map[types.UID]*entry),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(settleBackoff,
			workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "drasched_claim_writes"}),
		nominations: NewNominations(NominationOptions{Ended: opts.NominationEnded}),
	}
	if t.unknownGrace == 0 {
		t.unknownGrace = DefaultUnknownGrace
	}
	go func() {
		<-ctx.Done()
		t.queue.ShutDown()
	}()
	go wait.UntilWithContext(ctx, t.work, time.Second)
	return t, nil
}

// Claim returns the claim from the scheduler's claim cache.
func (t *Tracker) Claim(namespace, name string) (*resourceapi.ResourceClaim, error) {
	return t.claims.Get(namespace, name)
}

// Claims lists the scheduler's newest versions of all claims.
func (t *Tracker) Claims() ([]*resourceapi.ResourceClaim, error) {
	return t.claims.List()
}

// Slices returns all ResourceSlices with DeviceTaintRules applied. Objects
// are only replaced when they change, so identity can key caches.
//
// The informer lists in random order. As long as the set of slices stays
// the same, Slices returns the very list it returned before, in the same
// order, so that caches keyed by the list (the allocator's slice index and
// node views) stay valid from one scheduling cycle to the next. Callers
// share the list and must not modify it.
func (t *Tracker) Slices() ([]*resourceapi.ResourceSlice, error) {
	list, err := t.sliceLister.ListWithDeviceTaintRules()
	if err != nil {
		return nil, err
	}
	return t.stableSlices(list), nil
}

func (t *Tracker) stableSlices(list []*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	t.slicesMutex.Lock()
	defer t.slicesMutex.Unlock()
	if len(list) == len(t.lastSlices) && containsAll(t.lastSliceSet, list) {
		// The same number of distinct objects, all of them known: the
		// same set.
		return t.lastSlices
	}
	set := make(map[*resourceapi.ResourceSlice]struct{}, len(list))
	for _, slice := range list {
		set[slice] = struct{}{}
	}
	t.lastSlices, t.lastSliceSet = list, set
	return list
}

func containsAll(set map[*resourceapi.ResourceSlice]struct{}, list []*resourceapi.ResourceSlice) bool {
	for _, slice := range list {
		if _, ok := set[slice]; !ok {
			return false
		}
	}
	return true
}

// DeviceClasses lists and gets DeviceClasses.
func (t *Tracker) DeviceClasses() structured.DeviceClassLister { return t.classes }

// Nominations are the preemptors' nominated allocations.
func (t *Tracker) Nominations() *Nominations { return t.nominations }

// AllocatedState gathers the devices of allocated and in-flight claims.
// The manager detects a write that moved a claim from in flight to
// allocated while it gathered and returns an error; that is retried, as
// kube-scheduler's own plugin does, for up to five seconds.
func (t *Tracker) AllocatedState(ctx context.Context) (*structured.AllocatedState, error) {
	var state *structured.AllocatedState
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, time.Microsecond, 5*time.Second, true, func(context.Context) (bool, error) {
		s, err := t.claims.GatherAllocatedState()
		if err != nil || s == nil {
			// The only error is the concurrent modification.
			lastErr = err
			return false, nil
		}
		state = s
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("gather allocated devices: %w (last attempt: %w)", err, lastErr)
	}
	return state, nil
}

// PendingAllocation returns the allocation in flight for a claim, whoever
// put it there.
func (t *Tracker) PendingAllocation(uid types.UID) *resourceapi.AllocationResult {
	t.mutex.Lock()
	e := t.entries[uid]
	t.mutex.Unlock()
	if e != nil {
		return e.claim.Status.Allocation
	}
	// Another plugin's, such as the in-tree one of another profile.
	return schedminor.PendingAllocation(t.claims, uid)
}

// ErrAlreadyAllocated is returned by Reserve for a claim that someone else
// allocated since the cycle began.
var ErrAlreadyAllocated = errors.New("claim is already allocated")

// ErrInFlight is returned by Reserve for a claim whose allocation another
// pod's cycle has in flight.
var ErrInFlight = errors.New("claim allocation is in flight")

// PlaceholderName names claims that do not exist yet (the claim for a
// pod's extended resources before PreBind creates it), as kube-scheduler
// names them. It is not a valid object name, so it cannot be mistaken for
// a real claim; the claim cache is not asked about it.
const PlaceholderName = "<extended-resources>"

// Reserve puts an allocation in flight.
func (t *Tracker) Reserve(claim *resourceapi.ResourceClaim) error {
	if claim.Status.Allocation == nil {
		return fmt.Errorf("claim %s has no allocation to reserve", klog.KObj(claim))
	}
	t.mutex.Lock()
	defer t.mutex.Unlock()
	if _, found := t.entries[claim.UID]; found || schedminor.HasPendingAllocation(t.claims, claim.UID) {
		return fmt.Errorf("claim %s: %w", klog.KObj(claim), ErrInFlight)
	}
	if claim.Name != PlaceholderName {
		// The cycle's view may be stale: someone may have allocated the
		// claim in the meantime.
		if current, err := t.claims.Get(claim.Namespace, claim.Name); err == nil && current.UID == claim.UID && current.Status.Allocation != nil {
			return fmt.Errorf("claim %s: %w", klog.KObj(claim), ErrAlreadyAllocated)
		}
	}
	if err := t.claims.SignalClaimPendingAllocation(claim.UID, claim); err != nil {
		return fmt.Errorf("put allocation of claim %s in flight: %w", klog.KObj(claim), err)
	}
	t.entries[claim.UID] = &entry{claim: claim, phase: reserved, shares: 1}
	return nil
}

// ErrNotReserved is returned by Share for a claim whose allocation is
// neither in flight nor written.
var ErrNotReserved = errors.New("claim has no reserved allocation in flight")

// Share adds a share to a reserved allocation. The shares live in the
// tracker, not in the claim cache's pending allocations: the first write
// ends the flight for all of them, because from then on the claim cache
// holds the allocation.
//
// The pods of a pod group get their binding cycles one after the other,
// each started before the next pod's Reserve: a pod whose share comes
// after another pod's PreBind wrote the allocation finds it written (in
// flight until the claim cache has it, or in the cache), which is as good
// as a share. Without that, it failed with an error and was retried.
func (t *Tracker) Share(claim *resourceapi.ResourceClaim) (bool, error) {
	t.mutex.Lock()
	defer t.mutex.Unlock()
	if e := t.entries[claim.UID]; e != nil {
		if e.phase != reserved {
			return false, nil
		}
		e.shares++
		return true, nil
	}
	if current, err := t.claims.Get(claim.Namespace, claim.Name); err == nil && current.UID == claim.UID && current.Status.Allocation != nil {
		return false, nil
	}
	return false, fmt.Errorf("claim %s: %w", klog.KObj(claim), ErrNotReserved)
}

// Unreserve drops a share of an allocation that no write has touched, and
// the allocation with the last share.
func (t *Tracker) Unreserve(key types.UID) bool {
	t.mutex.Lock()
	defer t.mutex.Unlock()
	e := t.entries[key]
	if e == nil || e.phase != reserved {
		return false
	}
	if e.shares--; e.shares > 0 {
		return false
	}
	t.removeLocked(key)
	return true
}

// removeLocked drops an entry and its allocation in flight: the claim
// cache holds each allocation once; the tracker counts the shares.
func (t *Tracker) removeLocked(key types.UID) {
	schedminor.RemovePendingAllocation(t.claims, key)
	delete(t.entries, key)
}

// Written stores the written claim in the claim cache, which counts its
// devices from now on, and then takes the allocation out of flight. A
// claim the cache does not know yet stays in flight until it does.
func (t *Tracker) Written(ctx context.Context, key types.UID, claim *resourceapi.ResourceClaim) {
	logger := klog.FromContext(ctx)
	err := t.claims.AssumeClaimAfterAPICall(claim)
	if err != nil {
		logger.V(5).Info("Written claim not stored in the claim cache", "claim", klog.KObj(claim), "err", err)
	}
	if key == "" {
		return
	}
	t.mutex.Lock()
	defer t.mutex.Unlock()
	e := t.entries[key]
	if e == nil {
		return
	}
	if _, cached := t.cached(claim, version(claim)); err == nil || cached {
		t.removeLocked(key)
		return
	}
	e.phase, e.target, e.since = written, claim, time.Now()
	t.queue.AddRateLimited(key)
}

// WriteUnknown keeps the allocation in flight until its fate is known.
func (t *Tracker) WriteUnknown(ctx context.Context, key types.UID, base *resourceapi.ResourceClaim) {
	t.mutex.Lock()
	defer t.mutex.Unlock()
	e := t.entries[key]
	if e == nil {
		return
	}
	klog.FromContext(ctx).V(2).Info("Claim write with unknown outcome, keeping its devices in flight", "claim", klog.KObj(base), "resourceVersion", base.ResourceVersion)
	e.phase, e.target, e.since = unknown, base, time.Now()
	t.queue.Add(key)
}

// InFlight returns the keys of the tracker's allocations in flight.
func (t *Tracker) InFlight() []types.UID {
	t.mutex.Lock()
	defer t.mutex.Unlock()
	return sets.List(sets.KeySet(t.entries))
}

// cached returns the claim cache's version of this claim (same UID) if it
// is at the given resourceVersion or newer.
func (t *Tracker) cached(claim *resourceapi.ResourceClaim, v int64) (*resourceapi.ResourceClaim, bool) {
	cached, err := t.claims.Get(claim.Namespace, claim.Name)
	if err != nil || cached.UID != claim.UID || version(cached) < v {
		return nil, false
	}
	return cached, true
}

// holds: claim is allocated the devices of the in-flight allocation.
func holds(claim, inFlight *resourceapi.ResourceClaim) bool {
	return claim.Status.Allocation != nil && inFlight.Status.Allocation != nil &&
		apiequality.Semantic.DeepEqual(claim.Status.Allocation.Devices.Results, inFlight.Status.Allocation.Devices.Results)
}

// version parses a claim's resourceVersion; 0 if it has none.
func version(claim *resourceapi.ResourceClaim) int64 {
	v, err := strconv.ParseInt(claim.ResourceVersion, 10, 64)
	if err != nil {
		return 0
	}
	return v
}

func (t *Tracker) work(ctx context.Context) {
	for t.next(ctx) {
	}
}

func (t *Tracker) next(ctx context.Context) bool {
	key, shutdown := t.queue.Get()
	if shutdown {
		return false
	}
	defer t.queue.Done(key)
	done, freed := t.settle(ctx, key)
	if done {
		t.queue.Forget(key)
	} else {
		t.queue.AddRateLimited(key)
	}
	if freed && t.activate != nil {
		t.activate(klog.FromContext(ctx))
	}
	return true
}

// settle tries to resolve one entry. It reports whether the entry is gone
// and whether devices may have become free without a claim event saying
// so.
func (t *Tracker) settle(ctx context.Context, key types.UID) (done, freed bool) {
	logger := klog.FromContext(ctx)
	t.mutex.Lock()
	e := t.entries[key]
	if e == nil || e.phase == reserved {
		t.mutex.Unlock()
		return true, false
	}
	inFlight, phase, target, since := e.claim, e.phase, e.target, e.since
	t.mutex.Unlock()
	// An unknown outcome is settled by any version newer than the base:
	// the write landed, or the claim changed and the write, which has the
	// base's resourceVersion as precondition, can no longer land.
	need := version(target)
	if phase == unknown {
		need++
	}
	// Devices leave flight without an event that announces them as free
	// unless the claim now holds them.
	freedBy := func(claim *resourceapi.ResourceClaim) bool { return !holds(claim, inFlight) }

	// The claim cache first: it is what the scheduler's snapshots are
	// made of, so once it holds the outcome the entry is redundant.
	if cached, ok := t.cached(target, need); ok {
		logger.V(5).Info("Claim write settled by the claim cache", "claim", klog.KObj(target))
		t.awaitClaimEvents()
		t.drop(key)
		return true, freedBy(cached)
	}
	if phase == written && time.Since(since) < time.Second {
		// The informer delivers a written claim within milliseconds; ask
		// the API server only if it does not, to find a deleted claim.
		return false, false
	}

	latest, err := t.client.ResourceV1().ResourceClaims(target.Namespace).Get(ctx, target.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) || err == nil && latest.UID != target.UID:
		logger.V(5).Info("Claim of an allocation in flight is gone", "claim", klog.KObj(target))
		t.drop(key)
		return true, true
	case err != nil:
		logger.V(5).Info("Checking the outcome of a claim write", "claim", klog.KObj(target), "err", err)
		return false, false
	case version(latest) >= need:
		// The outcome is known; the claim cache must hold it before the
		// allocation leaves flight.
		if err := t.claims.AssumeClaimAfterAPICall(latest); err == nil {
			t.drop(key)
			return true, freedBy(latest)
		}
		if cached, ok := t.cached(latest, version(latest)); ok {
			t.drop(key)
			return true, freedBy(cached)
		}
		// Not in the cache yet (a claim created in PreBind): wait for it.
		t.mutex.Lock()
		if e := t.entries[key]; e != nil {
			e.phase, e.target = written, latest
		}
		t.mutex.Unlock()
		return false, false
	case phase == unknown && time.Since(since) >= t.unknownGrace:
		logger.V(2).Info("Claim write with unknown outcome did not land, freeing its devices", "claim", klog.KObj(target), "after", time.Since(since))
		t.drop(key)
		return true, true
	}
	return false, false
}

// awaitClaimEvents returns once the claim cache has delivered to its
// handlers every event it took in before the call. The cache's store shows
// a new claim version before its handlers see it, and one of them is the
// DRA manager's count of allocated devices: an allocation that left flight
// as soon as Get showed its claim would, until that handler ran, be counted
// nowhere, and another pod could be given its devices. Every call of the
// assume cache that may change it delivers the pending events, waiting for
// a delivery in progress, before it returns (what AssumeClaimAfterAPICall
// does for Written); restoring a claim that cannot exist changes nothing.
// Never call it with t.mutex held: the handlers may call the tracker.
func (t *Tracker) awaitClaimEvents() {
	t.claims.AssumedClaimRestore("", PlaceholderName)
}

// drop removes an entry if it is still there.
func (t *Tracker) drop(key types.UID) {
	t.mutex.Lock()
	defer t.mutex.Unlock()
	if t.entries[key] != nil {
		t.removeLocked(key)
	}
}
