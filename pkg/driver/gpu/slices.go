package gpu

import (
	"errors"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/minor"
	"github.com/drasched/drasched/pkg/driver/gpu/device"
)

// DefaultDriverName is the driver name used unless --driver-name says
// otherwise. Attributes follow the conventions of NVIDIA's gpu.nvidia.com
// driver, so DeviceClasses port by changing the driver name.
const DefaultDriverName = "gpu.drasched.dev"

// UnhealthyTaintSuffix completes the key of the taint put on unhealthy
// devices: "<driver name>/unhealthy".
const UnhealthyTaintSuffix = "/unhealthy"

// SliceOptions says how devices become ResourceSlices.
type SliceOptions struct {
	// DriverName defaults to DefaultDriverName.
	DriverName string
	// NodeName names the node and the pool; required.
	NodeName string
	// WithoutCounters leaves out MIG devices and the shared counters that
	// make them exclusive with their GPU. For clusters without the
	// DRAPartitionableDevices feature, where publishing both would let a
	// GPU and its MIG devices be allocated at once.
	WithoutCounters bool
	// WithoutTaints leaves unhealthy devices out instead of tainting them.
	// For clusters without the DRADeviceTaints feature.
	WithoutTaints bool
}

func (o SliceOptions) driverName() string {
	if o.DriverName == "" {
		return DefaultDriverName
	}
	return o.DriverName
}

// UnhealthyTaintKey is the key of the taint on unhealthy devices.
func (o SliceOptions) UnhealthyTaintKey() string {
	return o.driverName() + UnhealthyTaintSuffix
}

// ErrNoNodeName is returned when SliceOptions.NodeName is empty.
var ErrNoNodeName = errors.New("node name is required")

// BuildPool turns a node's GPUs into the slices of its pool, respecting the
// API limits: shared counters and devices never share a slice, at most 8
// counter sets per slice, at most 128 devices per slice (64 when any of them
// uses taints or counters).
//
// Order matters to the allocator, which takes the first fit: whole GPUs come
// first, by index, then MIG devices grouped by GPU.
func BuildPool(opts SliceOptions, gpus []device.GPU) (resourceslice.Pool, error) {
	if opts.NodeName == "" {
		return resourceslice.Pool{}, ErrNoNodeName
	}
	if err := device.Validate(gpus); err != nil {
		return resourceslice.Pool{}, err
	}
	var counterSets []resourceapi.CounterSet
	if !opts.WithoutCounters {
		for i := range gpus {
			if set := counterSet(&gpus[i]); set != nil {
				counterSets = append(counterSets, *set)
			}
		}
	}
	var devices []resourceapi.Device
	for _, ref := range device.Refs(gpus) {
		if ref.MIG != nil && opts.WithoutCounters {
			continue
		}
		if !ref.GPU.Health.IsHealthy() && opts.WithoutTaints {
			continue
		}
		d, err := buildDevice(opts, ref, len(counterSets) > 0)
		if err != nil {
			return resourceslice.Pool{}, fmt.Errorf("device %s: %w", ref.Name(), err)
		}
		devices = append(devices, d)
	}

	var pool resourceslice.Pool
	for start := 0; start < len(counterSets); start += resourceapi.ResourceSliceMaxCounterSets {
		end := min(start+resourceapi.ResourceSliceMaxCounterSets, len(counterSets))
		pool.Slices = append(pool.Slices, resourceslice.Slice{SharedCounters: counterSets[start:end]})
	}
	pool.Slices = append(pool.Slices, chunkDevices(devices)...)
	if len(pool.Slices) == 0 {
		// An empty slice tells the cluster that the driver runs and the
		// node has no GPUs, which is different from no information.
		pool.Slices = []resourceslice.Slice{{}}
	}
	return pool, nil
}

// BuildDriverResources is what the kubelet plugin publishes: one pool named
// after the node.
func BuildDriverResources(opts SliceOptions, gpus []device.GPU) (resourceslice.DriverResources, error) {
	pool, err := BuildPool(opts, gpus)
	if err != nil {
		return resourceslice.DriverResources{}, err
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{opts.NodeName: pool}}, nil
}

// BuildResourceSlices returns the ResourceSlice objects the plugin would
// publish for these GPUs on this node, as `discover --print-slices` prints
// them. Names are deterministic ("<node>-<driver>-<index>"), where the
// plugin's controller lets the apiserver generate them; everything else is
// what gets published. The demo and benchmarks use it to publish slices for
// simulated nodes.
func BuildResourceSlices(opts SliceOptions, gpus []device.GPU) ([]*resourceapi.ResourceSlice, error) {
	pool, err := BuildPool(opts, gpus)
	if err != nil {
		return nil, err
	}
	slices := make([]*resourceapi.ResourceSlice, 0, len(pool.Slices))
	for i, s := range pool.Slices {
		slices = append(slices, &resourceapi.ResourceSlice{
			TypeMeta: metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceSlice"},
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("%s-%s-%d", opts.NodeName, opts.driverName(), i),
			},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:   opts.driverName(),
				NodeName: ptr.To(opts.NodeName),
				Pool: resourceapi.ResourcePool{
					Name:               opts.NodeName,
					ResourceSliceCount: int64(len(pool.Slices)),
				},
				Devices:        s.Devices,
				SharedCounters: s.SharedCounters,
			},
		})
	}
	return slices, nil
}

// chunkDevices splits devices into slices of at most 128, or 64 when a
// slice holds a device with taints or counter consumption.
func chunkDevices(devices []resourceapi.Device) []resourceslice.Slice {
	var slices []resourceslice.Slice
	var chunk []resourceapi.Device
	advanced := false
	for _, d := range devices {
		deviceAdvanced := len(d.Taints) > 0 || len(d.ConsumesCounters) > 0
		limit := resourceapi.ResourceSliceMaxDevices
		if advanced || deviceAdvanced {
			limit = minor.SliceMaxDevicesAdvanced
		}
		if len(chunk)+1 > limit {
			slices = append(slices, resourceslice.Slice{Devices: chunk})
			chunk, advanced = nil, false
		}
		chunk = append(chunk, d)
		advanced = advanced || deviceAdvanced
	}
	if len(chunk) > 0 {
		slices = append(slices, resourceslice.Slice{Devices: chunk})
	}
	return slices
}

// counterSet returns the memory-slice counters of a GPU with MIG devices,
// nil for other GPUs.
func counterSet(g *device.GPU) *resourceapi.CounterSet {
	slices := g.MemorySlices()
	if len(slices) == 0 {
		return nil
	}
	counters := make(map[string]resourceapi.Counter, len(slices))
	for _, s := range slices {
		counters[device.MemorySliceCounter(s)] = resourceapi.Counter{Value: resource.MustParse("1")}
	}
	return &resourceapi.CounterSet{Name: g.CounterSetName(), Counters: counters}
}

// consumption returns what a device takes from its GPU's counter set: the
// whole GPU takes every memory slice, a MIG device those of its placement.
func consumption(ref device.Ref) []resourceapi.DeviceCounterConsumption {
	var slices []int
	if ref.MIG != nil {
		slices = ref.MIG.Placement.Slices()
	} else {
		slices = ref.GPU.MemorySlices()
	}
	if len(slices) == 0 {
		return nil
	}
	counters := make(map[string]resourceapi.Counter, len(slices))
	for _, s := range slices {
		counters[device.MemorySliceCounter(s)] = resourceapi.Counter{Value: resource.MustParse("1")}
	}
	return []resourceapi.DeviceCounterConsumption{{CounterSet: ref.GPU.CounterSetName(), Counters: counters}}
}

func buildDevice(opts SliceOptions, ref device.Ref, withCounters bool) (resourceapi.Device, error) {
	g := ref.GPU
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"type":        {StringValue: ptr.To(string(ref.Type()))},
		"uuid":        {StringValue: ptr.To(ref.UUID())},
		"productName": {StringValue: ptr.To(g.ProductName)},
	}
	setString := func(name resourceapi.QualifiedName, value string) {
		if value != "" {
			attrs[name] = resourceapi.DeviceAttribute{StringValue: ptr.To(value)}
		}
	}
	setVersion := func(name resourceapi.QualifiedName, value string) {
		if value != "" {
			attrs[name] = resourceapi.DeviceAttribute{VersionValue: ptr.To(value)}
		}
	}
	setString("brand", g.Brand)
	setString("architecture", g.Architecture)
	setVersion("cudaComputeCapability", g.CUDAComputeCapability)
	setVersion("driverVersion", g.DriverVersion)
	setString("nvlinkDomain", g.NVLinkDomain)
	setString(deviceattribute.StandardDeviceAttributePCIeRoot, g.PCIeRoot)
	if g.NUMANode != nil {
		name, numa, err := numaNodeAttribute(*g.NUMANode)
		if err != nil {
			return resourceapi.Device{}, err
		}
		attrs[name] = numa
	}

	capacity := map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{}
	if ref.MIG == nil {
		attrs["index"] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(g.Index))}
		attrs["minor"] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(g.Minor))}
		attrs["migEnabled"] = resourceapi.DeviceAttribute{BoolValue: ptr.To(g.MIGEnabled)}
		name, busID, err := minor.PCIBusIDAttribute(g.PCIBusID)
		if err != nil {
			return resourceapi.Device{}, err
		}
		attrs[name] = busID
		if g.MemoryBytes > 0 {
			capacity["memory"] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(g.MemoryBytes, resource.BinarySI)}
		}
	} else {
		computeSlices, _, err := device.ParseProfile(ref.MIG.Profile)
		if err != nil {
			return resourceapi.Device{}, err
		}
		attrs["parentUUID"] = resourceapi.DeviceAttribute{StringValue: ptr.To(g.UUID)}
		attrs["parentIndex"] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(g.Index))}
		attrs["profile"] = resourceapi.DeviceAttribute{StringValue: ptr.To(ref.MIG.Profile)}
		capacity["computeSlices"] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(int64(computeSlices), resource.DecimalSI)}
		capacity["memorySlices"] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(int64(ref.MIG.Placement.Size), resource.DecimalSI)}
		if ref.MIG.MemoryBytes > 0 {
			capacity["memory"] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(ref.MIG.MemoryBytes, resource.BinarySI)}
		}
	}

	d := resourceapi.Device{Name: ref.Name(), Attributes: attrs}
	if len(capacity) > 0 {
		d.Capacity = capacity
	}
	if withCounters {
		d.ConsumesCounters = consumption(ref)
	}
	if !g.Health.IsHealthy() {
		reason := g.Health.Reason
		if len(validation.IsValidLabelValue(reason)) > 0 {
			reason = "Unhealthy"
		}
		d.Taints = []resourceapi.DeviceTaint{{
			Key:    opts.UnhealthyTaintKey(),
			Value:  reason,
			Effect: resourceapi.DeviceTaintEffectNoSchedule,
		}}
	}
	return d, nil
}
