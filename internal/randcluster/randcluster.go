// Package randcluster generates random GPU clusters for the capacity tests:
// nodes with the ResourceSlices of a DRA driver (plain GPUs, pools of
// several slices and generations, MIG GPUs as pkg/driver/gpu publishes
// them, partitionable GPUs with uniform partition costs, shared GPUs with
// consumable capacity, a pool for all nodes), tainted devices,
// DeviceTaintRules, DeviceClasses, and claims, most of them allocated by
// pkg/allocator one after another, as a scheduler would have allocated
// them. Some pools are republished after the allocations with a device
// less, so that a claim may hold a device its pool no longer has. The same
// seed always gives the same cluster.
package randcluster

import (
	"context"
	"fmt"
	"math/rand/v2"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/minor"
	"github.com/drasched/drasched/pkg/allocator"
	"github.com/drasched/drasched/pkg/core"
	"github.com/drasched/drasched/pkg/driver/gpu"
	"github.com/drasched/drasched/pkg/driver/gpu/device"
)

// Options shape a cluster.
type Options struct {
	Seed uint64
	// Nodes is the number of nodes; 0 means 12.
	Nodes int
	// Driver names the driver; "" means gpu.example.com.
	Driver string
	// Namespace is the claims' namespace; "" means default.
	Namespace string
	// AdminNamespace, if set, is the namespace of claims with admin
	// access (it needs the label resource.kubernetes.io/admin-access).
	AdminNamespace string
	// Claims is the number of claims; 0 means four per node.
	Claims int
	// Prefix starts the names of cluster-scoped objects (nodes and their
	// pools, slices, classes, taint rules), so that clusters can share an
	// API server.
	Prefix string
	// DeclarePartitionType lets some pools declare their
	// partitionTypeAttribute in the slices (the alpha feature
	// DRAPartitionableDevicesType).
	DeclarePartitionType bool
}

// Cluster is a generated cluster.
type Cluster struct {
	Nodes      []*v1.Node
	Classes    []*resourceapi.DeviceClass
	Slices     []*resourceapi.ResourceSlice
	TaintRules []*minor.DeviceTaintRule
	// Claims are in creation order; those with Status.Allocation set are
	// allocated.
	Claims []*resourceapi.ResourceClaim
	// Pods are bound pods (Uniform only).
	Pods []*v1.Pod
	// PartitionAttribute is the partition type attribute of the
	// partitionable pools that do not declare it.
	PartitionAttribute string
}

// The shapes of a node's pool.
const (
	shapeGPUs        = "gpus"
	shapeMultiSlice  = "multislice"
	shapeMIG         = "mig"
	shapePartitioned = "partitioned"
	shapeShared      = "shared"
)

var shapes = []string{shapeGPUs, shapeMultiSlice, shapeMIG, shapePartitioned, shapeShared}

type gen struct {
	opts Options
	r    *rand.Rand
	c    *Cluster
}

// New generates a cluster.
func New(opts Options) (*Cluster, error) {
	if opts.Nodes == 0 {
		opts.Nodes = 12
	}
	if opts.Driver == "" {
		opts.Driver = "gpu.example.com"
	}
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if opts.Claims == 0 {
		opts.Claims = 4 * opts.Nodes
	}
	g := &gen{opts: opts, r: rand.New(rand.NewPCG(opts.Seed, 0x5eed)), c: &Cluster{PartitionAttribute: opts.Driver + "/partition"}}
	g.classes()
	for i := range opts.Nodes {
		shape := shapes[g.r.IntN(len(shapes))]
		if err := g.node(fmt.Sprintf("%snode-%d", opts.Prefix, i), shape); err != nil {
			return nil, err
		}
	}
	if g.r.IntN(2) == 0 {
		g.fabric()
	}
	if err := g.claims(); err != nil {
		return nil, err
	}
	g.republish()
	g.taintRules()
	return g.c, nil
}

func (g *gen) chance(p float64) bool { return g.r.Float64() < p }

func (g *gen) attr(name string) string { return g.opts.Driver + "/" + name }

func (g *gen) classes() {
	class := func(name, expr string) {
		g.c.Classes = append(g.c.Classes, &resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: g.opts.Prefix + name},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf("device.driver == %q && %s", g.opts.Driver, expr),
			}}}},
		})
	}
	d := g.opts.Driver
	class("gpu", fmt.Sprintf("device.attributes[%q].type == \"gpu\"", d))
	class("mig", fmt.Sprintf("device.attributes[%q].type == \"mig\"", d))
	class("partition", fmt.Sprintf("device.attributes[%q].type == \"partition\"", d))
	class("shared", fmt.Sprintf("device.attributes[%q].type == \"shared\"", d))
	class("any", "true")
}

func (g *gen) slice(name, pool, node string, generation, count int64) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: g.opts.Driver,
			Pool:   resourceapi.ResourcePool{Name: pool, Generation: generation, ResourceSliceCount: count},
		},
	}
	if node != "" {
		s.Spec.NodeName = ptr.To(node)
	} else {
		s.Spec.AllNodes = ptr.To(true)
	}
	return s
}

// taint taints a device now and then: mostly NoSchedule (an unhealthy
// GPU), sometimes NoExecute or the informational None.
func (g *gen) taint(d *resourceapi.Device) {
	if !g.chance(0.08) {
		return
	}
	effects := []resourceapi.DeviceTaintEffect{resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNoSchedule,
		resourceapi.DeviceTaintEffectNoExecute, resourceapi.DeviceTaintEffectNone}
	d.Taints = append(d.Taints, resourceapi.DeviceTaint{Key: g.attr("unhealthy"), Value: "XID", Effect: effects[g.r.IntN(len(effects))]})
}

func (g *gen) gpuDevice(name string, i int) resourceapi.Device {
	d := resourceapi.Device{
		Name: name,
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"type":                            {StringValue: ptr.To("gpu")},
			"index":                           {IntValue: ptr.To(int64(i))},
			"resource.kubernetes.io/pcieRoot": {StringValue: ptr.To(fmt.Sprintf("pci0000:%02x", i/2))},
			"resource.kubernetes.io/numaNode": {IntValue: ptr.To(int64(i / 4))},
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("80Gi")}},
	}
	g.taint(&d)
	return d
}

func (g *gen) node(name, shape string) error {
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{
			"kubernetes.io/hostname": name, g.attr("shape"): shape, "zone": []string{"a", "b"}[g.r.IntN(2)],
		}},
		Status: v1.NodeStatus{},
	}
	resources := v1.ResourceList{v1.ResourceCPU: resource.MustParse("64"), v1.ResourceMemory: resource.MustParse("512Gi"), v1.ResourcePods: resource.MustParse("110")}
	node.Status.Capacity, node.Status.Allocatable = resources, resources
	g.c.Nodes = append(g.c.Nodes, node)
	gen := int64(1 + g.r.IntN(3))
	switch shape {
	case shapeGPUs:
		n := []int{4, 8}[g.r.IntN(2)]
		s := g.slice(name+"-gpus", name, name, gen, 1)
		for i := range n {
			s.Spec.Devices = append(s.Spec.Devices, g.gpuDevice(fmt.Sprintf("gpu-%d", i), i))
		}
		g.c.Slices = append(g.c.Slices, s)
		if g.chance(0.5) && gen > 1 {
			// A slice of the generation before, which no longer counts.
			old := g.slice(name+"-gpus-old", name, name, gen-1, 1)
			old.Spec.Devices = []resourceapi.Device{g.gpuDevice("gpu-old", 0)}
			g.c.Slices = append(g.c.Slices, old)
		}
	case shapeMultiSlice:
		for part := range 2 {
			s := g.slice(fmt.Sprintf("%s-gpus-%d", name, part), name, name, gen, 2)
			for i := part * 4; i < part*4+4; i++ {
				s.Spec.Devices = append(s.Spec.Devices, g.gpuDevice(fmt.Sprintf("gpu-%d", i), i))
			}
			g.c.Slices = append(g.c.Slices, s)
		}
	case shapeMIG:
		slices, err := gpu.BuildResourceSlices(gpu.SliceOptions{DriverName: g.opts.Driver, NodeName: name}, g.migGPUs())
		if err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		for _, s := range slices {
			// As the kubelet plugin's slice controller publishes them: it
			// starts at generation 1.
			s.Spec.Pool.Generation = gen
		}
		g.c.Slices = append(g.c.Slices, slices...)
	case shapePartitioned:
		g.partitioned(name, gen)
	case shapeShared:
		s := g.slice(name+"-shared", name, name, gen, 1)
		for i := range 2 + g.r.IntN(3) {
			d := g.gpuDevice(fmt.Sprintf("gpu-%d", i), i)
			d.Attributes["type"] = resourceapi.DeviceAttribute{StringValue: ptr.To("shared")}
			d.AllowMultipleAllocations = ptr.To(true)
			d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				"memory": {Value: resource.MustParse("80Gi"), RequestPolicy: &resourceapi.CapacityRequestPolicy{
					Default:    ptr.To(resource.MustParse("10Gi")),
					ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(resource.MustParse("1Gi"))},
				}},
				"sm": {Value: resource.MustParse("132")},
			}
			s.Spec.Devices = append(s.Spec.Devices, d)
		}
		g.c.Slices = append(g.c.Slices, s)
	}
	return nil
}

// migGPUs are GPUs as the GPU driver's inventory describes them, some in
// MIG mode with a random layout of 1g and 2g instances.
func (g *gen) migGPUs() []device.GPU {
	var gpus []device.GPU
	for i := range 2 + g.r.IntN(3) {
		numa := i / 2
		gp := device.GPU{
			Index:        i,
			Minor:        i,
			UUID:         fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", g.r.Uint32(), i),
			ProductName:  "NVIDIA A100-SXM4-40GB",
			MemoryBytes:  40 << 30,
			PCIBusID:     fmt.Sprintf("0000:%02x:00.0", 7+i),
			PCIeRoot:     fmt.Sprintf("pci0000:%02x", i/2),
			NUMANode:     &numa,
			NVLinkDomain: "nvl-0",
		}
		if g.chance(0.2) {
			gp.Health = device.Health{Status: device.Unhealthy, Reason: "XID79"}
		}
		if g.chance(0.7) {
			gp.MIGEnabled = true
			for start := 0; start < 8; {
				size := 1 + g.r.IntN(2)
				if start+size > 8 {
					size = 1
				}
				profile := map[int]string{1: "1g.5gb", 2: "2g.10gb"}[size]
				gp.MIG = append(gp.MIG, device.MIGDevice{
					UUID:        fmt.Sprintf("MIG-%08x-0000-4000-8000-%012x", g.r.Uint32(), i*8+start),
					Profile:     profile,
					Placement:   device.Placement{Start: start, Size: size},
					MemoryBytes: int64(size) * 5 << 30,
				})
				start += size
			}
		}
		gpus = append(gpus, gp)
	}
	return gpus
}

// partitioned publishes GPUs whose partitions have uniform costs per type:
// a whole GPU draws all of its counter set, a half half of it, a quarter a
// quarter.
func (g *gen) partitioned(name string, generation int64) {
	counters := g.slice(name+"-counters", name, name, generation, 2)
	devices := g.slice(name+"-partitions", name, name, generation, 2)
	if g.opts.DeclarePartitionType && g.chance(0.5) {
		minor.SetPartitionTypeAttribute(&devices.Spec, resourceapi.FullyQualifiedName(g.c.PartitionAttribute))
	}
	numGPUs := 1 + g.r.IntN(2)
	for i := range numGPUs {
		set := fmt.Sprintf("gpu-%d", i)
		counters.Spec.SharedCounters = append(counters.Spec.SharedCounters, resourceapi.CounterSet{Name: set, Counters: map[string]resourceapi.Counter{
			"memory": {Value: resource.MustParse("80Gi")}, "compute": {Value: resource.MustParse("8")},
		}})
		add := func(dev, partition string, memory string, compute int64) {
			d := resourceapi.Device{
				Name: dev,
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					"type":                            {StringValue: ptr.To("partition")},
					"partition":                       {StringValue: ptr.To(partition)},
					"resource.kubernetes.io/pcieRoot": {StringValue: ptr.To(fmt.Sprintf("pci0000:%02x", i))},
				},
				ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: map[string]resourceapi.Counter{
					"memory": {Value: resource.MustParse(memory)}, "compute": {Value: *resource.NewQuantity(compute, resource.DecimalSI)},
				}}},
			}
			g.taint(&d)
			devices.Spec.Devices = append(devices.Spec.Devices, d)
		}
		add(set, "full", "80Gi", 8)
		for h := range 2 {
			add(fmt.Sprintf("%s-half-%d", set, h), "half", "40Gi", 4)
		}
		for q := range 4 {
			add(fmt.Sprintf("%s-quarter-%d", set, q), "quarter", "20Gi", 2)
		}
	}
	g.c.Slices = append(g.c.Slices, counters, devices)
}

// fabric is a pool that every node can use: GPUs behind a network fabric.
func (g *gen) fabric() {
	s := g.slice(g.opts.Prefix+"fabric", g.opts.Prefix+"fabric", "", 1, 1)
	for i := range 4 {
		s.Spec.Devices = append(s.Spec.Devices, g.gpuDevice(fmt.Sprintf("fabric-gpu-%d", i), i))
	}
	g.c.Slices = append(g.c.Slices, s)
}

// claims generates claims and allocates most of them, one after another,
// on random nodes, with the allocator and kube-scheduler's features.
func (g *gen) claims() error {
	ctx := context.Background()
	features := core.DefaultFeatures()
	state := core.NewAllocatedState()
	cache := allocator.NewCache(0)
	for i := range g.opts.Claims {
		claim := g.claim(i)
		g.c.Claims = append(g.c.Claims, claim)
		if g.chance(0.1) {
			continue // pending
		}
		a, err := allocator.New(ctx, features, state, allocator.ClassList(g.c.Classes), g.c.Slices, allocator.Options{Cache: cache})
		if err != nil {
			return err
		}
		for range 3 {
			node := g.c.Nodes[g.r.IntN(len(g.c.Nodes))]
			results, err := a.Allocate(ctx, node, []*resourceapi.ResourceClaim{claim})
			if err != nil {
				return fmt.Errorf("allocate claim %d on %s: %w", i, node.Name, err)
			}
			if results != nil {
				claim.Status.Allocation = &results[0]
				core.AddAllocation(&state, claim.Status.Allocation, features.ConsumableCapacity)
				break
			}
		}
	}
	return nil
}

func (g *gen) claim(i int) *resourceapi.ResourceClaim {
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{
		Name: fmt.Sprintf("claim-%d", i), Namespace: g.opts.Namespace, UID: types.UID(fmt.Sprintf("uid-claim-%d", i)),
	}}
	request := resourceapi.DeviceRequest{Name: "req", Exactly: &resourceapi.ExactDeviceRequest{AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}
	switch k := g.r.IntN(10); {
	case k < 4:
		request.Exactly.DeviceClassName = g.opts.Prefix + "gpu"
		request.Exactly.Count = int64(1 + g.r.IntN(2))
	case k < 6:
		request.Exactly.DeviceClassName = g.opts.Prefix + "mig"
	case k < 8:
		request.Exactly.DeviceClassName = g.opts.Prefix + "partition"
		partition := []string{"full", "half", "quarter", "quarter"}[g.r.IntN(4)]
		request.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.attributes[%q].partition == %q", g.opts.Driver, partition),
		}}}
	default:
		request.Exactly.DeviceClassName = g.opts.Prefix + "shared"
		request.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
			"memory": resource.MustParse(fmt.Sprintf("%dGi", 10*(1+g.r.IntN(4)))),
		}}
	}
	if g.opts.AdminNamespace != "" && g.chance(0.05) {
		claim.Namespace = g.opts.AdminNamespace
		request.Exactly = &resourceapi.ExactDeviceRequest{
			DeviceClassName: g.opts.Prefix + "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1, AdminAccess: ptr.To(true),
		}
	}
	claim.Spec.Devices.Requests = []resourceapi.DeviceRequest{request}
	return claim
}

// republish publishes some plain GPU pools again, a generation later and
// with a device less: a claim may still hold the device that is gone.
func (g *gen) republish() {
	for _, s := range g.c.Slices {
		if s.Spec.NodeName == nil || len(s.Spec.Devices) < 2 || s.Spec.Pool.ResourceSliceCount != 1 || len(s.Spec.SharedCounters) > 0 ||
			s.Spec.Devices[0].AllowMultipleAllocations != nil || !g.chance(0.15) {
			continue
		}
		if s.Spec.Devices[0].Attributes["type"].StringValue == nil || *s.Spec.Devices[0].Attributes["type"].StringValue != "gpu" {
			continue
		}
		newest := true
		for _, o := range g.c.Slices {
			if o != s && o.Spec.Pool.Name == s.Spec.Pool.Name && o.Spec.Pool.Generation > s.Spec.Pool.Generation {
				newest = false
			}
		}
		if !newest {
			continue
		}
		s.Spec.Pool.Generation++
		s.Spec.Devices = s.Spec.Devices[:len(s.Spec.Devices)-1]
	}
}

// taintRules taints a few devices and a pool through DeviceTaintRules.
func (g *gen) taintRules() {
	effects := []resourceapi.DeviceTaintEffect{resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNone}
	for i := range g.r.IntN(4) {
		s := g.c.Slices[g.r.IntN(len(g.c.Slices))]
		var device *string
		if len(s.Spec.Devices) > 0 && g.chance(0.7) {
			device = ptr.To(s.Spec.Devices[g.r.IntN(len(s.Spec.Devices))].Name)
		}
		taint := resourceapi.DeviceTaint{Key: g.attr("maintenance"), Effect: effects[g.r.IntN(len(effects))]}
		g.c.TaintRules = append(g.c.TaintRules, minor.NewDeviceTaintRule(fmt.Sprintf("%srule-%d", g.opts.Prefix, i), ptr.To(s.Spec.Driver), ptr.To(s.Spec.Pool.Name), device, taint))
	}
}

// UniformOptions shape a cluster of identical GPU nodes.
type UniformOptions struct {
	Nodes, GPUsPerNode int
	// Used is how many GPUs of each node a pod (bound to the node, with
	// a claim of one GPU each) holds.
	Used int
	// Driver names the driver; "" means gpu.example.com.
	Driver string
}

// Uniform builds a cluster of identical nodes for benchmarks: each with
// GPUsPerNode GPUs (two per PCIe root, four per NUMA node) in one slice,
// the first Used of them allocated to claims of bound pods, and the
// classes of New.
func Uniform(opts UniformOptions) *Cluster {
	if opts.Driver == "" {
		opts.Driver = "gpu.example.com"
	}
	g := &gen{opts: Options{Driver: opts.Driver}, r: rand.New(rand.NewPCG(0, 0)), c: &Cluster{PartitionAttribute: opts.Driver + "/partition"}}
	g.classes()
	resources := v1.ResourceList{v1.ResourceCPU: resource.MustParse("64"), v1.ResourceMemory: resource.MustParse("512Gi"), v1.ResourcePods: resource.MustParse("110")}
	for n := range opts.Nodes {
		name := fmt.Sprintf("node-%d", n)
		g.c.Nodes = append(g.c.Nodes, &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"kubernetes.io/hostname": name}},
			Status:     v1.NodeStatus{Capacity: resources, Allocatable: resources},
		})
		s := g.slice(name, name, name, 1, 1)
		for i := range opts.GPUsPerNode {
			d := resourceapi.Device{Name: fmt.Sprintf("gpu-%d", i), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"type":                            {StringValue: ptr.To("gpu")},
				"resource.kubernetes.io/pcieRoot": {StringValue: ptr.To(fmt.Sprintf("pci0000:%02x", i/2))},
				"resource.kubernetes.io/numaNode": {IntValue: ptr.To(int64(i / 4))},
			}}
			s.Spec.Devices = append(s.Spec.Devices, d)
		}
		g.c.Slices = append(g.c.Slices, s)
		for i := range opts.Used {
			pod := &v1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-pod-%d", name, i), Namespace: "default", UID: types.UID(fmt.Sprintf("uid-%s-pod-%d", name, i))},
				Spec: v1.PodSpec{NodeName: name, Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
					Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")},
				}}}},
			}
			claim := &resourceapi.ResourceClaim{
				ObjectMeta: metav1.ObjectMeta{Name: pod.Name + "-gpu", Namespace: "default", UID: types.UID("uid-" + pod.Name + "-gpu")},
				Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
					Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
				}}}},
				Status: resourceapi.ResourceClaimStatus{
					Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
						Request: "gpu", Driver: opts.Driver, Pool: name, Device: fmt.Sprintf("gpu-%d", i),
					}}}},
					ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}},
				},
			}
			g.c.Pods = append(g.c.Pods, pod)
			g.c.Claims = append(g.c.Claims, claim)
		}
	}
	return g.c
}

// Objects are all of the cluster's objects, for a fake clientset.
func (c *Cluster) Objects() []runtime.Object {
	var objects []runtime.Object
	for _, o := range c.Nodes {
		objects = append(objects, o)
	}
	for _, o := range c.Classes {
		objects = append(objects, o)
	}
	for _, o := range c.Slices {
		objects = append(objects, o)
	}
	for _, o := range c.TaintRules {
		objects = append(objects, o)
	}
	for _, o := range c.Claims {
		objects = append(objects, o)
	}
	for _, o := range c.Pods {
		objects = append(objects, o)
	}
	return objects
}
