package allocator

import (
	"maps"
	"math"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
)

// capacityInfeasible is the part of infeasible's relaxation for consumable
// capacity. The matching there lets a device that allows multiple
// allocations serve any number of requests, but every share consumes some
// of the device's capacity: requests that each fit alone may not fit
// together, and without this bound the search tries every way of placing
// them before it gives up (an adversarial claim took half a second on eight
// shared GPUs). Two checks, each a relaxation of the real problem, prove
// that the demands cannot all be served:
//
//   - shares per device: a shared device can serve at most as many demands
//     as the smallest amounts they would consume of it fit into what is
//     left of it (per capacity). With that limit instead of none, the
//     matching must still succeed;
//   - volume per capacity: the devices that a demand must place on shared
//     devices (those it cannot get elsewhere) consume at least the least
//     that the demand consumes of any of its shared candidates, and a
//     shared device absorbs at most what is left of it, and at most what
//     the demands that may use it consume of it together.
//
// What is left is taken from the current state; the search below only adds
// shares, so it only shrinks. A demand's consumption of a device is the
// least over its alternatives. Devices whose capacity or consumption is not
// exact in milli-units are taken as unlimited, and demands with admin
// access are left out: both only weaken the checks. demands are those that
// infeasible added, so the same conditions about traps and the result
// limit apply.
func (s *search) capacityInfeasible(demands []demand) bool {
	if !s.hasSharedDevices() {
		return false
	}
	t := s.newShareTable(demands)
	if t == nil {
		return false
	}
	return !t.sharesFit() || t.volumeExceeds()
}

// hasSharedDevices reports whether some candidate allows multiple
// allocations. Most nodes have none, and the bound runs often.
func (s *search) hasSharedDevices() bool {
	if s.anyShared == 0 {
		s.anyShared = 2
		for ci := range s.cands {
			if s.allowsMultiple(s.cands[ci].device()) {
				s.anyShared = 1
				break
			}
		}
	}
	return s.anyShared == 1
}

// shareTable is what capacityInfeasible knows about the shared devices that
// the demands may use.
type shareTable struct {
	s       *search
	demands []demand
	// row[c] is candidate c's index in devices, -1 if it is not a shared
	// device that some demand may use.
	row     []int
	devices []sharedDevice
}

// sharedDevice is one shared device that demands may use.
type sharedDevice struct {
	cand int
	// names are the device's capacities, sorted like the names of its
	// evaluations; left[i] is what is left of names[i], in milli-units.
	names []resourceapi.QualifiedName
	left  []int64
	// exact: left and all amounts are exact; otherwise the device is taken
	// as unlimited.
	exact bool
	// uses are the demands that may use the device, with the least they
	// consume of it, per capacity.
	uses []deviceUse
}

type deviceUse struct {
	demand  int
	amounts []int64
}

// newShareTable collects the shared devices of the demands without admin
// access, or returns nil if there are none.
func (s *search) newShareTable(all []demand) *shareTable {
	t := &shareTable{s: s}
	for _, d := range all {
		if d.admin || d.need <= 0 {
			continue
		}
		di := len(t.demands)
		t.demands = append(t.demands, d)
		for _, c := range d.cands {
			if !s.allowsMultiple(s.cands[c].device()) {
				continue
			}
			if t.row == nil {
				t.row = make([]int, len(s.cands))
				for i := range t.row {
					t.row[i] = -1
				}
			}
			if t.row[c] < 0 {
				t.row[c] = len(t.devices)
				t.devices = append(t.devices, s.sharedDevice(c))
			}
			dev := &t.devices[t.row[c]]
			use, exact := s.leastConsumed(d, c, len(dev.names))
			dev.exact = dev.exact && exact
			dev.uses = append(dev.uses, deviceUse{demand: di, amounts: use})
		}
	}
	if len(t.devices) == 0 {
		return nil
	}
	return t
}

// sharedDevice returns what is left of shared candidate c.
func (s *search) sharedDevice(c int) sharedDevice {
	device := s.cands[c].device()
	dev := sharedDevice{cand: c, exact: true}
	// The names of every evaluation for the device, in the same order.
	dev.names = slices.Sorted(maps.Keys(device.Capacity))
	dev.left = make([]int64, len(dev.names))
	allocated, _ := s.a.consumedCapacity(s.cands[c].id())
	for i, name := range dev.names {
		left := device.Capacity[name].Value.DeepCopy()
		if q := allocated[name]; q != nil {
			left.Sub(*q)
		}
		if s.sharedNow(c) {
			left.Sub(s.shares[c].sums[i])
		}
		milli, ok := exactMilli(left)
		dev.left[i] = milli
		dev.exact = dev.exact && ok
	}
	return dev
}

// leastConsumed returns, per capacity of candidate c, the least that any
// alternative of the demand consumes of it, and whether all amounts are
// exact.
func (s *search) leastConsumed(d demand, c, numNames int) ([]int64, bool) {
	least := make([]int64, numNames)
	found, exact := false, true
	for _, nr := range d.alternatives {
		e := s.capacityOf(nr, c)
		if e.missing || e.err != nil || e.violates || len(e.amounts) != numNames {
			// This alternative cannot use the device.
			continue
		}
		for i := range e.amounts {
			milli, ok := exactMilli(e.amounts[i])
			exact = exact && ok
			if !found || milli < least[i] {
				least[i] = milli
			}
		}
		found = true
	}
	if !found {
		// Only possible without consumable capacity; nothing is known.
		clear(least)
	}
	return least, exact
}

// limit is how many demands device dev can serve at once: for each of its
// capacities, as many as the smallest amounts fit into what is left.
func (dev *sharedDevice) limit() int {
	if !dev.exact || len(dev.names) == 0 {
		return unlimited
	}
	most := len(dev.uses)
	amounts := make([]int64, len(dev.uses))
	for i := range dev.names {
		for k, use := range dev.uses {
			amounts[k] = use.amounts[i]
		}
		slices.Sort(amounts)
		left, fit := dev.left[i], 0
		for _, amount := range amounts {
			if amount > left {
				break
			}
			left -= amount
			fit++
		}
		most = min(most, fit)
	}
	return most
}

// sharesFit reports whether the demands can be served with shared devices
// limited to as many demands as their capacity holds.
func (t *shareTable) sharesFit() bool {
	limits := make([]int, len(t.devices))
	for i := range t.devices {
		limits[i] = t.devices[i].limit()
	}
	m := newMatching(len(t.s.cands), func(c int) int {
		if t.row[c] >= 0 {
			return limits[t.row[c]]
		}
		if t.s.allowsMultiple(t.s.cands[c].device()) {
			return unlimited
		}
		return 1
	})
	for _, d := range t.demands {
		if !m.add(d) {
			return false
		}
	}
	return true
}

// volumeExceeds reports whether, for some capacity, the demands must
// consume more of the shared devices having it than these can absorb.
func (t *shareTable) volumeExceeds() bool {
	var names []resourceapi.QualifiedName
	for i := range t.devices {
		if t.devices[i].exact {
			for _, name := range t.devices[i].names {
				if !slices.Contains(names, name) {
					names = append(names, name)
				}
			}
		}
	}
	for _, name := range names {
		// Per device: which of its capacities the name is, -1 if it has
		// none or is not exact (it then absorbs the demand's devices
		// without consuming this capacity, as far as the check knows).
		index := make([]int, len(t.devices))
		for i := range t.devices {
			index[i] = -1
			if t.devices[i].exact {
				index[i] = slices.Index(t.devices[i].names, name)
			}
		}
		var need, absorb int64
		for di, d := range t.demands {
			// Devices elsewhere serve the demand without consuming.
			elsewhere := 0
			for _, c := range d.cands {
				if t.row[c] < 0 || index[t.row[c]] < 0 {
					elsewhere++
				}
			}
			units := d.need - elsewhere
			if units <= 0 {
				continue
			}
			least := int64(math.MaxInt64)
			for _, c := range d.cands {
				if r := t.row[c]; r >= 0 && index[r] >= 0 {
					least = min(least, t.devices[r].amountOf(di, index[r]))
				}
			}
			if least == math.MaxInt64 {
				// No such device (the matching has failed already then).
				continue
			}
			need = addSaturating(need, mulSaturating(int64(units), least))
		}
		for i := range t.devices {
			if index[i] < 0 {
				continue
			}
			var total int64
			for _, use := range t.devices[i].uses {
				total = addSaturating(total, use.amounts[index[i]])
			}
			absorb = addSaturating(absorb, max(0, min(t.devices[i].left[index[i]], total)))
		}
		// Saturation only rounds up: a need that exceeds an absorb below
		// the limit exceeds it for real.
		if need > absorb {
			return true
		}
	}
	return false
}

// amountOf returns what demand di consumes of capacity i of the device.
func (dev *sharedDevice) amountOf(di, i int) int64 {
	for _, use := range dev.uses {
		if use.demand == di {
			return use.amounts[i]
		}
	}
	return 0
}

func addSaturating(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func mulSaturating(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}
