package allocator

import (
	"context"
	"errors"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
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
//     the subtree fails, unless a trap lies in the range;
//   - symmetry: a candidate indistinguishable from one that already failed
//     at the same slot fails too (its subtree mirrors the other's);
//   - memo: the outcome of a failed search from a request boundary is
//     remembered under a hash of the whole mutable state, so equivalent
//     states reached along different paths are not searched again.
//
// All three prune only subtrees that upstream would search without finding
// anything, so the result is the same, found faster.

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
	// capacity caches what the request would consume per candidate.
	capacity []*capacityEval
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
	counters    map[*pool]*counterUsage
	compat      map[*pool]*compatUsage
	constraints [][]constraintState
	results     [][]resultDevice

	// failures counts backtracks. The costlier bounds only run once the
	// search had to backtrack a few times: a search that succeeds at the
	// first try, or after a little backtracking, never pays for them.
	failures int

	// hash is a Zobrist hash of the state the future depends on, maintained
	// incrementally; see memo.
	hash  stateHash
	memo  map[memoKey]struct{}
	stats searchStats
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
	var failed []deviceClassKey
	for ci := first; ci < len(s.cands); ci++ {
		if len(failed) > 0 && s.clean(ci) && slices.Contains(failed, s.classOf(ci)) {
			s.stats.symmetrySkips++
			continue
		}
		wasClean := s.clean(ci)
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
		if wasClean {
			failed = append(failed, s.classOf(ci))
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
		if s.a.features.CompatibilityGroups {
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
		s.addShare(ci, share, true)
		p.share = share
		p.shareKey = candKey(ci, r.claim, keyShare+uint64(rd.requestIndex)<<8+uint64(rd.subRequestIndex))
		s.hash.toggle(p.shareKey)
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
		s.addShare(p.cand, p.share, false)
		s.hash.toggle(p.shareKey)
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
// consume, per capacity in the order of capacityEval.names.
type shareUse struct {
	count int
	sums  []resource.Quantity
}

// addShare adds or removes a share. Upstream keeps these sums in a
// ConsumedCapacityCollection whose entry for a device exists exactly while
// the device has a share (undo is last-in first-out and consumption is never
// negative); count plays that part here.
func (s *search) addShare(ci int, share *capacityEval, add bool) {
	if s.shares == nil {
		s.shares = make([]shareUse, len(s.cands))
	}
	use := &s.shares[ci]
	if use.sums == nil {
		use.sums = make([]resource.Quantity, len(share.amounts))
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
	} else {
		use.count--
	}
}

// sharedNow: the device has a share in the current assignment.
func (s *search) sharedNow(ci int) bool {
	return s.shares != nil && s.shares[ci].count > 0
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

// clean: nothing in the current assignment touches the candidate, so it is
// interchangeable with any other clean candidate of its class.
func (s *search) clean(ci int) bool {
	if len(s.marks[ci]) > 0 {
		return false
	}
	return !s.sharedNow(ci)
}

// classOf returns the candidate's equivalence class for this cycle. Devices
// with any allocation state from earlier cycles are kept in classes of their
// own, so only the device content has to be compared.
func (s *search) classOf(ci int) deviceClassKey {
	c := s.cands[ci]
	if s.isAllocatedCand(ci) || s.a.isAllocated(c.id()) {
		var unique deviceClassKey
		// Distinct from any SHA-256 prefix in practice: the all-zero key
		// plus the candidate index.
		unique[0], unique[1], unique[2], unique[3] = 0xff, byte(ci>>16), byte(ci>>8), byte(ci)
		return unique
	}
	return c.ps.deviceClasses()[c.i]
}

func (s *search) capacityFits(nr *nodeRequest, ci int) (bool, error) {
	c := s.cands[ci]
	id := c.id()
	var allocating []resource.Quantity
	if s.sharedNow(ci) {
		allocating = s.shares[ci].sums
	}
	allocated, inAllocated := s.a.consumedCapacity(id)
	if nr.rd.capacity == nil && allocating == nil && !inAllocated {
		// Nothing requested and nothing consumed: the outcome depends on
		// the device alone, and is kept with the slice.
		return c.ps.defaultCapacityFits(c.i, s.a.features.FractionalCapacityRange)
	}
	return s.capacityOf(nr, ci).fits(c.device().Capacity, allocated, allocating)
}

// capacityOf returns what the (sub)request would consume of a candidate.
func (s *search) capacityOf(nr *nodeRequest, ci int) *capacityEval {
	if nr.capacity == nil {
		nr.capacity = make([]*capacityEval, len(s.cands))
	}
	if nr.capacity[ci] == nil {
		e := evaluateCapacity(nr.rd.capacity, s.cands[ci].device().Capacity, s.a.features.FractionalCapacityRange)
		nr.capacity[ci] = &e
	}
	return nr.capacity[ci]
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
		d.consumption = d.usage.pool.consumptionOf(c.ps, c.i)
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
