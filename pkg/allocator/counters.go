package allocator

import (
	"math"
	"slices"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/drasched/drasched/internal/minor"
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

// counterLayout is what a pool's counters are before anything is
// allocated: the slot of each counter, its value, and what every device of
// the pool draws. It depends only on the pool's slices, so it is computed
// once per pool and kept with it; the Cache keeps the pool with the node's
// view across cycles. Without that, every scheduling cycle compiled every
// partitionable device of every node again, which was a fifth of the
// allocator's time on partitionable nodes. It is immutable once built.
type counterLayout struct {
	slots map[counterRef]int
	// exact: every counter value and consumption of the pool is a whole
	// number of milli-units and all sums fit into int64, so arithmetic runs
	// on int64 (milli) instead of resource.Quantity (quantities).
	exact bool
	// milli or quantities (per exact) hold the counters' values.
	milli      []int64
	quantities []resource.Quantity
	// negative counts the slots whose value is below zero.
	negative int

	// slices are the pool's device slices, those that target the node and
	// the others; compiled[k][i] is what device i of slices[k] draws.
	slices   []*preparedSlice
	compiled [][]consumption
}

// counterLayout returns the pool's layout, computing it on first use.
func (p *pool) counterLayout() *counterLayout {
	p.layoutOnce.Do(func() { p.layout = newCounterLayout(p) })
	return p.layout
}

func newCounterLayout(p *pool) *counterLayout {
	l := &counterLayout{slots: make(map[counterRef]int)}
	// Exact int64 arithmetic needs every value in whole milli-units, and
	// the sum of all magnitudes below MaxInt64 so that no sum overflows.
	l.exact = true
	var total int64
	addMagnitude := func(q resource.Quantity) {
		m, ok := exactMilli(q)
		if m < 0 {
			m = -m
		}
		if !ok || m > math.MaxInt64/4 || total > math.MaxInt64/4 {
			l.exact = false
			return
		}
		total += m
	}
	for name, set := range p.counterSets {
		for counter, c := range set.Counters {
			l.slots[counterRef{name, counter}] = len(l.quantities)
			l.quantities = append(l.quantities, c.Value.DeepCopy())
			addMagnitude(c.Value)
		}
	}
	l.slices = append(slices.Clip(p.slices), p.notTargeting...)
	for _, ps := range l.slices {
		for i := range ps.slice.Spec.Devices {
			for _, consumption := range ps.slice.Spec.Devices[i].ConsumesCounters {
				for _, c := range consumption.Counters {
					addMagnitude(c.Value)
				}
			}
		}
	}
	for i := range l.quantities {
		if l.quantities[i].Sign() < 0 {
			l.negative++
		}
	}
	if l.exact {
		l.milli = make([]int64, len(l.quantities))
		for i := range l.quantities {
			l.milli[i], _ = exactMilli(l.quantities[i])
		}
		l.quantities = nil
	}
	l.compiled = make([][]consumption, len(l.slices))
	for k, ps := range l.slices {
		l.compiled[k] = make([]consumption, len(ps.slice.Spec.Devices))
		for i := range ps.slice.Spec.Devices {
			l.compiled[k][i] = l.compile(&ps.slice.Spec.Devices[i])
		}
	}
	return l
}

// consumptionOf returns what device i of a slice of the pool draws.
func (l *counterLayout) consumptionOf(ps *preparedSlice, i int) *consumption {
	// A pool has few slices; a scan beats a map.
	if k := slices.Index(l.slices, ps); k >= 0 {
		return &l.compiled[k][i]
	}
	// The Allocator keeps one poolCounters per pool name, with the layout
	// of the first node's view of it; other nodes see the same slices, the
	// ones targeting them and the others, so this is not expected. Compiled
	// now, the answer is right anyway.
	c := l.compile(&ps.slice.Spec.Devices[i])
	return &c
}

func (l *counterLayout) compile(device *resourceapi.Device) consumption {
	var c consumption
	for _, entry := range device.ConsumesCounters {
		for counter, value := range entry.Counters {
			slot, ok := l.slots[counterRef{entry.CounterSet, counter}]
			if !ok {
				// Pools with undefined counters are invalid and never get
				// here.
				continue
			}
			at := slices.Index(c.slots, slot)
			if at < 0 {
				at = len(c.slots)
				c.slots = append(c.slots, slot)
				if l.exact {
					c.milli = append(c.milli, 0)
				} else {
					c.quantities = append(c.quantities, resource.Quantity{})
				}
			}
			if l.exact {
				m, _ := exactMilli(value.Value)
				c.milli[at] += m
			} else {
				c.quantities[at].Add(value.Value)
			}
		}
	}
	return c
}

// poolCounters is what one cycle knows about a pool's counters: the layout
// minus what already allocated devices draw. It is computed once per
// Allocator and pool and never changes afterwards.
type poolCounters struct {
	once   sync.Once
	layout *counterLayout
	// exact is the layout's: arithmetic in milli-units.
	exact bool
	// milli or quantities (per layout.exact) hold, per slot, the counter's
	// value minus the consumption of all allocated devices of the pool. It
	// may be negative. With nothing allocated they are the layout's.
	milli      []int64
	quantities []resource.Quantity
	// overdrawn counts slots with available < 0. Such a pool admits no
	// device that consumes counters at all, as upstream checks every
	// counter of the pool after each addition.
	overdrawn int

	// compatBaseline is, per counter set, the compatibility-group
	// intersection of the allocated devices drawing from it; nil for none.
	compatBaseline map[string]compatIntersection
}

// consumption is what one device draws, per slot, summed over its
// ConsumesCounters entries: in milli-units if the layout is exact, else as
// quantities.
type consumption struct {
	slots      []int
	milli      []int64
	quantities []resource.Quantity
}

func (a *Allocator) poolCounters(p *pool) *poolCounters {
	v, ok := a.counters.Load(p.id)
	if !ok {
		v, _ = a.counters.LoadOrStore(p.id, &poolCounters{})
	}
	pc := v.(*poolCounters)
	pc.once.Do(func() { pc.init(a, p) })
	return pc
}

func (pc *poolCounters) init(a *Allocator, p *pool) {
	l := p.counterLayout()
	pc.layout, pc.exact = l, l.exact
	pc.milli, pc.quantities, pc.overdrawn = l.milli, l.quantities, l.negative
	copied := false
	for k, ps := range l.slices {
		for i := range ps.slice.Spec.Devices {
			device := &ps.slice.Spec.Devices[i]
			if len(device.ConsumesCounters) == 0 || !a.isAllocated(ps.ids[i]) {
				continue
			}
			if !copied {
				// The layout is shared; subtract from a copy.
				pc.milli, pc.quantities = slices.Clone(l.milli), slices.Clone(l.quantities)
				for i := range pc.quantities {
					pc.quantities[i] = pc.quantities[i].DeepCopy()
				}
				copied = true
			}
			c := &l.compiled[k][i]
			for j, slot := range c.slots {
				if l.exact {
					pc.milli[slot] -= c.milli[j]
				} else {
					pc.quantities[slot].Sub(c.quantities[j])
				}
			}
			if a.newer.CompatibilityGroups {
				if pc.compatBaseline == nil {
					pc.compatBaseline = make(map[string]compatIntersection)
				}
				for _, consumption := range device.ConsumesCounters {
					pc.compatBaseline[consumption.CounterSet] = pc.compatBaseline[consumption.CounterSet].add(groupSet(minor.CompatibilityGroups(&consumption)))
				}
			}
		}
	}
	if !copied {
		return
	}
	pc.overdrawn = 0
	for slot := range pc.milli {
		if pc.milli[slot] < 0 {
			pc.overdrawn++
		}
	}
	for slot := range pc.quantities {
		if pc.quantities[slot].Sign() < 0 {
			pc.overdrawn++
		}
	}
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
				cur = cur.add(groupSet(minor.CompatibilityGroups(earlier)))
			}
		}
		if !cur.admits(minor.CompatibilityGroups(consumption)) {
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
		u.running[consumption.CounterSet] = cur.add(groupSet(minor.CompatibilityGroups(&consumption)))
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
