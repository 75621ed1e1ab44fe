package capacity

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/minor"
	"github.com/drasched/drasched/pkg/allocator"
	"github.com/drasched/drasched/pkg/core"
)

// The machine-readable prefixes of PoolStatus.validationError, and the
// limit of the status lists, as the API defines them for
// ResourcePoolStatusRequest (KEP-5677).
const (
	prefixPoolIncomplete          = "PoolIncomplete:"
	prefixPartitionTypeMissing    = "PartitionTypeMissing:"
	prefixPartitionCostMismatch   = "PartitionCostMismatch:"
	prefixPartitionSummaryOverCap = "PartitionSummaryOverCap:"
	prefixShareableOverCap        = "ShareableSummaryOverCap:"
	maxStatusListItems            = 32
	maxValidationErrorBytes       = 256
)

// poolKey names a pool.
type poolKey struct{ driver, pool string }

func (k poolKey) String() string { return k.driver + "/" + k.pool }

// pool is one pool's slices of the newest generation and what claims take
// of it.
type pool struct {
	key        poolKey
	generation int64
	// slices are the newest generation's, by name.
	slices []*resourceapi.ResourceSlice
	// expected is the resourceSliceCount of the first slice.
	expected int64
	// nodeName is the slices' node; "" if they name none or different ones.
	nodeName string
	devices  []device
	counters []resourceapi.CounterSet
	// declares: a slice of the pool declares a partitionTypeAttribute.
	declares bool
	// inUse are the device names allocated claims name in the pool;
	// consumed the capacity they consume of its devices.
	inUse    sets.Set[string]
	consumed map[resourceapi.QualifiedName]resource.Quantity
}

func (p *pool) complete() bool { return int64(len(p.slices)) >= p.expected }

// departed counts the devices that claims hold in the pool but its slices
// no longer have: it was republished without them.
func (p *pool) departed() int32 {
	names := sets.New[string]()
	for i := range p.devices {
		names.Insert(p.devices[i].spec().Name)
	}
	return int32(p.inUse.Difference(names).Len())
}

// device is one device of a pool.
type device struct {
	slice *resourceapi.ResourceSlice
	index int
	// pool and seq are the device's pool's index in the list of pools
	// and its own in the pool's devices.
	pool, seq int
	// node is the node the device is attached to: its slice's, or its own
	// under perDeviceNodeSelection; "" for devices of several nodes.
	node string
	// partitionAttr is the attribute the device's partition type is read
	// from, "" for none; partitionType its value.
	partitionAttr string
	partitionType string
	hasType       bool
	inUse         bool
	unavailable   bool
	// consumed is the capacity the allocations on a shared device consume.
	consumed map[resourceapi.QualifiedName]resource.Quantity
}

func (d *device) spec() *resourceapi.Device { return &d.slice.Spec.Devices[d.index] }

func (d *device) id() structured.DeviceID {
	return structured.MakeDeviceID(d.slice.Spec.Driver, d.slice.Spec.Pool.Name, d.spec().Name)
}

// pools groups the slices into pools and counts what the claims take.
// defaultAttr is the partition type attribute for pools whose slices
// declare none.
func pools(resourceSlices []*resourceapi.ResourceSlice, claims []*resourceapi.ResourceClaim, defaultAttr string) []*pool {
	newest := core.NewestPools(resourceSlices)
	byKey := make(map[poolKey]*pool, len(newest))
	for id, np := range newest {
		k := poolKey{id.Driver, id.Pool}
		byKey[k] = &pool{key: k, generation: np.Generation, inUse: sets.New[string](), slices: np.Slices}
	}
	list := make([]*pool, 0, len(byKey))
	for _, p := range byKey {
		slices.SortFunc(p.slices, func(a, b *resourceapi.ResourceSlice) int { return cmp.Compare(a.Name, b.Name) })
		p.expected = p.slices[0].Spec.Pool.ResourceSliceCount
		p.nodeName = ptr.Deref(p.slices[0].Spec.NodeName, "")
		for _, s := range p.slices {
			if ptr.Deref(s.Spec.NodeName, "") != p.nodeName {
				p.nodeName = ""
			}
			p.declares = p.declares || minor.PartitionTypeAttribute(&s.Spec) != nil
		}
		list = append(list, p)
	}
	slices.SortFunc(list, func(a, b *pool) int {
		return cmp.Or(cmp.Compare(a.key.driver, b.key.driver), cmp.Compare(a.key.pool, b.key.pool))
	})

	perDevice := map[structured.DeviceID]map[resourceapi.QualifiedName]resource.Quantity{}
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			// Admin access observes a device; it does not take it.
			if ptr.Deref(r.AdminAccess, false) {
				continue
			}
			p := byKey[poolKey{r.Driver, r.Pool}]
			if p == nil {
				continue
			}
			p.inUse.Insert(r.Device)
			if len(r.ConsumedCapacity) == 0 {
				continue
			}
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			for name, q := range r.ConsumedCapacity {
				p.consumed = addQuantity(p.consumed, name, q)
				perDevice[id] = addQuantity(perDevice[id], name, q)
			}
		}
	}

	for pi, p := range list {
		for _, s := range p.slices {
			p.counters = append(p.counters, s.Spec.SharedCounters...)
			// A slice's own attribute wins; the default applies only to
			// pools in which no slice declares one.
			attr := string(ptr.Deref(minor.PartitionTypeAttribute(&s.Spec), ""))
			if attr == "" && !p.declares {
				attr = defaultAttr
			}
			for i := range s.Spec.Devices {
				spec := &s.Spec.Devices[i]
				d := device{
					slice:         s,
					index:         i,
					pool:          pi,
					seq:           len(p.devices),
					node:          ptr.Deref(s.Spec.NodeName, ""),
					partitionAttr: attr,
					inUse:         p.inUse.Has(spec.Name),
					unavailable:   allocator.Unavailable(spec),
				}
				if d.node == "" {
					d.node = ptr.Deref(spec.NodeName, "")
				}
				if attr != "" {
					d.partitionType, d.hasType = partitionType(s.Spec.Driver, spec, attr)
				}
				if len(perDevice) > 0 {
					d.consumed = perDevice[d.id()]
				}
				p.devices = append(p.devices, d)
			}
		}
	}
	return list
}

// partitionType reads a device's partition type: a string attribute,
// named by its fully qualified name or, in the driver's own domain, by the
// bare name, as CEL selectors name it (the fully qualified name first).
func partitionType(driver string, d *resourceapi.Device, attr string) (string, bool) {
	a, ok := d.Attributes[resourceapi.QualifiedName(attr)]
	if !ok {
		if bare, found := strings.CutPrefix(attr, driver+"/"); found {
			a, ok = d.Attributes[resourceapi.QualifiedName(bare)]
		}
	}
	if !ok || a.StringValue == nil {
		return "", false
	}
	return *a.StringValue, true
}

func addQuantity(m map[resourceapi.QualifiedName]resource.Quantity, name resourceapi.QualifiedName, q resource.Quantity) map[resourceapi.QualifiedName]resource.Quantity {
	if m == nil {
		m = map[resourceapi.QualifiedName]resource.Quantity{}
	}
	sum := m[name].DeepCopy()
	sum.Add(q)
	m[name] = sum
	return m
}

// status is the pool's PoolStatus as KEP-5677 defines it.
func (p *pool) status() minor.PoolStatus {
	st := minor.PoolStatus{Driver: p.key.driver, PoolName: p.key.pool, Generation: p.generation}
	if p.nodeName != "" {
		st.NodeName = ptr.To(p.nodeName)
	}
	if !p.complete() {
		st.ValidationError = ptr.To(truncate(fmt.Sprintf("%s pool %s is incomplete: observed %d/%d slices at generation %d",
			prefixPoolIncomplete, p.key, len(p.slices), p.expected, p.generation)))
		return st
	}
	var unavailable int32
	for i := range p.devices {
		if p.devices[i].unavailable {
			unavailable++
		}
	}
	c := counts(int32(len(p.devices)), int32(p.inUse.Len()), unavailable)
	st.ResourceSliceCount = ptr.To(int32(len(p.slices)))
	st.TotalDevices, st.AllocatedDevices = ptr.To(c.Total), ptr.To(c.Allocated)
	st.AvailableDevices, st.UnavailableDevices = ptr.To(c.Available), ptr.To(c.Unavailable)

	if !minor.PoolStatusSummaries {
		// The minor's pool status has no summaries, and its controller
		// checks nothing that only they need.
		return st
	}
	var verr string
	var summary []minor.PartitionTypeStatus
	grouped := slices.ContainsFunc(p.devices, func(d device) bool { return d.partitionAttr != "" })
	switch {
	case grouped && len(p.counters) == 0:
		verr = fmt.Sprintf("%s pool %s declares partitionTypeAttribute but publishes no sharedCounters", prefixPartitionTypeMissing, p.key)
	case grouped:
		var partitions []Partition
		partitions, verr = p.partitions(nil, true)
		for _, part := range partitions {
			summary = append(summary, minor.PartitionTypeStatus{
				Attribute: part.Attribute, Type: part.Type, Total: ptr.To(part.Total), Allocatable: ptr.To(part.Free),
			})
		}
	}
	shareable, shareErr := p.shareable(nil)
	if shareErr != "" {
		shareable = nil
	}
	if verr == "" {
		verr = shareErr
	}
	if verr != "" {
		summary = nil
		st.ValidationError = ptr.To(truncate(verr))
	}
	minor.SetPoolSummaries(&st, summary, shareable)
	return st
}

func truncate(s string) string {
	if len(s) > maxValidationErrorBytes {
		return s[:maxValidationErrorBytes]
	}
	return s
}

// Partition is one partition type: how many devices of it there are, and
// how many more of them the shared counters allow, the type on its own.
type Partition struct {
	// Attribute names the partition type; Type is its value.
	Attribute string `json:"attribute"`
	Type      string `json:"type"`
	Total     int32  `json:"total"`
	// Free is how many more devices of the type could be allocated now:
	// the devices not allocated whose counters are left after what the
	// allocated devices draw, taken one after another (KEP-5677's
	// allocatable). Taints do not count here; Counts.Unavailable does.
	Free int32 `json:"free"`
}

// partitions computes the partition types of the pool's devices that
// consume counters and have a partition type (those for which keep says
// yes; all for nil keep). strict asks what the controller asks: every
// device with a partition attribute has the type, and the devices of a
// type draw the same counters; otherwise it returns a validation error.
// Without strict, devices without a type are left out and the types of
// devices that draw different counters (MIG placements) are counted too.
func (p *pool) partitions(keep func(*device) bool, strict bool) ([]Partition, string) {
	type key struct{ attr, typ string }
	type group struct {
		total int32
		fresh []*device
		cost  string
	}
	groups := map[key]*group{}
	var keys []key
	for i := range p.devices {
		d := &p.devices[i]
		if len(d.spec().ConsumesCounters) == 0 || d.partitionAttr == "" || keep != nil && !keep(d) {
			continue
		}
		if !d.hasType {
			if strict {
				return nil, fmt.Sprintf("%s device %q in pool %s does not carry partition type attribute %q",
					prefixPartitionTypeMissing, d.spec().Name, p.key, d.partitionAttr)
			}
			continue
		}
		k := key{d.partitionAttr, d.partitionType}
		g := groups[k]
		cost := costKey(d.spec().ConsumesCounters)
		if g == nil {
			g = &group{cost: cost}
			groups[k] = g
			keys = append(keys, k)
		} else if strict && cost != g.cost {
			return nil, fmt.Sprintf("%s devices of partition type %q in pool %s consume different counters",
				prefixPartitionCostMismatch, d.partitionType, p.key)
		}
		g.total++
		if !d.inUse {
			g.fresh = append(g.fresh, d)
		}
	}
	slices.SortFunc(keys, func(a, b key) int { return cmp.Or(cmp.Compare(a.attr, b.attr), cmp.Compare(a.typ, b.typ)) })
	if strict && len(keys) > maxStatusListItems {
		return nil, fmt.Sprintf("%s pool %s has %d partition types, exceeding the maximum of %d",
			prefixPartitionSummaryOverCap, p.key, len(keys), maxStatusListItems)
	}
	left := p.countersLeft()
	out := make([]Partition, 0, len(keys))
	for _, k := range keys {
		g := groups[k]
		avail := cloneCounters(left)
		var free int32
		for _, d := range g.fresh {
			if drawCounters(d.spec().ConsumesCounters, avail) {
				free++
			}
		}
		out = append(out, Partition{Attribute: k.attr, Type: k.typ, Total: g.total, Free: free})
	}
	return out, ""
}

// costKey identifies what a device draws from shared counters.
func costKey(cost []resourceapi.DeviceCounterConsumption) string {
	var parts []string
	for _, cc := range cost {
		for name, c := range cc.Counters {
			parts = append(parts, cc.CounterSet+"/"+name+"="+c.Value.String())
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// counters is what is left of shared counters: [set][counter].
type counters map[string]map[string]resource.Quantity

// countersLeft returns the pool's shared counters minus what its
// allocated devices draw, once per device, as the scheduler counts them.
func (p *pool) countersLeft() counters {
	left := counters{}
	for _, cs := range p.counters {
		m := left[cs.Name]
		if m == nil {
			m = map[string]resource.Quantity{}
			left[cs.Name] = m
		}
		for name, c := range cs.Counters {
			m[name] = c.Value.DeepCopy()
		}
	}
	for i := range p.devices {
		if d := &p.devices[i]; d.inUse {
			deduct(d.spec().ConsumesCounters, left)
		}
	}
	return left
}

// drawCounters takes what a device draws from avail if all of it is
// there, and reports whether it was.
func drawCounters(cost []resourceapi.DeviceCounterConsumption, avail counters) bool {
	for _, cc := range cost {
		set := avail[cc.CounterSet]
		for name, c := range cc.Counters {
			have, ok := set[name]
			if !ok || have.Cmp(c.Value) < 0 {
				return false
			}
		}
	}
	deduct(cost, avail)
	return true
}

func deduct(cost []resourceapi.DeviceCounterConsumption, avail counters) {
	for _, cc := range cost {
		set := avail[cc.CounterSet]
		if set == nil {
			continue
		}
		for name, c := range cc.Counters {
			if have, ok := set[name]; ok {
				have.Sub(c.Value)
				set[name] = have
			}
		}
	}
}

func cloneCounters(c counters) counters {
	out := make(counters, len(c))
	for set, m := range c {
		cm := make(map[string]resource.Quantity, len(m))
		for name, q := range m {
			cm[name] = q.DeepCopy()
		}
		out[set] = cm
	}
	return out
}

// shareable is KEP-5677's shareable summary of the pool's devices that
// allow multiple allocations (those keep says yes to; all for nil keep),
// nil if it has none, or a validation error.
func (p *pool) shareable(keep func(*device) bool) (*minor.ShareableSummaryStatus, string) {
	var full, partial int32
	total := map[resourceapi.QualifiedName]resource.Quantity{}
	consumed := p.consumed
	if keep != nil {
		consumed = nil
	}
	found := false
	for i := range p.devices {
		d := &p.devices[i]
		if !ptr.Deref(d.spec().AllowMultipleAllocations, false) || keep != nil && !keep(d) {
			continue
		}
		found = true
		if d.inUse {
			partial++
		} else {
			full++
		}
		for name, c := range d.spec().Capacity {
			total = addQuantity(total, name, c.Value)
		}
		if keep != nil {
			for name, q := range d.consumed {
				consumed = addQuantity(consumed, name, q)
			}
		}
	}
	if !found {
		return nil, ""
	}
	names := slices.Sorted(func(yield func(resourceapi.QualifiedName) bool) {
		for name := range total {
			if !yield(name) {
				return
			}
		}
	})
	if len(names) > maxStatusListItems {
		return nil, fmt.Sprintf("%s pool %s has %d shareable capacity keys, exceeding the maximum of %d",
			prefixShareableOverCap, p.key, len(names), maxStatusListItems)
	}
	summary := &minor.ShareableSummaryStatus{FullyAvailableDevices: ptr.To(full), PartiallyAvailableDevices: ptr.To(partial)}
	for _, name := range names {
		t := total[name]
		c := consumed[name].DeepCopy()
		free := difference(t, c)
		summary.Capacity = append(summary.Capacity, minor.ShareableCapacityStatus{Name: string(name), Total: &t, Consumed: &c, Available: &free})
	}
	return summary, ""
}

// difference is a − b, at least 0, in a's format.
func difference(a, b resource.Quantity) resource.Quantity {
	d := a.DeepCopy()
	d.Sub(b)
	if d.Sign() < 0 {
		return *resource.NewQuantity(0, a.Format)
	}
	return d
}
