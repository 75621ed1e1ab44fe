// Package tracker keeps the scheduler's view of DRA state consistent across
// scheduling cycles, in three layers:
//
//  1. An assume cache of ResourceClaims on top of the informer. PreBind
//     stores the claim it wrote there, so that the next cycle sees the
//     allocation before the informer does.
//  2. In-flight allocations: claims allocated in Reserve whose allocation
//     PreBind has not written yet. Without them, the next pod's cycle would
//     not know that these devices are taken and could allocate them again.
//  3. Allocated devices: the devices of all allocated claims, maintained from
//     assume-cache events instead of listing every claim in every cycle,
//     merged with the in-flight ones into one snapshot per cycle.
//
// Layers 2 and 3 share one mutex. PreBind's Commit moves a claim from
// in-flight to allocated in one critical section, so there is no moment at
// which a snapshot could miss a claim that is allocated (the race behind
// kubernetes#136269, where the two were updated separately).
//
// The scheduler's own events for ResourceClaims come from another listener
// on the same informer, which may run ahead of ours. Whatever the scheduler
// reacts to, the tracker must already know, or a pod woken by a
// deallocation would find the devices still taken and wait forever. So the
// plugin hands every claim event it sees to Sync, Claim falls back to the
// scheduler's claim cache (Options.ClaimFallback), and the allocated layer
// applies each claim's versions in resourceVersion order, whichever path
// they arrive on. HasSynced includes the initial list of claims.
//
// ResourceSlices come from k8s.io/dynamic-resource-allocation's slice
// tracker, which applies DeviceTaintRules: in the scheduler, the one that
// kube-scheduler already runs for its SharedDRAManager (a slice informer
// takes the tracker's index only once); standalone, a tracker of its own.
package tracker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	resourceslicetracker "k8s.io/dynamic-resource-allocation/resourceslice/tracker"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/scheduler/util/assumecache"
	"k8s.io/utils/ptr"
)

// Options configure a Tracker.
type Options struct {
	// InformerFactory provides the ResourceClaim, ResourceSlice,
	// DeviceClass and DeviceTaintRule informers; the scheduler's shared
	// factory, so that no object is watched twice.
	InformerFactory informers.SharedInformerFactory
	// SliceLister lists ResourceSlices with DeviceTaintRules applied. In
	// the scheduler this is SharedDRAManager().ResourceSlices(). If nil,
	// New starts a slice tracker of its own on InformerFactory.
	SliceLister SliceLister
	// ClaimFallback looks up claims that the tracker's own cache has not
	// seen yet: in the scheduler, SharedDRAManager().ResourceClaims(), the
	// cache whose events drive the scheduling queue. Optional.
	ClaimFallback ClaimGetter
	// KubeClient lets an own slice tracker record events about
	// DeviceTaintRules.
	KubeClient kubernetes.Interface
	// DeviceTaintRules applies DeviceTaintRules to the slices (feature
	// DRADeviceTaintRules).
	DeviceTaintRules bool
	// ConsumableCapacity tracks shares of devices that allow multiple
	// allocations (feature DRAConsumableCapacity); without it, a share
	// counts as an exclusive allocation, as upstream does.
	ConsumableCapacity bool
}

// SliceLister lists ResourceSlices with DeviceTaintRules applied; the
// scheduler framework's ResourceSliceLister satisfies it.
type SliceLister interface {
	ListWithDeviceTaintRules() ([]*resourceapi.ResourceSlice, error)
}

// ClaimGetter gets a claim by namespace and name; the scheduler
// framework's ResourceClaimTracker satisfies it.
type ClaimGetter interface {
	Get(namespace, name string) (*resourceapi.ResourceClaim, error)
}

// Tracker is the scheduler plugin's view of ResourceClaims, devices and
// slices. All methods are safe for concurrent use.
type Tracker struct {
	claims *assumecache.AssumeCache
	// claimsSynced reports whether the assume cache, and through it the
	// allocated layer, has processed the informer's initial list.
	claimsSynced cache.InformerSynced
	fallback     ClaimGetter
	slices       SliceLister
	classes      resourcelisters.DeviceClassLister
	// ownSlices is the slice tracker New started, if any.
	ownSlices *resourceslicetracker.Tracker

	consumableCapacity bool

	// slicesMutex guards lastSlices and lastSliceSet: the list Slices
	// returned last, and its elements.
	slicesMutex  sync.Mutex
	lastSlices   []*resourceapi.ResourceSlice
	lastSliceSet map[*resourceapi.ResourceSlice]struct{}

	// mutex guards inFlight, allocated, applied, revision and snapshot.
	mutex sync.RWMutex
	// inFlight maps claim UIDs to the claim with the allocation made in
	// Reserve, until PreBind commits it or Unreserve drops it.
	inFlight map[types.UID]*resourceapi.ResourceClaim
	// allocated maps claim UIDs to the devices of allocated claims, as seen
	// through the assume cache or committed by PreBind.
	allocated map[types.UID]claimDevices
	// applied is the resourceVersion of the newest version of each claim
	// that the allocated layer has applied, so that a version arriving late
	// on one path never overwrites a newer one from another (Sync, Commit,
	// the assume cache). deletedVersion marks claims deleted through Sync
	// whose deletion the assume cache has not delivered yet.
	applied map[types.UID]int64
	// revision counts changes to inFlight and allocated.
	revision int64
	// snapshot is the AllocatedState of revision snapshotRevision; it is
	// shared read-only by all cycles until something changes.
	snapshot         *structured.AllocatedState
	snapshotRevision int64
}

// claimDevices is what one allocated claim takes.
type claimDevices struct {
	exclusive []structured.DeviceID
	shares    []structured.SharedDeviceID
	consumed  []structured.DeviceConsumedCapacity
}

// New sets up a Tracker on the informers of the factory. It must be called
// before the factory is started, like any informer registration.
func New(ctx context.Context, opts Options) (*Tracker, error) {
	logger := klog.FromContext(ctx)
	resource := opts.InformerFactory.Resource().V1()
	t := &Tracker{
		claims:             assumecache.NewAssumeCache(logger, resource.ResourceClaims().Informer(), "ResourceClaim", "", nil),
		slices:             opts.SliceLister,
		classes:            resource.DeviceClasses().Lister(),
		consumableCapacity: opts.ConsumableCapacity,
		inFlight:           make(map[types.UID]*resourceapi.ResourceClaim),
		allocated:          make(map[types.UID]claimDevices),
		applied:            make(map[types.UID]int64),
		fallback:           opts.ClaimFallback,
	}
	if t.slices == nil {
		sliceOpts := resourceslicetracker.Options{
			EnableDeviceTaintRules:   opts.DeviceTaintRules,
			EnableConsumableCapacity: opts.ConsumableCapacity,
			SliceInformer:            resource.ResourceSlices(),
			KubeClient:               opts.KubeClient,
		}
		if opts.DeviceTaintRules {
			sliceOpts.TaintInformer = resource.DeviceTaintRules()
		}
		own, err := resourceslicetracker.StartTracker(ctx, sliceOpts)
		if err != nil {
			return nil, fmt.Errorf("start ResourceSlice tracker: %w", err)
		}
		t.ownSlices = own
		t.slices = sliceList{own}
	}
	registration := t.claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.observe(obj) },
		UpdateFunc: func(_, obj any) { t.observe(obj) },
		DeleteFunc: func(obj any) { t.forget(obj, false) },
	})
	t.claimsSynced = registration.HasSynced
	return t, nil
}

// HasSynced reports whether the tracker has processed the initial list of
// claims (and of slices, for an own slice tracker). Until then its
// allocated devices are incomplete: the scheduler's informer sync does not
// cover the tracker's own listener.
func (t *Tracker) HasSynced() bool {
	return t.claimsSynced() && (t.ownSlices == nil || t.ownSlices.HasSynced())
}

// Stop stops an own slice tracker's background work.
func (t *Tracker) Stop() {
	if t.ownSlices != nil {
		t.ownSlices.Stop()
	}
}

// sliceList adapts a slice tracker to SliceLister.
type sliceList struct{ tracker *resourceslicetracker.Tracker }

func (l sliceList) ListWithDeviceTaintRules() ([]*resourceapi.ResourceSlice, error) {
	return l.tracker.ListPatchedResourceSlices()
}

// Claim returns the newest known version of a claim: the one PreBind wrote,
// until the informer has seen something newer, or the scheduler's, if that
// is newer still; a newer version from the scheduler is synced in.
func (t *Tracker) Claim(namespace, name string) (*resourceapi.ResourceClaim, error) {
	var own *resourceapi.ResourceClaim
	obj, err := t.claims.Get(namespace + "/" + name)
	switch {
	case err == nil:
		claim, ok := obj.(*resourceapi.ResourceClaim)
		if !ok {
			return nil, fmt.Errorf("unexpected object of type %T for claim %s/%s", obj, namespace, name)
		}
		own = claim
	case !isNotFound(err):
		return nil, err
	}
	if t.fallback != nil {
		if theirs, ferr := t.fallback.Get(namespace, name); ferr == nil && theirs != nil && (own == nil || version(theirs) > version(own)) {
			t.Sync(nil, theirs)
			return theirs, nil
		}
	}
	if own == nil {
		return nil, err
	}
	return own, nil
}

// isNotFound matches the assume cache's not-found error.
func isNotFound(err error) bool {
	return errors.Is(err, assumecache.ErrNotFound)
}

// version parses a claim's resourceVersion; 0 if it has none (an object
// not from the API server).
func version(claim *resourceapi.ResourceClaim) int64 {
	v, err := strconv.ParseInt(claim.ResourceVersion, 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// Sync applies a claim event that the scheduler has seen, possibly before
// the tracker's own listener: oldObj and newObj as in an informer event
// handler (newObj nil for a deletion). Versions older than what the
// tracker knows are ignored.
func (t *Tracker) Sync(oldObj, newObj any) {
	if newObj == nil {
		t.forget(oldObj, true)
		return
	}
	claim, ok := newObj.(*resourceapi.ResourceClaim)
	if !ok {
		return
	}
	// Through the assume cache if it has the claim, so that Get sees it
	// too; the cache calls observe before Assume returns.
	if err := t.claims.Assume(claim); err == nil || !isNotFound(err) {
		return
	}
	// Not listed yet: the allocated layer takes it directly. Claim finds
	// it through the fallback until the listener adds it.
	t.observe(claim)
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
	list, err := t.slices.ListWithDeviceTaintRules()
	if err != nil {
		return nil, err
	}
	t.slicesMutex.Lock()
	defer t.slicesMutex.Unlock()
	if len(list) == len(t.lastSlices) && containsAll(t.lastSliceSet, list) {
		// The same number of distinct objects, all of them known: the
		// same set.
		return t.lastSlices, nil
	}
	set := make(map[*resourceapi.ResourceSlice]struct{}, len(list))
	for _, slice := range list {
		set[slice] = struct{}{}
	}
	t.lastSlices, t.lastSliceSet = list, set
	return list, nil
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
func (t *Tracker) DeviceClasses() structured.DeviceClassLister { return classLister{t.classes} }

type classLister struct {
	lister resourcelisters.DeviceClassLister
}

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	return l.lister.List(labels.Everything())
}
func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) { return l.lister.Get(name) }

// ErrAlreadyAllocated is returned by Reserve for a claim that someone else
// allocated since the cycle began.
var ErrAlreadyAllocated = errors.New("claim is already allocated")

// ErrInFlight is returned by Reserve for a claim whose allocation another
// pod's cycle has in flight.
var ErrInFlight = errors.New("claim allocation is in flight")

// Reserve records an allocation made for a claim in Reserve, before PreBind
// writes it. allocated is a copy of the claim with Status.Allocation set.
// From now on, snapshots count its devices as taken.
func (t *Tracker) Reserve(allocated *resourceapi.ResourceClaim) error {
	if allocated.Status.Allocation == nil {
		return fmt.Errorf("claim %s has no allocation to reserve", klog.KObj(allocated))
	}
	// The cycle's view may be stale: someone may have allocated the claim
	// in the meantime. Check the newest version.
	if current, err := t.Claim(allocated.Namespace, allocated.Name); err == nil && current.UID == allocated.UID && current.Status.Allocation != nil {
		return fmt.Errorf("claim %s: %w", klog.KObj(allocated), ErrAlreadyAllocated)
	}
	t.mutex.Lock()
	defer t.mutex.Unlock()
	if _, found := t.inFlight[allocated.UID]; found {
		return fmt.Errorf("claim %s: %w", klog.KObj(allocated), ErrInFlight)
	}
	t.inFlight[allocated.UID] = allocated
	t.revision++
	return nil
}

// PendingAllocation returns the allocation in flight for a claim, or nil.
func (t *Tracker) PendingAllocation(uid types.UID) *resourceapi.AllocationResult {
	t.mutex.RLock()
	defer t.mutex.RUnlock()
	if claim := t.inFlight[uid]; claim != nil {
		return claim.Status.Allocation
	}
	return nil
}

// Unreserve drops an in-flight allocation that will not be written. It
// reports whether there was one. PreBind stores a claim in the assume
// cache only after writing it, and that moves it out of flight, so there
// is nothing to restore.
func (t *Tracker) Unreserve(claim *resourceapi.ResourceClaim) bool {
	t.mutex.Lock()
	defer t.mutex.Unlock()
	_, found := t.inFlight[claim.UID]
	if found {
		delete(t.inFlight, claim.UID)
		t.revision++
	}
	return found
}

// Created records that a claim which Reserve tracked under a placeholder
// UID, because it did not exist yet (the claim for a pod's extended
// resources), has been created in the API: its in-flight allocation is
// keyed by the new UID from now on, so that Commit and Unreserve of the
// created claim find it. Nothing is freed or counted twice on the way.
func (t *Tracker) Created(placeholder types.UID, created *resourceapi.ResourceClaim) error {
	t.mutex.Lock()
	defer t.mutex.Unlock()
	claim, found := t.inFlight[placeholder]
	if !found {
		return fmt.Errorf("claim %s: no allocation in flight under placeholder UID %s", klog.KObj(created), placeholder)
	}
	if _, found := t.inFlight[created.UID]; found {
		return fmt.Errorf("claim %s: %w", klog.KObj(created), ErrInFlight)
	}
	claim = claim.DeepCopy()
	claim.ObjectMeta = *created.ObjectMeta.DeepCopy()
	delete(t.inFlight, placeholder)
	t.inFlight[created.UID] = claim
	// Every change of inFlight counts, even one that leaves the
	// snapshot's devices as they are.
	t.revision++
	return nil
}

// Commit records a claim that PreBind has written: it becomes the newest
// version in the assume cache, and its devices move from in-flight to
// allocated in one step.
func (t *Tracker) Commit(ctx context.Context, written *resourceapi.ResourceClaim) {
	if err := t.claims.Assume(written); err != nil {
		// Only fails if the informer already has something newer, which
		// then is what counts.
		klog.FromContext(ctx).V(5).Info("Claim not stored in assume cache", "claim", klog.KObj(written), "err", err)
	}
	devices := t.devicesOf(written)
	t.mutex.Lock()
	defer t.mutex.Unlock()
	if v := version(written); v >= t.applied[written.UID] {
		t.applied[written.UID] = v
		if written.Status.Allocation != nil {
			t.allocated[written.UID] = devices
		} else {
			delete(t.allocated, written.UID)
		}
	}
	delete(t.inFlight, written.UID)
	t.revision++
}

// ForgetInFlight drops an in-flight allocation after PreBind wrote only the
// reservation for an already allocated claim. Unlike Unreserve it leaves
// the assume cache alone.
func (t *Tracker) ForgetInFlight(uid types.UID) {
	t.mutex.Lock()
	defer t.mutex.Unlock()
	if _, found := t.inFlight[uid]; found {
		delete(t.inFlight, uid)
		t.revision++
	}
}

// observe applies a version of a claim to the allocated layer, unless a
// newer one was applied already.
func (t *Tracker) observe(obj any) {
	claim, ok := obj.(*resourceapi.ResourceClaim)
	if !ok {
		return
	}
	devices := t.devicesOf(claim)
	v := version(claim)
	t.mutex.Lock()
	defer t.mutex.Unlock()
	if applied, known := t.applied[claim.UID]; known && v < applied {
		return
	}
	t.applied[claim.UID] = v
	_, allocated := t.allocated[claim.UID]
	switch {
	case claim.Status.Allocation != nil:
		t.allocated[claim.UID] = devices
		t.revision++
	case allocated:
		delete(t.allocated, claim.UID)
		t.revision++
	}
}

// deletedVersion marks a claim deleted through Sync in applied: no later
// version of it may be applied.
const deletedVersion = math.MaxInt64

// forget removes a deleted claim. A deletion the scheduler saw first
// (synced) leaves a mark, so that late versions from the listener are
// ignored; the listener's own deletion clears everything.
func (t *Tracker) forget(obj any, synced bool) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	claim, ok := obj.(*resourceapi.ResourceClaim)
	if !ok {
		return
	}
	t.mutex.Lock()
	defer t.mutex.Unlock()
	_, known := t.applied[claim.UID]
	switch {
	case !synced:
		delete(t.applied, claim.UID)
	case known:
		t.applied[claim.UID] = deletedVersion
	}
	if _, allocated := t.allocated[claim.UID]; allocated {
		delete(t.allocated, claim.UID)
		t.revision++
	}
}

// devicesOf lists the devices an allocated claim takes. Devices with admin
// access are shared with other claims and not counted. Shares of devices
// that allow multiple allocations are counted as shares, with their
// consumed capacity, when consumable capacity is on.
func (t *Tracker) devicesOf(claim *resourceapi.ResourceClaim) claimDevices {
	var d claimDevices
	if claim.Status.Allocation == nil {
		return d
	}
	for _, result := range claim.Status.Allocation.Devices.Results {
		if ptr.Deref(result.AdminAccess, false) {
			continue
		}
		id := structured.MakeDeviceID(result.Driver, result.Pool, result.Device)
		if t.consumableCapacity && result.ShareID != nil {
			d.shares = append(d.shares, structured.MakeSharedDeviceID(id, result.ShareID))
			if result.ConsumedCapacity != nil {
				d.consumed = append(d.consumed, structured.NewDeviceConsumedCapacity(id, result.ConsumedCapacity))
			}
			continue
		}
		d.exclusive = append(d.exclusive, id)
	}
	return d
}

// AllocatedState returns the devices taken by allocated and in-flight
// claims. The result is shared and must not be modified.
func (t *Tracker) AllocatedState() structured.AllocatedState {
	t.mutex.RLock()
	if t.snapshot != nil && t.snapshotRevision == t.revision {
		defer t.mutex.RUnlock()
		return *t.snapshot
	}
	revision := t.revision
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	add := func(d claimDevices) {
		state.AllocatedDevices.Insert(d.exclusive...)
		state.AllocatedSharedDeviceIDs.Insert(d.shares...)
		for _, c := range d.consumed {
			state.AggregatedCapacity.Insert(c)
		}
	}
	for _, d := range t.allocated {
		add(d)
	}
	for uid, claim := range t.inFlight {
		if _, committed := t.allocated[uid]; committed {
			// Already counted; counting capacity twice would under-report
			// what is free.
			continue
		}
		add(t.devicesOf(claim))
	}
	t.mutex.RUnlock()

	t.mutex.Lock()
	defer t.mutex.Unlock()
	if t.revision == revision {
		t.snapshot, t.snapshotRevision = &state, revision
	}
	return state
}

// InFlight returns the UIDs of claims with allocations in flight, for
// debugging and tests.
func (t *Tracker) InFlight() []types.UID {
	t.mutex.RLock()
	defer t.mutex.RUnlock()
	return sets.List(sets.KeySet(t.inFlight))
}
