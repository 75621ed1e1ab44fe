package allocator

import (
	"fmt"
	"math"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
)

// infeasible is the search's bound at a request boundary: it reports that
// the requests from r on (the rest of the current claim and all later
// claims) cannot all be satisfied from the current state, so the subtree can
// be cut.
//
// It relaxes the problem to a bipartite matching: every remaining request
// needs its number of devices, each device can serve one request (a device
// that allows multiple allocations any number), and a request may only use
// candidates it could accept right now. Constraints between devices and
// counters drawn by other devices are ignored, which only makes the
// relaxation easier to satisfy; a request with subrequests needs the fewest
// devices any of them needs, from the union of their candidates. If even the
// relaxation has no solution, the real problem has none. The capacity that
// requests share on devices that allow multiple allocations is checked last
// (capacityInfeasible).
//
// Cutting must also leave upstream's outcome unchanged, which needs two more
// conditions: no (request, device) pair of the remaining requests may be a
// trap (its evaluation fails), since upstream would report that error while
// searching the subtree; and the current claim must not be able to exceed
// the result limit on the way, since upstream's subtree would then end with
// its "too many results" signal instead of a plain failure.
//
// With current set, the search is inside request r: slot r.device and the
// following slots of that (sub)request are still open and may only use
// candidates from index from on.
func (s *search) infeasible(r pos, current *nodeRequest, from int) bool {
	if r.claim >= len(s.claims) {
		return false
	}
	if s.laterClaimImpossible(r, current) {
		return true
	}
	// Demands are added in the order upstream's search reaches the
	// requests. Upstream only reaches a request after satisfying all
	// before it, so once a prefix is infeasible nothing after it matters;
	// the checks stop at the first request that upstream could reach with
	// an error (a trap, or more results than the claim may hold).
	m := s.newMatching()
	room := resourceapi.AllocationResultsMaxSize - len(s.results[r.claim])
	// added are the demands of the prefix so far, for the capacity bound,
	// which runs last: it costs more than the matching. The search's
	// scratch buffer keeps it from allocating on every bound check.
	var claimDemands []demand
	added := s.scratchDemands[:0]
	defer func() { s.scratchDemands = added[:0] }()
	// finishClaim runs the per-claim check on the claim's demands so far.
	finishClaim := func() bool {
		if len(claimDemands) == 0 {
			return false
		}
		infeasible := !s.claimFeasible(claimDemands[0].claim, claimDemands)
		claimDemands = claimDemands[:0]
		return infeasible
	}
	add := func(d demand) (infeasible, stop bool) {
		if d.claim == r.claim {
			room -= d.most
			if room < 0 {
				return false, true
			}
		}
		if len(claimDemands) > 0 && claimDemands[0].claim != d.claim && finishClaim() {
			return true, true
		}
		if d.need < 0 {
			return true, true
		}
		if d.need == 0 {
			return false, false
		}
		if len(d.cands) < d.need || !m.add(d) {
			return true, true
		}
		claimDemands = append(claimDemands, d)
		added = append(added, d)
		return false, false
	}
	// done ends the check on the prefix added so far.
	done := func(infeasible bool) bool {
		return infeasible || s.capacityInfeasible(added)
	}

	next := r.request
	if current != nil {
		next++
		if !s.trapFree(current) {
			return false
		}
		d := demand{claim: r.claim, need: current.numDevices - r.device, most: current.numDevices - r.device,
			admin: current.rd.adminAccess, alternatives: []*nodeRequest{current}}
		for c := from; c < len(s.cands); c++ {
			if ok, _ := s.couldAccept(r.claim, current, c, 0, nil); ok {
				d.cands = append(d.cands, c)
			}
		}
		if infeasible, stop := add(d); stop {
			return done(infeasible)
		}
	}
	for ci := r.claim; ci < len(s.claims); ci++ {
		first := 0
		if ci == r.claim {
			first = next
		}
		for ri := first; ri < len(s.reqs[ci]); ri++ {
			d, trap := s.demandFor(ci, s.reqs[ci][ri])
			if trap {
				return done(finishClaim())
			}
			if infeasible, stop := add(d); stop {
				return done(infeasible)
			}
		}
	}
	return done(finishClaim())
}

// laterClaimImpossible reports that some later claim, together with the
// ones after it, cannot be satisfied even from the state the search started
// in. Allocating devices only ever takes options away, so such claims
// cannot be satisfied after any choice for the claims before them, and the
// subtree can be cut, provided that upstream would not reach an error in it
// (no trap among the remaining requests, no "too many results" for the
// current claim).
//
// The one way in which using a device gives options instead is a shared
// device that consumes counters: its later shares skip the counter check.
// With such candidates this shortcut is off.
func (s *search) laterClaimImpossible(r pos, current *nodeRequest) bool {
	if r.claim+1 >= len(s.claims) || s.sharesSkipCounters() {
		return false
	}
	impossible := false
	for k := r.claim + 1; k < len(s.claims) && !impossible; k++ {
		impossible = s.suffixImpossible(k)
	}
	if !impossible {
		return false
	}
	// Upstream would search all of the remainder; it must hold no trap and
	// no way for the current claim to exceed the result limit.
	room := resourceapi.AllocationResultsMaxSize - len(s.results[r.claim])
	if current != nil {
		if !s.trapFree(current) {
			return false
		}
		room -= current.numDevices - r.device
	}
	for ci := r.claim; ci < len(s.claims); ci++ {
		first := 0
		if ci == r.claim {
			first = r.request
			if current != nil {
				first++
			}
		}
		for ri := first; ri < len(s.reqs[ci]); ri++ {
			most := 0
			for _, nr := range s.reqs[ci][ri] {
				if !s.trapFree(nr) {
					return false
				}
				most = max(most, nr.numDevices)
			}
			if ci == r.claim {
				room -= most
			}
		}
	}
	return room >= 0
}

// suffixImpossible reports whether claims k and later cannot be satisfied
// from the search's initial state, searching them once on their own.
func (s *search) suffixImpossible(k int) bool {
	if s.suffix == nil {
		s.suffix = make([]int8, len(s.claims))
	}
	switch s.suffix[k] {
	case 1:
		return true
	case 2:
		return false
	}
	s.suffix[k] = 2
	claims := make([]*resourceapi.ResourceClaim, 0, len(s.claims)-k)
	for _, cd := range s.claims[k:] {
		claims = append(claims, cd.claim)
	}
	probe, err := s.a.newSearch(s.ctx, s.node, claims, false)
	if err != nil {
		return false
	}
	defer probe.release()
	ok, err := probe.allocateOne(pos{}, false, 0)
	s.stats.steps += probe.stats.steps
	if !ok && err == nil {
		s.suffix[k] = 1
		return true
	}
	return false
}

// sharesSkipCounters: some candidate allows multiple allocations and
// consumes counters.
func (s *search) sharesSkipCounters() bool {
	if !s.a.features.ConsumableCapacity {
		return false
	}
	for ci := range s.cands {
		device := s.cands[ci].device()
		if ptr.Deref(device.AllowMultipleAllocations, false) && len(device.ConsumesCounters) > 0 {
			return true
		}
	}
	return false
}

// demandFor builds the relaxation's demand for a request that the search
// reaches later, or reports a trap among its alternatives.
func (s *search) demandFor(claim int, alternatives []*nodeRequest) (demand, bool) {
	d := demand{claim: claim, need: -1, alternatives: alternatives}
	seen := make(map[int]struct{})
	for _, nr := range alternatives {
		if !s.trapFree(nr) {
			return d, true
		}
		d.most = max(d.most, nr.numDevices)
		if nr.rd.allocationMode == resourceapi.DeviceAllocationModeAll && len(nr.all) == 0 {
			// "All" of nothing never succeeds.
			continue
		}
		if d.need < 0 || nr.numDevices < d.need {
			d.need = nr.numDevices
		}
		d.admin = d.admin || nr.rd.adminAccess
		consider := func(c int) {
			if _, dup := seen[c]; dup {
				return
			}
			if s.couldAcceptLater(claim, nr, c) {
				seen[c] = struct{}{}
				d.cands = append(d.cands, c)
			}
		}
		if nr.rd.allocationMode == resourceapi.DeviceAllocationModeAll {
			for _, c := range nr.all {
				consider(c)
			}
			continue
		}
		for c := range s.cands {
			consider(c)
		}
	}
	return d, false
}

// claimFeasible checks the demands of one claim against the claim's
// constraints, one constraint at a time:
//
//   - a matchAttribute constraint without devices yet: all covered requests
//     must be served with one value (scalar semantics) or with devices that
//     share one element (list semantics), so some value must admit a
//     matching;
//   - a distinctAttribute constraint: covered requests need pairwise
//     different values, so their devices must be matchable to distinct
//     values (a device with a list value to one of its elements; under
//     scalar semantics all non-scalar values count as one, since only the
//     first device may have one).
//
// Constraints that already have devices are applied by couldAccept.
func (s *search) claimFeasible(claim int, demands []demand) bool {
	var own []demand
	for _, d := range demands {
		if d.claim == claim {
			own = append(own, d)
		}
	}
	if len(own) == 0 {
		return true
	}
	if !s.matchable(own, nil) {
		return false
	}
	var matchKeys [][]map[int][]string
	for i := range s.constraints[claim] {
		cs := &s.constraints[claim][i]
		if cs.spec.match && cs.numDevices > 0 {
			continue
		}
		keys := s.constraintKeys(cs, own)
		if cs.spec.match {
			matchKeys = append(matchKeys, keys)
		} else if !matchableDistinct(own, keys) {
			return false
		}
	}
	return s.matchableWithin(own, matchKeys)
}

// constraintKeys returns, for each demand the constraint covers in every
// alternative, the values each candidate offers for the constraint's
// attribute; nil for demands it does not cover.
func (s *search) constraintKeys(cs *constraintState, demands []demand) []map[int][]string {
	keys := make([]map[int][]string, len(demands))
	for i, d := range demands {
		covered := true
		for _, nr := range d.alternatives {
			covered = covered && cs.spec.appliesTo(nr.rd)
		}
		if !covered {
			continue
		}
		keys[i] = make(map[int][]string, len(d.cands))
		for _, c := range d.cands {
			// Subrequests may differ in derived attributes; the first
			// alternative that resolves the attribute decides.
			for _, nr := range d.alternatives {
				attr, err := s.attribute(nr.rd, s.cands[c], cs.spec.attribute)
				if err != nil || attr == nil {
					continue
				}
				keys[i][c] = attributeKeys(attr, cs.listSemantics, cs.spec.match, c)
				break
			}
		}
	}
	return keys
}

// attributeKeys are the values an attribute of candidate c offers: its
// elements under list semantics; otherwise its scalar value. Under scalar
// semantics a value that is not a scalar never equals another: for
// matchAttribute it forms a set of one (a key of its own), for
// distinctAttribute only one such device fits in a set (one shared key).
func attributeKeys(attr *resourceapi.DeviceAttribute, listSemantics, match bool, c int) []string {
	if listSemantics {
		set := attributeAsSet(attr)
		if set == nil {
			return nil
		}
		return strings.Split(setFingerprint(set), "\x00")
	}
	if key, ok := scalarKey(attr); ok {
		return []string{key}
	}
	if !match {
		return []string{"non-scalar"}
	}
	return []string{fmt.Sprintf("#%d", c)}
}

// maxValueCombinations bounds how many combinations of values
// matchableWithin tries; beyond it, constraints are checked one by one.
const maxValueCombinations = 256

// matchableWithin reports whether some choice of one value per
// matchAttribute constraint serves all demands at once, each covered demand
// with devices offering the chosen values.
func (s *search) matchableWithin(demands []demand, constraints [][]map[int][]string) bool {
	var values [][]string
	var active [][]map[int][]string
	combinations := 1
	for _, keys := range constraints {
		set := make(map[string]struct{})
		covered := false
		for i := range demands {
			if keys[i] == nil {
				continue
			}
			covered = true
			for _, ks := range keys[i] {
				for _, k := range ks {
					set[k] = struct{}{}
				}
			}
		}
		if !covered {
			continue
		}
		if len(set) == 0 {
			return false
		}
		list := make([]string, 0, len(set))
		for k := range set {
			list = append(list, k)
		}
		slices.Sort(list)
		values = append(values, list)
		active = append(active, keys)
		combinations *= len(list)
	}
	if len(active) == 0 {
		return true
	}
	if combinations > maxValueCombinations {
		// Too many to try jointly: each constraint on its own is still a
		// valid, if weaker, relaxation.
		for i := range active {
			if !s.matchableWithin(demands, active[i:i+1]) {
				return false
			}
		}
		return true
	}
	choice := make([]int, len(values))
	for {
		filter := func(i, c int) bool {
			for k, keys := range active {
				if keys[i] != nil && !slices.Contains(keys[i][c], values[k][choice[k]]) {
					return false
				}
			}
			return true
		}
		if s.matchable(demands, filter) {
			return true
		}
		// Next combination.
		k := 0
		for k < len(choice) {
			choice[k]++
			if choice[k] < len(values[k]) {
				break
			}
			choice[k] = 0
			k++
		}
		if k == len(choice) {
			return false
		}
	}
}

// matchableDistinct reports whether the covered demands can get pairwise
// different values.
func matchableDistinct(demands []demand, keys []map[int][]string) bool {
	ids := make(map[string]int)
	var valueDemands []demand
	for i, d := range demands {
		if keys[i] == nil {
			continue
		}
		vd := demand{need: d.need}
		seen := make(map[int]bool)
		for _, c := range d.cands {
			for _, k := range keys[i][c] {
				id, ok := ids[k]
				if !ok {
					id = len(ids)
					ids[k] = id
				}
				if !seen[id] {
					seen[id] = true
					vd.cands = append(vd.cands, id)
				}
			}
		}
		valueDemands = append(valueDemands, vd)
	}
	m := newMatching(len(ids), func(int) int { return 1 })
	for _, vd := range valueDemands {
		if !m.add(vd) {
			return false
		}
	}
	return true
}

// matchable reports whether every demand can get its devices at once;
// filter, if set, restricts the candidates of demand i.
func (s *search) matchable(demands []demand, filter func(i, c int) bool) bool {
	m := s.newMatching()
	m.filter = filter
	for _, d := range demands {
		if !m.add(d) {
			return false
		}
	}
	return true
}

// newMatching prepares a matching over the candidates in which shared
// devices serve any number of demands.
func (s *search) newMatching() *matching {
	return newMatching(len(s.cands), func(c int) int {
		if s.allowsMultiple(s.cands[c].device()) {
			return unlimited
		}
		return 1
	})
}

// newMatching prepares a matching over n candidates.
func newMatching(n int, limit func(c int) int) *matching {
	m := &matching{limit: limit, owner: make([]int32, n), visited: make([]uint32, n)}
	for i := range m.owner {
		m.owner[i] = -1
	}
	return m
}

// demand is one request of the relaxation: how many devices it needs and
// which candidates it may use.
type demand struct {
	claim int
	need  int
	// most is the largest number of devices any alternative needs.
	most         int
	admin        bool
	cands        []int
	alternatives []*nodeRequest
}

// matching is the state of the bipartite matching between demands and
// candidates. Each candidate serves at most limit(c) demands, and each
// demand at most once, since a request's devices are distinct: a device
// that cannot be shared serves one demand, a shared device any number
// (unlimited) or, in the capacity bound, as many as its capacity can hold.
type matching struct {
	demands []demand
	limit   func(c int) int
	filter  func(i, c int) bool
	// owner[c] is the demand using candidate c of limit 1, or -1.
	owner []int32
	// users[c] are the demands using candidate c of a larger limit; created
	// on first use.
	users [][]int32
	// visited[c] == epoch: c was visited in the current augmentation.
	visited []uint32
	epoch   uint32
}

// unlimited is the limit of a shared device whose capacity is not taken
// into account.
const unlimited = math.MaxInt

// add adds a demand and reports whether all demands added so far can be
// served at once. A demand with admin access may share devices with other
// claims, so it is only checked on its own.
func (m *matching) add(d demand) bool {
	di := len(m.demands)
	m.demands = append(m.demands, d)
	if d.admin {
		n := 0
		for _, c := range d.cands {
			if m.filter == nil || m.filter(di, c) {
				n++
			}
		}
		// Keep it out of the shared matching.
		m.demands[di].cands = nil
		return n >= d.need
	}
	for range d.need {
		m.epoch++
		if !m.augment(di) {
			return false
		}
	}
	return true
}

// augment finds one more device for demand di, moving other demands to
// alternative devices where needed (Kuhn's algorithm for a matching with
// capacities; a demand needing n devices takes n units).
func (m *matching) augment(di int) bool {
	demands := m.demands
	for _, c := range demands[di].cands {
		if m.filter != nil && !m.filter(di, c) {
			continue
		}
		limit := m.limit(c)
		if limit <= 1 {
			if limit < 1 || m.visited[c] == m.epoch {
				continue
			}
			m.visited[c] = m.epoch
			if other := m.owner[c]; other < 0 || m.augment(int(other)) {
				m.owner[c] = int32(di)
				return true
			}
			continue
		}
		if m.users == nil {
			m.users = make([][]int32, len(m.owner))
		}
		users := m.users[c]
		if slices.Contains(users, int32(di)) || m.visited[c] == m.epoch {
			continue
		}
		if len(users) < limit {
			m.users[c] = append(users, int32(di))
			return true
		}
		// Full: one of its demands may move to another device.
		m.visited[c] = m.epoch
		for k, other := range users {
			if m.augment(int(other)) {
				m.users[c][k] = int32(di)
				return true
			}
		}
	}
	return false
}

// couldAcceptLater is couldAccept for a request that the search reaches
// later. Between now and then a device that allows multiple allocations may
// get a share, after which further shares skip the counter check; so such
// devices are assumed to pass it.
func (s *search) couldAcceptLater(claim int, nr *nodeRequest, ci int) bool {
	ok, _ := s.couldAccept(claim, nr, ci, checkOptimisticShares, nil)
	return ok
}

// trapFree reports whether no candidate's evaluation for the (sub)request
// fails: selectors, capacity resolution and derived attributes used by the
// claim's constraints. An "All" request under a constraint is never
// trap-free: a device that violates the constraint is an error there.
func (s *search) trapFree(nr *nodeRequest) bool {
	switch nr.trapFree {
	case 1:
		return true
	case 2:
		return false
	}
	free := s.computeTrapFree(nr)
	nr.trapFree = 2
	if free {
		nr.trapFree = 1
	}
	return free
}

func (s *search) computeTrapFree(nr *nodeRequest) bool {
	rd := nr.rd
	constraints := s.claims[rd.claimIndex].constraints
	if rd.allocationMode == resourceapi.DeviceAllocationModeAll && len(nr.all) > 0 {
		for i := range constraints {
			if constraints[i].appliesTo(rd) {
				return false
			}
		}
	}
	// The selectors and the capacity requirements depend on the slice
	// only: their verdict is kept per slice (sliceTrapFree). Capacity
	// fails to evaluate or not whatever is consumed of it (capacityFits
	// only reports the evaluation's own error). Derived attributes and
	// per-device node selection are checked per device.
	perDevice := rd.trapID == 0
	for i := range constraints {
		if _, derived := rd.derived[constraints[i].attribute]; derived && constraints[i].appliesTo(rd) {
			perDevice = true
		}
	}
	if !perDevice {
		var last *preparedSlice
		for ci, c := range s.cands {
			if c.ps.perDeviceNodeSelection {
				if !s.candTrapFree(nr, ci) {
					return false
				}
				continue
			}
			if c.ps != last {
				last = c.ps
				if !s.sliceTrapFree(rd, c) {
					return false
				}
			}
		}
		return true
	}
	for ci := range s.cands {
		if !s.candTrapFree(nr, ci) {
			return false
		}
	}
	return true
}

// candTrapFree: evaluating the (sub)request on the candidate fails nowhere.
func (s *search) candTrapFree(nr *nodeRequest, ci int) bool {
	rd := nr.rd
	selectable, err := s.isSelectable(nr, ci)
	if err != nil {
		return false
	}
	if !selectable {
		return true
	}
	if s.a.features.ConsumableCapacity {
		if _, err := s.capacityFits(nr, ci); err != nil {
			return false
		}
	}
	constraints := s.claims[rd.claimIndex].constraints
	for i := range constraints {
		if !constraints[i].appliesTo(rd) {
			continue
		}
		if _, err := s.attribute(rd, s.cands[ci], constraints[i].attribute); err != nil {
			return false
		}
	}
	return true
}

// trapCacheKey is what sliceTrapFree's verdict depends on besides the
// slice: the selectors and the features that change the checks.
type trapCacheKey struct {
	selectors, capacity                             int64
	bindingConditions, consumable, fractionalRanges bool
}

// maxTrapKeysPerSlice bounds the verdicts kept per slice.
const maxTrapKeysPerSlice = 64

// sliceTrapFree is candTrapFree for all devices of the candidate's slice,
// with no node-dependent device selection and no derived attribute: then
// nothing but the slice, the selectors and the capacity requirements
// decides, and the verdict is kept with the slice across nodes and cycles.
func (s *search) sliceTrapFree(rd *requestData, c cand) bool {
	key := trapCacheKey{
		selectors:         rd.trapID,
		capacity:          rd.capacityID,
		bindingConditions: s.a.features.DeviceBindingAndStatus,
		consumable:        s.a.features.ConsumableCapacity,
		fractionalRanges:  s.a.newer.FractionalCapacityRange,
	}
	if free, ok := c.ps.traps.load(key); ok {
		return free
	}
	free := true
	for i := range c.ps.slice.Spec.Devices {
		d := cand{pool: c.pool, ps: c.ps, i: i}
		if !key.bindingConditions && len(d.device().BindingConditions) > 0 {
			continue
		}
		ok, err := s.matchesSelectors(rd, d)
		if err == nil && ok && key.consumable {
			err = c.ps.capacityEval(i, makeCapacityKey(key.capacity, key.fractionalRanges), rd.capacity).err
		}
		if err != nil {
			free = false
			break
		}
	}
	if s.ctx.Err() != nil {
		// Evaluations may have been cut short: not a verdict to keep.
		return false
	}
	c.ps.traps.loadOrStore(key, maxTrapKeysPerSlice, func() bool { return free })
	return free
}
