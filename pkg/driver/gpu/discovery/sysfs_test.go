package discovery

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"
)

// fakeHost is a sysfs tree and an NVIDIA /proc directory in a temp dir,
// laid out as the kernel does: /sys/devices/<root>/<bridge>/<device>, with
// /sys/bus/pci/devices/<device> a relative symlink to it.
type fakeHost struct {
	t     *testing.T
	sysfs string
	proc  string
}

type fakePCIGPU struct {
	busID    string
	root     string // "pci0000:15"
	numa     string // "" leaves numa_node out, "-1" means no affinity
	vendor   string // default NVIDIA
	class    string // default 3D controller
	deviceID string // default H100 SXM5
	driver   string // default nvidia; "-" for none
	// /proc/driver/nvidia/gpus/<bus>/information; no entry when uuid is "".
	uuid  string
	model string
	minor int
}

func newFakeHost(t *testing.T, dir string) *fakeHost {
	t.Helper()
	h := &fakeHost{t: t, sysfs: filepath.Join(dir, "sys"), proc: filepath.Join(dir, "proc", "driver", "nvidia")}
	for _, d := range []string{filepath.Join(h.sysfs, "bus", "pci", "devices"), filepath.Join(h.sysfs, "bus", "pci", "drivers"), filepath.Join(h.proc, "gpus")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func (h *fakeHost) write(path, content string) {
	h.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

func (h *fakeHost) addGPU(g fakePCIGPU) {
	h.t.Helper()
	if g.vendor == "" {
		g.vendor = "0x10de"
	}
	if g.class == "" {
		g.class = "0x030200"
	}
	if g.deviceID == "" {
		g.deviceID = "0x2330"
	}
	if g.driver == "" {
		g.driver = "nvidia"
	}
	if g.model == "" {
		g.model = "NVIDIA H100 80GB HBM3"
	}
	rel := filepath.Join("devices", g.root, "0000:00:01.0", g.busID)
	dir := filepath.Join(h.sysfs, rel)
	h.write(filepath.Join(dir, "vendor"), g.vendor+"\n")
	h.write(filepath.Join(dir, "class"), g.class+"\n")
	h.write(filepath.Join(dir, "device"), g.deviceID+"\n")
	if g.numa != "" {
		h.write(filepath.Join(dir, "numa_node"), g.numa+"\n")
	}
	if g.driver != "-" {
		drvDir := filepath.Join(h.sysfs, "bus", "pci", "drivers", g.driver)
		if err := os.MkdirAll(drvDir, 0o755); err != nil {
			h.t.Fatal(err)
		}
		link := filepath.Join(dir, "driver")
		_ = os.Remove(link)
		target, _ := filepath.Rel(dir, drvDir)
		if err := os.Symlink(target, link); err != nil {
			h.t.Fatal(err)
		}
	}
	link := filepath.Join(h.sysfs, "bus", "pci", "devices", g.busID)
	_ = os.Remove(link)
	if err := os.Symlink(filepath.Join("..", "..", "..", rel), link); err != nil {
		h.t.Fatal(err)
	}
	if g.uuid != "" {
		h.write(filepath.Join(h.proc, "gpus", g.busID, "information"), fmt.Sprintf(
			"Model: \t\t %s\nIRQ:   \t\t 287\nGPU UUID: \t %s\nVideo BIOS: \t 96.00.74.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t %s\nDevice Minor: \t %d\nGPU Excluded:\t No\n",
			g.model, g.uuid, g.busID, g.minor))
	}
}

func (h *fakeHost) setDriverVersion(v string) {
	h.write(filepath.Join(h.proc, "version"), "NVRM version: NVIDIA UNIX x86_64 Kernel Module  "+v+"  Tue Mar  5 22:23:56 UTC 2024\nGCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n")
}

func TestSysfs(t *testing.T) {
	uuid := func(n int) string { return fmt.Sprintf("GPU-%08d-06c0-7d70-1a51-e59b25b2c16c", n) }
	tests := map[string]struct {
		setup   func(h *fakeHost)
		want    []gpuSummary
		wantErr string
	}{
		"GPUs in bus order; other functions and drivers skipped": {
			setup: func(h *fakeHost) {
				h.setDriverVersion("550.54.15")
				h.addGPU(fakePCIGPU{busID: "0000:9a:00.0", root: "pci0000:97", numa: "1", uuid: uuid(2), minor: 2})
				h.addGPU(fakePCIGPU{busID: "0000:18:00.0", root: "pci0000:15", numa: "0", uuid: uuid(0), minor: 0})
				// An L40S on a VGA-class function, with an unknown NUMA node.
				h.addGPU(fakePCIGPU{busID: "0000:41:00.0", root: "pci0000:40", numa: "-1", class: "0x030000", deviceID: "0x26b9", model: "NVIDIA L40S", uuid: uuid(1), minor: 1})
				// Bound to vfio-pci for passthrough: not ours.
				h.addGPU(fakePCIGPU{busID: "0000:ab:00.0", root: "pci0000:97", numa: "1", driver: "vfio-pci"})
				// NVIDIA audio function, an NVSwitch bridge, an Intel NIC.
				h.addGPU(fakePCIGPU{busID: "0000:18:00.1", root: "pci0000:15", class: "0x040300"})
				h.addGPU(fakePCIGPU{busID: "0000:05:00.0", root: "pci0000:00", class: "0x068000", deviceID: "0x22a3"})
				h.addGPU(fakePCIGPU{busID: "0000:31:00.0", root: "pci0000:15", vendor: "0x8086", class: "0x020000"})
			},
			want: []gpuSummary{
				{Name: "gpu-0", Product: "NVIDIA H100 80GB HBM3", BusID: "0000:18:00.0", Driver: "550.54.15", CC: "9.0.0", Arch: "Hopper", Brand: "Nvidia", MemoryMiB: 81559, Minor: 0, Health: "/"},
				{Name: "gpu-1", Product: "NVIDIA L40S", BusID: "0000:41:00.0", Driver: "550.54.15", CC: "8.9.0", Arch: "Ada Lovelace", Brand: "Nvidia", MemoryMiB: 46068, Minor: 1, Health: "/"},
				{Name: "gpu-2", Product: "NVIDIA H100 80GB HBM3", BusID: "0000:9a:00.0", Driver: "550.54.15", CC: "9.0.0", Arch: "Hopper", Brand: "Nvidia", MemoryMiB: 81559, Minor: 2, Health: "/"},
			},
		},
		"unknown device ID is published without memory": {
			setup: func(h *fakeHost) {
				h.addGPU(fakePCIGPU{busID: "0000:18:00.0", root: "pci0000:15", deviceID: "0x9999", model: "NVIDIA Future GPU", uuid: uuid(0)})
			},
			want: []gpuSummary{{Name: "gpu-0", Product: "NVIDIA Future GPU", BusID: "0000:18:00.0", Brand: "Nvidia", Health: "/"}},
		},
		"no GPUs": {
			setup: func(h *fakeHost) {},
		},
		"GPU bound to nvidia without a /proc entry": {
			setup: func(h *fakeHost) {
				h.addGPU(fakePCIGPU{busID: "0000:18:00.0", root: "pci0000:15", uuid: uuid(0)})
				h.addGPU(fakePCIGPU{busID: "0000:2a:00.0", root: "pci0000:15"})
			},
			wantErr: "GPUs 0000:2a:00.0 are bound to the nvidia driver but have no",
		},
		"damaged /proc information": {
			setup: func(h *fakeHost) {
				h.addGPU(fakePCIGPU{busID: "0000:18:00.0", root: "pci0000:15", uuid: uuid(0)})
				h.write(filepath.Join(h.proc, "gpus", "0000:18:00.0", "information"), "Model: NVIDIA H100\nDevice Minor: many\n")
			},
			wantErr: "Device Minor \"many\"",
		},
		"two GPUs claiming one minor": {
			setup: func(h *fakeHost) {
				h.addGPU(fakePCIGPU{busID: "0000:18:00.0", root: "pci0000:15", uuid: uuid(0), minor: 0})
				h.addGPU(fakePCIGPU{busID: "0000:2a:00.0", root: "pci0000:15", uuid: uuid(1), minor: 0})
			},
			wantErr: "gpus[1].minor: Duplicate value",
		},
		"a huge sysfs file": {
			setup: func(h *fakeHost) {
				h.addGPU(fakePCIGPU{busID: "0000:18:00.0", root: "pci0000:15", uuid: uuid(0)})
				h.write(filepath.Join(h.proc, "version"), strings.Repeat("x", maxHostFileSize+1))
			},
			wantErr: "larger than",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			h := newFakeHost(t, t.TempDir())
			tc.setup(h)
			s := &Sysfs{Root: h.sysfs, NvidiaProcDir: h.proc}
			gpus, err := s.Discover(ctx)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Discover: error %v, want one containing %q", err, tc.wantErr)
				}
				if gpus != nil {
					t.Errorf("Discover returned GPUs with the error")
				}
				return
			}
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			if diff := cmp.Diff(tc.want, summarizeGPUs(gpus)); diff != "" {
				t.Errorf("GPUs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSysfsTopology(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	h := newFakeHost(t, t.TempDir())
	h.addGPU(fakePCIGPU{busID: "0000:18:00.0", root: "pci0000:15", numa: "1", uuid: "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c"})
	h.addGPU(fakePCIGPU{busID: "0000:2a:00.0", root: "pci0000:15", numa: "-1", uuid: "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16d", minor: 1})
	gpus, err := (&Sysfs{Root: h.sysfs, NvidiaProcDir: h.proc}).Discover(ctx)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	if gpus[0].PCIeRoot != "pci0000:15" || gpus[0].NUMANode == nil || *gpus[0].NUMANode != 1 {
		t.Errorf("gpu-0: PCIe root %q, NUMA node %v; want pci0000:15 and 1", gpus[0].PCIeRoot, gpus[0].NUMANode)
	}
	if gpus[1].NUMANode != nil {
		t.Errorf("gpu-1 has no NUMA affinity but got NUMA node %d", *gpus[1].NUMANode)
	}
}

func TestSysfsMissingRoot(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	_, err := (&Sysfs{Root: filepath.Join(t.TempDir(), "nope")}).Discover(ctx)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Discover on a missing sysfs: %v, want a not-exist error", err)
	}
}
