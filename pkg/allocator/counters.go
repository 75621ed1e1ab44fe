package allocator

import (
	"math"
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
// per Allocator and pool and never changes afterwards, except for the lazily
// compiled consumption of devices (guarded by mutex).
type poolCounters struct {
	once sync.Once

	slots map[counterRef]int
	// exact: every counter value and consumption of the pool is a whole
	// number of milli-units and all sums fit into int64, so arithmetic runs
	// on int64 (milli) instead of resource.Quantity (quantities).
	exact bool
	// available[slot] is the counter's value minus the consumption of all
	// allocated devices of the pool. It may be negative.
	milli      []int64
	quantities []resource.Quantity
	// overdrawn counts slots with available < 0. Such a pool admits no
	// device that consumes counters at all, as upstream checks every
	// counter of the pool after each addition.
	overdrawn int

	// compatBaseline is, per counter set, the compatibility-group
	// intersection of the allocated devices drawing from it.
	compatBaseline map[string]compatIntersection

	mutex    sync.Mutex
	compiled map[*preparedSlice][]consumption
}

// consumption is what one device draws, per slot, summed over its
// ConsumesCounters entries.
type consumption struct {
	slots      []int
	milli      []int64
	quantities []resource.Quantity
}

func (a *Allocator) poolCounters(p *pool) *poolCounters {
	v, _ := a.counters.LoadOrStore(p.id, &poolCounters{})
	pc := v.(*poolCounters)
	pc.once.Do(func() { pc.init(a, p) })
	return pc
}

func (pc *poolCounters) init(a *Allocator, p *pool) {
	pc.slots = make(map[counterRef]int)
	pc.compiled = make(map[*preparedSlice][]consumption)
	// Exact int64 arithmetic needs every value in whole milli-units, and
	// the sum of all magnitudes below MaxInt64 so that no sum overflows.
	pc.exact = true
	var total int64
	addMagnitude := func(q resource.Quantity) {
		m, ok := exactMilli(q)
		if m < 0 {
			m = -m
		}
		if !ok || m > math.MaxInt64/4 || total > math.MaxInt64/4 {
			pc.exact = false
			return
		}
		total += m
	}
	for name, set := range p.counterSets {
		for counter, c := range set.Counters {
			pc.slots[counterRef{name, counter}] = len(pc.quantities)
			pc.quantities = append(pc.quantities, c.Value.DeepCopy())
			addMagnitude(c.Value)
		}
	}
	pc.compatBaseline = make(map[string]compatIntersection)
	for _, group := range [][]*preparedSlice{p.slices, p.notTargeting} {
		for _, ps := range group {
			for i := range ps.slice.Spec.Devices {
				for _, consumption := range ps.slice.Spec.Devices[i].ConsumesCounters {
					for _, c := range consumption.Counters {
						addMagnitude(c.Value)
					}
				}
				if !a.isAllocated(ps.ids[i]) {
					continue
				}
				for _, consumption := range ps.slice.Spec.Devices[i].ConsumesCounters {
					for counter, c := range consumption.Counters {
						if slot, ok := pc.slots[counterRef{consumption.CounterSet, counter}]; ok {
							pc.quantities[slot].Sub(c.Value)
						}
					}
					if a.features.CompatibilityGroups {
						pc.compatBaseline[consumption.CounterSet] = pc.compatBaseline[consumption.CounterSet].add(groupSet(consumption.CompatibilityGroups))
					}
				}
			}
		}
	}
	for i := range pc.quantities {
		if pc.quantities[i].Sign() < 0 {
			pc.overdrawn++
		}
	}
	if pc.exact {
		pc.milli = make([]int64, len(pc.quantities))
		for i := range pc.quantities {
			pc.milli[i], _ = exactMilli(pc.quantities[i])
		}
	}
}

// consumptionOf returns the compiled consumption of device i of a slice.
func (pc *poolCounters) consumptionOf(ps *preparedSlice, i int) *consumption {
	pc.mutex.Lock()
	defer pc.mutex.Unlock()
	compiled := pc.compiled[ps]
	if compiled == nil {
		compiled = make([]consumption, len(ps.slice.Spec.Devices))
		for d := range ps.slice.Spec.Devices {
			compiled[d] = pc.compile(&ps.slice.Spec.Devices[d])
		}
		pc.compiled[ps] = compiled
	}
	return &compiled[i]
}

func (pc *poolCounters) compile(device *resourceapi.Device) consumption {
	var c consumption
	index := make(map[int]int)
	for _, entry := range device.ConsumesCounters {
		for counter, value := range entry.Counters {
			slot, ok := pc.slots[counterRef{entry.CounterSet, counter}]
			if !ok {
				// Pools with undefined counters are invalid and never get
				// here.
				continue
			}
			at, seen := index[slot]
			if !seen {
				at = len(c.slots)
				index[slot] = at
				c.slots = append(c.slots, slot)
				c.milli = append(c.milli, 0)
				c.quantities = append(c.quantities, resource.Quantity{})
			}
			c.quantities[at].Add(value.Value)
			if pc.exact {
				m, _ := exactMilli(value.Value)
				c.milli[at] += m
			}
		}
	}
	return c
}

// counterUsage tracks, during one search, what the devices being allocated
// consume from one pool.
type counterUsage struct {
	pool       *poolCounters
	milli      []int64
	quantities []resource.Quantity
	overdrawn  int
}

func newCounterUsage(pc *poolCounters) *counterUsage {
	u := &counterUsage{pool: pc, overdrawn: pc.overdrawn}
	if pc.exact {
		u.milli = make([]int64, len(pc.milli))
	} else {
		u.quantities = make([]resource.Quantity, len(pc.quantities))
	}
	return u
}

// fits reports whether the pool stays within its counters after adding the
// consumption, without changing anything: only the device's slots can change
// from within to overdrawn.
func (u *counterUsage) fits(c *consumption) bool {
	overdrawn := u.overdrawn
	for k, slot := range c.slots {
		before, after := u.overdrawnAfter(slot, c, k)
		switch {
		case after && !before:
			overdrawn++
		case before && !after:
			overdrawn--
		}
	}
	return overdrawn == 0
}

// overdrawnAfter reports whether a slot is overdrawn now and after adding
// the consumption's k-th amount.
func (u *counterUsage) overdrawnAfter(slot int, c *consumption, k int) (before, after bool) {
	if u.pool.exact {
		return u.pool.milli[slot] < u.milli[slot], u.pool.milli[slot] < u.milli[slot]+c.milli[k]
	}
	next := u.quantities[slot].DeepCopy()
	next.Add(c.quantities[k])
	return u.pool.quantities[slot].Cmp(u.quantities[slot]) < 0, u.pool.quantities[slot].Cmp(next) < 0
}

func (u *counterUsage) release(c *consumption) {
	u.apply(c, false)
}

func (u *counterUsage) apply(c *consumption, add bool) {
	for k, slot := range c.slots {
		before, after := u.overdrawnAfter(slot, c, k)
		if !add {
			// Removing: the state "after" removal is the current "before"
			// minus the amount; recompute directly.
			if u.pool.exact {
				before = u.pool.milli[slot] < u.milli[slot]
				after = u.pool.milli[slot] < u.milli[slot]-c.milli[k]
			} else {
				next := u.quantities[slot].DeepCopy()
				next.Sub(c.quantities[k])
				before = u.pool.quantities[slot].Cmp(u.quantities[slot]) < 0
				after = u.pool.quantities[slot].Cmp(next) < 0
			}
		}
		if u.pool.exact {
			if add {
				u.milli[slot] += c.milli[k]
			} else {
				u.milli[slot] -= c.milli[k]
			}
		} else if add {
			u.quantities[slot].Add(c.quantities[k])
		} else {
			u.quantities[slot].Sub(c.quantities[k])
		}
		switch {
		case after && !before:
			u.overdrawn++
		case before && !after:
			u.overdrawn--
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

// admits reports whether a device declaring groups may join the devices
// drawing from the counter set. It takes the groups as declared, so that
// checking allocates nothing.
func (c compatIntersection) admits(groups []string) bool {
	switch {
	case !c.hasMembers:
		return true
	case len(groups) == 0:
		return c.allEmpty
	case c.allEmpty:
		return false
	}
	for _, group := range groups {
		if c.groups.Has(group) {
			return true
		}
	}
	return false
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

// current is the state of one counter set: the search's if it touched the
// set, else what the allocated devices left.
func (u *compatUsage) current(set string) (compatIntersection, bool) {
	if cur, ok := u.running[set]; ok {
		return cur, true
	}
	return u.baseline[set], false
}

// admits reports whether the device may join the devices drawing from each
// counter set it draws from. It changes nothing; fold applies the device.
func (u *compatUsage) admits(device *resourceapi.Device) bool {
	for k := range device.ConsumesCounters {
		consumption := &device.ConsumesCounters[k]
		cur, _ := u.current(consumption.CounterSet)
		// Several entries of one device for the same counter set are
		// folded in one after the other, and each is checked against
		// the earlier ones.
		for j := range k {
			if earlier := &device.ConsumesCounters[j]; earlier.CounterSet == consumption.CounterSet {
				cur = cur.add(groupSet(earlier.CompatibilityGroups))
			}
		}
		if !cur.admits(consumption.CompatibilityGroups) {
			return false
		}
	}
	return true
}

// fold adds the groups of a device that admits accepted. The returned undo
// list restores the state.
func (u *compatUsage) fold(device *resourceapi.Device) []compatUndo {
	undo := make([]compatUndo, 0, len(device.ConsumesCounters))
	for _, consumption := range device.ConsumesCounters {
		cur, existed := u.current(consumption.CounterSet)
		undo = append(undo, compatUndo{set: consumption.CounterSet, prev: cur, existed: existed})
		u.running[consumption.CounterSet] = cur.add(groupSet(consumption.CompatibilityGroups))
	}
	return undo
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
