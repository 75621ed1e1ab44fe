package allocator

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"maps"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/klog/v2"
)

// isSelectable checks a candidate against the class and request selectors
// and, for per-device node selection, against the node. Results are cached
// per (sub)request and candidate; errors are not cached, they abort.
//
// Selectors are evaluated in upstream's order and stop at the first
// mismatch, so exactly the same expressions are evaluated and the same
// errors can surface.
func (s *search) isSelectable(nr *nodeRequest, ci int) (bool, error) {
	c := s.cands[ci]
	device := c.device()
	if !s.a.features.DeviceBindingAndStatus && len(device.BindingConditions) > 0 {
		// Devices with binding conditions need the feature.
		return false, nil
	}
	switch nr.selectable[ci] {
	case 1:
		return true, nil
	case 2:
		return false, nil
	}
	ok, err := s.selectable(nr, ci)
	if err != nil {
		return false, err
	}
	nr.selectable[ci] = 2
	if ok {
		nr.selectable[ci] = 1
	}
	return ok, nil
}

func (s *search) selectable(nr *nodeRequest, ci int) (bool, error) {
	c := s.cands[ci]
	ok, err := s.matchesSelectors(nr.rd, c)
	if err != nil || !ok {
		return false, err
	}
	if c.ps.perDeviceNodeSelection {
		match, err := c.ps.deviceMatchesNode(c.i, s.node)
		if err != nil || !match {
			return false, err
		}
	}
	return true, nil
}

// matchesSelectors evaluates the class's, then the request's selectors on
// a device, stopping at the first mismatch.
func (s *search) matchesSelectors(rd *requestData, c cand) (bool, error) {
	claim := s.claims[rd.claimIndex].claim
	for i, expr := range rd.classExprs {
		if expr == nil {
			return false, fmt.Errorf("class %s: selector #%d: CEL expression empty (unsupported selector type?)", rd.class.Name, i)
		}
		match, err := s.evaluate(expr, c)
		if err != nil {
			if expr.result.Error != nil {
				return false, fmt.Errorf("class %s: selector #%d: CEL compile error: %w", rd.class.Name, i, expr.result.Error)
			}
			return false, fmt.Errorf("class %s: selector #%d on device %s: CEL runtime error: %w", rd.class.Name, i, c.id(), err)
		}
		if !match {
			return false, nil
		}
	}
	for i, expr := range rd.requestExprs {
		match, err := s.evaluate(expr, c)
		if err != nil {
			if expr.result.Error != nil {
				return false, fmt.Errorf("claim %s: selector #%d: CEL compile error: %w", klog.KObj(claim), i, expr.result.Error)
			}
			return false, fmt.Errorf("claim %s: selector #%d on device %s: CEL runtime error: %w", klog.KObj(claim), i, c.id(), err)
		}
		if !match {
			return false, nil
		}
	}
	return true, nil
}

// evaluate runs a compiled selector on a candidate, through the device-match
// cache. A compile error is returned as is; runtime errors are enhanced like
// upstream's.
func (s *search) evaluate(expr *compiled, c cand) (bool, error) {
	if expr.result.Error != nil {
		return false, expr.result.Error
	}
	results := c.ps.matches.results(expr.id, len(c.ps.celDevices))
	slot := &results.outcomes[c.i]
	if outcome := slot.Load(); outcome != nil {
		s.a.cache.stats.matchHits.Add(1)
		return outcome.match, outcome.err
	}
	s.a.cache.stats.matchMisses.Add(1)
	match, _, err := expr.result.DeviceMatches(s.ctx, c.ps.celDevices[c.i])
	if err != nil {
		err = cel.EnhanceRuntimeError(err)
		if s.ctx.Err() != nil {
			// Interrupted, not a property of the device: do not cache.
			return false, err
		}
		slot.Store(&evalOutcome{err: err})
		return false, err
	}
	if match {
		slot.Store(outcomeTrue)
	} else {
		slot.Store(outcomeFalse)
	}
	return match, nil
}

// attribute resolves a constraint's attribute for a device allocated for
// rd: a derived attribute of the request if it defines one with that name,
// the device's own attribute otherwise.
func (s *search) attribute(rd *requestData, c cand, name resourceapi.FullyQualifiedName) (*resourceapi.DeviceAttribute, error) {
	expression, derived := rd.derived[name]
	if !derived {
		return c.ps.attribute(c.i, name), nil
	}
	expr := s.a.cache.compile(s.a.celFeatures, true, expression)
	if expr.result.Error != nil {
		return nil, fmt.Errorf("compile derived attribute %s failed: %w", name, expr.result.Error)
	}
	results := c.ps.matches.results(expr.id, len(c.ps.celDevices))
	slot := &results.outcomes[c.i]
	if outcome := slot.Load(); outcome != nil {
		s.a.cache.stats.matchHits.Add(1)
		if outcome.err != nil {
			return nil, fmt.Errorf("evaluate derived attribute %s on device %s failed: %w", name, c.id(), outcome.err)
		}
		return outcome.attr, nil
	}
	s.a.cache.stats.matchMisses.Add(1)
	device := c.device()
	attr, _, err := expr.result.EvaluateDerivedAttribute(s.ctx, cel.Device{
		Driver:                   c.ps.slice.Spec.Driver,
		AllowMultipleAllocations: device.AllowMultipleAllocations,
		Attributes:               device.Attributes,
		Capacity:                 device.Capacity,
	})
	if err != nil {
		if s.ctx.Err() == nil {
			slot.Store(&evalOutcome{err: err})
		}
		return nil, fmt.Errorf("evaluate derived attribute %s on device %s failed: %w", name, c.id(), err)
	}
	slot.Store(&evalOutcome{attr: attr})
	return attr, nil
}

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

// couldAccept is allocateDevice's decision without its effects, for the
// bounds: accepts in the current state, with mode saying what a bound may
// assume. trap reports an evaluation error, which a bound must leave to the
// search to find. values, if not nil, receives the constraint values.
func (s *search) couldAccept(claim int, nr *nodeRequest, ci int, mode checkMode, values []constraintValue) (ok, trap bool) {
	ok, _, err := s.accepts(claim, nr, ci, mode, values)
	return ok, err != nil
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

// stateHash is a 128-bit Zobrist hash: each state element contributes a
// pseudo-random key, combined with XOR so that adding and removing the same
// element cancel out.
type stateHash [2]uint64

func (h *stateHash) toggle(k stateHash) {
	h[0] ^= k[0]
	h[1] ^= k[1]
}

// add and sub combine keys of a multiset: a device can carry several
// equal shares, whose keys XOR would cancel.
func (h *stateHash) add(k stateHash) {
	h[0] += k[0]
	h[1] += k[1]
}

func (h *stateHash) sub(k stateHash) {
	h[0] -= k[0]
	h[1] -= k[1]
}

const (
	keyMark     = 1
	keyCounters = 2
)

// shareKey is the key of one share that consumes what requests with
// capacity key ck consume, of whichever device.
func shareKey(ck capacityKey) stateHash {
	x := uint64(ck)*0x9e3779b97f4a7c15 ^ 0x2545f4914f6cdd1d
	return stateHash{mix64(x ^ 0x5851f42d4c957f2d), mix64(x ^ 0x14057b7ef767814f)}
}

// sharesHash is the memo's hash of the shares of shared devices: the sum
// of their deviceShareKeys. It is computed when the memo asks, not kept up
// to date with every share: searches that never backtrack never need it.
func (s *search) sharesHash() stateHash {
	var h stateHash
	if !s.sharesSized {
		return h
	}
	for ci := range s.shares {
		if s.shares[ci].count > 0 {
			h.add(s.deviceShareKey(ci))
		}
	}
	return h
}

// deviceShareKey is candidate ci's part of sharesHash: zero without shares,
// otherwise a function of its memo class and of the multiset of its shares
// (the sum of their shareKeys). It leaves out which requests hold the
// shares and which device of its class carries them: no check looks at the
// former, only at whether a device has shares and what they consume
// together (sameShares), and devices of one memo class are interchangeable
// (interchangeable), so that states that differ in either are the same
// state to the memo. Everything else the memo hashes per candidate (marks
// of exclusive devices, counters drawn) keeps the devices apart where it
// matters.
func (s *search) deviceShareKey(ci int) stateHash {
	if !s.sharedNow(ci) {
		return stateHash{}
	}
	use := &s.shares[ci]
	class := s.memoClass(ci)
	x := use.keys[0] + uint64(use.count)*0x94d049bb133111eb
	y := use.keys[1] ^ uint64(use.count)
	return stateHash{mix64(class[0] ^ mix64(x)), mix64(class[1] ^ mix64(y^0x7f4a7c159e3779b9))}
}

// memoClass identifies what a shared device is before this search: what
// the search sees of it (searchClass) and what earlier cycles allocated of
// it. It is computed once per search and candidate.
func (s *search) memoClass(ci int) stateHash {
	if !s.memoClassesSized {
		s.memoClasses = grow(s.memoClasses, len(s.cands))
		s.memoClassesSized = true
	}
	if k := s.memoClasses[ci]; k != (stateHash{}) {
		return k
	}
	c := s.cands[ci]
	id := c.id()
	var h maphash.Hash
	h.SetSeed(memoSeed)
	class := s.searchClass(ci)
	var b [18]byte
	binary.LittleEndian.PutUint64(b[0:], class[0])
	binary.LittleEndian.PutUint64(b[8:], class[1])
	if s.isAllocatedCand(ci) {
		b[16] = 1
	}
	if s.a.sharedDevices().Has(id) {
		b[17] = 1
	}
	h.Write(b[:])
	if consumed, ok := s.a.consumedCapacity(id); ok {
		for _, name := range slices.Sorted(maps.Keys(consumed)) {
			h.WriteString(string(name))
			if q := consumed[name]; q != nil {
				// The exact value; AsDec changes its receiver, a copy.
				value := q.DeepCopy()
				h.WriteString("=" + value.AsDec().String())
			}
			h.WriteByte(0)
		}
	}
	sum := h.Sum64()
	k := stateHash{mix64(sum ^ 0x14057b7ef767814f), mix64(sum ^ 0x5851f42d4c957f2d)}
	s.memoClasses[ci] = k
	return k
}

// candKey derives the key of one state element from the candidate, the
// claim and the element kind with a strong mixer.
func candKey(ci, claim int, kind uint64) stateHash {
	x := uint64(ci)<<32 ^ uint64(uint32(claim))<<1 ^ kind*0x9e3779b97f4a7c15
	return stateHash{mix64(x ^ 0x5851f42d4c957f2d), mix64(x ^ 0x14057b7ef767814f)}
}

// mix64 is the splitmix64 finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// maxMemoEntries bounds the memo of one search. Beyond it the search goes on
// without remembering more failures.
const maxMemoEntries = 1 << 18

type memoKey struct {
	claim, request, results int
	hash, shares            stateHash
}

var memoSeed = maphash.MakeSeed()

// memoKey describes the state at a request boundary. The future of the
// search depends on the devices in use (and by which claim), counters and
// capacity drawn, the constraint state of the current claim and how many
// results it holds; the incremental hashes cover the first three.
func (s *search) memoKey(r pos) (memoKey, bool) {
	key := memoKey{claim: r.claim, request: r.request, hash: s.hash, shares: s.sharesHash()}
	if r.claim >= len(s.claims) {
		return key, false
	}
	key.results = len(s.results[r.claim])
	if r.request == 0 || len(s.constraints[r.claim]) == 0 {
		// A fresh claim has fresh constraints.
		return key, true
	}
	var h maphash.Hash
	h.SetSeed(memoSeed)
	for i := range s.constraints[r.claim] {
		cs := &s.constraints[r.claim][i]
		_, _ = fmt.Fprintf(&h, "|%d:", cs.numDevices)
		switch {
		case cs.numDevices == 0:
		case cs.spec.match && cs.listSemantics:
			h.WriteString(setFingerprint(cs.intersections[cs.numDevices-1]))
		case cs.spec.match:
			h.WriteString(attrFingerprint(cs.first))
		default:
			prints := make([]string, len(cs.distinct))
			for j, attr := range cs.distinct {
				prints[j] = attrFingerprint(attr)
			}
			slices.Sort(prints)
			h.WriteString(strings.Join(prints, ","))
		}
	}
	sum := h.Sum64()
	key.hash[0] ^= mix64(sum ^ 0x2545f4914f6cdd1d)
	key.hash[1] ^= mix64(sum ^ 0x7f4a7c159e3779b9)
	return key, true
}

func attrFingerprint(attr *resourceapi.DeviceAttribute) string {
	if key, ok := scalarKey(attr); ok {
		return key
	}
	if set := attributeAsSet(attr); set != nil {
		return "l" + setFingerprint(set)
	}
	return "?"
}

func setFingerprint(set *attributeSet) string {
	var parts []string
	switch {
	case set.ints != nil:
		for v := range set.ints {
			parts = append(parts, fmt.Sprintf("i%d", v))
		}
	case set.bools != nil:
		for v := range set.bools {
			parts = append(parts, fmt.Sprintf("b%t", v))
		}
	case set.strings != nil:
		for v := range set.strings {
			parts = append(parts, "s"+v)
		}
	case set.versions != nil:
		for v := range set.versions {
			parts = append(parts, "v"+v)
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, "\x00")
}
