package discovery

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/drasched/drasched/pkg/driver/gpu/device"
)

// Inventory file identification.
const (
	InventoryAPIVersion = "gpu.drasched.dev/v1alpha1"
	InventoryKind       = "GPUInventory"
)

// maxInventorySize bounds inventory files: a node with 1000 GPUs needs well
// under 1 MiB.
const maxInventorySize = 4 << 20

// InventoryFile is the YAML format of an inventory. Unknown fields are
// rejected.
type InventoryFile struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// DriverVersion applies to every GPU that does not set its own.
	DriverVersion string `json:"driverVersion,omitempty"`
	// GPUs lists the node's GPUs.
	GPUs []InventoryGPU `json:"gpus"`
}

// InventoryGPU describes one GPU.
type InventoryGPU struct {
	// Index defaults to the GPU's position in the list.
	Index *int `json:"index,omitempty"`
	// Minor defaults to the index.
	Minor       *int   `json:"minor,omitempty"`
	UUID        string `json:"uuid"`
	ProductName string `json:"productName"`
	// Brand defaults to the brand derived from the product name.
	Brand string `json:"brand,omitempty"`
	// Architecture defaults to the one of the compute capability.
	Architecture          string            `json:"architecture,omitempty"`
	CUDAComputeCapability string            `json:"cudaComputeCapability,omitempty"`
	DriverVersion         string            `json:"driverVersion,omitempty"`
	Memory                resource.Quantity `json:"memory"`
	// PCIBusID accepts both "0000:4f:00.0" and nvidia-smi's "00000000:4F:00.0".
	PCIBusID     string        `json:"pciBusID"`
	PCIeRoot     string        `json:"pcieRoot,omitempty"`
	NUMANode     *int          `json:"numaNode,omitempty"`
	NVLinkDomain string        `json:"nvlinkDomain,omitempty"`
	MIG          *InventoryMIG `json:"mig,omitempty"`
	// Health lets simulations and tests mark a GPU unhealthy.
	Health *device.Health `json:"health,omitempty"`
}

// InventoryMIG is the MIG configuration of one GPU.
type InventoryMIG struct {
	Enabled bool                 `json:"enabled"`
	Devices []InventoryMIGDevice `json:"devices,omitempty"`
}

// InventoryMIGDevice is one MIG device.
type InventoryMIGDevice struct {
	UUID      string           `json:"uuid"`
	Profile   string           `json:"profile"`
	Placement device.Placement `json:"placement"`
	// Memory defaults to the nominal memory of the profile name
	// ("1g.10gb" → 10Gi).
	Memory *resource.Quantity `json:"memory,omitempty"`
	// Caps are the minors of the device's nvidia-caps nodes
	// (/dev/nvidia-caps/nvidia-cap<minor>); Prepare refuses a MIG device
	// without them.
	Caps *device.MIGCaps `json:"caps,omitempty"`
}

// Inventory discovers the GPUs described by a YAML file.
type Inventory struct {
	Path string
}

var _ Discoverer = &Inventory{}

func (i *Inventory) String() string { return "inventory " + i.Path }

// WatchPaths implements Discoverer. It watches the directory, not the file:
// editors and ConfigMap updates replace the file, which ends a watch on the
// file itself.
func (i *Inventory) WatchPaths() []string { return []string{filepath.Dir(i.Path)} }

// Declared implements Discoverer: the file declares the devices, and a GPU
// taken out of it is gone.
func (i *Inventory) Declared() bool { return true }

// Discover implements Discoverer.
func (i *Inventory) Discover(ctx context.Context) ([]device.GPU, error) {
	data, err := readLimited(i.Path, maxInventorySize)
	if err != nil {
		return nil, fmt.Errorf("inventory: %w", err)
	}
	gpus, err := ParseInventory(data)
	if err != nil {
		return nil, fmt.Errorf("inventory %s: %w", i.Path, err)
	}
	klog.FromContext(ctx).V(5).Info("Discovered GPUs", "backend", i.String(), "devices", describe(gpus))
	return gpus, nil
}

// ParseInventory decodes and validates an inventory document.
func ParseInventory(data []byte) ([]device.GPU, error) {
	if len(data) > maxInventorySize {
		return nil, invalidf("larger than %d bytes", maxInventorySize)
	}
	var inv InventoryFile
	if err := decodeStrict(data, &inv); err != nil {
		return nil, invalidf("decode: %v", err)
	}
	return inv.GPUList()
}

// decodeStrict decodes YAML (or JSON) into v, rejecting unknown and
// duplicate fields and matching field names case-sensitively. Its errors
// name the offending field's path.
func decodeStrict(data []byte, v any) error {
	jsonData, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return err
	}
	strictErrs, err := kjson.UnmarshalStrict(jsonData, v)
	if err != nil {
		return err
	}
	return errors.Join(strictErrs...)
}

// GPUList converts the file's GPUs into validated devices.
func (inv *InventoryFile) GPUList() ([]device.GPU, error) {
	var errs field.ErrorList
	if inv.APIVersion != InventoryAPIVersion {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), inv.APIVersion, []string{InventoryAPIVersion}))
	}
	if inv.Kind != InventoryKind {
		errs = append(errs, field.NotSupported(field.NewPath("kind"), inv.Kind, []string{InventoryKind}))
	}
	gpus := make([]device.GPU, 0, len(inv.GPUs))
	for n := range inv.GPUs {
		g, gpuErrs := inv.gpu(n)
		errs = append(errs, gpuErrs...)
		gpus = append(gpus, g)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidInput, errs.ToAggregate())
	}
	return finish(gpus)
}

func (inv *InventoryFile) gpu(n int) (device.GPU, field.ErrorList) {
	var errs field.ErrorList
	in := &inv.GPUs[n]
	p := field.NewPath("gpus").Index(n)
	g := device.GPU{
		Index:        n,
		UUID:         in.UUID,
		ProductName:  in.ProductName,
		Brand:        in.Brand,
		Architecture: in.Architecture,
		MemoryBytes:  in.Memory.Value(),
		PCIeRoot:     in.PCIeRoot,
		NUMANode:     in.NUMANode,
		NVLinkDomain: in.NVLinkDomain,
	}
	if in.Index != nil {
		g.Index = *in.Index
	}
	g.Minor = g.Index
	if in.Minor != nil {
		g.Minor = *in.Minor
	}
	if g.Brand == "" {
		g.Brand = device.BrandFor(g.ProductName)
	}
	if in.Memory.Sign() <= 0 {
		errs = append(errs, field.Required(p.Child("memory"), "a positive quantity such as 80Gi"))
	}
	var err error
	if g.PCIBusID, err = device.NormalizePCIBusID(in.PCIBusID); err != nil {
		errs = append(errs, field.Invalid(p.Child("pciBusID"), in.PCIBusID, err.Error()))
	}
	if in.CUDAComputeCapability != "" {
		if g.CUDAComputeCapability, err = device.NormalizeVersion(in.CUDAComputeCapability); err != nil {
			errs = append(errs, field.Invalid(p.Child("cudaComputeCapability"), in.CUDAComputeCapability, err.Error()))
		}
	}
	if g.Architecture == "" {
		g.Architecture = device.ArchitectureFor(g.CUDAComputeCapability)
	}
	driverVersion := in.DriverVersion
	if driverVersion == "" {
		driverVersion = inv.DriverVersion
	}
	if driverVersion != "" {
		if g.DriverVersion, err = device.NormalizeVersion(driverVersion); err != nil {
			errs = append(errs, field.Invalid(p.Child("driverVersion"), driverVersion, err.Error()))
		}
	}
	if in.Health != nil {
		g.Health = *in.Health
	}
	if in.MIG != nil {
		g.MIGEnabled = in.MIG.Enabled
		for j, m := range in.MIG.Devices {
			mig := device.MIGDevice{UUID: m.UUID, Profile: m.Profile, Placement: m.Placement, Caps: m.Caps}
			_, memoryGB, err := device.ParseProfile(m.Profile)
			switch {
			case m.Memory != nil:
				mig.MemoryBytes = m.Memory.Value()
			case err == nil:
				mig.MemoryBytes = int64(memoryGB) << 30
			}
			if m.Memory != nil && m.Memory.Sign() <= 0 {
				errs = append(errs, field.Invalid(p.Child("mig", "devices").Index(j).Child("memory"), m.Memory.String(), "must be positive"))
			}
			g.MIG = append(g.MIG, mig)
		}
	}
	return g, errs
}
