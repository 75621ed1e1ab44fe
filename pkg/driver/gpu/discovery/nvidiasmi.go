package discovery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"

	"k8s.io/klog/v2"

	"github.com/drasched/drasched/pkg/driver/gpu/device"
)

// NvidiaSMI discovers GPUs with nvidia-smi. The same code parses live output
// and recorded transcripts: only the Runner differs. NVLink domains come
// from `nvidia-smi topo -m` and, like the sysfs topology, are left out when
// that fails.
type NvidiaSMI struct {
	// Runner runs nvidia-smi: an ExecRunner on a GPU host, a Recording in
	// dry runs and tests. When it also implements ProcFiles, as Recording
	// and Recorder do, the driver's /proc files are read through it rather
	// than from NvidiaProcDir, so that a transcript replays everything
	// discovery read.
	Runner Runner
	// SysfsRoot is where the PCIe root and NUMA node are read (default
	// /sys). Devices missing there simply lack these attributes.
	SysfsRoot string
	// NvidiaProcDir is the driver's /proc directory (default
	// /proc/driver/nvidia), read for device minor numbers. A GPU without a
	// usable entry there is left out (see Discover).
	NvidiaProcDir string
}

var _ Discoverer = &NvidiaSMI{}

func (n *NvidiaSMI) String() string {
	if rec, ok := n.Runner.(*Recording); ok && rec != nil {
		return "nvidia-smi (recorded output)"
	}
	return "nvidia-smi"
}

// WatchPaths implements Discoverer: nvidia-smi has nothing to watch, the
// periodic rescan notices changes.
func (n *NvidiaSMI) WatchPaths() []string { return nil }

// Declared implements Discoverer: nvidia-smi observes the hardware.
func (n *NvidiaSMI) Declared() bool { return false }

// noDevices is what nvidia-smi prints, with exit status 6, on a host
// without GPUs.
var noDevices = []byte("No devices were found")

// Discover implements Discoverer.
//
// A GPU whose minor number cannot be read from the driver's /proc entry is
// left out, with an error in the log and the refused_gpus metric, and the
// other GPUs are returned. The nvidia-smi index is no substitute: the two
// numberings differ on many hosts (nvidia-smi counts in PCI order, the
// driver in probe order), and a guessed minor would make the claim's CDI
// spec grant another GPU's /dev/nvidia<minor>. Publishing the GPU tainted
// would not help either: a taint keeps new claims away, not an allocation
// made before the entry broke, and Prepare would then hand out the wrong
// device node.
func (n *NvidiaSMI) Discover(ctx context.Context) ([]device.GPU, error) {
	logger := klog.FromContext(ctx)
	out, err := n.Runner.Run(ctx, QueryArgs...)
	if exitErr, ok := errors.AsType[*ExitError](err); ok && bytes.Contains(exitErr.Output, noDevices) {
		return []device.GPU{}, nil
	}
	if err != nil {
		return nil, err
	}
	rows, err := parseQuery(out)
	if err != nil {
		return nil, err
	}

	var list smiList
	var instances []smiGPUInstance
	var memory map[profileKey]int64
	if anyMIGEnabled(rows) {
		if list, instances, memory, err = n.listMIG(ctx); err != nil {
			return nil, err
		}
	}
	// The MIG devices' instances, for their nvidia-caps nodes. Without
	// them the MIG devices are published and refused at Prepare: the
	// other devices need not suffer from a listing that only MIG uses.
	var migInstances map[string]map[int]migInstance
	var migInstancesErr error
	if len(list.MIG) > 0 {
		migInstances, migInstancesErr = n.listMIGInstances(ctx)
		if migInstancesErr != nil {
			logger.Error(migInstancesErr, "MIG devices cannot be prepared: their GPU and compute instances are unknown")
		}
	}

	domains, err := n.readNVLinkDomains(ctx, rows)
	if err != nil {
		return nil, err
	}

	sysfsRoot := n.SysfsRoot
	if sysfsRoot == "" {
		sysfsRoot = DefaultSysfsRoot
	}
	procDir := n.NvidiaProcDir
	if procDir == "" {
		procDir = DefaultNvidiaProcDir
	}
	var files ProcFiles = ProcDir(procDir)
	if recorded, ok := n.Runner.(ProcFiles); ok {
		files = recorded
	}
	refused := map[string]int{}
	gpus := make([]device.GPU, 0, len(rows))
	for _, row := range rows {
		if len(row.unavailableFieldNames) > 0 {
			logger.V(5).Info("nvidia-smi has no value for some fields", "gpu", row.Index, "fields", row.unavailableFieldNames)
		}
		g := device.GPU{
			Index:                 row.Index,
			UUID:                  row.UUID,
			ProductName:           row.Name,
			CUDAComputeCapability: row.ComputeCapability,
			Architecture:          device.ArchitectureFor(row.ComputeCapability),
			DriverVersion:         row.DriverVersion,
			MemoryBytes:           row.MemoryMiB << 20,
			PCIBusID:              row.PCIBusID,
			NVLinkDomain:          domains[row.Index],
			MIGEnabled:            row.MIGEnabled,
			Health:                row.Health,
		}
		if g.ProductName == "" {
			g.ProductName = "NVIDIA GPU"
		}
		g.Brand = device.BrandFor(g.ProductName)
		if uuid, listed := list.GPUUUIDs[row.Index]; row.MIGEnabled && listed && uuid != row.UUID {
			return nil, invalidf("GPU %d has UUID %s in nvidia-smi --query-gpu but %s in nvidia-smi -L", row.Index, row.UUID, uuid)
		}
		var placed map[string]migInstance
		if row.MIGEnabled && len(list.MIG[row.Index]) > 0 {
			if g.MIG, placed, err = joinMIG(row.Index, list.MIG[row.Index], instances, memory, migInstances[row.PCIBusID]); err != nil {
				return nil, err
			}
		}
		info, err := readProcInfo(files, row.PCIBusID)
		if err != nil {
			reason := RefusedBadProcEntry
			if errors.Is(err, fs.ErrNotExist) {
				reason = RefusedNoProcEntry
			}
			refused[reason]++
			logger.Error(err, "Leaving out GPU: its minor number (/dev/nvidia<minor>) is unknown", "gpu", row.Index, "uuid", row.UUID, "pciBusID", row.PCIBusID, "reason", reason, "procDir", procDir)
			continue
		}
		if info.UUID != row.UUID {
			return nil, invalidf("GPU %d (%s) has UUID %s in nvidia-smi but %s in %s", row.Index, row.PCIBusID, row.UUID, info.UUID, procDir)
		}
		g.Minor = info.Minor
		if migInstancesErr == nil {
			addMIGCaps(ctx, &g, placed, files)
		}
		topo, errs := readTopology(sysfsRoot, row.PCIBusID)
		if len(errs) > 0 {
			logger.V(4).Info("Leaving out topology attributes", "gpu", row.Index, "err", errors.Join(errs...))
		}
		g.PCIeRoot, g.NUMANode = topo.PCIeRoot, topo.NUMANode
		gpus = append(gpus, g)
	}
	gpus, err = finish(gpus)
	if err != nil {
		return nil, fmt.Errorf("nvidia-smi: %w", err)
	}
	recordRefused(refused)
	logger.V(5).Info("Discovered GPUs", "backend", n.String(), "devices", describe(gpus))
	return gpus, nil
}

func anyMIGEnabled(rows []smiGPU) bool {
	for _, r := range rows {
		if r.MIGEnabled {
			return true
		}
	}
	return false
}

// listMIGInstances runs `nvidia-smi -q -x` for the instances of the MIG
// devices.
func (n *NvidiaSMI) listMIGInstances(ctx context.Context) (map[string]map[int]migInstance, error) {
	out, err := n.Runner.Run(ctx, QueryXMLArgs...)
	if err != nil {
		return nil, err
	}
	return parseMIGInstances(out)
}

// addMIGCaps sets the caps of g's MIG devices from their instances (by
// UUID; see joinMIG). A device whose instances or caps are unknown keeps
// none, with an error in the log.
func addMIGCaps(ctx context.Context, g *device.GPU, placed map[string]migInstance, files ProcFiles) {
	for i := range g.MIG {
		m := &g.MIG[i]
		inst, ok := placed[m.UUID]
		if !ok {
			klog.FromContext(ctx).Error(nil, "MIG device cannot be prepared: nvidia-smi -q -x does not name its GPU instance among those of nvidia-smi mig -lgi",
				"gpu", g.Index, "mig", m.UUID)
			continue
		}
		caps, err := readMIGCaps(files, g.Minor, inst)
		if err != nil {
			klog.FromContext(ctx).Error(err, "MIG device cannot be prepared: its nvidia-caps nodes are unknown", "gpu", g.Index, "mig", m.UUID)
			continue
		}
		m.Caps = caps
	}
}

// listMIG runs the MIG listings. `mig -lgi` and `mig -lgip` fail on hosts
// without GPU instances, so they only run when `-L` shows MIG devices.
func (n *NvidiaSMI) listMIG(ctx context.Context) (smiList, []smiGPUInstance, map[profileKey]int64, error) {
	out, err := n.Runner.Run(ctx, ListArgs...)
	if err != nil {
		return smiList{}, nil, nil, err
	}
	list, err := parseList(out)
	if err != nil {
		return smiList{}, nil, nil, err
	}
	if len(list.MIG) == 0 {
		return list, nil, nil, nil
	}
	out, err = n.Runner.Run(ctx, ListGPUInstancesArgs...)
	if err != nil {
		return smiList{}, nil, nil, err
	}
	instances, err := parseGPUInstances(out)
	if err != nil {
		return smiList{}, nil, nil, err
	}
	out, err = n.Runner.Run(ctx, ListGPUInstanceProfilesArgs...)
	if err != nil {
		return smiList{}, nil, nil, err
	}
	memory, err := parseGPUInstanceProfiles(out)
	if err != nil {
		return smiList{}, nil, nil, err
	}
	return list, instances, memory, nil
}
