package discovery

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/klog/v2"

	"github.com/drasched/drasched/pkg/driver/gpu/device"
)

// nvidiaVendorID is the PCI vendor ID of NVIDIA.
const nvidiaVendorID = "0x10de"

// PCI class codes (class, subclass) of the functions that are GPUs. The
// audio, USB and NVSwitch functions of NVIDIA boards have other classes.
var gpuClassPrefixes = []string{
	"0x0300", // VGA-compatible display controller
	"0x0302", // 3D controller (data-center GPUs)
}

// product is what sysfs cannot say about a GPU but its PCI device ID does.
type product struct {
	MemoryMiB         int64
	ComputeCapability string
}

// products lists data-center GPUs by PCI device ID. Unknown IDs are still
// published, without memory and compute capability.
var products = map[string]product{
	"0x1eb8": {MemoryMiB: 15360, ComputeCapability: "7.5"},  // Tesla T4
	"0x20b0": {MemoryMiB: 40960, ComputeCapability: "8.0"},  // A100-SXM4-40GB
	"0x20b2": {MemoryMiB: 81920, ComputeCapability: "8.0"},  // A100-SXM4-80GB
	"0x20b5": {MemoryMiB: 81920, ComputeCapability: "8.0"},  // A100 80GB PCIe
	"0x20f1": {MemoryMiB: 40960, ComputeCapability: "8.0"},  // A100-PCIE-40GB
	"0x2330": {MemoryMiB: 81559, ComputeCapability: "9.0"},  // H100 80GB HBM3 (SXM5)
	"0x2331": {MemoryMiB: 81559, ComputeCapability: "9.0"},  // H100 PCIe
	"0x2335": {MemoryMiB: 143771, ComputeCapability: "9.0"}, // H200
	"0x26b5": {MemoryMiB: 46068, ComputeCapability: "8.9"},  // L40
	"0x26b9": {MemoryMiB: 46068, ComputeCapability: "8.9"},  // L40S
	"0x27b8": {MemoryMiB: 23034, ComputeCapability: "8.9"},  // L4
}

// Sysfs discovers GPUs by scanning PCI devices in sysfs. It needs the NVIDIA
// driver's /proc entries for UUIDs and minor numbers, and it does not see
// MIG devices (use the nvidia-smi backend for MIG).
type Sysfs struct {
	// Root is the sysfs mount, default /sys.
	Root string
	// NvidiaProcDir is the driver's /proc directory, default
	// /proc/driver/nvidia.
	NvidiaProcDir string
}

var _ Discoverer = &Sysfs{}

func (s *Sysfs) root() string {
	if s.Root == "" {
		return DefaultSysfsRoot
	}
	return s.Root
}

func (s *Sysfs) procDir() string {
	if s.NvidiaProcDir == "" {
		return DefaultNvidiaProcDir
	}
	return s.NvidiaProcDir
}

func (s *Sysfs) String() string { return "sysfs " + s.root() }

// Declared implements Discoverer: sysfs shows the hardware.
func (s *Sysfs) Declared() bool { return false }

// WatchPaths implements Discoverer. The kernel does not send inotify events
// for sysfs on hot-plug, so on real hosts the periodic rescan does the work;
// the watch covers trees that are ordinary directories (tests, bind mounts).
func (s *Sysfs) WatchPaths() []string {
	return []string{filepath.Join(s.root(), "bus", "pci", "devices"), filepath.Join(s.procDir(), "gpus")}
}

// Discover implements Discoverer.
func (s *Sysfs) Discover(ctx context.Context) ([]device.GPU, error) {
	logger := klog.FromContext(ctx)
	dir := filepath.Join(s.root(), "bus", "pci", "devices")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("sysfs: %w", err)
	}
	var busIDs []string
	for _, e := range entries {
		busID := e.Name()
		pciDir := filepath.Join(dir, busID)
		vendor, err := readSysfsString(filepath.Join(pciDir, "vendor"))
		if err != nil || vendor != nvidiaVendorID {
			continue
		}
		class, err := readSysfsString(filepath.Join(pciDir, "class"))
		if err != nil || !isGPUClass(class) {
			continue
		}
		normalized, err := device.NormalizePCIBusID(busID)
		if err != nil || normalized != busID {
			return nil, invalidf("sysfs: PCI device directory %q is not a PCI address", busID)
		}
		if drv := boundDriver(pciDir); drv != "nvidia" {
			logger.V(2).Info("Skipping NVIDIA GPU not bound to the nvidia driver", "pciBusID", busID, "driver", drv)
			continue
		}
		busIDs = append(busIDs, busID)
	}
	// nvidia-smi numbers GPUs in PCI bus order; do the same.
	sort.Strings(busIDs)

	driverVersion, err := readDriverVersion(s.procDir())
	if err != nil {
		return nil, fmt.Errorf("sysfs: %w", err)
	}
	if driverVersion != "" {
		if driverVersion, err = device.NormalizeVersion(driverVersion); err != nil {
			return nil, fmt.Errorf("sysfs: %w", err)
		}
	}
	gpus := make([]device.GPU, 0, len(busIDs))
	var missing []string
	for i, busID := range busIDs {
		info, err := readProcInfo(ProcDir(s.procDir()), busID)
		if errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, busID)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("sysfs: %s: %w", s.procDir(), err)
		}
		g := device.GPU{
			Index:         i,
			Minor:         info.Minor,
			UUID:          info.UUID,
			ProductName:   info.Model,
			DriverVersion: driverVersion,
			PCIBusID:      busID,
		}
		g.Brand = device.BrandFor(g.ProductName)
		deviceID, _ := readSysfsString(filepath.Join(dir, busID, "device"))
		if p, ok := products[deviceID]; ok {
			g.MemoryBytes = p.MemoryMiB << 20
			g.CUDAComputeCapability, _ = device.NormalizeVersion(p.ComputeCapability)
			g.Architecture = device.ArchitectureFor(g.CUDAComputeCapability)
		}
		topo, errs := readTopology(s.root(), busID)
		if len(errs) > 0 {
			logger.V(4).Info("Leaving out topology attributes", "pciBusID", busID, "err", errors.Join(errs...))
		}
		g.PCIeRoot, g.NUMANode = topo.PCIeRoot, topo.NUMANode
		gpus = append(gpus, g)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("sysfs: GPUs %s are bound to the nvidia driver but have no %s/gpus/<bus ID>/information (is the driver loaded and --nvidia-proc-dir right?): %w",
			strings.Join(missing, ","), s.procDir(), fs.ErrNotExist)
	}
	gpus, err = finish(gpus)
	if err != nil {
		return nil, fmt.Errorf("sysfs: %w", err)
	}
	logger.V(5).Info("Discovered GPUs", "backend", s.String(), "devices", describe(gpus))
	return gpus, nil
}

func isGPUClass(class string) bool {
	for _, prefix := range gpuClassPrefixes {
		if strings.HasPrefix(class, prefix) {
			return true
		}
	}
	return false
}

// boundDriver returns the name of the kernel driver bound to a PCI device,
// "" when none.
func boundDriver(pciDir string) string {
	target, err := os.Readlink(filepath.Join(pciDir, "driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(target)
}

func readSysfsString(path string) (string, error) {
	data, err := readHostFile(path)
	if err != nil {
		return "", err
	}
	return strings.ToLower(strings.TrimSpace(string(data))), nil
}
