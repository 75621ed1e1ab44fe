package allocator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Policy says how Allocate chooses among the fits of a node.
type Policy string

const (
	// PolicyFirstFit (or the empty string) takes the first fit in
	// upstream's candidate order: upstream's answer.
	PolicyFirstFit Policy = "FirstFit"
	// PolicyBestFit takes the first fit in an order that keeps capacity
	// whole; see bestFitOrder.
	PolicyBestFit Policy = "BestFit"
)

// BestFit searches the same space as FirstFit, in another candidate order.
// The search is complete for any order (feasibility, symmetry and the memo
// prune only subtrees without a solution, whatever the order), so it finds a
// fit exactly where FirstFit finds one. What the order can change is which
// error upstream's search meets first: a trap (a candidate whose evaluation
// fails) that FirstFit reaches before its fit. Allocate therefore keeps a
// BestFit answer only when no candidate of any request is a trap, and
// otherwise lets FirstFit decide; BestFit never turns an error into a fit or
// a fit into an error.
//
// The order can make the search slower than FirstFit's: preferred devices
// may be a dead end that the pruning only detects after some backtracking.
// The BestFit search therefore has a step budget (bestFitBudget); a search
// that exceeds it gives way to FirstFit, so BestFit costs at most its
// budget more than FirstFit, and such a pod gets upstream's choice.
//
// The order, per search (it depends on what is allocated):
//
//  1. candidates whose unit of capacity is already in use first: a further
//     share of a device already shared, a partition (MIG device) of a GPU
//     already partitioned. A unit is a counter set for devices that consume
//     counters (a GPU and its partitions), the device itself otherwise;
//  2. then by topology group, for each level (Options.TopologyAttributes)
//     that has a group with room for the request's device count n: groups
//     that can hold n before those that cannot, the fewest free units
//     first. Levels where no group can hold n come after, fewest free
//     first: the request spans groups there and should break the smallest;
//  3. then upstream's order.
//
// A device without a level's attribute is a group of its own at that level.
// n is the pod's device count, the exact counts of all its requests
// (requestSize): the order is one per search, and a pod's devices are best
// kept together.

// topology is what BestFit knows about a node view's candidates for one
// list of topology attributes. It depends only on the view, so it is kept
// with it.
type topology struct {
	attrs string
	// unit[ci] is the candidate's unit of capacity.
	unit  []int32
	units int
	// cand maps device IDs to candidate indexes.
	cand map[structured.DeviceID]int
	// group[level*units+u] is unit u's group at a level.
	group  []int32
	groups []int
	// offset[level] is where the level's groups start in freeCounts'
	// result; totalGroups the sum of groups.
	offset      []int
	totalGroups int
	// value[level][g] is group g's attribute value as people read it, ""
	// for a unit without the attribute.
	value [][]string
}

// topologyKey identifies a list of attributes.
func topologyKey(attrs []resourceapi.FullyQualifiedName) string {
	var b strings.Builder
	for _, a := range attrs {
		b.WriteString(string(a))
		b.WriteByte(0)
	}
	return b.String()
}

// topology returns the view's topology for the allocator's attributes,
// computing it on first use. Concurrent searches may compute it twice;
// either result is the same.
func (a *Allocator) topology(v *nodeView) *topology {
	if t := v.topo.Load(); t != nil && t.attrs == a.topoKey {
		return t
	}
	t := &topology{attrs: a.topoKey, unit: make([]int32, len(v.cands)), cand: make(map[structured.DeviceID]int, len(v.cands))}
	type setKey struct {
		pool *pool
		set  string
	}
	unitOf := map[setKey]int32{}
	var first []int // a candidate of each unit
	for ci, c := range v.cands {
		t.cand[c.id()] = ci
		d := c.device()
		if len(d.ConsumesCounters) > 0 && a.features.PartitionableDevices {
			k := setKey{c.pool, d.ConsumesCounters[0].CounterSet}
			u, ok := unitOf[k]
			if !ok {
				u = int32(len(first))
				unitOf[k] = u
				first = append(first, ci)
			}
			t.unit[ci] = u
			continue
		}
		t.unit[ci] = int32(len(first))
		first = append(first, ci)
	}
	t.units = len(first)
	t.group = make([]int32, len(a.topoAttrs)*t.units)
	t.groups = make([]int, len(a.topoAttrs))
	t.value = make([][]string, len(a.topoAttrs))
	for level, name := range a.topoAttrs {
		ids := map[string]int32{}
		for u, ci := range first {
			g := int32(-1)
			c := v.cands[ci]
			if attr := c.ps.attribute(c.i, name); attr != nil {
				key := attrFingerprint(attr)
				id, ok := ids[key]
				if !ok {
					id = int32(t.groups[level])
					ids[key] = id
					t.groups[level]++
					t.value[level] = append(t.value[level], attrString(attr))
				}
				g = id
			}
			if g < 0 {
				// A group of its own.
				g = int32(t.groups[level])
				t.groups[level]++
				t.value[level] = append(t.value[level], "")
			}
			t.group[level*t.units+u] = g
		}
	}
	t.offset = make([]int, len(t.groups))
	for level, n := range t.groups {
		t.offset[level] = t.totalGroups
		t.totalGroups += n
	}
	v.topo.Store(t)
	return t
}

// busyUnits marks, per unit, whether any of its candidates is allocated
// before this cycle, in whole or as a share. These lookups, one per
// candidate, are most of what BestFit costs more than FirstFit, which
// stops at the first free device.
func (a *Allocator) busyUnits(v *nodeView, t *topology, busy []bool) []bool {
	busy = grow(busy, t.units)
	for ci, c := range v.cands {
		if u := t.unit[ci]; !busy[u] && a.isAllocated(c.id()) {
			busy[u] = true
		}
	}
	return busy
}

// freeCounts returns, per level and group, the units that are not busy:
// free[t.offset[level]+group].
func (t *topology) freeCounts(busy []bool, free []int) []int {
	free = grow(free, t.totalGroups)
	for level := range t.groups {
		counts := free[t.offset[level] : t.offset[level]+t.groups[level]]
		for u, b := range busy {
			if !b {
				counts[t.group[level*t.units+u]]++
			}
		}
	}
	return free
}

// bestFitOrder returns the view's candidates in BestFit's order for a
// request of n devices, and for each view index its position in that
// order. It returns the view's own slice (and nil) when the order is
// upstream's. Both are read-only: the last order is kept with the view.
func (s *search) bestFitOrder(v *nodeView, n int) ([]cand, []int) {
	a := s.a
	t := a.topology(v)
	s.busy = a.busyUnits(v, t, s.busy)
	// Most nodes are as they were in the last cycle, and most pods are
	// alike: the order found last is likely still the order.
	if o := v.order.Load(); o != nil && o.topo == t && o.n == n && slices.Equal(o.busy, s.busy) {
		return o.cands, o.position
	}
	cands, position := s.computeOrder(v, t, n)
	v.order.Store(&orderCache{topo: t, n: n, busy: slices.Clone(s.busy), cands: cands, position: position})
	return cands, position
}

// orderCache is the last order bestFitOrder computed for a view, with what
// it was computed from.
type orderCache struct {
	topo     *topology
	n        int
	busy     []bool
	cands    []cand
	position []int
}

func (s *search) computeOrder(v *nodeView, t *topology, n int) ([]cand, []int) {
	s.free = t.freeCounts(s.busy, s.free)
	levels := len(t.groups)
	s.holds = grow(s.holds, levels)
	holds := s.holds
	for level := range levels {
		holds[level] = slices.ContainsFunc(s.free[t.offset[level]:t.offset[level]+t.groups[level]], func(f int) bool { return f >= n })
	}
	width := 1 + 2*levels
	s.keys = grow(s.keys, width*len(v.cands))
	sorted := true
	for ci := range v.cands {
		k := s.keys[ci*width : (ci+1)*width]
		u := int(t.unit[ci])
		if !s.busy[u] {
			k[0] = 1
		}
		i := 1
		// Levels that can hold the request first, in their order.
		for level := range levels {
			if !holds[level] {
				continue
			}
			f := s.free[t.offset[level]+int(t.group[level*t.units+u])]
			if f < n {
				k[i] = 1
			}
			k[i+1] = f
			i += 2
		}
		for level := range levels {
			if holds[level] {
				continue
			}
			k[i] = s.free[t.offset[level]+int(t.group[level*t.units+u])]
			i += 2
		}
		if sorted && ci > 0 && slices.Compare(s.keys[(ci-1)*width:ci*width], k) > 0 {
			sorted = false
		}
	}
	if sorted {
		return v.cands, nil
	}
	s.perm = grow(s.perm, len(v.cands))
	for i := range s.perm {
		s.perm[i] = i
	}
	slices.SortStableFunc(s.perm, func(x, y int) int {
		return slices.Compare(s.keys[x*width:(x+1)*width], s.keys[y*width:(y+1)*width])
	})
	ordered := make([]cand, len(v.cands))
	position := make([]int, len(v.cands))
	for i, ci := range s.perm {
		ordered[i] = v.cands[ci]
		position[ci] = i
	}
	return ordered, position
}

// requestSize is the n of bestFitOrder: the devices the pod asks for, the
// exact counts of all requests of all claims (the first subrequest of a
// prioritized list). A pod's devices are best kept in one group, and a
// matchAttribute over several requests needs room for all of them.
func requestSize(claims []*claimData) int {
	n := 0
	for _, cd := range claims {
		for ri := range cd.requests {
			if alternatives := cd.requests[ri].alternatives; len(alternatives) > 0 {
				if rd := alternatives[0]; rd.allocationMode == resourceapi.DeviceAllocationModeExactCount {
					n += int(min(rd.count, resourceapi.AllocationResultsMaxSize))
				}
			}
		}
	}
	return max(n, 1)
}

// errBudget stops a BestFit search that exceeded its step budget.
var errBudget = errors.New("BestFit step budget exceeded")

// bestFitBudget is the BestFit search's step budget: a few times the steps
// of a search that fills every device slot at the first try.
func bestFitBudget(slots int) int64 { return int64(4*slots + 64) }

// allocateBestFit runs the BestFit search. decided is false when FirstFit
// has to answer instead: the BestFit search met an error, or a trap could
// make FirstFit's answer an error.
func (a *Allocator) allocateBestFit(ctx context.Context, node *v1.Node, claims []*resourceapi.ResourceClaim) (results []resourceapi.AllocationResult, decided bool, err error) {
	s, err := a.newSearch(ctx, node, claims, true)
	if err != nil || s == nil {
		return nil, false, nil
	}
	defer s.release()
	slots := 0
	for _, claimReqs := range s.reqs {
		for _, alternatives := range claimReqs {
			slots += alternatives[0].numDevices
		}
	}
	s.budget = bestFitBudget(slots)
	loggerV := s.logger.V(5)
	ok, err := s.allocateOne(pos{}, false, 0)
	a.steps.Add(s.stats.steps)
	if loggerV.Enabled() {
		loggerV.Info("Done with BestFit allocation", "success", ok, "err", err, "numCandidates", len(s.cands),
			"steps", s.stats.steps, "feasibilityPrunes", s.stats.feasibilityPrunes, "symmetrySkips", s.stats.symmetrySkips, "memoHits", s.stats.memoHits)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, true, s.abortError()
		}
		return nil, false, nil
	}
	if !s.trapFreeAll() {
		return nil, false, nil
	}
	if !ok {
		// No fit in a complete search without traps: FirstFit finds none
		// either, but it reports invalid pools as an error.
		for _, p := range s.pools {
			if p.invalid {
				return nil, false, nil
			}
		}
		return nil, true, nil
	}
	results, err = s.buildResults()
	return results, true, err
}

// trapFreeAll: no candidate of any request of the search is a trap.
func (s *search) trapFreeAll() bool {
	for _, claimReqs := range s.reqs {
		for _, alternatives := range claimReqs {
			for _, nr := range alternatives {
				if !s.trapFree(nr) {
					return false
				}
			}
		}
	}
	return true
}

// WholeFree says where the node's free units would be once the results
// are allocated, summed over the levels of Options.TopologyAttributes:
// free is the free units (once per level), whole those of them in groups
// with no unit in use. A pod that fills a partly used group leaves more of
// the free units whole than one that breaks a whole group, and a pod that
// takes a node's last free units leaves nothing to strand; scoring
// prefers both. It returns zeros without topology attributes.
func (a *Allocator) WholeFree(node *v1.Node, results []resourceapi.AllocationResult) (whole, free int, err error) {
	if len(a.topoAttrs) == 0 {
		return 0, 0, nil
	}
	v := a.view(node)
	if v.err != nil {
		return 0, 0, fmt.Errorf("gather pool information: %w", v.err)
	}
	t := a.topology(v)
	busy := a.busyUnits(v, t, nil)
	for _, r := range results {
		for _, d := range r.Devices.Results {
			if ci, ok := t.cand[structured.MakeDeviceID(d.Driver, d.Pool, d.Device)]; ok {
				busy[t.unit[ci]] = true
			}
		}
	}
	counts := t.freeCounts(busy, nil)
	for level, n := range t.groups {
		used := make([]bool, n)
		for u := range t.units {
			if busy[u] {
				used[t.group[level*t.units+u]] = true
			}
		}
		for g := range n {
			f := counts[t.offset[level]+g]
			free += f
			if !used[g] {
				whole += f
			}
		}
	}
	return whole, free, nil
}

// TopologyGroup is one group of a topology level on a node: the units of
// capacity whose devices share a value of the level's attribute. A unit is
// what BestFit keeps whole: a counter set (a GPU and its partitions) for
// devices that consume counters, the device itself otherwise.
type TopologyGroup struct {
	// Attribute is the level's attribute (Options.TopologyAttributes).
	Attribute resourceapi.FullyQualifiedName `json:"attribute"`
	// Value is the attribute's value; empty for a unit without the
	// attribute, which is a group of its own.
	Value string `json:"value,omitempty"`
	// Units counts the group's units, Free those of them of which no
	// device is allocated, in whole or as a share. The group is whole
	// when Free equals Units.
	Units int `json:"units"`
	Free  int `json:"free"`
}

// TopologyGroups lists the groups of the node's devices at each level of
// Options.TopologyAttributes, in the order of the levels and, within a
// level, of the devices: the groups that BestFit and WholeFree count, with
// the units free before this cycle. It returns nothing without topology
// attributes.
func (a *Allocator) TopologyGroups(node *v1.Node) ([]TopologyGroup, error) {
	if len(a.topoAttrs) == 0 {
		return nil, nil
	}
	v := a.view(node)
	if v.err != nil {
		return nil, fmt.Errorf("gather pool information: %w", v.err)
	}
	t := a.topology(v)
	busy := a.busyUnits(v, t, nil)
	free := t.freeCounts(busy, nil)
	var groups []TopologyGroup
	for level, n := range t.groups {
		start := len(groups)
		for g := range n {
			groups = append(groups, TopologyGroup{Attribute: a.topoAttrs[level], Value: t.value[level][g], Free: free[t.offset[level]+g]})
		}
		for u := range t.units {
			groups[start+int(t.group[level*t.units+u])].Units++
		}
	}
	return groups, nil
}

// attrString shows an attribute's value as people read it.
func attrString(attr *resourceapi.DeviceAttribute) string {
	switch {
	case attr.StringValue != nil:
		return *attr.StringValue
	case attr.IntValue != nil:
		return strconv.FormatInt(*attr.IntValue, 10)
	case attr.BoolValue != nil:
		return strconv.FormatBool(*attr.BoolValue)
	case attr.VersionValue != nil:
		return *attr.VersionValue
	}
	return attrFingerprint(attr)
}
