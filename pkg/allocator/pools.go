package allocator

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/minor"
)

// poolID names a resource pool: driver and pool name.
type poolID struct {
	driver, pool string
}

func (id poolID) String() string { return id.driver + "/" + id.pool }

// pool is one resource pool as seen from one node.
type pool struct {
	id poolID
	// incomplete: not all slices of the pool's current generation are
	// visible. Nothing is allocated from such a pool.
	incomplete bool
	// invalid: the pool's content is inconsistent (duplicate device names,
	// undefined counters). Nothing is allocated from such a pool.
	invalid       bool
	invalidReason string

	// slices are the device slices of the pool that target the node, sorted
	// by name. Their devices are the candidates, in this order.
	slices []*preparedSlice
	// notTargeting are the pool's other device slices. Their allocated
	// devices still consume the pool's shared counters.
	notTargeting []*preparedSlice
	// counterSets are the pool's shared counter sets by name.
	counterSets map[string]*resourceapi.CounterSet
	// withBindingConditions: some device that targets the node has
	// BindingConditions set; such pools are tried last.
	withBindingConditions bool

	// layout is the pool's counter layout, computed on first use; see
	// counterLayout.
	layoutOnce sync.Once
	layout     *counterLayout
}

func (p *pool) usable() bool { return !p.incomplete && !p.invalid }

// gatherPools collects the pools whose devices the node can access, in
// candidate order: pools sorted by driver and name, pools with binding
// conditions after all others. This reproduces upstream's GatherPools: slices
// of older generations are ignored, pools whose current generation is not
// fully visible are incomplete, pools with inconsistent content are invalid.
func (a *Allocator) gatherPools(node *v1.Node) ([]*pool, map[poolID][]*resourceapi.ResourceSlice, error) {
	type group struct {
		generation int64
		slices     []*preparedSlice
	}
	var (
		groups map[poolID]*group
		order  []poolID
	)
	add := func(ps *preparedSlice) {
		if groups == nil {
			groups = make(map[poolID]*group, 2)
		}
		id := poolID{driver: ps.slice.Spec.Driver, pool: ps.slice.Spec.Pool.Name}
		generation := ps.slice.Spec.Pool.Generation
		g := groups[id]
		switch {
		case g == nil:
			groups[id] = &group{generation: generation, slices: []*preparedSlice{ps}}
			order = append(order, id)
		case generation < g.generation:
			// Outdated.
		case generation > g.generation:
			// Newer, replaces all older slices.
			g.generation = generation
			g.slices = []*preparedSlice{ps}
		default:
			g.slices = append(g.slices, ps)
		}
	}

	consider := func(s *resourceapi.ResourceSlice) error {
		spec := &s.Spec
		if !a.features.PartitionableDevices && (spec.PerDeviceNodeSelection != nil || len(spec.SharedCounters) > 0) {
			return nil
		}
		ps := a.cache.slice(s)
		// Without the feature, compatibility groups cannot be checked, so
		// such slices are ignored (which leaves their pool incomplete).
		if !a.newer.CompatibilityGroups && ps.usesCompatibilityGroups {
			return nil
		}
		relevant := false
		switch {
		case minor.CounterSlicesOnEveryNode && len(spec.SharedCounters) > 0:
			// Needed to use the pool, whatever their node selection.
			relevant = true
		case ptr.Deref(spec.NodeName, "") != "" || ptr.Deref(spec.AllNodes, false) || spec.NodeSelector != nil:
			match, err := ps.matchesNode(node)
			if err != nil {
				return fmt.Errorf("failed to perform node selection for slice %s: %w", s.Name, err)
			}
			relevant = match
		case ps.perDeviceNodeSelection:
			for i := range spec.Devices {
				match, err := ps.deviceMatchesNode(i, node)
				if err != nil {
					return fmt.Errorf("failed to perform node selection for device %s in slice %s: %w", spec.Devices[i].String(), s.Name, err)
				}
				if match {
					relevant = true
					break
				}
			}
		default:
			// No node selection that this allocator knows: some future
			// extension. Other pools may still be usable.
		}
		if relevant {
			add(ps)
		}
		return nil
	}

	idx := a.index()
	for _, s := range idx.byNode[node.Name] {
		if err := consider(s); err != nil {
			return nil, nil, err
		}
	}
	for _, s := range idx.shared {
		if err := consider(s); err != nil {
			return nil, nil, err
		}
	}
	// deps are the pools whose complete slice lists were consulted; the
	// result depends on them too.
	var deps map[poolID][]*resourceapi.ResourceSlice

	pools := make([]*pool, 0, len(order))
	var withBindingConditions []*pool
	for _, id := range order {
		g := groups[id]
		// Completeness is judged by the first slice of the current generation,
		// as upstream does.
		wantSlices := g.slices[0].slice.Spec.Pool.ResourceSliceCount
		var all []*resourceapi.ResourceSlice
		if int64(len(g.slices)) != wantSlices {
			// Some slices were not relevant for this node. Look at the whole
			// pool to tell "incomplete" from "relevant subset".
			if deps == nil {
				deps = make(map[poolID][]*resourceapi.ResourceSlice)
			}
			deps[id] = idx.byPool[id]
			obsolete, inPool := idx.poolSlices(id, g.generation)
			if obsolete {
				// The driver is replacing this generation; ignore the pool.
				continue
			}
			if !a.newer.CompatibilityGroups {
				inPool = slices.DeleteFunc(slices.Clone(inPool), func(s *resourceapi.ResourceSlice) bool {
					return a.cache.slice(s).usesCompatibilityGroups
				})
			}
			if int64(len(inPool)) != wantSlices {
				pools = append(pools, &pool{id: id, incomplete: true})
				continue
			}
			all = inPool
		}
		p := a.buildPool(id, g.slices, all)
		if p.withBindingConditions {
			withBindingConditions = append(withBindingConditions, p)
			continue
		}
		pools = append(pools, p)
	}
	sortPools(pools)
	sortPools(withBindingConditions)
	return append(pools, withBindingConditions...), deps, nil
}

// nodeView is what gatherPools finds for a node, with the node's candidate
// devices. It depends only on the node, the features and slice objects, so
// it is kept in the Cache and reused in later cycles while those are the
// same objects.
type nodeView struct {
	node     *v1.Node
	features structured.Features
	local    []*resourceapi.ResourceSlice
	shared   []*resourceapi.ResourceSlice
	deps     map[poolID][]*resourceapi.ResourceSlice

	pools []*pool
	// cands are the devices of usable pools that target the node, in
	// candidate order; poolStart[i] is the index of pool i's first one.
	cands     []cand
	poolStart []int
	err       error

	// topo is BestFit's grouping of cands, computed on first use; order
	// the last BestFit order.
	topo  atomic.Pointer[topology]
	order atomic.Pointer[orderCache]
}

// view returns the node's view, from the cache if still valid.
func (a *Allocator) view(node *v1.Node) *nodeView {
	idx := a.index()
	if v := a.cache.nodeView(node.Name); v != nil && v.valid(a, node, idx) {
		return v
	}
	v := &nodeView{node: node, features: a.features, local: idx.byNode[node.Name], shared: idx.shared}
	v.pools, v.deps, v.err = a.gatherPools(node)
	if v.err == nil {
		v.poolStart = make([]int, len(v.pools))
		n := 0
		for _, p := range v.pools {
			if p.usable() {
				for _, ps := range p.slices {
					n += len(ps.slice.Spec.Devices)
				}
			}
		}
		v.cands = make([]cand, 0, n)
		for i, p := range v.pools {
			v.poolStart[i] = len(v.cands)
			if !p.usable() {
				continue
			}
			for _, ps := range p.slices {
				for d := range ps.slice.Spec.Devices {
					v.cands = append(v.cands, cand{pool: p, ps: ps, i: d})
				}
			}
		}
	}
	a.cache.storeNodeView(node.Name, v)
	return v
}

func (v *nodeView) valid(a *Allocator, node *v1.Node, idx *sliceIndex) bool {
	if v.features != a.features || !sameNode(v.node, node) ||
		!slices.Equal(v.local, idx.byNode[node.Name]) || !slices.Equal(v.shared, idx.shared) {
		return false
	}
	for id, consulted := range v.deps {
		if !slices.Equal(consulted, idx.byPool[id]) {
			return false
		}
	}
	return true
}

// sameNode: the same object, or one with the same name and labels (node
// selectors only look at those; status updates change the object often).
func sameNode(a, b *v1.Node) bool {
	return a == b || a.Name == b.Name && maps.Equal(a.Labels, b.Labels)
}

func sortPools(pools []*pool) {
	slices.SortFunc(pools, func(a, b *pool) int {
		if c := cmp.Compare(a.id.driver, b.id.driver); c != 0 {
			return c
		}
		return cmp.Compare(a.id.pool, b.id.pool)
	})
}

// buildPool sorts and validates the slices of a pool. targeting are the
// slices relevant for the node; all, if not nil, are all slices of the pool's
// generation.
func (a *Allocator) buildPool(id poolID, targeting []*preparedSlice, all []*resourceapi.ResourceSlice) *pool {
	slices.SortFunc(targeting, func(x, y *preparedSlice) int {
		if minor.BindingConditionSlicesLast && x.hasBindingConditionsField != y.hasBindingConditionsField {
			if x.hasBindingConditionsField {
				return 1
			}
			return -1
		}
		return cmp.Compare(x.slice.Name, y.slice.Name)
	})

	p := &pool{id: id}
	var counterSlices []*preparedSlice
	for _, ps := range targeting {
		if a.features.PartitionableDevices && ps.hasSharedCounters {
			counterSlices = append(counterSlices, ps)
		} else {
			p.slices = append(p.slices, ps)
		}
	}
	if len(targeting) < len(all) {
		names := make(map[string]struct{}, len(targeting))
		for _, ps := range targeting {
			names[ps.slice.Name] = struct{}{}
		}
		for _, s := range all {
			if _, ok := names[s.Name]; ok {
				continue
			}
			ps := a.cache.slice(s)
			if a.features.PartitionableDevices && ps.hasSharedCounters {
				counterSlices = append(counterSlices, ps)
			} else {
				p.notTargeting = append(p.notTargeting, ps)
			}
		}
	}

	if name, dup := duplicateDeviceName(p.slices); dup {
		return &pool{id: id, invalid: true, invalidReason: fmt.Sprintf("duplicate device name %s", name)}
	}
	if !a.features.PartitionableDevices {
		p.withBindingConditions = hasBindingConditions(p.slices)
		return p
	}

	p.counterSets = make(map[string]*resourceapi.CounterSet)
	for _, ps := range counterSlices {
		for i := range ps.slice.Spec.SharedCounters {
			set := &ps.slice.Spec.SharedCounters[i]
			if _, dup := p.counterSets[set.Name]; dup {
				return &pool{id: id, invalid: true, invalidReason: fmt.Sprintf("duplicate counter set name %s", set.Name)}
			}
			p.counterSets[set.Name] = set
		}
	}
	for _, group := range [][]*preparedSlice{p.slices, p.notTargeting} {
		if err := validateCounterConsumption(p.counterSets, group); err != nil {
			return &pool{id: id, invalid: true, invalidReason: err.Error()}
		}
	}
	p.withBindingConditions = hasBindingConditions(p.slices)
	return p
}

func duplicateDeviceName(slices []*preparedSlice) (string, bool) {
	if len(slices) == 1 {
		return slices[0].duplicateName, slices[0].duplicateName != ""
	}
	seen := make(map[string]struct{})
	for _, ps := range slices {
		for i := range ps.slice.Spec.Devices {
			name := ps.slice.Spec.Devices[i].Name
			if _, dup := seen[name]; dup {
				return name, true
			}
			seen[name] = struct{}{}
		}
	}
	return "", false
}

func validateCounterConsumption(counterSets map[string]*resourceapi.CounterSet, slices []*preparedSlice) error {
	for _, ps := range slices {
		for i := range ps.slice.Spec.Devices {
			for _, consumption := range ps.slice.Spec.Devices[i].ConsumesCounters {
				set, ok := counterSets[consumption.CounterSet]
				if !ok {
					return fmt.Errorf("counter set %s not found", consumption.CounterSet)
				}
				for name := range consumption.Counters {
					if _, ok := set.Counters[name]; !ok {
						return fmt.Errorf("counter %s not found in counter set %s", name, set.Name)
					}
				}
			}
		}
	}
	return nil
}

func hasBindingConditions(slices []*preparedSlice) bool {
	for _, ps := range slices {
		if ps.hasBindingConditionsField {
			return true
		}
	}
	return false
}

// sliceIndex is built once per Allocator: slices by node and by pool.
type sliceIndex struct {
	byNode map[string][]*resourceapi.ResourceSlice
	shared []*resourceapi.ResourceSlice
	byPool map[poolID][]*resourceapi.ResourceSlice
}

func (a *Allocator) index() *sliceIndex {
	a.indexOnce.Do(func() { a.idx = a.cache.sliceIndex(a.slices) })
	return a.idx
}

// newSliceIndex groups slices by node and by pool, keeping their order.
// It runs once per scheduling cycle over all slices of the cluster, so it
// counts first and then fills one backing array per grouping instead of
// growing a slice per node and per pool.
// localNode is the node whose slices s is indexed under, "" for the slices
// that every node considers: those without a node name, and in a minor
// whose upstream considers them on every node, those with shared counters.
func localNode(s *resourceapi.ResourceSlice) string {
	if minor.CounterSlicesOnEveryNode && len(s.Spec.SharedCounters) > 0 {
		return ""
	}
	return ptr.Deref(s.Spec.NodeName, "")
}

func newSliceIndex(slices []*resourceapi.ResourceSlice) *sliceIndex {
	nodeCount := make(map[string]int, len(slices))
	poolCount := make(map[poolID]int, len(slices))
	shared := 0
	for _, s := range slices {
		if name := localNode(s); name != "" {
			nodeCount[name]++
		} else {
			shared++
		}
		poolCount[poolID{driver: s.Spec.Driver, pool: s.Spec.Pool.Name}]++
	}
	idx := &sliceIndex{
		byNode: make(map[string][]*resourceapi.ResourceSlice, len(nodeCount)),
		byPool: make(map[poolID][]*resourceapi.ResourceSlice, len(poolCount)),
	}
	if shared > 0 {
		idx.shared = make([]*resourceapi.ResourceSlice, 0, shared)
	}
	nodeBacking := make([]*resourceapi.ResourceSlice, 0, len(slices)-shared)
	poolBacking := make([]*resourceapi.ResourceSlice, 0, len(slices))
	for _, s := range slices {
		if name := localNode(s); name != "" {
			idx.byNode[name] = appendGroup(idx.byNode[name], &nodeBacking, nodeCount[name], s)
		} else {
			idx.shared = append(idx.shared, s)
		}
		id := poolID{driver: s.Spec.Driver, pool: s.Spec.Pool.Name}
		idx.byPool[id] = appendGroup(idx.byPool[id], &poolBacking, poolCount[id], s)
	}
	return idx
}

// appendGroup appends s to a group that has room for size slices, carving
// the group out of backing on its first slice.
func appendGroup(group []*resourceapi.ResourceSlice, backing *[]*resourceapi.ResourceSlice, size int, s *resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	if group == nil {
		start := len(*backing)
		*backing = (*backing)[:start+size]
		group = (*backing)[start : start : start+size]
	}
	return append(group, s)
}

// poolSlices returns all slices of the pool with the given generation, in
// input order, or obsolete=true if the pool has a newer generation.
func (idx *sliceIndex) poolSlices(id poolID, generation int64) (obsolete bool, result []*resourceapi.ResourceSlice) {
	for _, s := range idx.byPool[id] {
		switch {
		case s.Spec.Pool.Generation == generation:
			result = append(result, s)
		case s.Spec.Pool.Generation > generation:
			return true, nil
		}
	}
	return false, result
}
