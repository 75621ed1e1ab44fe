package allocator

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/minor"
)

// The search is a depth-first, first-fit backtracking search in exactly
// upstream's order: claims in order, their requests in order, for a request
// with subrequests each alternative in order, and for each device slot the
// candidates in order (pools by driver and name, pools with binding
// conditions last, slices by name, devices as listed), each slot starting
// after the device of the previous slot of the same request. The first
// complete assignment is the result.
//
// Upstream's outcome depends not only on where solutions are but also on
// where errors are: a CEL selector that fails at runtime on some device only
// aborts allocation if the search evaluates it before finding a solution.
// Such (request, device) pairs are called traps below. The search therefore
// keeps upstream's control flow, including the "too many results" cut-off,
// and only skips subtrees that provably contain neither a solution nor a
// trap:
//
//   - feasibility: before a slot is filled, the candidates that could still
//     be accepted are counted (constraint values and counters taken into
//     account, matchAttribute candidates bucketed by value); too few means
//     the subtree fails, unless a trap lies in the range (feasible.go);
//   - bounds: once the search backtracks, at request boundaries and after a
//     candidate failed at a slot, the remaining requests are relaxed to a
//     bipartite matching of requests to candidates (matchingbound.go) that
//     also counts what shared devices have left of their capacity
//     (capacitybound.go); no matching means no assignment;
//   - symmetry: a candidate indistinguishable from one that already failed
//     at the same slot fails too (its subtree mirrors the other's); shared
//     devices are indistinguishable while their shares consume the same;
//   - memo: the outcome of a failed search from a request boundary is
//     remembered under a hash of the whole mutable state, so equivalent
//     states reached along different paths are not searched again (states
//     that differ only in which request or which of two indistinguishable
//     shared devices holds a share are equivalent; memo.go).
//
// Each of them prunes only subtrees that upstream would search without
// finding anything, so the result is the same, found faster.

// errMaxSize means the current claim cannot hold the devices still needed
// within resourceapi.AllocationResultsMaxSize, whatever is tried at the
// levels in between; it makes callers stop trying alternatives until a
// subrequest choice or a claim boundary can change that.
var errMaxSize = errors.New("allocation max size exceeded")

// cand is one candidate device on the node.
type cand struct {
	pool *pool
	ps   *preparedSlice
	i    int
}

func (c cand) device() *resourceapi.Device { return &c.ps.slice.Spec.Devices[c.i] }
func (c cand) id() structured.DeviceID     { return c.ps.ids[c.i] }

// pos identifies one device slot: claim, request, subrequest, device.
type pos struct {
	claim, request, sub, device int
}

// nodeRequest is a (sub)request as seen on one node.
type nodeRequest struct {
	rd         *requestData
	numDevices int
	// all are the candidates of an "All" request, in order.
	all []int
	// selectable caches isSelectable per candidate: 0 unknown, 1, 2.
	selectable []int8
	// trapFree caches whether no candidate's evaluation fails: 0 unknown, 1, 2.
	trapFree int8
}

// resultDevice is one allocated device of the current assignment.
type resultDevice struct {
	cand int
	nr   *nodeRequest
	// share is set for a share of an allow-multiple device: what it
	// consumes.
	share *capacityEval
}

type search struct {
	a      *Allocator
	ctx    context.Context
	logger klog.Logger
	node   *v1.Node
	pools  []*pool
	cands  []cand

	claims []*claimData
	// reqs[claim][request][alternative]
	reqs [][][]*nodeRequest
	// selectedSub[claim][request] is the chosen alternative.
	selectedSub [][]int

	// Mutable state of the current partial assignment.
	marks     [][]int // per candidate: claims that allocate it exclusively
	allocated []int8  // per candidate: 0 unknown, 1 allocated before this cycle, 2 not
	// shares tracks, per candidate, the shares of allow-multiple devices
	// in the current assignment: how many, and what they consume together.
	shares      []shareUse
	sharesSized bool
	// anyShared caches hasSharedDevices: 0 unknown, 1, 2.
	anyShared   int8
	counters    map[*pool]*counterUsage
	compat      map[*pool]*compatUsage
	constraints [][]constraintState
	results     [][]resultDevice

	// failures counts backtracks. The costlier bounds only run once the
	// search had to backtrack a few times: a search that succeeds at the
	// first try, or after a little backtracking, never pays for them.
	failures int

	// hash is a Zobrist hash of the state the future depends on, maintained
	// incrementally; see memo. The shares of shared devices are hashed
	// apart (sharesHash).
	hash  stateHash
	memo  map[memoKey]struct{}
	stats searchStats
	// memoClasses and searchClasses cache memoClass and searchClass per
	// candidate; sized on first use in a search.
	memoClasses        []stateHash
	memoClassesSized   bool
	searchClasses      []stateHash
	searchClassesSized bool
	// suffix[k] caches whether claims k.. are impossible from the initial
	// state: 0 unknown, 1 impossible, 2 possible or unknown.
	suffix []int8

	// Buffers behind the slices above, reused through searchPool.
	requestBuf     [][]*nodeRequest
	selectedBuf    []int
	alternativeBuf []*nodeRequest
	nodeRequestBuf []nodeRequest
	selectableBuf  []int8
	constraintBuf  []constraintState
	// values receives what accepts found for the constraints of the
	// current claim; sized for the claim with the most constraints.
	values []constraintValue
	// placements holds the placements of the current assignment.
	placements placementStack
	// buckets is feasible's scratch map, cleared before each use.
	buckets map[string]int
	// Scratch buffers of feasible and counterCapacity, which run for
	// every slot: the candidates drawing counters, their pools, and per
	// counter slot what they draw.
	scratchDrawing []int
	scratchPools   []*pool
	scratchAmounts [][]int64
	// scratchDemands is infeasible's list of the demands it added.
	scratchDemands []demand
	// draws caches counterDraw per candidate; sized on first use in a
	// search.
	draws      []counterDrawRef
	drawsSized bool

	// budget limits the steps of a BestFit search; 0 for none.
	budget int64

	// BestFit's buffers (bestFitOrder): busy units, levels that can hold
	// the request, free units per level and group, sort keys, the
	// permutation.
	busy  []bool
	holds []bool
	free  []int
	keys  []int
	perm  []int
}

// placementChunk is how many placements placementStack allocates at once.
const placementChunk = 32

// placementStack hands out placements in the order in which the search
// applies them. Backtracking undoes them in reverse order, which returns
// them to the stack, so that a search, and the next one on the pooled
// search, reuse their memory. Chunks never move: pointers stay valid.
type placementStack struct {
	chunks [][]placement
	n      int
}

func (st *placementStack) push() *placement {
	c, i := st.n/placementChunk, st.n%placementChunk
	if c == len(st.chunks) {
		st.chunks = append(st.chunks, make([]placement, placementChunk))
	}
	st.n++
	p := &st.chunks[c][i]
	*p = placement{}
	return p
}

// pop returns p to the stack if it is the top one; undo is always called
// for the last placement still applied.
func (st *placementStack) pop(p *placement) {
	if st.n > 0 && &st.chunks[(st.n-1)/placementChunk][(st.n-1)%placementChunk] == p {
		st.n--
	}
}

func (st *placementStack) reset() {
	for c := range st.chunks {
		clear(st.chunks[c][:min(placementChunk, max(st.n-c*placementChunk, 0))])
	}
	st.n = 0
}

type searchStats struct {
	steps, memoHits, symmetrySkips, feasibilityPrunes, boundPrunes int64
}

func (s *search) allocateOne(r pos, allocSub bool, start int) (bool, error) {
	s.stats.steps++
	if s.ctx.Err() != nil {
		return false, s.abortError()
	}
	if s.budget > 0 && s.stats.steps > s.budget {
		return false, errBudget
	}
	if r.claim >= len(s.claims) {
		return true, nil
	}
	claimReqs := s.reqs[r.claim]
	if r.request >= len(claimReqs) {
		ok, err := s.boundary(pos{claim: r.claim + 1})
		if errors.Is(err, errMaxSize) {
			// The next claim exceeds the limit on its own; choices made for
			// this claim cannot change that, but the caller keeps looking
			// like upstream does.
			return false, nil
		}
		return ok, err
	}

	alternatives := claimReqs[r.request]
	if !allocSub && alternatives[0].rd.parentName != "" {
		// A request with subrequests: allocate exactly one of them, trying
		// them in order.
		allExceeded := true
		for sub := range alternatives {
			r.sub = sub
			ok, err := s.allocateOne(r, true, 0)
			if errors.Is(err, errMaxSize) {
				// A later alternative may need fewer devices.
				continue
			}
			allExceeded = false
			if err != nil {
				return false, err
			}
			if ok {
				s.selectedSub[r.claim][r.request] = sub
				return true, nil
			}
		}
		if allExceeded {
			return false, errMaxSize
		}
		return false, nil
	}

	nr := alternatives[r.sub]
	rd := nr.rd
	all := rd.allocationMode == resourceapi.DeviceAllocationModeAll
	if all && len(nr.all) == 0 {
		// "All" needs at least one device.
		return false, nil
	}
	if r.device >= nr.numDevices {
		return s.boundary(pos{claim: r.claim, request: r.request + 1})
	}
	if nr.numDevices-r.device > resourceapi.AllocationResultsMaxSize-len(s.results[r.claim]) {
		return false, errMaxSize
	}

	next := pos{claim: r.claim, request: r.request, sub: r.sub, device: r.device + 1}
	if all {
		// The devices are known; each must be usable, in order.
		c := nr.all[r.device]
		p, err := s.allocateDevice(r, nr, c, true)
		if err != nil || p == nil {
			return false, err
		}
		ok, err := s.allocateOne(next, allocSub, 0)
		if err != nil || !ok {
			s.undo(p)
			return false, err
		}
		return true, nil
	}

	first, feasible, err := s.feasible(r, nr, start, nr.numDevices-r.device)
	if err != nil {
		return false, err
	}
	if !feasible {
		s.stats.feasibilityPrunes++
		s.failures++
		return false, nil
	}
	// failed holds candidates that failed at this slot while nothing of
	// the assignment set them apart (see interchangeable).
	var failedBuf [8]int
	failed := failedBuf[:0]
	for ci := first; ci < len(s.cands); ci++ {
		if s.interchangeableWithAny(failed, ci) {
			s.stats.symmetrySkips++
			continue
		}
		p, err := s.allocateDevice(r, nr, ci, false)
		if err != nil {
			return false, err
		}
		if p == nil {
			continue
		}
		ok, err := s.allocateOne(next, allocSub, ci+1)
		if err == nil && ok {
			return true, nil
		}
		s.undo(p)
		if err != nil {
			return false, err
		}
		if len(s.marks[ci]) == 0 {
			failed = append(failed, ci)
		}
		s.failures++
		if s.boundsEnabled() && s.infeasible(r, nr, ci+1) {
			s.stats.boundPrunes++
			return false, nil
		}
	}
	return false, nil
}

// aborted returns abortError once the context is done, nil before.
func (s *search) aborted() error {
	if s.ctx.Err() == nil {
		return nil
	}
	return s.abortError()
}

// abortError wraps the context's cause in upstream's wording.
func (s *search) abortError() error {
	return fmt.Errorf("filter operation aborted: %w", context.Cause(s.ctx))
}

// boundsThreshold is how many backtracks turn on the matching bounds.
const boundsThreshold = 8

func (s *search) boundsEnabled() bool { return s.failures >= boundsThreshold }

// boundary enters the next request or claim, consulting the memo of failed
// searches from equivalent states.
func (s *search) boundary(r pos) (bool, error) {
	// The memo, like the bounds, only pays off once the search backtracks.
	key, memoize := memoKey{}, false
	if s.boundsEnabled() {
		key, memoize = s.memoKey(r)
	}
	if memoize {
		if _, failed := s.memo[key]; failed {
			s.stats.memoHits++
			return false, nil
		}
	}
	if s.boundsEnabled() && s.infeasible(r, nil, 0) {
		s.stats.boundPrunes++
		if memoize {
			s.remember(key)
		}
		return false, nil
	}
	ok, err := s.allocateOne(r, false, 0)
	if memoize && !ok && err == nil {
		s.remember(key)
	}
	return ok, err
}

func (s *search) remember(key memoKey) {
	if s.memo == nil {
		s.memo = make(map[memoKey]struct{})
	}
	if len(s.memo) < maxMemoEntries {
		s.memo[key] = struct{}{}
	}
}

// placement records what allocateDevice changed, for undo.
type placement struct {
	r            pos
	nr           *nodeRequest
	cand         int
	marked       bool
	countersHeld bool
	compatUndo   []compatUndo
	constraints  int // number of constraints the device was added to
	// share is the capacity consumed by a share of an allow-multiple
	// device.
	share       *capacityEval
	shareKey    stateHash
	resultAdded bool
}

// allocateDevice asks accepts whether the candidate can take slot r and,
// if so, applies it to the state: counters and compatibility groups drawn,
// constraint values added, the device marked in use or a share of it taken,
// the result recorded. It returns nil if the candidate is not accepted. With
// must set (an "All" request), a violated constraint is an error: such a
// claim can never be satisfied.
func (s *search) allocateDevice(r pos, nr *nodeRequest, ci int, must bool) (*placement, error) {
	mode := checkMode(0)
	if must {
		mode = checkAll
	}
	values := s.values[:len(s.constraints[r.claim])]
	ok, reason, err := s.accepts(r.claim, nr, ci, mode, values)
	if err != nil {
		return nil, err
	}
	if !ok {
		if must && reason == ReasonConstraintUnsatisfiable {
			return nil, fmt.Errorf("claim %s, request %s: cannot add device %s because a claim constraint would not be satisfied", klog.KObj(s.claims[r.claim].claim), nr.rd.name, s.cands[ci].id())
		}
		return nil, nil
	}

	c := s.cands[ci]
	device := c.device()
	rd := nr.rd
	p := s.placements.push()
	p.r, p.nr, p.cand = r, nr, ci
	// A further share of a shared device has its counters accounted for
	// already.
	if len(device.ConsumesCounters) > 0 && s.drawsCounters(ci) {
		if s.a.newer.CompatibilityGroups {
			p.compatUndo = s.compatFor(c.pool).fold(device)
		}
		usage, consumption := s.counterDraw(ci)
		usage.apply(consumption, true)
		p.countersHeld = true
		s.hash.toggle(candKey(ci, -1, keyCounters))
	}
	for i := range s.constraints[r.claim] {
		cs := &s.constraints[r.claim][i]
		if cs.spec.appliesTo(rd) {
			cs.add(values[i].attr, values[i].narrowed)
		}
		p.constraints++
	}
	allowMultiple := s.allowsMultiple(device)
	if !allowMultiple {
		s.marks[ci] = append(s.marks[ci], r.claim)
		p.marked = true
		s.hash.toggle(candKey(ci, r.claim, keyMark))
	}
	result := resultDevice{cand: ci, nr: nr}
	if allowMultiple {
		share := s.capacityOf(nr, ci)
		result.share = share
		p.share = share
		p.shareKey = shareKey(s.capacityKey(rd))
		s.addShare(ci, share, p.shareKey, true)
	}
	s.results[r.claim] = append(s.results[r.claim], result)
	p.resultAdded = true
	return p, nil
}

// undo reverts a placement, or the part of it applied so far, in reverse
// order of application.
func (s *search) undo(p *placement) {
	c := s.cands[p.cand]
	if p.resultAdded {
		s.results[p.r.claim] = s.results[p.r.claim][:len(s.results[p.r.claim])-1]
	}
	if p.share != nil {
		s.addShare(p.cand, p.share, p.shareKey, false)
	}
	if p.marked {
		marks := s.marks[p.cand]
		if i := slices.Index(marks, p.r.claim); i >= 0 {
			s.marks[p.cand] = slices.Delete(marks, i, i+1)
		}
		s.hash.toggle(candKey(p.cand, p.r.claim, keyMark))
	}
	for i := p.constraints - 1; i >= 0; i-- {
		cs := &s.constraints[p.r.claim][i]
		if cs.spec.appliesTo(p.nr.rd) {
			cs.remove()
		}
	}
	if p.compatUndo != nil {
		s.compatFor(c.pool).restore(p.compatUndo)
	}
	if p.countersHeld {
		usage, consumption := s.counterDraw(p.cand)
		usage.release(consumption)
		s.hash.toggle(candKey(p.cand, -1, keyCounters))
	}
	s.placements.pop(p)
}

// inUse: allocated before this cycle, or exclusively allocated by the
// current assignment.
func (s *search) inUse(ci int) bool {
	return s.isAllocatedCand(ci) || len(s.marks[ci]) > 0
}

func (s *search) markedBy(ci, claim int) bool {
	return slices.Contains(s.marks[ci], claim)
}

func (s *search) isAllocatedCand(ci int) bool {
	switch s.allocated[ci] {
	case 1:
		return true
	case 2:
		return false
	}
	allocated := s.a.allocatedWhole(s.cands[ci].id())
	s.allocated[ci] = 2
	if allocated {
		s.allocated[ci] = 1
	}
	return allocated
}

// shareUse is what the shares of one device in the current assignment
// consume, per capacity in the order of capacityEval.names, and the sum of
// their shareKeys.
type shareUse struct {
	count int
	sums  []resource.Quantity
	keys  stateHash
}

// addShare adds or removes a share. Upstream keeps these sums in a
// ConsumedCapacityCollection whose entry for a device exists exactly while
// the device has a share (undo is last-in first-out and consumption is never
// negative); count plays that part here.
func (s *search) addShare(ci int, share *capacityEval, key stateHash, add bool) {
	if !s.sharesSized {
		// Entries keep the memory of their sums from earlier searches on
		// the pooled search; release empties them.
		s.shares = growEntries(s.shares, len(s.cands))
		s.sharesSized = true
	}
	use := &s.shares[ci]
	if len(use.sums) == 0 {
		use.sums = grow(use.sums, len(share.amounts))
	}
	for i := range share.amounts {
		if add {
			use.sums[i].Add(share.amounts[i])
		} else {
			use.sums[i].Sub(share.amounts[i])
		}
	}
	if add {
		use.count++
		use.keys.add(key)
	} else {
		use.count--
		use.keys.sub(key)
	}
}

// sharedNow: the device has a share in the current assignment.
func (s *search) sharedNow(ci int) bool {
	return s.sharesSized && s.shares[ci].count > 0
}

// capacityInUse: some share of an allow-multiple device exists, from an
// earlier cycle or the current assignment.
func (s *search) capacityInUse(ci int) bool {
	id := s.cands[ci].id()
	if _, ok := s.a.consumedCapacity(id); ok {
		return true
	}
	if s.a.sharedDevices().Has(id) {
		return true
	}
	return s.sharedNow(ci)
}

// interchangeableWithAny reports whether the candidate is interchangeable
// with one of the failed candidates of the current slot, which are earlier
// in the candidate order: then its subtree mirrors one that failed, and
// fails too (swapping the two devices maps each of its assignments to one
// of the other's, since the slots after this one only use later
// candidates, and everything else sees the two devices alike).
func (s *search) interchangeableWithAny(failed []int, ci int) bool {
	for _, f := range failed {
		if s.interchangeable(f, ci) {
			return true
		}
	}
	return false
}

// interchangeable reports whether no check of the allocator can tell the
// two candidates apart in the current state: the same searchClass and the
// same allocation state. A device that a claim holds exclusively is never
// interchangeable: which claim holds it matters. Exclusive devices must be
// untouched by earlier cycles too (they are then in use anyway). Shared
// devices may carry shares, from earlier cycles and this assignment, as
// long as the two carry the same: which requests hold the shares does not
// matter to any check, only that there are shares and what they consume
// together. Without that, devices shared by earlier cycles were never
// interchangeable, and the search tried every permutation of them.
func (s *search) interchangeable(a, b int) bool {
	if len(s.marks[a]) > 0 || len(s.marks[b]) > 0 {
		return false
	}
	if s.searchClass(a) != s.searchClass(b) {
		return false
	}
	ca, cb := s.cands[a], s.cands[b]
	if !s.allowsMultiple(ca.device()) {
		return !s.isAllocatedCand(a) && !s.a.isAllocated(ca.id()) &&
			!s.isAllocatedCand(b) && !s.a.isAllocated(cb.id())
	}
	return s.sameShares(a, b)
}

// searchClass identifies what the checks of this search can see of
// candidate ci: its content apart from its name and attributes
// (deviceClasses), and of its attributes what the claims look at: whether
// the selectors of each (sub)request select it, and its value (static or
// derived) of each constraint's attribute for each (sub)request that
// selects it. Candidates of one class differ in nothing the search reads
// but their allocation state. A candidate whose evaluation fails is a class
// of its own: the error must surface where upstream's search meets it, not
// here. It is computed once per search and candidate.
func (s *search) searchClass(ci int) stateHash {
	if !s.searchClassesSized {
		s.searchClasses = grow(s.searchClasses, len(s.cands))
		s.searchClassesSized = true
	}
	if k := s.searchClasses[ci]; k != (stateHash{}) {
		return k
	}
	k := s.computeSearchClass(ci)
	s.searchClasses[ci] = k
	return k
}

func (s *search) computeSearchClass(ci int) stateHash {
	c := s.cands[ci]
	unique := stateHash{mix64(uint64(ci) ^ 0x6a09e667f3bcc908), mix64(uint64(ci) ^ 0xbb67ae8584caa73b)}
	var h maphash.Hash
	h.SetSeed(memoSeed)
	class := c.ps.deviceClasses()[c.i]
	h.Write(class[:])
	// A static attribute is the same for every request: written once.
	var writtenBuf [4]resourceapi.FullyQualifiedName
	written := writtenBuf[:0]
	for claim, requests := range s.reqs {
		for _, alternatives := range requests {
			for _, nr := range alternatives {
				selectable, err := s.isSelectable(nr, ci)
				if err != nil {
					return unique
				}
				if !selectable {
					h.WriteByte(0)
					continue
				}
				h.WriteByte(1)
				for _, cs := range s.claims[claim].constraints {
					if !cs.appliesTo(nr.rd) {
						continue
					}
					if _, derived := nr.rd.derived[cs.attribute]; !derived {
						if slices.Contains(written, cs.attribute) {
							continue
						}
						written = append(written, cs.attribute)
					}
					attr, err := s.attribute(nr.rd, c, cs.attribute)
					if err != nil {
						return unique
					}
					writeAttribute(&h, attr)
				}
			}
		}
	}
	sum := h.Sum64()
	return stateHash{mix64(sum ^ 0x3c6ef372fe94f82b), mix64(sum ^ 0xa54ff53a5f1d36f1)}
}

// writeAttribute writes all of an attribute, or that it is missing: each
// field, with whether it is set and its value, so that two attributes write
// the same exactly if they are equal. TestWriteAttributeFields keeps the
// list of fields complete.
func writeAttribute(h *maphash.Hash, attr *resourceapi.DeviceAttribute) {
	if attr == nil {
		h.WriteByte(0)
		return
	}
	h.WriteByte(1)
	var b [9]byte
	writeInt := func(set bool, v int64) {
		b[0] = 0
		if set {
			b[0] = 1
		}
		binary.LittleEndian.PutUint64(b[1:], uint64(v))
		h.Write(b[:])
	}
	writeString := func(set bool, v string) {
		writeInt(set, int64(len(v)))
		h.WriteString(v)
	}
	boolInt := func(v bool) int64 {
		if v {
			return 1
		}
		return 0
	}
	writeInt(attr.IntValue != nil, ptr.Deref(attr.IntValue, 0))
	writeInt(attr.BoolValue != nil, boolInt(ptr.Deref(attr.BoolValue, false)))
	writeString(attr.StringValue != nil, ptr.Deref(attr.StringValue, ""))
	writeString(attr.VersionValue != nil, ptr.Deref(attr.VersionValue, ""))
	ints, bools, strs, versions := minor.AttributeLists(attr)
	writeInt(ints != nil, int64(len(ints)))
	for _, v := range ints {
		writeInt(true, v)
	}
	writeInt(bools != nil, int64(len(bools)))
	for _, v := range bools {
		writeInt(true, boolInt(v))
	}
	writeInt(strs != nil, int64(len(strs)))
	for _, v := range strs {
		writeString(true, v)
	}
	writeInt(versions != nil, int64(len(versions)))
	for _, v := range versions {
		writeString(true, v)
	}
}

// sameShares reports whether two shared devices have the same shares: from
// earlier cycles (whole allocation, shares, consumed capacity) and in the
// current assignment (whether any, and their consumption).
func (s *search) sameShares(a, b int) bool {
	ida, idb := s.cands[a].id(), s.cands[b].id()
	if s.isAllocatedCand(a) != s.isAllocatedCand(b) || s.a.sharedDevices().Has(ida) != s.a.sharedDevices().Has(idb) {
		return false
	}
	consumedA, okA := s.a.consumedCapacity(ida)
	consumedB, okB := s.a.consumedCapacity(idb)
	if okA != okB || len(consumedA) != len(consumedB) {
		return false
	}
	for name, qa := range consumedA {
		qb, ok := consumedB[name]
		if !ok || (qa == nil) != (qb == nil) {
			return false
		}
		if qa == nil {
			continue
		}
		// A copy: Cmp may change its receiver's representation, and the
		// state is shared by concurrent searches.
		if q := *qa; q.Cmp(*qb) != 0 {
			return false
		}
	}
	if s.sharedNow(a) != s.sharedNow(b) {
		return false
	}
	if s.sharedNow(a) {
		// Devices of one class have the same capacities, so the sums line
		// up.
		for i := range s.shares[a].sums {
			if s.shares[a].sums[i].Cmp(s.shares[b].sums[i]) != 0 {
				return false
			}
		}
	}
	return true
}

func (s *search) capacityFits(nr *nodeRequest, ci int) (bool, error) {
	c := s.cands[ci]
	var allocating []resource.Quantity
	if s.sharedNow(ci) {
		allocating = s.shares[ci].sums
	}
	allocated, _ := s.a.consumedCapacity(c.id())
	e := s.capacityOf(nr, ci)
	if allocating == nil && len(allocated) == 0 {
		// Nothing consumed: the outcome depends on the device and the
		// request alone, and is kept with the evaluation.
		if e.err != nil {
			return false, e.err
		}
		return e.fitsUnused, nil
	}
	return e.fits(c.device().Capacity, allocated, allocating)
}

// capacityOf returns what the (sub)request would consume of a candidate.
func (s *search) capacityOf(nr *nodeRequest, ci int) *capacityEval {
	c := s.cands[ci]
	return c.ps.capacityEval(c.i, s.capacityKey(nr.rd), nr.rd.capacity)
}

// capacityKey is what decides, besides the device, what the (sub)request
// consumes of it.
func (s *search) capacityKey(rd *requestData) capacityKey {
	return makeCapacityKey(rd.capacityID, s.a.newer.FractionalCapacityRange)
}

// consumptionOf returns what a candidate draws from its pool's counters.
func (s *search) consumptionOf(ci int) *consumption {
	_, c := s.counterDraw(ci)
	return c
}

// counterDraw returns the counters a candidate draws from and what it
// draws. Every check and every placement of a partitionable device needs
// both; looking them up once per search keeps the pool's lock and two map
// lookups out of the search's inner loop.
func (s *search) counterDraw(ci int) (*counterUsage, *consumption) {
	if !s.drawsSized {
		s.draws = grow(s.draws, len(s.cands))
		s.drawsSized = true
	}
	d := &s.draws[ci]
	if d.usage == nil {
		c := s.cands[ci]
		d.usage = s.countersFor(c.pool)
		d.consumption = d.usage.pool.layout.consumptionOf(c.ps, c.i)
	}
	return d.usage, d.consumption
}

// counterDrawRef is counterDraw's answer for one candidate.
type counterDrawRef struct {
	usage       *counterUsage
	consumption *consumption
}

func (s *search) countersFor(p *pool) *counterUsage {
	u := s.counters[p]
	if u == nil {
		u = newCounterUsage(s.a.poolCounters(p))
		if s.counters == nil {
			s.counters = make(map[*pool]*counterUsage)
		}
		s.counters[p] = u
	}
	return u
}

func (s *search) compatFor(p *pool) *compatUsage {
	u := s.compat[p]
	if u == nil {
		u = &compatUsage{baseline: s.a.poolCounters(p).compatBaseline, running: make(map[string]compatIntersection)}
		if s.compat == nil {
			s.compat = make(map[*pool]*compatUsage)
		}
		s.compat[p] = u
	}
	return u
}

// Unavailable reports whether a device's taints keep it from every request
// that tolerates none of them: a NoSchedule or NoExecute taint, the effects
// the search honours (taintPrevents, with DeviceTaints on, as in every
// tier). This is also what KEP-5677's ResourcePoolStatusRequest counts as
// unavailable; pkg/capacity and the scheduler's device metrics count with it.
func Unavailable(device *resourceapi.Device) bool {
	return taintPrevents(device, nil)
}

func taintPrevents(device *resourceapi.Device, tolerations []resourceapi.DeviceToleration) bool {
	for i := range device.Taints {
		taint := &device.Taints[i]
		switch taint.Effect {
		case resourceapi.DeviceTaintEffectNoExecute, resourceapi.DeviceTaintEffectNoSchedule:
			// Only these effects prevent allocation; others, None included,
			// are informational.
		default:
			continue
		}
		tolerated := false
		for j := range tolerations {
			if resourceclaim.ToleratesTaint(tolerations[j], *taint) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			return true
		}
	}
	return false
}
