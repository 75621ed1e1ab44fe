package discovery

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"
)

var shippedInventories = filepath.Join("..", "..", "..", "..", "config", "inventory")

func TestShippedInventories(t *testing.T) {
	tests := map[string]struct {
		gpus, migEnabled, migDevices int
	}{
		"h100-hgx-8.yaml":         {gpus: 8},
		"a100-mig-8.yaml":         {gpus: 8, migEnabled: 6, migDevices: 25},
		"l40s-4.yaml":             {gpus: 4},
		"l40s-8-pcie-switch.yaml": {gpus: 8},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			gpus, err := (&Inventory{Path: filepath.Join(shippedInventories, name)}).Discover(ctx)
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			migEnabled, migDevices := 0, 0
			for _, g := range gpus {
				if g.MIGEnabled {
					migEnabled++
				}
				migDevices += len(g.MIG)
				if g.NUMANode == nil || g.PCIeRoot == "" || g.DriverVersion == "" || g.Architecture == "" {
					t.Errorf("%s lacks topology or versions: %+v", g.Name(), g)
				}
			}
			if len(gpus) != tc.gpus || migEnabled != tc.migEnabled || migDevices != tc.migDevices {
				t.Errorf("got %d GPUs, %d in MIG mode, %d MIG devices; want %d, %d, %d",
					len(gpus), migEnabled, migDevices, tc.gpus, tc.migEnabled, tc.migDevices)
			}
		})
	}
}

const validInventory = `apiVersion: gpu.drasched.dev/v1alpha1
kind: GPUInventory
driverVersion: "550.54.15"
gpus:
- uuid: GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c
  productName: NVIDIA H100 80GB HBM3
  cudaComputeCapability: "9.0"
  memory: 81559Mi
  pciBusID: "00000000:18:00.0"
  numaNode: 0
- uuid: GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16d
  productName: NVIDIA H100 80GB HBM3
  cudaComputeCapability: "9.0"
  memory: 81559Mi
  pciBusID: "0000:2a:00.0"
  mig:
    enabled: true
    devices:
    - uuid: MIG-b3e729f2-40a3-4c60-b2ec-940dcb12b6cc
      profile: 3g.40gb
      placement: {start: 0, size: 4}
`

func TestParseInventory(t *testing.T) {
	gpus, err := ParseInventory([]byte(validInventory))
	if err != nil {
		t.Fatalf("ParseInventory: %v", err)
	}
	want := []gpuSummary{
		{Name: "gpu-0", Product: "NVIDIA H100 80GB HBM3", BusID: "0000:18:00.0", Driver: "550.54.15", CC: "9.0.0", Arch: "Hopper", Brand: "Nvidia", MemoryMiB: 81559, Minor: 0, Health: "/"},
		{Name: "gpu-1", Product: "NVIDIA H100 80GB HBM3", BusID: "0000:2a:00.0", Driver: "550.54.15", CC: "9.0.0", Arch: "Hopper", Brand: "Nvidia", MemoryMiB: 81559, Minor: 1, Health: "/",
			MIGEnabled: true, MIG: []string{"3g.40gb@0:4=40960"}},
	}
	if diff := cmp.Diff(want, summarizeGPUs(gpus)); diff != "" {
		t.Errorf("GPUs (-want +got):\n%s", diff)
	}
}

// TestParseInventoryErrors: a broken inventory gives an error naming the
// problem and no devices.
func TestParseInventoryErrors(t *testing.T) {
	replace := func(old, new string) string { return strings.Replace(validInventory, old, new, 1) }
	tests := map[string]struct {
		data    string
		wantErr string
	}{
		"unknown field":          {data: replace("  numaNode: 0\n", "  numaNode: 0\n  numa: 0\n"), wantErr: `unknown field "gpus[0].numa"`},
		"duplicate key":          {data: replace("  numaNode: 0\n", "  numaNode: 0\n  numaNode: 1\n"), wantErr: "already set"},
		"wrong kind":             {data: replace("kind: GPUInventory", "kind: Inventory"), wantErr: "kind: Unsupported value"},
		"wrong apiVersion":       {data: replace("gpu.drasched.dev/v1alpha1", "v1"), wantErr: "apiVersion: Unsupported value"},
		"truncated file":         {data: validInventory[:len(validInventory)/2], wantErr: "gpus[1]"},
		"cut inside a MIG entry": {data: validInventory[:strings.Index(validInventory, "      placement")], wantErr: "placement"},
		"duplicate UUID":         {data: replace("e59b25b2c16d", "e59b25b2c16c"), wantErr: "gpus[1].uuid: Duplicate value"},
		"bad PCI bus ID":         {data: replace(`"0000:2a:00.0"`, `"2a:00.0"`), wantErr: "gpus[1].pciBusID"},
		"missing memory":         {data: replace("  memory: 81559Mi\n  pciBusID: \"0000:2a", "  pciBusID: \"0000:2a"), wantErr: "gpus[1].memory: Required"},
		"bad compute capability": {data: replace(`"9.0"`, `"sm_90"`), wantErr: "gpus[0].cudaComputeCapability"},
		"overlapping MIG": {
			data:    validInventory + "    - uuid: MIG-b3e729f2-40a3-4c60-b2ec-940dcb12b6cd\n      profile: 1g.10gb\n      placement: {start: 3, size: 1}\n",
			wantErr: "overlaps MIG device MIG-b3e729f2-40a3-4c60-b2ec-940dcb12b6cc",
		},
		"MIG devices without MIG mode": {data: replace("enabled: true", "enabled: false"), wantErr: "MIG devices need MIG mode enabled"},
		"unknown MIG profile":          {data: replace("3g.40gb", "3g.40GB; rm -rf /"), wantErr: "gpus[1].mig.devices[0].profile"},
		"unhealthy without reason":     {data: replace("  numaNode: 0\n", "  numaNode: 0\n  health: {status: Unhealthy}\n"), wantErr: "gpus[0].health.reason: Required"},
		"NUMA node out of range":       {data: replace("numaNode: 0", "numaNode: 4096"), wantErr: "gpus[0].numaNode"},
		"not YAML":                     {data: "\x00\x01{[", wantErr: "decode"},
		"huge":                         {data: validInventory + "# " + strings.Repeat("x", maxInventorySize), wantErr: "larger than"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			gpus, err := ParseInventory([]byte(tc.data))
			if err == nil {
				t.Fatalf("ParseInventory succeeded with %d GPUs, want an error containing %q", len(gpus), tc.wantErr)
			}
			if gpus != nil {
				t.Errorf("ParseInventory returned GPUs with the error")
			}
			if !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %q is not an invalid-input error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestInventoryFileErrors(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	if _, err := (&Inventory{Path: filepath.Join(dir, "missing.yaml")}).Discover(ctx); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: got %v, want a not-exist error", err)
	}
	path := filepath.Join(dir, "inventory.yaml")
	if err := os.WriteFile(path, []byte("gpus: [}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := (&Inventory{Path: path}).Discover(ctx); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("broken file: got %v, want an error naming %s", err, path)
	}
}
