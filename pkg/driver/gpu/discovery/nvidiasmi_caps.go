package discovery

import (
	"bufio"
	"bytes"
	"encoding/xml"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/drasched/drasched/pkg/driver/gpu/device"
)

// A MIG device's nvidia-caps nodes are found in three steps, because no
// single nvidia-smi listing names a MIG device's UUID together with its GPU
// and compute instance:
//
//  1. `nvidia-smi -L` gives each MIG UUID with its MIG device index
//     ("MIG 3g.20gb Device 1: (UUID: MIG-...)");
//  2. `nvidia-smi -q -x` gives, per GPU, each MIG device index with its GPU
//     instance ID and compute instance ID (<mig_device><index>,
//     <gpu_instance_id>, <compute_instance_id>); both listings number MIG
//     devices as NVML does;
//  3. the NVIDIA driver's capability files give the minor of each
//     instance's nvidia-caps node: "DeviceFileMinor: <minor>" in
//     capabilities/gpu<GPU minor>/mig/gi<GI>/access and
//     .../gi<GI>/ci<CI>/access under /proc/driver/nvidia.
//
// The join is by index, never by profile or listing order: a MIG device
// paired with another's instance would give a claim's containers that
// other device. A MIG device whose instances cannot be found is published
// without caps and Prepare refuses it; the other devices are unaffected.

// smiLog is the part of `nvidia-smi -q -x` that discovery reads.
type smiLog struct {
	GPUs []smiLogGPU `xml:"gpu"`
}

type smiLogGPU struct {
	// ID is the PCI bus ID ("00000000:07:00.0").
	ID         string         `xml:"id,attr"`
	MIGDevices []smiMIGDevice `xml:"mig_devices>mig_device"`
}

type smiMIGDevice struct {
	Index           string `xml:"index"`
	GPUInstance     string `xml:"gpu_instance_id"`
	ComputeInstance string `xml:"compute_instance_id"`
}

// migInstance is a MIG device's place: its GPU instance and compute
// instance IDs.
type migInstance struct {
	GPUInstance, ComputeInstance int
}

// parseMIGInstances reads `nvidia-smi -q -x` into the instances of each
// GPU's MIG devices, by normalised PCI bus ID and MIG device index.
func parseMIGInstances(out []byte) (map[string]map[int]migInstance, error) {
	var log smiLog
	// encoding/xml never fetches the DTD that nvidia-smi's DOCTYPE names.
	if err := xml.Unmarshal(out, &log); err != nil {
		return nil, invalidf("nvidia-smi -q -x output: %v", err)
	}
	byGPU := map[string]map[int]migInstance{}
	for _, g := range log.GPUs {
		busID, err := device.NormalizePCIBusID(g.ID)
		if err != nil {
			return nil, invalidf("nvidia-smi -q -x output: gpu id %q: %v", g.ID, err)
		}
		if _, dup := byGPU[busID]; dup {
			return nil, invalidf("nvidia-smi -q -x output: GPU %s listed twice", busID)
		}
		instances := map[int]migInstance{}
		for _, m := range g.MIGDevices {
			nums := atoiAll(strings.TrimSpace(m.Index), strings.TrimSpace(m.GPUInstance), strings.TrimSpace(m.ComputeInstance))
			if nums == nil {
				return nil, invalidf("nvidia-smi -q -x output: GPU %s: MIG device index %q, GPU instance %q, compute instance %q: want numbers",
					busID, m.Index, m.GPUInstance, m.ComputeInstance)
			}
			if _, dup := instances[nums[0]]; dup {
				return nil, invalidf("nvidia-smi -q -x output: GPU %s: MIG device %d listed twice", busID, nums[0])
			}
			instances[nums[0]] = migInstance{GPUInstance: nums[1], ComputeInstance: nums[2]}
		}
		byGPU[busID] = instances
	}
	return byGPU, nil
}

// capFileName is the name of an instance's access file in the driver's
// /proc directory: the GPU instance's when ci is negative.
func capFileName(gpuMinor, gi, ci int) string {
	name := path.Join("capabilities", fmt.Sprintf("gpu%d", gpuMinor), "mig", fmt.Sprintf("gi%d", gi))
	if ci >= 0 {
		name = path.Join(name, fmt.Sprintf("ci%d", ci))
	}
	return path.Join(name, "access")
}

// readCapMinor reads the DeviceFileMinor of an access file.
func readCapMinor(files ProcFiles, name string) (int, error) {
	data, err := files.ReadProcFile(name)
	if err != nil {
		return 0, err
	}
	scanner := bufio.NewScanner(bytes.NewReader(data))
	for scanner.Scan() {
		key, value, ok := strings.Cut(scanner.Text(), ":")
		if !ok || strings.TrimSpace(key) != "DeviceFileMinor" {
			continue
		}
		minor, err := strconv.Atoi(strings.TrimSpace(value))
		if err != nil || minor < 0 {
			return 0, invalidf("%s: DeviceFileMinor %q is not a number", name, strings.TrimSpace(value))
		}
		return minor, nil
	}
	return 0, invalidf("%s: no DeviceFileMinor", name)
}

// readMIGCaps reads the caps of the MIG device in inst on the GPU with
// this minor.
func readMIGCaps(files ProcFiles, gpuMinor int, inst migInstance) (*device.MIGCaps, error) {
	gi, err := readCapMinor(files, capFileName(gpuMinor, inst.GPUInstance, -1))
	if err != nil {
		return nil, fmt.Errorf("GPU instance %d: %w", inst.GPUInstance, err)
	}
	ci, err := readCapMinor(files, capFileName(gpuMinor, inst.GPUInstance, inst.ComputeInstance))
	if err != nil {
		return nil, fmt.Errorf("compute instance %d of GPU instance %d: %w", inst.ComputeInstance, inst.GPUInstance, err)
	}
	return &device.MIGCaps{GPUInstance: gi, ComputeInstance: ci}, nil
}
