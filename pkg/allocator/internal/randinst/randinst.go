// Package randinst generates random allocation problems for differential
// testing of pkg/allocator against upstream's allocator.
//
// An instance is small (a few pools, a dozen devices, a few claims) so that
// exhaustive searches stay cheap, but it draws on every input the allocator
// understands: pools spread over several slices and generations, incomplete
// and invalid pools, node selection of every kind, taints, binding
// conditions, partitionable devices with shared counters and compatibility
// groups, consumable capacity with request policies, list attributes,
// already allocated devices; claims with exact counts, "All", subrequests,
// admin access, selectors (including ones that fail at runtime or do not
// compile), constraints, derived attributes, tolerations and configs. Some
// instances are shared-GPU problems: interchangeable GPUs that allow
// multiple allocations, memory that earlier claims consume already, and
// requests for several shares each that compete for what is left. The
// same seed always yields the same instance.
package randinst

import (
	"fmt"
	"math/rand/v2"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/minor"
)

// Instance is one allocation problem.
type Instance struct {
	Seed     uint64
	Features structured.Features
	Node     *v1.Node
	Classes  []*resourceapi.DeviceClass
	Slices   []*resourceapi.ResourceSlice
	Claims   []*resourceapi.ResourceClaim
	State    structured.AllocatedState
	// SharedGPUs: the instance is a shared-GPU problem (see sharedGPUs).
	SharedGPUs bool
}

var (
	drivers   = []string{"a.example.com", "b.example.com"}
	nodeNames = []string{"node-0", "node-1", "node-2"}
	models    = []string{"x", "y", "z"}
	roots     = []string{"pci0", "pci1", "pci2"}
)

// mode says how well-formed an instance is.
type mode int

const (
	// clean instances are valid API objects using only enabled features,
	// with selectors that never fail: they exercise the search.
	clean mode = iota
	// traps: like clean, but selectors and derived attributes may fail on
	// some devices, so whether an error surfaces depends on search order.
	traps
	// adversarial instances may contain any bad input.
	adversarial
)

type gen struct {
	mode     mode
	r        *rand.Rand
	features structured.Features
	newer    minor.NewerFeatures
	inst     *Instance
	// devices lists every generated device, for allocated state.
	devices []generatedDevice
	// multi lists devices that allow multiple allocations.
	multi []generatedDevice
}

type generatedDevice struct {
	driver, pool, name string
	capacity           map[resourceapi.QualifiedName]resourceapi.DeviceCapacity
}

func (g *gen) chance(p float64) bool { return g.r.Float64() < p }

// weighted returns 1..len(weights), each with the given relative weight.
func (g *gen) weighted(weights ...int) int {
	total := 0
	for _, w := range weights {
		total += w
	}
	x := g.intn(total)
	for i, w := range weights {
		if x < w {
			return i + 1
		}
		x -= w
	}
	return len(weights)
}

// bad is chance for bad input, which only adversarial instances get.
func (g *gen) bad(p float64) bool { return g.mode == adversarial && g.chance(p) }
func (g *gen) intn(n int) int     { return g.r.IntN(n) }
func pick[T any](g *gen, values []T) T {
	return values[g.r.IntN(len(values))]
}

// New generates the instance for a seed.
func New(seed uint64) *Instance {
	g := &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	g.inst = &Instance{Seed: seed}
	switch x := g.r.Float64(); {
	case x < 0.6:
		g.mode = clean
	case x < 0.85:
		g.mode = traps
	default:
		g.mode = adversarial
	}
	// Drawn one by one in this order, so that a seed gives the same
	// instance as before the features that only some minors have moved to
	// minor.NewerFeatures.
	var f structured.Features
	var newer minor.NewerFeatures
	f.AdminAccess = g.chance(0.5)
	newer.CompatibilityGroups = g.chance(0.3)
	f.ConsumableCapacity = g.chance(0.5)
	newer.DerivedAttributes = g.chance(0.3)
	f.DeviceBindingAndStatus = g.chance(0.5)
	f.DeviceTaints = g.chance(0.6)
	newer.FractionalCapacityRange = g.chance(0.3)
	newer.ListTypeAttributes = g.chance(0.3)
	newer.OptionalNodeOperations = g.chance(0.3)
	f.PartitionableDevices = g.chance(0.6)
	f.PrioritizedList = g.chance(0.6)
	// A third of the instances stay within the incubating tier's features,
	// which upstream then serves with its other copy of the allocator.
	if g.chance(0.33) {
		newer.CompatibilityGroups = false
		newer.DerivedAttributes = false
		newer.ListTypeAttributes = false
		newer.OptionalNodeOperations = false
	}
	// An older minor's build has none of the newer features.
	g.features = newer.With(f)
	g.newer = minor.NewerFeaturesOf(g.features)
	g.inst.Features = g.features

	g.inst.Node = g.node(nodeNames[0])
	g.classes()
	numPools := 1 + g.intn(4)
	for p := range numPools {
		g.pool(p)
	}
	g.allocatedState()
	numClaims := g.weighted(5, 3, 2)
	for c := range numClaims {
		g.inst.Claims = append(g.inst.Claims, g.claim(c))
	}
	// Some instances become shared-GPU problems. Their choices come from a
	// stream of their own, so that all other instances stay as they were.
	g.r = rand.New(rand.NewPCG(seed^0x5851f42d4c957f2d, seed^0x14057b7ef767814f))
	if g.chance(0.12) && (g.features.ConsumableCapacity || g.bad(0.3)) {
		g.sharedGPUs()
	}
	return g.inst
}

// sharedGPUs adds a pool of GPUs that allow multiple allocations, with the
// same memory and request policy (so that many are interchangeable, up to
// attributes that no claim looks at, like real GPUs' indexes), shares of
// earlier claims on some of them (often the same on several), and claims
// whose requests each take a few shares of memory, so that requests
// compete for the memory that is left. The claims come first; the
// instance's first claim may follow them.
func (g *gen) sharedGPUs() {
	g.inst.SharedGPUs = true
	const driver, pool = "a.example.com", "gpus"
	numGPUs := 3 + g.intn(3)
	memory := pick(g, []string{"8Gi", "12Gi"})
	policy := pick(g, []*resourceapi.CapacityRequestPolicy{
		nil,
		{Default: ptr.To(resource.MustParse("1Gi")), ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(resource.MustParse("1Gi")), Step: ptr.To(resource.MustParse("1Gi"))}},
		{Default: ptr.To(resource.MustParse("2Gi")), ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(resource.MustParse("2Gi")), Step: ptr.To(resource.MustParse("2Gi"))}},
		{Default: ptr.To(resource.MustParse("2Gi")), ValidValues: []resource.Quantity{resource.MustParse("2Gi"), resource.MustParse("3Gi"), resource.MustParse("4Gi"), resource.MustParse("6Gi")}},
	})
	slice := g.sliceMeta(driver, pool, 1, 1, "gpus-s0")
	slice.Spec.NodeName, slice.Spec.AllNodes, slice.Spec.NodeSelector = ptr.To(nodeNames[0]), nil, nil
	for i := range numGPUs {
		device := resourceapi.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"index": {IntValue: ptr.To(int64(i))},
				"numa":  {IntValue: ptr.To(int64(i / 2))},
				"model": {StringValue: ptr.To("x")},
			},
			Capacity:                 map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse(memory), RequestPolicy: policy}},
			AllowMultipleAllocations: ptr.To(true),
		}
		switch {
		case g.chance(0.1):
			// One that is smaller than the others.
			device.Capacity["memory"] = resourceapi.DeviceCapacity{Value: resource.MustParse("4Gi"), RequestPolicy: policy}
		case g.chance(0.05):
			device.Taints = []resourceapi.DeviceTaint{{Key: "t1", Value: "v", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
		case g.mode != clean && g.chance(0.1):
			// Selectors that read the model fail on this one.
			delete(device.Attributes, "model")
		}
		slice.Spec.Devices = append(slice.Spec.Devices, device)
	}
	g.inst.Slices = append(g.inst.Slices, slice)

	// Earlier claims: a share on some GPUs each, the same on all of them.
	for k := range g.intn(4) {
		amount := resource.MustParse(pick(g, []string{"1Gi", "2Gi", "3Gi", "4Gi"}))
		for i := range numGPUs {
			if !g.chance(0.6) {
				continue
			}
			id := structured.MakeDeviceID(driver, pool, fmt.Sprintf("gpu-%d", i))
			share := types.UID(fmt.Sprintf("earlier-%d-%d", k, i))
			g.inst.State.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, &share))
			g.inst.State.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, map[resourceapi.QualifiedName]resource.Quantity{"memory": amount}))
		}
	}

	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "class-gpu"}}
	class.Spec.Selectors = []resourceapi.DeviceSelector{celSelector(fmt.Sprintf("device.driver == %q && device.allowMultipleAllocations == true", driver))}
	g.inst.Classes = append(g.inst.Classes, class)

	claims := make([]*resourceapi.ResourceClaim, 0, 3)
	for c := range g.weighted(8, 2) {
		claims = append(claims, g.gpuClaim(c, numGPUs))
	}
	if len(g.inst.Claims) > 0 && g.chance(0.5) {
		claims = append(claims, g.inst.Claims[0])
	}
	g.inst.Claims = claims
}

// gpuClaim is a claim for shares of the shared GPUs.
func (g *gen) gpuClaim(index, numGPUs int) *resourceapi.ResourceClaim {
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("gpu-claim-%d", index), Namespace: "default", UID: types.UID(fmt.Sprintf("gpu-claim-uid-%d", index))}}
	memory := func() *resourceapi.CapacityRequirements {
		if g.chance(0.15) {
			// The policy's default.
			return nil
		}
		return &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
			"memory": resource.MustParse(pick(g, []string{"1Gi", "2Gi", "3Gi", "4Gi", "5Gi"})),
		}}
	}
	count := func() int64 { return int64(1 + g.intn(min(3, numGPUs))) }
	var names []string
	for r := range g.weighted(3, 4, 3) {
		name := fmt.Sprintf("req-%d", r)
		request := resourceapi.DeviceRequest{Name: name}
		if g.chance(0.15) && (g.features.PrioritizedList || g.bad(0.5)) {
			for s := range 2 {
				request.FirstAvailable = append(request.FirstAvailable, resourceapi.DeviceSubRequest{
					Name: fmt.Sprintf("sub-%d", s), DeviceClassName: "class-gpu",
					AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count(), Capacity: memory(),
				})
			}
		} else {
			exact := &resourceapi.ExactDeviceRequest{DeviceClassName: "class-gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count(), Capacity: memory()}
			if g.chance(0.05) {
				exact.AllocationMode, exact.Count = resourceapi.DeviceAllocationModeAll, 0
			}
			if g.mode != clean && g.chance(0.15) {
				exact.Selectors = []resourceapi.DeviceSelector{celSelector(fmt.Sprintf("device.attributes[%q].model == \"x\"", "a.example.com"))}
			}
			if g.chance(0.1) {
				exact.Tolerations = []resourceapi.DeviceToleration{{Key: "t1", Operator: resourceapi.DeviceTolerationOpExists}}
			}
			if g.chance(0.05) && (g.features.AdminAccess || g.bad(0.5)) {
				exact.AdminAccess = ptr.To(true)
			}
			request.Exactly = exact
		}
		names = append(names, name)
		claim.Spec.Devices.Requests = append(claim.Spec.Devices.Requests, request)
	}
	if g.chance(0.4) {
		constraint := resourceapi.DeviceConstraint{}
		if g.chance(0.6) {
			constraint.Requests = g.subset(names)
		}
		attribute := resourceapi.FullyQualifiedName(pick(g, []string{"a.example.com/numa", "a.example.com/index", "a.example.com/model"}))
		if g.chance(0.7) {
			constraint.DistinctAttribute = &attribute
		} else {
			constraint.MatchAttribute = &attribute
		}
		claim.Spec.Devices.Constraints = append(claim.Spec.Devices.Constraints, constraint)
	}
	return claim
}

func (g *gen) node(name string) *v1.Node {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"region": pick(g, []string{"r0", "r1"})}}}
	if g.chance(0.5) {
		node.Status.DeclaredFeatures = []string{minor.OptionalNodeOperationsFeature}
	}
	return node
}

func (g *gen) classes() {
	for i := range 3 {
		class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("class-%d", i)}}
		driver := drivers[i%len(drivers)]
		if i < 2 && g.chance(0.8) {
			class.Spec.Selectors = append(class.Spec.Selectors, celSelector(fmt.Sprintf("device.driver == %q", driver)))
		}
		if g.chance(0.3) {
			class.Spec.Selectors = append(class.Spec.Selectors, celSelector(g.selectorExpression(driver)))
		}
		if g.chance(0.4) {
			class.Spec.Config = append(class.Spec.Config, resourceapi.DeviceClassConfiguration{DeviceConfiguration: opaqueConfig(driver, fmt.Sprintf("class-%d", i))})
			if g.chance(0.3) {
				class.Spec.Config = append(class.Spec.Config, resourceapi.DeviceClassConfiguration{DeviceConfiguration: opaqueConfig(driver, fmt.Sprintf("class-%d-b", i))})
			}
		}
		if g.features.ConsumableCapacity && g.chance(0.2) {
			class.Spec.Selectors = append(class.Spec.Selectors, celSelector("device.allowMultipleAllocations == true"))
		}
		g.inst.Classes = append(g.inst.Classes, class)
	}
}

func celSelector(expr string) resourceapi.DeviceSelector {
	return resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}
}

func opaqueConfig(driver, value string) resourceapi.DeviceConfiguration {
	return resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
		Driver:     driver,
		Parameters: runtime.RawExtension{Raw: []byte(fmt.Sprintf(`{"v":%q}`, value))},
	}}
}

// selectorExpression returns a selector; outside clean instances some fail
// at runtime on devices without the attribute, a few do not compile.
func (g *gen) selectorExpression(driver string) string {
	if g.mode == clean {
		switch g.intn(5) {
		case 0:
			return fmt.Sprintf("!(%q in device.attributes[%q]) || device.attributes[%q].model != %q", "model", driver, driver, pick(g, models))
		case 1:
			return fmt.Sprintf("%q in device.attributes[%q] && device.attributes[%q].numa >= 1", "numa", driver, driver)
		case 2:
			return fmt.Sprintf("%q in device.capacity[%q] && device.capacity[%q].memory.compareTo(quantity(%q)) >= 0", "memory", driver, driver, pick(g, []string{"1Gi", "4Gi", "8Gi"}))
		default:
			return fmt.Sprintf("%q in device.attributes[%q]", pick(g, []string{"model", "numa", "numas"}), driver)
		}
	}
	switch g.intn(10) {
	case 0:
		// Runtime error where "model" is missing.
		return fmt.Sprintf("device.attributes[%q].model == %q", driver, pick(g, models))
	case 1:
		return fmt.Sprintf("device.attributes[%q].numa >= 1", driver)
	case 2:
		return "device.attributes[\"resource.kubernetes.io\"].pcieRoot != \"pci2\""
	case 3:
		return fmt.Sprintf("device.capacity[%q].memory.compareTo(quantity(%q)) >= 0", driver, pick(g, []string{"1Gi", "4Gi", "8Gi"}))
	case 4:
		if g.bad(0.5) {
			return "device.attributes[" // does not compile
		}
		return "true"
	case 5:
		return fmt.Sprintf("!(%q in device.attributes[%q]) || device.attributes[%q].model != %q", "model", driver, driver, pick(g, models))
	default:
		return fmt.Sprintf("%q in device.attributes[%q]", pick(g, []string{"model", "numa", "numas"}), driver)
	}
}

func (g *gen) pool(p int) {
	driver := pick(g, drivers)
	name := fmt.Sprintf("pool-%d", p)
	generation := int64(1)
	if g.chance(0.2) {
		// An outdated slice of an older generation.
		generation = 2
		old := g.slice(driver, name, 1, 1, fmt.Sprintf("%s-old", name), nil)
		g.inst.Slices = append(g.inst.Slices, old)
	}
	numSlices := 1 + g.intn(3)
	declared := int64(numSlices)
	var counterSets []resourceapi.CounterSet
	if g.chance(0.4) {
		// Partitionable: one slice with shared counters.
		counterSets = g.counterSets()
		counterSlice := g.sliceMeta(driver, name, generation, 0, fmt.Sprintf("%s-counters", name))
		counterSlice.Spec.SharedCounters = counterSets
		declared++
		g.inst.Slices = append(g.inst.Slices, counterSlice)
	}
	if g.chance(0.05) || g.bad(0.2) {
		declared++ // incomplete: a slice never shows up
	}
	for s := range numSlices {
		slice := g.slice(driver, name, generation, declared, fmt.Sprintf("%s-s%d", name, s), counterSets)
		g.inst.Slices = append(g.inst.Slices, slice)
	}
	for _, s := range g.inst.Slices {
		if s.Spec.Pool.Name == name && s.Spec.Pool.Generation == generation {
			s.Spec.Pool.ResourceSliceCount = declared
		}
	}
	if g.chance(0.05) {
		// A newer generation that does not target this node makes the
		// pool obsolete here.
		newer := g.sliceMeta(driver, name, generation+1, 1, fmt.Sprintf("%s-next", name))
		newer.Spec.NodeName = ptr.To(nodeNames[2])
		g.inst.Slices = append(g.inst.Slices, newer)
	}
}

func (g *gen) sliceMeta(driver, pool string, generation, count int64, name string) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(fmt.Sprintf("uid-%s-%d", name, g.inst.Seed)), ResourceVersion: "1"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: driver,
			Pool:   resourceapi.ResourcePool{Name: pool, Generation: generation, ResourceSliceCount: count},
		},
	}
	g.nodeSelection(&s.Spec)
	return s
}

// nodeSelection sets one of the slice-level node selection fields; mostly
// the node itself.
func (g *gen) nodeSelection(spec *resourceapi.ResourceSliceSpec) {
	switch g.intn(10) {
	case 0:
		spec.AllNodes = ptr.To(true)
	case 1:
		spec.NodeSelector = g.nodeSelector()
	case 2:
		if g.chance(0.5) {
			spec.NodeName = ptr.To(pick(g, nodeNames[1:]))
			return
		}
		spec.NodeName = ptr.To(nodeNames[0])
	default:
		spec.NodeName = ptr.To(nodeNames[0])
	}
}

func (g *gen) nodeSelector() *v1.NodeSelector {
	op := v1.NodeSelectorOpIn
	if g.bad(0.1) {
		op = "Bogus" // cannot be parsed
	}
	return &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
		MatchExpressions: []v1.NodeSelectorRequirement{{Key: "region", Operator: op, Values: []string{pick(g, []string{"r0", "r1"})}}},
	}}}
}

func (g *gen) counterSets() []resourceapi.CounterSet {
	var sets []resourceapi.CounterSet
	for i := range 1 + g.intn(2) {
		sets = append(sets, resourceapi.CounterSet{
			Name: fmt.Sprintf("cs-%d", i),
			Counters: map[string]resourceapi.Counter{
				"mem":   {Value: resource.MustParse(pick(g, []string{"4Gi", "8Gi", "16Gi"}))},
				"cores": {Value: *resource.NewQuantity(int64(2+g.intn(6)), resource.DecimalSI)},
			},
		})
	}
	return sets
}

func (g *gen) slice(driver, pool string, generation, count int64, name string, counterSets []resourceapi.CounterSet) *resourceapi.ResourceSlice {
	s := g.sliceMeta(driver, pool, generation, count, name)
	perDevice := g.features.PartitionableDevices && g.chance(0.1) || g.chance(0.02)
	if perDevice {
		s.Spec.NodeName, s.Spec.AllNodes, s.Spec.NodeSelector = nil, nil, nil
		s.Spec.PerDeviceNodeSelection = ptr.To(true)
	}
	if g.chance(0.1) {
		skipNodePrepare(s)
	}
	numDevices := g.intn(10)
	for d := range numDevices {
		deviceName := fmt.Sprintf("%s-d%d", name, d)
		if g.chance(0.01) || g.bad(0.05) {
			deviceName = fmt.Sprintf("%s-d0", name) // duplicate: invalid pool
		}
		device := g.device(driver, deviceName, counterSets)
		if perDevice {
			switch g.intn(4) {
			case 0:
				device.AllNodes = ptr.To(true)
			case 1:
				device.NodeSelector = g.nodeSelector()
			case 2:
				device.NodeName = ptr.To(pick(g, nodeNames[1:]))
			default:
				device.NodeName = ptr.To(nodeNames[0])
			}
		}
		s.Spec.Devices = append(s.Spec.Devices, device)
		g.devices = append(g.devices, generatedDevice{driver: driver, pool: pool, name: deviceName, capacity: device.Capacity})
		if ptr.Deref(device.AllowMultipleAllocations, false) {
			g.multi = append(g.multi, g.devices[len(g.devices)-1])
		}
	}
	return s
}

func (g *gen) device(driver, name string, counterSets []resourceapi.CounterSet) resourceapi.Device {
	device := resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}}
	// Many devices share attribute values, so that interchangeable devices
	// and bucketing are exercised.
	if g.chance(0.8) {
		device.Attributes["model"] = resourceapi.DeviceAttribute{StringValue: ptr.To(pick(g, models))}
	}
	if g.chance(0.7) {
		device.Attributes["numa"] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(g.intn(2)))}
	}
	if g.chance(0.7) {
		device.Attributes["resource.kubernetes.io/pcieRoot"] = resourceapi.DeviceAttribute{StringValue: ptr.To(pick(g, roots))}
	}
	if g.chance(0.3) {
		values := []int64{int64(g.intn(3))}
		if g.chance(0.5) {
			values = append(values, int64(g.intn(3)))
		}
		device.Attributes["numas"] = minor.IntListAttribute(sets.List(sets.New(values...)))
	}
	if g.chance(0.6) {
		device.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			"memory": {Value: resource.MustParse(pick(g, []string{"2Gi", "4Gi", "8Gi", "16Gi"}))},
		}
	}
	if g.chance(0.15) {
		effect := pick(g, []resourceapi.DeviceTaintEffect{resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNoExecute, resourceapi.DeviceTaintEffectNone})
		device.Taints = []resourceapi.DeviceTaint{{Key: pick(g, []string{"t1", "t2"}), Value: "v", Effect: effect}}
	}
	if g.chance(0.1) {
		device.BindingConditions = []string{"ready"}
		device.BindingFailureConditions = []string{"failed"}
	} else if g.chance(0.03) {
		device.BindingConditions = []string{}
	}
	if g.chance(0.08) {
		device.BindsToNode = ptr.To(true)
	}
	if g.chance(0.25) {
		device.AllowMultipleAllocations = ptr.To(true)
		if device.Capacity == nil && g.chance(0.7) {
			device.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("8Gi")}}
		}
		for name, c := range device.Capacity {
			c.RequestPolicy = g.requestPolicy()
			device.Capacity[name] = c
		}
	}
	if len(counterSets) > 0 && g.chance(0.8) {
		set := pick(g, counterSets)
		consumption := resourceapi.DeviceCounterConsumption{
			CounterSet: set.Name,
			Counters: map[string]resourceapi.Counter{
				"mem": {Value: resource.MustParse(pick(g, []string{"1Gi", "2Gi", "4Gi", "8Gi"}))},
			},
		}
		if g.chance(0.5) {
			consumption.Counters["cores"] = resourceapi.Counter{Value: *resource.NewQuantity(int64(1+g.intn(3)), resource.DecimalSI)}
		}
		if g.bad(0.1) {
			consumption.Counters["missing"] = resourceapi.Counter{Value: resource.MustParse("1")} // invalid pool
		}
		if g.chance(0.3) {
			groups := []string{pick(g, []string{"g1", "g2"})}
			if g.chance(0.3) {
				groups = append(groups, "g3")
			}
			setCompatibilityGroups(&consumption, groups)
		}
		device.ConsumesCounters = []resourceapi.DeviceCounterConsumption{consumption}
	}
	return device
}

func (g *gen) requestPolicy() *resourceapi.CapacityRequestPolicy {
	switch g.intn(4) {
	case 0:
		return nil
	case 1:
		policy := &resourceapi.CapacityRequestPolicy{
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(resource.MustParse("1Gi"))},
		}
		if g.chance(0.7) {
			policy.ValidRange.Step = ptr.To(resource.MustParse(pick(g, []string{"1Gi", "2Gi", "512Mi"})))
		}
		if g.chance(0.5) {
			policy.ValidRange.Max = ptr.To(resource.MustParse("6Gi"))
		}
		if g.chance(0.5) {
			policy.Default = ptr.To(resource.MustParse("2Gi"))
		}
		if g.newer.FractionalCapacityRange && g.chance(0.3) {
			policy.ValidRange.Min = ptr.To(resource.MustParse("500m"))
			policy.ValidRange.Step = ptr.To(resource.MustParse("250m"))
			policy.ValidRange.Max = nil
		}
		return policy
	case 2:
		return &resourceapi.CapacityRequestPolicy{
			Default:     ptr.To(resource.MustParse("1Gi")),
			ValidValues: []resource.Quantity{resource.MustParse("1Gi"), resource.MustParse("2Gi"), resource.MustParse("4Gi")},
		}
	default:
		return &resourceapi.CapacityRequestPolicy{Default: ptr.To(resource.MustParse("2Gi"))}
	}
}

func (g *gen) allocatedState() {
	g.inst.State = structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, d := range g.devices {
		if g.chance(0.15) {
			g.inst.State.AllocatedDevices.Insert(structured.MakeDeviceID(d.driver, d.pool, d.name))
		}
	}
	for _, d := range g.multi {
		if !g.chance(0.4) {
			continue
		}
		id := structured.MakeDeviceID(d.driver, d.pool, d.name)
		share := types.UID(fmt.Sprintf("share-%d", g.intn(1000)))
		g.inst.State.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, &share))
		if len(d.capacity) > 0 && g.chance(0.8) {
			consumed := map[resourceapi.QualifiedName]resource.Quantity{}
			for name := range d.capacity {
				consumed[name] = resource.MustParse(pick(g, []string{"1Gi", "2Gi", "6Gi"}))
			}
			g.inst.State.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, consumed))
		}
	}
}

func (g *gen) claim(index int) *resourceapi.ResourceClaim {
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("claim-%d", index), Namespace: "default", UID: types.UID(fmt.Sprintf("claim-uid-%d", index))}}
	numRequests := g.weighted(5, 3, 2)
	var names []string
	for r := range numRequests {
		name := fmt.Sprintf("req-%d", r)
		request := resourceapi.DeviceRequest{Name: name}
		if g.chance(0.25) && (g.features.PrioritizedList || g.bad(0.5)) {
			for s := range 1 + g.intn(3) {
				sub := resourceapi.DeviceSubRequest{Name: fmt.Sprintf("sub-%d", s)}
				g.fillSubRequest(&sub)
				request.FirstAvailable = append(request.FirstAvailable, sub)
				names = append(names, name+"/"+sub.Name)
			}
		} else {
			request.Exactly = g.exactRequest()
		}
		names = append(names, name)
		claim.Spec.Devices.Requests = append(claim.Spec.Devices.Requests, request)
	}
	if g.chance(0.5) {
		for range 1 + g.intn(2) {
			constraint := resourceapi.DeviceConstraint{}
			if g.chance(0.5) {
				constraint.Requests = g.subset(names)
			}
			attribute := resourceapi.FullyQualifiedName(pick(g, []string{
				"resource.kubernetes.io/pcieRoot", "a.example.com/numa", "a.example.com/model", "b.example.com/model",
				"a.example.com/numas", "dra.example.com/derived",
			}))
			if g.chance(0.7) {
				constraint.MatchAttribute = &attribute
			} else {
				constraint.DistinctAttribute = &attribute
			}
			claim.Spec.Devices.Constraints = append(claim.Spec.Devices.Constraints, constraint)
		}
	}
	if g.chance(0.4) {
		for range 1 + g.intn(2) {
			config := resourceapi.DeviceClaimConfiguration{DeviceConfiguration: opaqueConfig(pick(g, drivers), fmt.Sprintf("claim-%d", g.intn(100)))}
			if g.chance(0.7) {
				config.Requests = g.subset(names)
			}
			claim.Spec.Devices.Config = append(claim.Spec.Devices.Config, config)
		}
	}
	return claim
}

func (g *gen) subset(names []string) []string {
	var result []string
	for _, n := range names {
		if g.chance(0.5) {
			result = append(result, n)
		}
	}
	if len(result) == 0 {
		result = append(result, pick(g, names))
	}
	return result
}

func (g *gen) className() string {
	if g.bad(0.1) {
		return "no-such-class"
	}
	return fmt.Sprintf("class-%d", g.intn(3))
}

func (g *gen) count() (resourceapi.DeviceAllocationMode, int64) {
	if g.chance(0.1) {
		return resourceapi.DeviceAllocationModeAll, 0
	}
	return resourceapi.DeviceAllocationModeExactCount, int64(g.weighted(6, 3, 2, 1))
}

func (g *gen) exactRequest() *resourceapi.ExactDeviceRequest {
	mode, count := g.count()
	request := &resourceapi.ExactDeviceRequest{DeviceClassName: g.className(), AllocationMode: mode, Count: count}
	if g.chance(0.3) {
		request.Selectors = append(request.Selectors, celSelector(g.selectorExpression(pick(g, drivers))))
	}
	if g.chance(0.1) && (g.features.AdminAccess || g.bad(0.5)) {
		request.AdminAccess = ptr.To(g.chance(0.8))
	}
	request.Tolerations = g.tolerations()
	if g.chance(0.2) && (g.features.ConsumableCapacity || g.bad(0.5)) {
		request.Capacity = g.capacityRequest()
	}
	if g.chance(0.2) && (g.newer.DerivedAttributes || g.bad(0.5)) {
		setExactDerivedAttributes(request, g.derived())
	}
	return request
}

func (g *gen) fillSubRequest(sub *resourceapi.DeviceSubRequest) {
	sub.DeviceClassName = g.className()
	sub.AllocationMode, sub.Count = g.count()
	if g.chance(0.3) {
		sub.Selectors = append(sub.Selectors, celSelector(g.selectorExpression(pick(g, drivers))))
	}
	sub.Tolerations = g.tolerations()
	if g.chance(0.15) && (g.features.ConsumableCapacity || g.bad(0.5)) {
		sub.Capacity = g.capacityRequest()
	}
	if g.chance(0.15) && (g.newer.DerivedAttributes || g.bad(0.5)) {
		setSubRequestDerivedAttributes(sub, g.derived())
	}
}

func (g *gen) tolerations() []resourceapi.DeviceToleration {
	if !g.chance(0.3) {
		return nil
	}
	toleration := resourceapi.DeviceToleration{Key: pick(g, []string{"t1", "t2"}), Operator: resourceapi.DeviceTolerationOpExists}
	if g.chance(0.5) {
		toleration.Effect = pick(g, []resourceapi.DeviceTaintEffect{resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNoExecute})
	}
	return []resourceapi.DeviceToleration{toleration}
}

func (g *gen) capacityRequest() *resourceapi.CapacityRequirements {
	requests := map[resourceapi.QualifiedName]resource.Quantity{
		"memory": resource.MustParse(pick(g, []string{"1Gi", "1500Mi", "3Gi", "5Gi", "750m"})),
	}
	if g.chance(0.05) {
		requests["missing"] = resource.MustParse("1") // fits no device
	}
	return &resourceapi.CapacityRequirements{Requests: requests}
}

func (g *gen) derived() []minor.DerivedAttribute {
	if g.mode == clean {
		expression := pick(g, []string{
			`"numa" in device.attributes["a.example.com"] ? device.attributes["a.example.com"].numa : 7`,
			`"pcieRoot" in device.attributes["resource.kubernetes.io"] ? device.attributes["resource.kubernetes.io"].pcieRoot : "none"`,
			`device.driver`,
		})
		return []minor.DerivedAttribute{{Name: "dra.example.com/derived", Expression: expression}}
	}
	if g.mode == traps {
		expression := pick(g, []string{
			`device.attributes["a.example.com"].numa`,
			`device.attributes["resource.kubernetes.io"].pcieRoot`,
		})
		return []minor.DerivedAttribute{{Name: "dra.example.com/derived", Expression: expression}}
	}
	expression := pick(g, []string{
		`device.attributes["a.example.com"].numa`,
		`device.attributes["resource.kubernetes.io"].pcieRoot`,
		`device.attributes["a.example.com"].model + "-" + device.driver`,
		`device.attributes["b.example.com"].numa % 2`,
		`device.attributes[`,
	})
	return []minor.DerivedAttribute{{Name: "dra.example.com/derived", Expression: expression}}
}
