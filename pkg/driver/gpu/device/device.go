// Package device is the driver's model of the GPUs on one node: what every
// discovery backend produces and what the slice builder, Prepare and health
// reporting consume. It holds no I/O.
//
// Every value in a GPU is normalised when a backend builds it (PCI bus IDs in
// the form the standard attribute wants, versions as semver), so consumers
// never have to parse again.
package device

import (
	"fmt"
	"strings"
)

// Type is the value of the "type" attribute, as in NVIDIA's gpu.nvidia.com
// driver.
type Type string

const (
	// TypeGPU is a whole physical GPU.
	TypeGPU Type = "gpu"
	// TypeMIG is one MIG device (GPU instance with its compute instance).
	TypeMIG Type = "mig"
)

// HealthStatus says whether a device can be given to a workload.
type HealthStatus string

const (
	// Healthy is the normal state.
	Healthy HealthStatus = "Healthy"
	// Unhealthy devices are published with a NoSchedule taint and are
	// reported as unhealthy to the kubelet.
	Unhealthy HealthStatus = "Unhealthy"
)

// Health is what a backend found out about a device.
type Health struct {
	// Status is Healthy when empty.
	Status HealthStatus `json:"status,omitempty"`
	// Reason is a short CamelCase token (a valid label value, for example
	// "UncorrectableECC"); it becomes the taint's value.
	Reason string `json:"reason,omitempty"`
	// Message is a human-readable detail for the kubelet's health report.
	Message string `json:"message,omitempty"`
}

// IsHealthy reports whether the device may be scheduled.
func (h Health) IsHealthy() bool {
	return h.Status == "" || h.Status == Healthy
}

// Placement is where a MIG GPU instance sits on its GPU, in memory slices, as
// `nvidia-smi mig -lgi` prints it ("Start:Size").
type Placement struct {
	Start int `json:"start"`
	Size  int `json:"size"`
}

// Slices returns the indexes of the memory slices the placement covers.
func (p Placement) Slices() []int {
	slices := make([]int, 0, p.Size)
	for i := p.Start; i < p.Start+p.Size; i++ {
		slices = append(slices, i)
	}
	return slices
}

// overlaps reports whether two placements share a memory slice.
func (p Placement) overlaps(o Placement) bool {
	return p.Start < o.Start+o.Size && o.Start < p.Start+p.Size
}

// MIGDevice is one MIG device of a GPU whose MIG mode is enabled.
type MIGDevice struct {
	// UUID is the MIG device's UUID ("MIG-...").
	UUID string
	// Profile is the GPU instance profile name without the "MIG " prefix,
	// for example "1g.10gb".
	Profile string
	// Placement is the GPU instance's placement in memory slices.
	Placement Placement
	// MemoryBytes is the instance's memory; zero when unknown.
	MemoryBytes int64
	// Caps are the nvidia-caps device nodes through which a container
	// uses this MIG device; nil when discovery could not read them, and
	// such a device is refused at Prepare.
	Caps *MIGCaps
}

// MIGCaps are the minor numbers of the two nvidia-caps device nodes
// (/dev/nvidia-caps/nvidia-cap<minor>) that give a process access to one
// MIG device: that of its GPU instance and that of its compute instance.
// The NVIDIA driver lists each as "DeviceFileMinor: <minor>" in
// /proc/driver/nvidia/capabilities/gpu<GPU minor>/mig/gi<GI ID>/access and
// .../gi<GI ID>/ci<CI ID>/access. Without both, CUDA in a container sees the
// parent GPU's device node but no MIG device; with another device's, it
// uses that device.
type MIGCaps struct {
	GPUInstance     int `json:"gpuInstance"`
	ComputeInstance int `json:"computeInstance"`
}

// CapsDeviceDir is where the NVIDIA driver's nvidia-caps device nodes are.
const CapsDeviceDir = "/dev/nvidia-caps"

// DeviceNodes returns the paths of the two device nodes.
func (c MIGCaps) DeviceNodes() []string {
	return []string{CapDeviceNode(c.GPUInstance), CapDeviceNode(c.ComputeInstance)}
}

// CapDeviceNode is the path of the nvidia-caps device node with this minor.
func CapDeviceNode(minor int) string {
	return fmt.Sprintf("%s/nvidia-cap%d", CapsDeviceDir, minor)
}

// GPU is one physical GPU and, when MIG is enabled, its MIG devices.
type GPU struct {
	// Index is nvidia-smi's index. It names the device ("gpu-<index>").
	Index int
	// Minor is the minor number of /dev/nvidia<minor>.
	Minor int
	// UUID is the GPU's UUID ("GPU-...").
	UUID string
	// ProductName is the marketing name, e.g. "NVIDIA H100 80GB HBM3".
	ProductName string
	// Brand follows NVML's brand names, e.g. "Nvidia", "GeForce".
	Brand string
	// Architecture is e.g. "Hopper"; empty when unknown.
	Architecture string
	// CUDAComputeCapability is a semver string ("9.0.0"); empty when unknown.
	CUDAComputeCapability string
	// DriverVersion is a semver string ("550.54.15"); empty when unknown.
	DriverVersion string
	// MemoryBytes is the framebuffer size; zero when unknown.
	MemoryBytes int64
	// PCIBusID is the normalised BDF, e.g. "0000:4f:00.0".
	PCIBusID string
	// PCIeRoot is the PCIe root complex ("pci0000:4a"); empty when unknown.
	PCIeRoot string
	// NUMANode is nil when the device has no NUMA affinity or it is unknown.
	NUMANode *int
	// NVLinkDomain names the NVLink/NVSwitch domain; empty when none.
	NVLinkDomain string
	// MIGEnabled is the current MIG mode.
	MIGEnabled bool
	// MIG lists the MIG devices, sorted by placement.
	MIG []MIGDevice
	// Health applies to the GPU and all its MIG devices.
	Health Health
}

// Name is the device name in the ResourceSlice. It is a DNS label.
func (g *GPU) Name() string {
	return fmt.Sprintf("gpu-%d", g.Index)
}

// MIGName is the device name of one of g's MIG devices. It is derived from
// the MIG UUID, not from the placement or an index: a name must keep meaning
// the same hardware for as long as a claim may hold it, and nvidia-smi gives
// no guarantee that its listing order is stable.
func (g *GPU) MIGName(m *MIGDevice) string {
	return fmt.Sprintf("gpu-%d-mig-%s", g.Index, strings.ToLower(strings.TrimPrefix(m.UUID, "MIG-")))
}

// CounterSetName is the name of the shared counter set of g's memory slices.
func (g *GPU) CounterSetName() string {
	return fmt.Sprintf("gpu-%d-memory-slices", g.Index)
}

// MemorySliceCounter names the counter of one memory slice.
func MemorySliceCounter(slice int) string {
	return fmt.Sprintf("memory-slice-%d", slice)
}

// MemorySlices returns the memory slices used by g's MIG devices, sorted.
// These are the counters of g's counter set: the whole GPU consumes all of
// them, every MIG device its own, so a whole GPU and its MIG devices exclude
// each other while MIG devices with disjoint placements do not.
func (g *GPU) MemorySlices() []int {
	used := map[int]bool{}
	maxSlice := -1
	for _, m := range g.MIG {
		for _, s := range m.Placement.Slices() {
			used[s] = true
			maxSlice = max(maxSlice, s)
		}
	}
	var slices []int
	for s := 0; s <= maxSlice; s++ {
		if used[s] {
			slices = append(slices, s)
		}
	}
	return slices
}

// Ref identifies one publishable device: a whole GPU (MIG == nil) or one of
// its MIG devices.
type Ref struct {
	GPU *GPU
	MIG *MIGDevice
}

// Name is the device name in the ResourceSlice.
func (r Ref) Name() string {
	if r.MIG != nil {
		return r.GPU.MIGName(r.MIG)
	}
	return r.GPU.Name()
}

// Type is the value of the "type" attribute.
func (r Ref) Type() Type {
	if r.MIG != nil {
		return TypeMIG
	}
	return TypeGPU
}

// UUID is the UUID a container runtime uses for this device.
func (r Ref) UUID() string {
	if r.MIG != nil {
		return r.MIG.UUID
	}
	return r.GPU.UUID
}

// Hardware lists keys for the hardware the device occupies. A whole GPU
// is its UUID; a MIG device is its own UUID and one key per memory slice of
// its placement (MemorySliceKey), each part of its GPU's key (HardwareParent).
// Two devices overlap when a key of one equals a key of the other or is
// part of it: a whole GPU overlaps each of its MIG devices, also one created
// after the GPU was prepared, and MIG devices overlap only when they are the
// same device or their placements share a memory slice. This is what the
// counters of the GPU's counter set let the scheduler allocate together
// (MemorySlices). Prepare compares the keys to refuse one piece of hardware
// to a second claim, whatever the device names of the allocations.
//
// A MIG device keeps its own UUID among its keys for the version before
// memory slices were keys, which compares keys for equality and knows a MIG
// device by its UUID: rolled back to, it still refuses a whole GPU one of
// whose MIG devices (while it exists) this version prepared.
func (r Ref) Hardware() []string {
	if r.MIG == nil {
		return []string{r.GPU.UUID}
	}
	keys := []string{r.MIG.UUID}
	for _, s := range r.MIG.Placement.Slices() {
		keys = append(keys, MemorySliceKey(r.GPU.UUID, s))
	}
	return keys
}

// MemorySliceKey is the hardware key of one memory slice of the GPU with
// this UUID.
func MemorySliceKey(gpuUUID string, slice int) string {
	return gpuUUID + "/" + MemorySliceCounter(slice)
}

// HardwareParent returns the key of the hardware that a hardware key is
// part of (a memory slice's GPU), and false for a key that is no part of
// another.
func HardwareParent(key string) (string, bool) {
	parent, _, ok := strings.Cut(key, "/")
	return parent, ok
}

// Refs lists every publishable device in publishing order: whole GPUs by
// index first, then MIG devices grouped by GPU.
func Refs(gpus []GPU) []Ref {
	var refs []Ref
	for i := range gpus {
		refs = append(refs, Ref{GPU: &gpus[i]})
	}
	for i := range gpus {
		for j := range gpus[i].MIG {
			refs = append(refs, Ref{GPU: &gpus[i], MIG: &gpus[i].MIG[j]})
		}
	}
	return refs
}

// Index maps device names to devices.
func Index(gpus []GPU) map[string]Ref {
	refs := Refs(gpus)
	index := make(map[string]Ref, len(refs))
	for _, ref := range refs {
		index[ref.Name()] = ref
	}
	return index
}
