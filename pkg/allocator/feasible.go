package allocator

import (
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
)

// feasible scans the candidates from start for a slot of an ExactCount
// request that still needs `need` devices. It returns the first candidate
// worth trying and whether enough candidates could still be accepted in the
// current state. Every later state of the subtree only restricts further
// (more devices in use, counters drawn, constraint values fixed), so "not
// enough now" means the subtree has no solution.
//
// If the scan meets a trap (a candidate whose evaluation fails), it does not
// prune: upstream's search would reach that candidate and report the error.
func (s *search) feasible(r pos, nr *nodeRequest, start, need int) (int, bool, error) {
	bucketBy := s.emptyScalarMatch(r.claim, nr.rd)
	var buckets map[string]int
	// Only bucketing needs the constraint values.
	var values []constraintValue
	if bucketBy >= 0 {
		values = s.values
	}
	count, first := 0, -1
	// Devices that draw counters are only counted after the scan, by what
	// their pools' remaining counters can hold together.
	drawing := s.scratchDrawing[:0]
	defer func() { s.scratchDrawing = drawing[:0] }()
	for ci := start; ci < len(s.cands); ci++ {
		ok, trap := s.couldAccept(r.claim, nr, ci, 0, values)
		if trap {
			if first < 0 {
				first = ci
			}
			return first, true, nil
		}
		if !ok {
			continue
		}
		if first < 0 {
			first = ci
		}
		if bucketBy < 0 && s.drawsCounters(ci) {
			drawing = append(drawing, ci)
			continue
		}
		n := count + 1
		if bucketBy >= 0 {
			if buckets == nil {
				if s.buckets == nil {
					s.buckets = make(map[string]int)
				}
				buckets = s.buckets
				clear(buckets)
			}
			key := s.bucket(ci, bucketBy)
			buckets[key]++
			n = buckets[key]
		}
		count++
		if n >= need {
			return first, true, nil
		}
		if err := s.ctx.Err(); err != nil {
			// Let the search report the interruption at its next step.
			return first, true, nil
		}
	}
	if first < 0 {
		first = len(s.cands)
	}
	if len(drawing) > 0 && count+s.counterCapacity(drawing) >= need {
		return first, true, nil
	}
	return first, false, nil
}

// drawsCounters: allocating the candidate now would draw from its pool's
// counters.
func (s *search) drawsCounters(ci int) bool {
	device := s.cands[ci].device()
	if len(device.ConsumesCounters) == 0 || !s.a.features.PartitionableDevices {
		return false
	}
	return !s.furtherShare(ci, device)
}

// furtherShare: the candidate is a shared device that has a share already,
// from an earlier cycle or this assignment. Its counters are accounted for;
// a further share draws none.
func (s *search) furtherShare(ci int, device *resourceapi.Device) bool {
	return s.allowsMultiple(device) && s.capacityInUse(ci)
}

// counterCapacity bounds how many of the candidates can be allocated
// together as far as counters go: per pool and counter, the candidates
// drawing least fill what remains first; the fewest that fit over all of a
// pool's counters is the most the pool can take.
//
// feasible calls it for every slot of a partitionable request, so it works
// in the search's scratch buffers: maps here were a fifth of the time of a
// search on a partitionable node.
func (s *search) counterCapacity(cands []int) int {
	total := 0
	// The pools of the candidates; a node has few.
	pools := s.scratchPools[:0]
	for _, ci := range cands {
		if p := s.cands[ci].pool; !slices.Contains(pools, p) {
			pools = append(pools, p)
		}
	}
	s.scratchPools = pools
	for _, p := range pools {
		u := s.countersFor(p)
		inPool := 0
		for _, ci := range cands {
			if s.cands[ci].pool == p {
				inPool++
			}
		}
		if !u.pool.exact {
			// Without exact arithmetic, only the single-device check of
			// couldAccept applies.
			total += inPool
			continue
		}
		// amounts[slot] lists what the candidates draw of the slot.
		amounts := s.scratchAmounts
		for len(amounts) < len(u.milli) {
			amounts = append(amounts, nil)
		}
		for slot := range u.milli {
			amounts[slot] = amounts[slot][:0]
		}
		s.scratchAmounts = amounts
		for _, ci := range cands {
			if s.cands[ci].pool != p {
				continue
			}
			c := s.consumptionOf(ci)
			for k, slot := range c.slots {
				amounts[slot] = append(amounts[slot], c.milli[k])
			}
		}
		most := inPool
		for slot := range u.milli {
			list := amounts[slot]
			if len(list) == 0 {
				continue
			}
			slices.Sort(list)
			remaining := u.pool.milli[slot] - u.milli[slot]
			// Devices that do not draw this counter fit regardless.
			fit := inPool - len(list)
			for _, amount := range list {
				if amount > remaining {
					break
				}
				remaining -= amount
				fit++
			}
			most = min(most, fit)
		}
		total += most
	}
	return total
}

// emptyScalarMatch returns the index of a matchAttribute constraint with
// scalar semantics that applies to rd and has no device yet, or -1; all
// devices of the request must then share the value of whichever comes
// first.
func (s *search) emptyScalarMatch(claim int, rd *requestData) int {
	for i := range s.constraints[claim] {
		cs := &s.constraints[claim][i]
		if cs.spec.match && !cs.listSemantics && cs.numDevices == 0 && cs.spec.appliesTo(rd) {
			return i
		}
	}
	return -1
}

// bucket is the key under which feasible counts a candidate that
// couldAccept accepted last with s.values, by its value for the constraint
// with index bucketBy.
func (s *search) bucket(ci, bucketBy int) string {
	if key, scalar := scalarKey(s.values[bucketBy].attr); scalar {
		return key
	}
	// A non-scalar first value can never be matched by a second device: a
	// bucket of its own.
	return fmt.Sprintf("#%d", ci)
}
