package capacity

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/minor"
	"github.com/drasched/drasched/pkg/allocator"
	"github.com/drasched/drasched/pkg/core"
)

// View is what Top lists.
type View string

// The views of Top.
const (
	ViewNodes   View = "nodes"
	ViewPools   View = "pools"
	ViewClasses View = "classes"
)

// Options say what Top counts and lists.
type Options struct {
	// View selects the rows: nodes (the default), pools or classes.
	View View
	// Selector keeps the nodes with these labels, and the devices and
	// pools of those nodes; nil keeps all.
	Selector labels.Selector
	// Node keeps one node, its devices and pools.
	Node string
	// Class keeps the devices that DeviceClass matches.
	Class string
	// PartitionAttribute names the attribute whose value is a partitionable
	// device's partition type where its slice names none: the
	// defaultPartitionTypeAttribute of a ResourcePoolStatusRequest, such as
	// gpu.drasched.dev/profile.
	PartitionAttribute string
	// TopologyAttributes group devices into topology groups, as the
	// profile's allocation.topologyAttributes do; the nodes view counts the
	// groups that are wholly free.
	TopologyAttributes []resourceapi.FullyQualifiedName
	// Features are the allocator's; nil means core.DefaultFeatures,
	// kube-scheduler's for this binary's feature gates.
	Features *structured.Features
	// Cache is the allocator cache for class selectors; nil means a new
	// one.
	Cache *allocator.Cache
}

// Counts are a set of devices by state (see the package doc).
type Counts struct {
	Total       int32 `json:"total"`
	Allocated   int32 `json:"allocated"`
	Available   int32 `json:"available"`
	Unavailable int32 `json:"unavailable"`
}

func counts(total, allocated, unavailable int32) Counts {
	return Counts{Total: total, Allocated: allocated, Unavailable: unavailable, Available: max(0, total-allocated-unavailable)}
}

func (c *Counts) add(o Counts) {
	c.Total += o.Total
	c.Allocated += o.Allocated
	c.Available += o.Available
	c.Unavailable += o.Unavailable
}

// CounterSets count the shared counter sets (for GPUs with MIG: one per
// GPU) by what allocated devices draw from them.
type CounterSets struct {
	Total int32 `json:"total"`
	// Free: nothing drawn (a whole GPU free). Partial: something drawn,
	// something left. Full: every counter drawn to zero.
	Free    int32 `json:"free"`
	Partial int32 `json:"partial"`
	Full    int32 `json:"full"`
}

// SharedDevice is a device that allows multiple allocations, with what its
// allocations consume.
type SharedDevice struct {
	Pool     string           `json:"pool"`
	Device   string           `json:"device"`
	Node     string           `json:"node,omitempty"`
	Capacity []SharedCapacity `json:"capacity,omitempty"`
}

// SharedCapacity is one capacity of a shared device.
type SharedCapacity struct {
	Name     string            `json:"name"`
	Total    resource.Quantity `json:"total"`
	Consumed resource.Quantity `json:"consumed"`
	Free     resource.Quantity `json:"free"`
}

// Topology is one level of topology groups on a node.
type Topology struct {
	Attribute resourceapi.FullyQualifiedName `json:"attribute"`
	// Groups counts the groups, Whole those in which no unit is in use.
	Groups int `json:"groups"`
	Whole  int `json:"whole"`
	// Units and Free count the units (GPUs) of the groups and the free
	// ones.
	Units int `json:"units"`
	Free  int `json:"free"`
	// Detail lists each group.
	Detail []allocator.TopologyGroup `json:"detail,omitempty"`
}

// Node is a node's devices.
type Node struct {
	Name  string   `json:"name"`
	Pools []string `json:"pools,omitempty"`
	Counts
	Partitions    []Partition    `json:"partitions,omitempty"`
	CounterSets   *CounterSets   `json:"counterSets,omitempty"`
	SharedDevices []SharedDevice `json:"sharedDevices,omitempty"`
	Topology      []Topology     `json:"topology,omitempty"`
	// Incomplete are the node's pools that are being published: their
	// devices are not counted.
	Incomplete []string `json:"incomplete,omitempty"`
}

// Pool is a resource pool.
type Pool struct {
	Name string `json:"name"`
	// Status is the pool's PoolStatus, exactly as the
	// ResourcePoolStatusRequest controller reports it (with Class set, of
	// the whole pool).
	Status minor.PoolStatus `json:"status"`
	// Counts are Status's counts, or with Class set those of the class's
	// devices; nil for an incomplete pool.
	Counts        *Counts        `json:"counts,omitempty"`
	Partitions    []Partition    `json:"partitions,omitempty"`
	CounterSets   *CounterSets   `json:"counterSets,omitempty"`
	SharedDevices []SharedDevice `json:"sharedDevices,omitempty"`
}

// Class is the devices a DeviceClass matches.
type Class struct {
	Name string `json:"name"`
	Counts
	Partitions    []Partition    `json:"partitions,omitempty"`
	SharedDevices []SharedDevice `json:"sharedDevices,omitempty"`
	// Errors are selector errors; the devices they occurred on do not
	// count as matching.
	Errors []string `json:"errors,omitempty"`
}

// Report is what Top found.
type Report struct {
	Nodes   []Node   `json:"nodes,omitempty"`
	Pools   []Pool   `json:"pools,omitempty"`
	Classes []Class  `json:"classes,omitempty"`
	Notes   []string `json:"notes,omitempty"`
}

// ErrNotFound marks a node or DeviceClass of the options that does not
// exist.
var ErrNotFound = errors.New("not found")

// Top counts the devices of the snapshot for the view of opts. When ctx
// ends first, it returns the context's error.
func Top(ctx context.Context, snap *Snapshot, opts Options) (*Report, error) {
	features := core.DefaultFeatures()
	if opts.Features != nil {
		features = *opts.Features
	}
	report := &Report{Notes: slices.Clone(snap.Notes)}
	nodes, err := selectNodes(snap.Nodes, opts)
	if err != nil {
		return nil, err
	}
	var class *resourceapi.DeviceClass
	if opts.Class != "" {
		if class, err = allocator.ClassList(snap.Classes).Get(opts.Class); err != nil {
			return nil, fmt.Errorf("DeviceClass %s: %w", opts.Class, ErrNotFound)
		}
	}
	all := pools(snap.Slices, snap.Claims, opts.PartitionAttribute)
	m := &matcher{cache: opts.Cache, features: minor.CELFeatures(features.ConsumableCapacity, minor.NewerFeaturesOf(features).ListTypeAttributes)}
	if m.cache == nil {
		m.cache = allocator.NewCache(0)
	}
	// keep: the device is on a selected node and of the class.
	nodeFilter := opts.Selector != nil && !opts.Selector.Empty() || opts.Node != ""
	inClass := func(*device) bool { return true }
	if class != nil {
		if inClass, err = m.matches(ctx, class, all); err != nil {
			return nil, err
		}
	}
	keep := func(d *device) bool { return (!nodeFilter || nodes.Has(d.node)) && inClass(d) }

	switch opts.View {
	case ViewPools:
		for _, p := range all {
			if nodeFilter && !slices.ContainsFunc(p.devices, func(d device) bool { return nodes.Has(d.node) }) {
				continue
			}
			row := Pool{Name: p.key.String(), Status: p.status()}
			if p.complete() {
				c := Counts{
					Total: ptr.Deref(row.Status.TotalDevices, 0), Allocated: ptr.Deref(row.Status.AllocatedDevices, 0),
					Available: ptr.Deref(row.Status.AvailableDevices, 0), Unavailable: ptr.Deref(row.Status.UnavailableDevices, 0),
				}
				var k func(*device) bool
				if class != nil || nodeFilter {
					k = keep
					c = tally([]*pool{p}, k)
					if c.Total == 0 {
						continue
					}
				}
				row.Counts = &c
				row.Partitions, _ = p.partitions(k, false)
				row.CounterSets = p.counterSets()
				row.SharedDevices = p.sharedDevices(k)
			}
			report.Pools = append(report.Pools, row)
		}
	case ViewClasses:
		for _, c := range snap.Classes {
			if class != nil && c.Name != class.Name {
				continue
			}
			row := Class{Name: c.Name}
			match, err := m.matches(ctx, c, all)
			if err != nil {
				return nil, err
			}
			k := func(d *device) bool { return (!nodeFilter || nodes.Has(d.node)) && match(d) }
			row.Counts = tally(all, k)
			for _, p := range all {
				if p.complete() {
					parts, _ := p.partitions(k, false)
					row.Partitions = mergePartitions(row.Partitions, parts)
					row.SharedDevices = append(row.SharedDevices, p.sharedDevices(k)...)
				}
			}
			row.Errors = m.takeErrors()
			report.Classes = append(report.Classes, row)
		}
		slices.SortFunc(report.Classes, func(a, b Class) int { return cmp.Compare(a.Name, b.Name) })
	default:
		report.Nodes, err = nodeRows(ctx, snap, all, nodes, keep, class, features, opts)
		if err != nil {
			return nil, err
		}
		unattached := 0
		for _, p := range all {
			for i := range p.devices {
				if p.devices[i].node == "" {
					unattached++
				}
			}
		}
		if unattached > 0 {
			report.Notes = append(report.Notes, fmt.Sprintf("%d devices are attached to no single node (pools with a node selector or for all nodes): see kubectl drasched top pools", unattached))
		}
	}
	if err := ctx.Err(); err != nil {
		// Whatever it stopped, the report may lack it.
		return nil, err
	}
	for _, p := range all {
		if !p.complete() {
			report.Notes = append(report.Notes, fmt.Sprintf("pool %s is incomplete (%d of %d slices of generation %d): its devices are not counted", p.key, len(p.slices), p.expected, p.generation))
		}
	}
	return report, nil
}

// selectNodes returns the names of the nodes the options keep.
func selectNodes(all []*v1.Node, opts Options) (sets.Set[string], error) {
	names := sets.New[string]()
	for _, n := range all {
		if opts.Node != "" && n.Name != opts.Node {
			continue
		}
		if opts.Selector != nil && !opts.Selector.Matches(labels.Set(n.Labels)) {
			continue
		}
		names.Insert(n.Name)
	}
	if opts.Node != "" && names.Len() == 0 && !slices.ContainsFunc(all, func(n *v1.Node) bool { return n.Name == opts.Node }) {
		return nil, fmt.Errorf("node %s: %w", opts.Node, ErrNotFound)
	}
	return names, nil
}

// tally counts the devices of complete pools that keep says yes to (all
// for nil keep).
func tally(ps []*pool, keep func(*device) bool) Counts {
	var total, allocated, unavailable int32
	for _, p := range ps {
		if !p.complete() {
			continue
		}
		for i := range p.devices {
			d := &p.devices[i]
			if keep != nil && !keep(d) {
				continue
			}
			total++
			if d.inUse {
				allocated++
			}
			if d.unavailable {
				unavailable++
			}
		}
	}
	return counts(total, allocated, unavailable)
}

// counterSets counts the pool's counter sets by what is drawn from them.
func (p *pool) counterSets() *CounterSets {
	if len(p.counters) == 0 || !p.complete() {
		return nil
	}
	left := p.countersLeft()
	cs := &CounterSets{}
	seen := sets.New[string]()
	for _, set := range p.counters {
		if seen.Has(set.Name) {
			continue
		}
		seen.Insert(set.Name)
		cs.Total++
		drawn, full := false, true
		for name, c := range set.Counters {
			have := left[set.Name][name]
			if have.Cmp(c.Value) < 0 {
				drawn = true
			}
			if have.Sign() > 0 {
				full = false
			}
		}
		switch {
		case !drawn:
			cs.Free++
		case full:
			cs.Full++
		default:
			cs.Partial++
		}
	}
	return cs
}

func (c *CounterSets) add(o *CounterSets) *CounterSets {
	if o == nil {
		return c
	}
	if c == nil {
		c = &CounterSets{}
	}
	c.Total += o.Total
	c.Free += o.Free
	c.Partial += o.Partial
	c.Full += o.Full
	return c
}

// sharedDevices lists the pool's devices that allow multiple allocations
// and keep says yes to (all for nil keep), with their capacity.
func (p *pool) sharedDevices(keep func(*device) bool) []SharedDevice {
	var out []SharedDevice
	for i := range p.devices {
		d := &p.devices[i]
		spec := d.spec()
		if !ptr.Deref(spec.AllowMultipleAllocations, false) || keep != nil && !keep(d) {
			continue
		}
		sd := SharedDevice{Pool: p.key.String(), Device: spec.Name, Node: d.node}
		names := make([]string, 0, len(spec.Capacity))
		for name := range spec.Capacity {
			names = append(names, string(name))
		}
		sort.Strings(names)
		for _, name := range names {
			total := spec.Capacity[resourceapi.QualifiedName(name)].Value
			consumed := d.consumed[resourceapi.QualifiedName(name)].DeepCopy()
			sd.Capacity = append(sd.Capacity, SharedCapacity{Name: name, Total: total.DeepCopy(), Consumed: consumed, Free: difference(total, consumed)})
		}
		out = append(out, sd)
	}
	return out
}

// mergePartitions adds partitions of the same attribute and type.
func mergePartitions(to, from []Partition) []Partition {
	for _, p := range from {
		i := slices.IndexFunc(to, func(q Partition) bool { return q.Attribute == p.Attribute && q.Type == p.Type })
		if i < 0 {
			to = append(to, p)
			continue
		}
		to[i].Total += p.Total
		to[i].Free += p.Free
	}
	slices.SortFunc(to, func(a, b Partition) int {
		return cmp.Or(cmp.Compare(a.Attribute, b.Attribute), cmp.Compare(a.Type, b.Type))
	})
	return to
}

// nodeRows counts per node.
func nodeRows(ctx context.Context, snap *Snapshot, all []*pool, names sets.Set[string], keep func(*device) bool, class *resourceapi.DeviceClass,
	features structured.Features, opts Options) ([]Node, error) {
	byName := map[string]*Node{}
	row := func(name string) *Node {
		n := byName[name]
		if n == nil {
			n = &Node{Name: name}
			byName[name] = n
		}
		return n
	}
	for _, p := range all {
		var poolNodes []string
		for i := range p.devices {
			if d := &p.devices[i]; d.node != "" && names.Has(d.node) && !slices.Contains(poolNodes, d.node) {
				poolNodes = append(poolNodes, d.node)
			}
		}
		for _, name := range poolNodes {
			n := row(name)
			n.Pools = append(n.Pools, p.key.String())
			if !p.complete() {
				n.Incomplete = append(n.Incomplete, p.key.String())
				continue
			}
			onNode := func(d *device) bool { return d.node == name && keep(d) }
			c := tally([]*pool{p}, onNode)
			if p.nodeName == name && class == nil {
				// As in the pool's status: the node's allocated devices
				// include those claims hold that left the slices.
				c = counts(c.Total, c.Allocated+p.departed(), c.Unavailable)
			}
			n.Counts.add(c)
			parts, _ := p.partitions(onNode, false)
			n.Partitions = mergePartitions(n.Partitions, parts)
			if p.nodeName == name {
				n.CounterSets = n.CounterSets.add(p.counterSets())
			}
			n.SharedDevices = append(n.SharedDevices, p.sharedDevices(onNode)...)
		}
	}
	// Only a node that was asked for by name is listed without devices.
	if opts.Node != "" && names.Has(opts.Node) {
		row(opts.Node)
	}
	if len(opts.TopologyAttributes) > 0 && len(byName) > 0 {
		if err := topology(ctx, snap, byName, features, opts); err != nil {
			return nil, err
		}
	}
	rows := make([]Node, 0, len(byName))
	for _, n := range byName {
		rows = append(rows, *n)
	}
	slices.SortFunc(rows, func(a, b Node) int { return cmp.Compare(a.Name, b.Name) })
	return rows, nil
}

// topology adds the topology groups of each node, as the allocator forms
// them.
func topology(ctx context.Context, snap *Snapshot, rows map[string]*Node, features structured.Features, opts Options) error {
	state := core.NewAllocatedState()
	for _, c := range snap.Claims {
		core.AddAllocation(&state, c.Status.Allocation, features.ConsumableCapacity)
	}
	a, err := allocator.New(ctx, features, state, allocator.ClassList(snap.Classes), snap.Slices,
		allocator.Options{Cache: opts.Cache, TopologyAttributes: opts.TopologyAttributes})
	if err != nil {
		return fmt.Errorf("allocator: %w", err)
	}
	for _, node := range snap.Nodes {
		n := rows[node.Name]
		if n == nil {
			continue
		}
		groups, err := a.TopologyGroups(node)
		if err != nil {
			// A node whose pools the allocator cannot use (invalid,
			// being updated) has no groups to show.
			continue
		}
		for _, g := range groups {
			i := slices.IndexFunc(n.Topology, func(t Topology) bool { return t.Attribute == g.Attribute })
			if i < 0 {
				n.Topology = append(n.Topology, Topology{Attribute: g.Attribute})
				i = len(n.Topology) - 1
			}
			t := &n.Topology[i]
			t.Groups++
			t.Units += g.Units
			t.Free += g.Free
			if g.Free == g.Units && g.Units > 0 {
				t.Whole++
			}
			t.Detail = append(t.Detail, g)
		}
	}
	return nil
}

// matcher tells whether a class matches a device, with the allocator's
// cached CEL evaluation. Its methods are safe for concurrent use.
type matcher struct {
	cache    *allocator.Cache
	features cel.Features
	// mutex guards errs, the first selector errors.
	mutex sync.Mutex
	errs  []string
}

func (m *matcher) match(ctx context.Context, class *resourceapi.DeviceClass, d *device) bool {
	for _, sel := range class.Spec.Selectors {
		if sel.CEL == nil {
			continue
		}
		ok, err := m.cache.Matches(ctx, m.features, d.slice, d.index, sel.CEL.Expression)
		if err != nil {
			if ctx.Err() != nil {
				// Interrupted: says nothing about the selector, and
				// matches returns the context's error.
				return false
			}
			m.mutex.Lock()
			if len(m.errs) < 5 {
				m.errs = append(m.errs, fmt.Sprintf("device %s: %v", d.id(), err))
			}
			m.mutex.Unlock()
			return false
		}
		if !ok {
			return false
		}
	}
	return true
}

// matches evaluates the class on every device of the pools, pool by pool
// on all CPUs (CEL is most of what the classes view costs), and returns
// the answer for a device of them. When ctx ends first it returns the
// context's error: the pools it did not get to have no answers, and a
// selector that takes long to evaluate is interrupted.
func (m *matcher) matches(ctx context.Context, class *resourceapi.DeviceClass, all []*pool) (func(*device) bool, error) {
	results := make([][]bool, len(all))
	workqueue.ParallelizeUntil(ctx, runtime.GOMAXPROCS(0), len(all), func(i int) {
		p := all[i]
		r := make([]bool, len(p.devices))
		for j := range p.devices {
			if ctx.Err() != nil {
				return
			}
			r[j] = m.match(ctx, class, &p.devices[j])
		}
		results[i] = r
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return func(d *device) bool { return results[d.pool][d.seq] }, nil
}

// takeErrors returns the selector errors so far and forgets them.
func (m *matcher) takeErrors() []string {
	m.mutex.Lock()
	defer m.mutex.Unlock()
	errs := m.errs
	m.errs = nil
	return errs
}
