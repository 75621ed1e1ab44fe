package device

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNormalizePCIBusID(t *testing.T) {
	tests := map[string]struct {
		in, want string
	}{
		"nvidia-smi form":       {in: "00000000:4F:00.0", want: "0000:4f:00.0"},
		"sysfs form":            {in: "0000:4f:00.0", want: "0000:4f:00.0"},
		"non-zero domain":       {in: "00000002:0A:1F.7", want: "0002:0a:1f.7"},
		"surrounding spaces":    {in: " 00000000:18:00.0 ", want: "0000:18:00.0"},
		"domain over 16 bits":   {in: "00010000:18:00.0"},
		"no domain":             {in: "18:00.0"},
		"function out of range": {in: "0000:18:00.8"},
		"garbage":               {in: "../../../etc"},
		"empty":                 {in: ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := NormalizePCIBusID(tc.in)
			if tc.want == "" {
				if !errors.Is(err, ErrInvalid) {
					t.Errorf("NormalizePCIBusID(%q) = %q, %v; want an invalid-value error", tc.in, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("NormalizePCIBusID(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestNormalizeVersion(t *testing.T) {
	tests := map[string]struct {
		in, want string
	}{
		"compute capability":   {in: "9.0", want: "9.0.0"},
		"driver version":       {in: "550.54.15", want: "550.54.15"},
		"leading zeros":        {in: "535.104.05", want: "535.104.5"},
		"single number":        {in: "550"},
		"four parts":           {in: "1.2.3.4"},
		"suffix":               {in: "550.54.15-beta"},
		"negative":             {in: "-1.0"},
		"huge part":            {in: "99999999999.0"},
		"not available marker": {in: "[N/A]"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := NormalizeVersion(tc.in)
			if tc.want == "" {
				if !errors.Is(err, ErrInvalid) {
					t.Errorf("NormalizeVersion(%q) = %q, %v; want an invalid-value error", tc.in, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("NormalizeVersion(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestParseProfile(t *testing.T) {
	tests := map[string]struct {
		compute, memory int
		wantErr         bool
	}{
		"1g.5gb":     {compute: 1, memory: 5},
		"1g.10gb+me": {compute: 1, memory: 10},
		"7g.141gb":   {compute: 7, memory: 141},
		"1c.3g.20gb": {wantErr: true},
		"3g":         {wantErr: true},
		"0g.5gb":     {wantErr: true},
		"MIG 1g.5gb": {wantErr: true},
	}
	for profile, tc := range tests {
		t.Run(profile, func(t *testing.T) {
			compute, memory, err := ParseProfile(profile)
			if (err != nil) != tc.wantErr || compute != tc.compute || memory != tc.memory {
				t.Errorf("ParseProfile(%q) = %d, %d, %v", profile, compute, memory, err)
			}
		})
	}
}

func TestBrandAndArchitecture(t *testing.T) {
	brands := map[string]string{
		"NVIDIA H100 80GB HBM3":   "Nvidia",
		"NVIDIA GeForce RTX 4090": "GeForceRTX",
		"Tesla T4":                "Tesla",
		"Quadro RTX 8000":         "QuadroRTX",
		"NVIDIA RTX A6000":        "NvidiaRTX",
		"NVIDIA TITAN V":          "Titan",
	}
	for name, want := range brands {
		if got := BrandFor(name); got != want {
			t.Errorf("BrandFor(%q) = %q, want %q", name, got, want)
		}
	}
	archs := map[string]string{"9.0.0": "Hopper", "8.0.0": "Ampere", "8.9.0": "Ada Lovelace", "10.0.0": "Blackwell", "1.0.0": "", "": ""}
	for cc, want := range archs {
		if got := ArchitectureFor(cc); got != want {
			t.Errorf("ArchitectureFor(%q) = %q, want %q", cc, got, want)
		}
	}
}

func validGPU(index int) GPU {
	return GPU{
		Index: index, Minor: index,
		UUID:        "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c1" + string(rune('0'+index)) + "0",
		ProductName: "NVIDIA A100-SXM4-40GB", PCIBusID: "0000:0" + string(rune('0'+index)) + ":00.0",
		MIGEnabled: true,
		MIG: []MIGDevice{
			{UUID: "MIG-b3e729f2-40a3-4c60-b2ec-940dcb12b6c" + string(rune('0'+index)), Profile: "3g.20gb", Placement: Placement{Start: 4, Size: 4},
				Caps: &MIGCaps{GPUInstance: 100*index + 12, ComputeInstance: 100*index + 13}},
			{UUID: "MIG-b3e729f2-40a3-4c60-b2ec-940dcb12b6d" + string(rune('0'+index)), Profile: "1g.5gb", Placement: Placement{Start: 1, Size: 1}},
		},
	}
}

func TestMemorySlicesAndNames(t *testing.T) {
	g := validGPU(3)
	if diff := cmp.Diff([]int{1, 4, 5, 6, 7}, g.MemorySlices()); diff != "" {
		t.Errorf("MemorySlices (-want +got):\n%s", diff)
	}
	refs := Refs([]GPU{g})
	var names []string
	for _, r := range refs {
		names = append(names, r.Name())
	}
	want := []string{"gpu-3", "gpu-3-mig-b3e729f2-40a3-4c60-b2ec-940dcb12b6c3", "gpu-3-mig-b3e729f2-40a3-4c60-b2ec-940dcb12b6d3"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	slice := func(n int) string { return g.UUID + "/memory-slice-" + strconv.Itoa(n) }
	hardware := map[string][]string{
		"gpu-3": {g.UUID},
		"gpu-3-mig-b3e729f2-40a3-4c60-b2ec-940dcb12b6c3": {g.MIG[0].UUID, slice(4), slice(5), slice(6), slice(7)},
		"gpu-3-mig-b3e729f2-40a3-4c60-b2ec-940dcb12b6d3": {g.MIG[1].UUID, slice(1)},
	}
	for _, r := range refs {
		if diff := cmp.Diff(hardware[r.Name()], r.Hardware()); diff != "" {
			t.Errorf("hardware of %s (-want +got):\n%s", r.Name(), diff)
		}
		for _, key := range r.Hardware() {
			parent, ok := HardwareParent(key)
			if want := strings.HasPrefix(key, g.UUID+"/"); ok != want || ok && parent != g.UUID {
				t.Errorf("HardwareParent(%q) = %q, %v", key, parent, ok)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	tests := map[string]struct {
		modify  func(gpus []GPU)
		wantErr string
	}{
		"valid":              {modify: func([]GPU) {}},
		"duplicate index":    {modify: func(g []GPU) { g[1].Index = 0 }, wantErr: "gpus[1].index: Duplicate value"},
		"duplicate bus ID":   {modify: func(g []GPU) { g[1].PCIBusID = g[0].PCIBusID }, wantErr: "gpus[1].pciBusID: Duplicate value"},
		"MIG UUID reused":    {modify: func(g []GPU) { g[1].MIG[0].UUID = g[0].MIG[0].UUID }, wantErr: "gpus[1].mig.devices[0].uuid: Duplicate value"},
		"legacy MIG UUID":    {modify: func(g []GPU) { g[0].MIG[0].UUID = "MIG-GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c100/1/0" }, wantErr: "driver R470 or newer"},
		"overlap":            {modify: func(g []GPU) { g[0].MIG[1].Placement = Placement{Start: 5, Size: 1} }, wantErr: "overlaps MIG device"},
		"placement too far":  {modify: func(g []GPU) { g[0].MIG[0].Placement = Placement{Start: 30, Size: 4} }, wantErr: "within 32 memory slices"},
		"not normalised bus": {modify: func(g []GPU) { g[0].PCIBusID = "00000000:01:00.0" }, wantErr: "must be a normalised PCI address"},
		"bad semver":         {modify: func(g []GPU) { g[0].DriverVersion = "535.104.05" }, wantErr: "driverVersion"},
		"bad PCIe root":      {modify: func(g []GPU) { g[0].PCIeRoot = "0000:00" }, wantErr: "pcieRoot"},
		"health reason":      {modify: func(g []GPU) { g[0].Health = Health{Status: Unhealthy, Reason: "has spaces"} }, wantErr: "health.reason"},
		"health status":      {modify: func(g []GPU) { g[0].Health = Health{Status: "Sick"} }, wantErr: "health.status: Unsupported value"},
		"no product name":    {modify: func(g []GPU) { g[0].ProductName = "" }, wantErr: "productName: Required value"},
		"MIG caps shared": {
			modify:  func(g []GPU) { g[1].MIG[0].Caps.ComputeInstance = g[0].MIG[0].Caps.GPUInstance },
			wantErr: "gpus[1].mig.devices[0].caps.computeInstance: Duplicate value",
		},
		"MIG caps of one device": {
			modify:  func(g []GPU) { g[0].MIG[0].Caps.ComputeInstance = g[0].MIG[0].Caps.GPUInstance },
			wantErr: "gpus[0].mig.devices[0].caps.computeInstance: Duplicate value",
		},
		"MIG caps minor": {modify: func(g []GPU) { g[0].MIG[0].Caps.GPUInstance = -1 }, wantErr: "caps.gpuInstance: Invalid value"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			gpus := []GPU{validGPU(0), validGPU(1)}
			tc.modify(gpus)
			err := Validate(gpus)
			if tc.wantErr == "" {
				if err != nil {
					t.Errorf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Validate: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}
