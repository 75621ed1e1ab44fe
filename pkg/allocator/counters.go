package allocator

import (
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
)

// Partitionable devices (DRAPartitionableDevices) consume counters from
// counter sets shared within their pool; a device fits only if, after adding
// its consumption, no counter of the pool is overdrawn. Compatibility groups
// (DRADeviceCompatibilityGroups) further restrict which devices may draw from
// the same counter set together.

// counterRef names one counter of one counter set.
type counterRef struct {
	set, counter string
}

// poolCounters is what the whole cycle knows about a pool's counters:
// capacity minus what already allocated devices consume. It is computed once
// per Allocator and pool and never changes afterwards.
type poolCounters struct {
	once sync.Once

	slots map[counterRef]int
	// available[slot] is the counter's value minus the consumption of all
	// allocated devices of the pool. It may be negative.
	available []resource.Quantity
	// overdrawn counts slots with available < 0. Such a pool admits no
	// device that consumes counters at all, as upstream checks every
	// counter of the pool after each addition.
	overdrawn int

	// compatBaseline is, per counter set, the compatibility-group
	// intersection of the allocated devices drawing from it.
	compatBaseline map[string]compatIntersection
}

func (a *Allocator) poolCounters(p *pool) *poolCounters {
	v, _ := a.counters.LoadOrStore(p.id, &poolCounters{})
	pc := v.(*poolCounters)
	pc.once.Do(func() { pc.init(a, p) })
	return pc
}

func (pc *poolCounters) init(a *Allocator, p *pool) {
	pc.slots = make(map[counterRef]int)
	for name, set := range p.counterSets {
		for counter, c := range set.Counters {
			pc.slots[counterRef{name, counter}] = len(pc.available)
			pc.available = append(pc.available, c.Value.DeepCopy())
		}
	}
	pc.compatBaseline = make(map[string]compatIntersection)
	for _, group := range [][]*preparedSlice{p.slices, p.notTargeting} {
		for _, ps := range group {
			for i := range ps.slice.Spec.Devices {
				if !a.isAllocated(ps.ids[i]) {
					continue
				}
				for _, consumption := range ps.slice.Spec.Devices[i].ConsumesCounters {
					for counter, c := range consumption.Counters {
						if slot, ok := pc.slots[counterRef{consumption.CounterSet, counter}]; ok {
							pc.available[slot].Sub(c.Value)
						}
					}
					if a.features.CompatibilityGroups {
						pc.compatBaseline[consumption.CounterSet] = pc.compatBaseline[consumption.CounterSet].add(groupSet(consumption.CompatibilityGroups))
					}
				}
			}
		}
	}
	for i := range pc.available {
		if pc.available[i].Sign() < 0 {
			pc.overdrawn++
		}
	}
}

// counterUsage tracks, during one search, what the devices being allocated
// consume from one pool.
type counterUsage struct {
	pool      *poolCounters
	consumed  []resource.Quantity
	overdrawn int
}

func newCounterUsage(pc *poolCounters) *counterUsage {
	return &counterUsage{pool: pc, consumed: make([]resource.Quantity, len(pc.available)), overdrawn: pc.overdrawn}
}

// reserve adds a device's consumption and reports whether the pool is
// still within its counters; if not, the consumption is removed again.
func (u *counterUsage) reserve(device *resourceapi.Device) bool {
	u.apply(device, true)
	if u.overdrawn > 0 {
		u.apply(device, false)
		return false
	}
	return true
}

// fits reports whether reserve would succeed, without changing anything.
func (u *counterUsage) fits(device *resourceapi.Device) bool {
	ok := u.reserve(device)
	if ok {
		u.release(device)
	}
	return ok
}

func (u *counterUsage) release(device *resourceapi.Device) {
	u.apply(device, false)
}

func (u *counterUsage) apply(device *resourceapi.Device, add bool) {
	for _, consumption := range device.ConsumesCounters {
		for counter, c := range consumption.Counters {
			slot, ok := u.pool.slots[counterRef{consumption.CounterSet, counter}]
			if !ok {
				// Pools with undefined counters are invalid and never reach
				// this point.
				continue
			}
			before := u.pool.available[slot].Cmp(u.consumed[slot]) < 0
			if add {
				u.consumed[slot].Add(c.Value)
			} else {
				u.consumed[slot].Sub(c.Value)
			}
			after := u.pool.available[slot].Cmp(u.consumed[slot]) < 0
			switch {
			case after && !before:
				u.overdrawn++
			case before && !after:
				u.overdrawn--
			}
		}
	}
}

// compatIntersection is the running state of compatibility groups on one
// counter set: the intersection of the groups declared by every device
// drawing from it. A device without groups only goes together with other
// devices without groups, which a plain intersection cannot express, hence
// allEmpty.
type compatIntersection struct {
	hasMembers bool
	allEmpty   bool
	groups     sets.Set[string]
}

func (c compatIntersection) admits(groups sets.Set[string]) bool {
	switch {
	case !c.hasMembers:
		return true
	case groups.Len() == 0:
		return c.allEmpty
	case c.allEmpty:
		return false
	}
	return c.groups.Intersection(groups).Len() > 0
}

// add returns the state after adding a device's groups. It never mutates the
// receiver, so a copy taken before is a valid snapshot for undo.
func (c compatIntersection) add(groups sets.Set[string]) compatIntersection {
	if !c.hasMembers {
		if groups.Len() == 0 {
			return compatIntersection{hasMembers: true, allEmpty: true}
		}
		return compatIntersection{hasMembers: true, groups: groups.Clone()}
	}
	if c.allEmpty || groups.Len() == 0 {
		return c
	}
	c.groups = c.groups.Intersection(groups)
	return c
}

func groupSet(groups []string) sets.Set[string] {
	if len(groups) == 0 {
		return nil
	}
	return sets.New(groups...)
}

// compatUsage tracks compatibility groups of one pool during a search.
type compatUsage struct {
	baseline map[string]compatIntersection
	running  map[string]compatIntersection
}

// compatUndo restores one counter set's state.
type compatUndo struct {
	set     string
	prev    compatIntersection
	existed bool
}

// consume checks a device against every counter set it draws from and, if
// it fits, folds its groups in. The returned undo list restores the state.
func (u *compatUsage) consume(device *resourceapi.Device) (bool, []compatUndo) {
	var undo []compatUndo
	for _, consumption := range device.ConsumesCounters {
		cur, existed := u.running[consumption.CounterSet]
		if !existed {
			cur = u.baseline[consumption.CounterSet]
		}
		groups := groupSet(consumption.CompatibilityGroups)
		if !cur.admits(groups) {
			u.restore(undo)
			return false, nil
		}
		undo = append(undo, compatUndo{set: consumption.CounterSet, prev: cur, existed: existed})
		u.running[consumption.CounterSet] = cur.add(groups)
	}
	return true, undo
}

// admits is consume without the side effects.
func (u *compatUsage) admits(device *resourceapi.Device) bool {
	ok, undo := u.consume(device)
	if ok {
		u.restore(undo)
	}
	return ok
}

func (u *compatUsage) restore(undo []compatUndo) {
	for i := len(undo) - 1; i >= 0; i-- {
		if undo[i].existed {
			u.running[undo[i].set] = undo[i].prev
		} else {
			delete(u.running, undo[i].set)
		}
	}
}
