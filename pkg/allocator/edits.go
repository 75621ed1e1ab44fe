package allocator

import (
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Edits change the allocated state an Allocator sees, the way preemption's
// dry run asks: Freed holds what the claims of evicted pods would give
// back, Added what pods nominated to a node will take. Both are in the
// form of structured.AllocatedState, as the claims' allocations contribute
// to it.
//
// The edited state is the one upstream's scheduler would gather after those
// claims were deallocated and allocated: exclusive devices are taken if
// they are in the state and not freed, or added; shares likewise; consumed
// capacity is the state's, minus the freed, plus the added, with the
// arithmetic of structured.ConsumedCapacityCollection (an entry disappears
// when it drops to zero).
type Edits struct {
	Freed structured.AllocatedState
	Added structured.AllocatedState
	// AlsoAdded is taken as Added is, kept apart so that a caller whose
	// additions change often (allocations in flight) on top of a larger
	// set that does not (nominations) need not copy the larger one each
	// time. A device in both counts once; capacity in both adds up.
	AlsoAdded structured.AllocatedState
}

func (e *Edits) empty() bool {
	return e == nil || emptyState(e.Freed) && emptyState(e.Added) && emptyState(e.AlsoAdded)
}

func emptyState(s structured.AllocatedState) bool {
	return len(s.AllocatedDevices) == 0 && len(s.AllocatedSharedDeviceIDs) == 0 && len(s.AggregatedCapacity) == 0
}

// WithEdits returns an allocator for the same cycle and inputs that sees
// the allocated state changed by edits; a's own state stays as it is. It
// shares a's slice index and cache, so it is cheap: preemption's dry run
// makes one per node and set of victims. Only the devices that edits name
// are looked up differently; the cycle's state is not copied.
func (a *Allocator) WithEdits(edits Edits) *Allocator {
	e := &Allocator{
		features:    a.features,
		newer:       a.newer,
		celFeatures: a.celFeatures,
		tier:        a.tier,
		state:       a.state,
		classes:     a.classes,
		slices:      a.slices,
		cache:       a.cache,
		bestFit:     a.bestFit,
		topoAttrs:   a.topoAttrs,
		topoKey:     a.topoKey,
	}
	e.idx = a.index()
	e.indexOnce.Do(func() {})
	if edits.empty() {
		return e
	}
	e.edits = &edits
	if len(edits.Freed.AggregatedCapacity) > 0 || len(edits.Added.AggregatedCapacity) > 0 || len(edits.AlsoAdded.AggregatedCapacity) > 0 {
		e.capacity = map[structured.DeviceID]structured.ConsumedCapacity{}
		ids := sets.KeySet(edits.Freed.AggregatedCapacity).Union(sets.KeySet(edits.Added.AggregatedCapacity)).Union(sets.KeySet(edits.AlsoAdded.AggregatedCapacity))
		for id := range ids {
			c := structured.NewConsumedCapacityCollection()
			if base, ok := a.state.AggregatedCapacity[id]; ok {
				c[id] = base.Clone()
			}
			if freed, ok := edits.Freed.AggregatedCapacity[id]; ok {
				c.Remove(structured.DeviceConsumedCapacity{DeviceID: id, ConsumedCapacity: freed})
			}
			if added, ok := edits.Added.AggregatedCapacity[id]; ok {
				c.Insert(structured.DeviceConsumedCapacity{DeviceID: id, ConsumedCapacity: added})
			}
			if added, ok := edits.AlsoAdded.AggregatedCapacity[id]; ok {
				c.Insert(structured.DeviceConsumedCapacity{DeviceID: id, ConsumedCapacity: added})
			}
			// nil: nothing consumed after the edits.
			e.capacity[id] = c[id]
		}
	}
	return e
}

// WithoutAllocations returns an allocator for the same cycle and inputs
// that sees no device allocated: whether claims fit a node at all, if
// every pod there were evicted.
func (a *Allocator) WithoutAllocations() *Allocator {
	e := a.WithEdits(Edits{})
	e.state = structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	return e
}

// allocatedWhole reports whether a device is allocated exclusively.
func (a *Allocator) allocatedWhole(id structured.DeviceID) bool {
	if a.edits == nil {
		return a.state.AllocatedDevices.Has(id)
	}
	if a.edits.Added.AllocatedDevices.Has(id) || a.edits.AlsoAdded.AllocatedDevices.Has(id) {
		return true
	}
	return a.state.AllocatedDevices.Has(id) && !a.edits.Freed.AllocatedDevices.Has(id)
}

// consumedCapacity returns what the shares of a device consume, and
// whether the device has such an entry at all.
func (a *Allocator) consumedCapacity(id structured.DeviceID) (structured.ConsumedCapacity, bool) {
	if a.capacity != nil {
		if c, edited := a.capacity[id]; edited {
			return c, c != nil
		}
	}
	c, ok := a.state.AggregatedCapacity[id]
	return c, ok
}

// sharedDevices returns the devices that have shares in
// state.AllocatedSharedDeviceIDs, after the edits.
func (a *Allocator) sharedDevices() sets.Set[structured.DeviceID] {
	a.sharedOnce.Do(func() {
		a.shared = sets.New[structured.DeviceID]()
		for id := range a.state.AllocatedSharedDeviceIDs {
			if a.edits != nil && a.edits.Freed.AllocatedSharedDeviceIDs.Has(id) {
				continue
			}
			a.shared.Insert(baseDevice(id))
		}
		if a.edits != nil {
			for id := range a.edits.Added.AllocatedSharedDeviceIDs {
				a.shared.Insert(baseDevice(id))
			}
			for id := range a.edits.AlsoAdded.AllocatedSharedDeviceIDs {
				a.shared.Insert(baseDevice(id))
			}
		}
	})
	return a.shared
}

// baseDevice is the device of a share (SharedDeviceID.GetDeviceID, which
// 1.35's schedulerapi lacks).
func baseDevice(id structured.SharedDeviceID) structured.DeviceID {
	return structured.DeviceID{Driver: id.Driver, Pool: id.Pool, Device: id.Device}
}
