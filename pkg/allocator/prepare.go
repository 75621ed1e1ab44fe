package allocator

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	draapi "k8s.io/dynamic-resource-allocation/api"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/minor"
)

// preparedSlice is the node-independent, immutable preprocessing of one
// ResourceSlice object. It is computed once per object and shared by all
// nodes and cycles that see the object.
type preparedSlice struct {
	slice *resourceapi.ResourceSlice

	driver, pool draapi.UniqueString
	// ids[i] identifies Spec.Devices[i] the way upstream's allocator does.
	ids []structured.DeviceID

	perDeviceNodeSelection  bool
	usesCompatibilityGroups bool
	hasSharedCounters       bool
	// hasBindingConditionsField: some device has a non-nil BindingConditions
	// (upstream orders such pools last).
	hasBindingConditionsField bool
	// duplicateName is a device name that occurs twice in this slice, if any.
	duplicateName string

	// matches holds CEL results for this slice's content. Set by the cache.
	matches *matchTable

	// Node selectors are parsed once, lazily: parsing is node-independent,
	// matching is not.
	sliceSelectorOnce sync.Once
	sliceSelector     *nodeaffinity.NodeSelector
	sliceSelectorErr  error
	// deviceSelectors[i] is Spec.Devices[i]'s parsed node selector; nil
	// unless the slice selects nodes per device, which few do: every
	// cached slice would pay for it.
	deviceSelectors []lazySelector

	// Equivalence classes are computed lazily, only when the search needs
	// them (after a failure).
	classesOnce sync.Once
	classes     []deviceClassKey

	// capacities caches what requests consume of each device, per
	// capacityKey (see capacityEval).
	capacities readMostlyMap[capacityKey, []atomic.Pointer[capacityEval]]

	// attrs caches constraint attribute lookups: per fully qualified name,
	// the attribute of each device (nil if it has none).
	attrs readMostlyMap[resourceapi.FullyQualifiedName, []*resourceapi.DeviceAttribute]

	// traps caches sliceTrapFree per requestData.trapKey and features.
	traps readMostlyMap[trapCacheKey, bool]
}

// attribute returns device i's attribute with the fully qualified name.
func (ps *preparedSlice) attribute(i int, name resourceapi.FullyQualifiedName) *resourceapi.DeviceAttribute {
	values, ok := ps.attrs.load(name)
	if !ok {
		// Every attribute name a constraint uses is stored; there is no
		// limit to enforce.
		values = ps.attrs.loadOrStore(name, math.MaxInt, func() []*resourceapi.DeviceAttribute {
			values := make([]*resourceapi.DeviceAttribute, len(ps.slice.Spec.Devices))
			for d := range ps.slice.Spec.Devices {
				values[d] = staticAttribute(&ps.slice.Spec.Devices[d], ps.slice.Spec.Driver, name)
			}
			return values
		})
	}
	return values[i]
}

// capacityKey identifies what a request asks of capacity: its
// requirements (requestData.capacityID, 0 for none) and whether fractional
// capacity ranges are on. It is one integer, which maps hash fastest: the
// search looks evaluations up for every candidate it checks.
type capacityKey uint64

func makeCapacityKey(request int64, fractional bool) capacityKey {
	key := capacityKey(request) << 1
	if fractional {
		key |= 1
	}
	return key
}

func (k capacityKey) fractional() bool { return k&1 != 0 }

// maxCapacityKeysPerSlice bounds the capacity requirements whose
// evaluations a slice keeps.
const maxCapacityKeysPerSlice = 64

// capacityEval returns what a request with the given capacity requirements
// consumes of device i. Only the device and the requirements decide that,
// so it is evaluated once per slice version and requirements, like CEL
// results, and shared by all nodes, searches and cycles; before, every
// search evaluated it again, which was a fifth of the time of a node with
// shared devices.
func (ps *preparedSlice) capacityEval(i int, key capacityKey, request *resourceapi.CapacityRequirements) *capacityEval {
	evals, ok := ps.capacities.load(key)
	if !ok {
		evals = ps.capacities.loadOrStore(key, maxCapacityKeysPerSlice, func() []atomic.Pointer[capacityEval] {
			return make([]atomic.Pointer[capacityEval], len(ps.slice.Spec.Devices))
		})
	}
	if e := evals[i].Load(); e != nil {
		return e
	}
	// Concurrent searches may evaluate twice; both results are equal.
	capacity := ps.slice.Spec.Devices[i].Capacity
	e := evaluateCapacity(request, capacity, key.fractional())
	e.fitsUnused, _ = e.fits(capacity, nil, nil)
	evals[i].Store(&e)
	return &e
}

type lazySelector struct {
	once     sync.Once
	selector *nodeaffinity.NodeSelector
	err      error
}

// deviceClassKey identifies devices that no check of the allocator can tell
// apart except through their attributes: same driver, pool and content
// except the name and the attributes. It is a SHA-256 over a canonical
// encoding, truncated to 128 bits. The search adds what the claims see of
// the attributes (searchClass): every GPU carries attributes of its own (an
// index, a UUID, a PCI address) that no claim may look at.
type deviceClassKey [16]byte

func prepareSlice(s *resourceapi.ResourceSlice) *preparedSlice {
	ps := &preparedSlice{
		slice:                  s,
		driver:                 uniqueString(s.Spec.Driver),
		pool:                   uniqueString(s.Spec.Pool.Name),
		perDeviceNodeSelection: ptr.Deref(s.Spec.PerDeviceNodeSelection, false),
		hasSharedCounters:      len(s.Spec.SharedCounters) > 0,
		ids:                    make([]structured.DeviceID, len(s.Spec.Devices)),
	}
	if ps.perDeviceNodeSelection {
		ps.deviceSelectors = make([]lazySelector, len(s.Spec.Devices))
	}
	seen := make(map[string]struct{}, len(s.Spec.Devices))
	for i := range s.Spec.Devices {
		device := &s.Spec.Devices[i]
		ps.ids[i] = structured.DeviceID{Driver: ps.driver, Pool: ps.pool, Device: uniqueString(device.Name)}
		if device.BindingConditions != nil {
			ps.hasBindingConditionsField = true
		}
		for _, consumption := range device.ConsumesCounters {
			if len(minor.CompatibilityGroups(&consumption)) > 0 {
				ps.usesCompatibilityGroups = true
			}
		}
		if _, dup := seen[device.Name]; dup && ps.duplicateName == "" {
			ps.duplicateName = device.Name
		}
		seen[device.Name] = struct{}{}
	}
	return ps
}

// celDevice is the CEL input for device i. It is built for each
// evaluation instead of kept: it only copies references out of the
// device, and a cache miss is rare, while a copy per device of every
// cached slice would be held for as long as the slice.
func (ps *preparedSlice) celDevice(i int) cel.Device {
	device := &ps.slice.Spec.Devices[i]
	return cel.Device{
		Driver:                   ps.slice.Spec.Driver,
		AllowMultipleAllocations: device.AllowMultipleAllocations,
		Attributes:               device.Attributes,
		Capacity:                 device.Capacity,
	}
}

// uniqueString converts like upstream's v1 → internal conversion: the empty
// string becomes the null UniqueString.
func uniqueString(s string) draapi.UniqueString {
	if s == "" {
		return draapi.NullUniqueString
	}
	return draapi.MakeUniqueString(s)
}

// matchesNode reports whether a slice with node selection fields applies to
// the node, with upstream's precedence: node name, all nodes, node selector.
func (ps *preparedSlice) matchesNode(node *v1.Node) (bool, error) {
	spec := &ps.slice.Spec
	switch {
	case ptr.Deref(spec.NodeName, "") != "":
		return node != nil && node.Name == *spec.NodeName, nil
	case ptr.Deref(spec.AllNodes, false):
		return true, nil
	case spec.NodeSelector != nil:
		ps.sliceSelectorOnce.Do(func() {
			ps.sliceSelector, ps.sliceSelectorErr = parseNodeSelector(spec.NodeSelector)
		})
		if ps.sliceSelectorErr != nil {
			return false, ps.sliceSelectorErr
		}
		return ps.sliceSelector.Match(node), nil
	}
	return false, nil
}

// deviceMatchesNode is matchesNode for the per-device node selection fields
// of device i.
func (ps *preparedSlice) deviceMatchesNode(i int, node *v1.Node) (bool, error) {
	device := &ps.slice.Spec.Devices[i]
	switch {
	case ptr.Deref(device.NodeName, "") != "":
		return node != nil && node.Name == *device.NodeName, nil
	case ptr.Deref(device.AllNodes, false):
		return true, nil
	case device.NodeSelector != nil:
		lazy := &ps.deviceSelectors[i]
		lazy.once.Do(func() {
			lazy.selector, lazy.err = parseNodeSelector(device.NodeSelector)
		})
		if lazy.err != nil {
			return false, lazy.err
		}
		return lazy.selector.Match(node), nil
	}
	return false, nil
}

func parseNodeSelector(selector *v1.NodeSelector) (*nodeaffinity.NodeSelector, error) {
	parsed, err := nodeaffinity.NewNodeSelector(selector)
	if err != nil {
		// Upstream's wording, which callers wrap further.
		return nil, fmt.Errorf("failed to parse node selector %s: %w", selector.String(), err)
	}
	return parsed, nil
}

// deviceClasses returns the equivalence class of every device in the slice.
func (ps *preparedSlice) deviceClasses() []deviceClassKey {
	ps.classesOnce.Do(func() {
		ps.classes = make([]deviceClassKey, len(ps.slice.Spec.Devices))
		for i := range ps.slice.Spec.Devices {
			ps.classes[i] = classKeyOf(ps.slice, i)
		}
	})
	return ps.classes
}

// classKeyOf hashes everything that any allocator check can read about
// device i, except the attributes: the device without its name and
// attributes, the driver and pool (counters and attribute lookups are per
// pool and driver), and the slice-level fields that influence whether a
// device can be used.
func classKeyOf(s *resourceapi.ResourceSlice, i int) deviceClassKey {
	device := s.Spec.Devices[i]
	device.Name = ""
	device.Attributes = nil
	canonical := struct {
		Driver                 string
		Pool                   string
		PerDeviceNodeSelection *bool
		SkipNodeOperations     []minor.SkipNodeOperation
		Device                 resourceapi.Device
	}{
		Driver:                 s.Spec.Driver,
		Pool:                   s.Spec.Pool.Name,
		PerDeviceNodeSelection: s.Spec.PerDeviceNodeSelection,
		SkipNodeOperations:     minor.SkipNodeOperations(&s.Spec),
		Device:                 device,
	}
	// encoding/json sorts map keys, so equal content encodes equally.
	data, err := json.Marshal(canonical)
	if err != nil {
		// Not expected for API types. A unique key keeps the device in a
		// class of its own, which only disables symmetry pruning for it.
		data = fmt.Appendf(nil, "unencodable %p %d", s, i)
	}
	sum := sha256.Sum256(data)
	var key deviceClassKey
	copy(key[:], sum[:16])
	return key
}
