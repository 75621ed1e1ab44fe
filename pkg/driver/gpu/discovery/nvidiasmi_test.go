package discovery

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"

	"github.com/drasched/drasched/pkg/driver/gpu/device"
)

// gpuSummary is what the tests compare of a discovered GPU; UUIDs are
// checked by device.Validate, which every backend runs.
type gpuSummary struct {
	Name, Product, BusID, Driver, CC, Arch, Brand string
	MemoryMiB                                     int64
	MIGEnabled                                    bool
	MIG                                           []string // profile@start:size=MiB[ caps=GI/CI]
	Health                                        string
	Minor                                         int
	NVLinkDomain                                  string
}

func summarizeGPUs(gpus []device.GPU) []gpuSummary {
	var out []gpuSummary
	for i := range gpus {
		g := &gpus[i]
		s := gpuSummary{
			Name: g.Name(), Product: g.ProductName, BusID: g.PCIBusID, Driver: g.DriverVersion,
			CC: g.CUDAComputeCapability, Arch: g.Architecture, Brand: g.Brand,
			MemoryMiB: g.MemoryBytes >> 20, MIGEnabled: g.MIGEnabled, Minor: g.Minor,
			Health: string(g.Health.Status) + "/" + g.Health.Reason, NVLinkDomain: g.NVLinkDomain,
		}
		for _, m := range g.MIG {
			mig := m.Profile + "@" + itoa(m.Placement.Start) + ":" + itoa(m.Placement.Size) + "=" + itoa(int(m.MemoryBytes>>20))
			if m.Caps != nil {
				mig += " caps=" + itoa(m.Caps.GPUInstance) + "/" + itoa(m.Caps.ComputeInstance)
			}
			s.MIG = append(s.MIG, mig)
		}
		out = append(out, s)
	}
	return out
}

func itoa(i int) string { return strconv.Itoa(i) }

func h100(index int, bus string) gpuSummary {
	return gpuSummary{
		Name: "gpu-" + itoa(index), Product: "NVIDIA H100 80GB HBM3", BusID: "0000:" + bus + ":00.0",
		Driver: "550.54.15", CC: "9.0.0", Arch: "Hopper", Brand: "Nvidia", MemoryMiB: 81559, Minor: index, Health: "/",
	}
}

func a100(index int, bus string, mig ...string) gpuSummary {
	return gpuSummary{
		Name: "gpu-" + itoa(index), Product: "NVIDIA A100-SXM4-40GB", BusID: "0000:" + bus + ":00.0",
		Driver: "535.104.5", CC: "8.0.0", Arch: "Ampere", Brand: "Nvidia", MemoryMiB: 40960, Minor: index, Health: "/",
		MIGEnabled: len(mig) > 0, MIG: mig,
	}
}

// inNVLinkDomain puts GPUs into one NVLink domain.
func inNVLinkDomain(domain string, gpus ...gpuSummary) []gpuSummary {
	for i := range gpus {
		gpus[i].NVLinkDomain = domain
	}
	return gpus
}

func unhealthy(s gpuSummary, reason string) gpuSummary {
	s.Health = "Unhealthy/" + reason
	return s
}

// discoverRecording runs the nvidia-smi backend on a recorded transcript,
// with empty host directories so that nothing of the test machine leaks in.
func discoverRecording(t *testing.T, runner Runner) ([]device.GPU, error) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	empty := t.TempDir()
	b := &NvidiaSMI{Runner: runner, SysfsRoot: empty, NvidiaProcDir: empty}
	return b.Discover(ctx)
}

func loadTestRecording(t *testing.T, name string) *Recording {
	t.Helper()
	rec, err := LoadRecording(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("load recording: %v", err)
	}
	return rec
}

func TestNvidiaSMIRecordings(t *testing.T) {
	tests := map[string]struct {
		file string
		want []gpuSummary
	}{
		"H100 HGX: one NVLink domain of all eight GPUs": {
			file: "nvidia-smi-h100-8.txt",
			want: inNVLinkDomain("nvlink-0000:18:00.0",
				h100(0, "18"), h100(1, "2a"), h100(2, "3a"), h100(3, "5d"), h100(4, "9a"), h100(5, "ab"), h100(6, "ba"), h100(7, "db")),
		},
		"A100 with MIG enabled on three GPUs, all in one NVLink domain": {
			file: "nvidia-smi-a100-mig.txt",
			want: inNVLinkDomain("nvlink-0000:07:00.0",
				a100(0, "07", "1g.5gb@0:1=4864 caps=66/67", "1g.5gb@1:1=4864 caps=75/76", "1g.5gb@2:1=4864 caps=84/85", "1g.5gb@3:1=4864 caps=93/94",
					"1g.5gb@4:1=4864 caps=102/103", "1g.5gb@5:1=4864 caps=111/112", "1g.5gb@6:1=4864 caps=120/121"),
				// MIG device 0 is GPU instance 2, at 0:4 (nvidia-smi -q -x).
				a100(1, "0f", "3g.20gb@0:4=20091 caps=156/157", "3g.20gb@4:4=20091 caps=147/148"),
				a100(2, "47", "4g.20gb@0:4=20091 caps=282/283", "2g.10gb@4:2=9851 caps=318/319", "1g.5gb@6:1=4864 caps=390/391"),
				a100(3, "4e"),
			),
		},
		"A40 with two NVLink bridges: two domains": {
			file: "nvidia-smi-a40-nvlink-pairs.txt",
			want: func() []gpuSummary {
				var out []gpuSummary
				for i, bus := range []string{"17", "31", "b1", "ca"} {
					out = append(out, gpuSummary{
						Name: "gpu-" + itoa(i), Product: "NVIDIA A40", BusID: "0000:" + bus + ":00.0",
						Driver: "550.90.7", CC: "8.6.0", Arch: "Ampere", Brand: "Nvidia", MemoryMiB: 46068, Minor: i, Health: "/",
					})
				}
				return append(inNVLinkDomain("nvlink-0000:17:00.0", out[0], out[1]), inNVLinkDomain("nvlink-0000:b1:00.0", out[2], out[3])...)
			}(),
		},
		"L40S without MIG support or NVLink": {
			file: "nvidia-smi-l40s-4.txt",
			want: func() []gpuSummary {
				var out []gpuSummary
				for i, bus := range []string{"01", "41", "81", "c1"} {
					out = append(out, gpuSummary{
						Name: "gpu-" + itoa(i), Product: "NVIDIA L40S", BusID: "0000:" + bus + ":00.0",
						Driver: "550.90.7", CC: "8.9.0", Arch: "Ada Lovelace", Brand: "Nvidia", MemoryMiB: 46068, Minor: i, Health: "/",
					})
				}
				return out
			}(),
		},
		"[N/A] and [Not Supported] fields are left out": {
			file: "nvidia-smi-na-fields.txt",
			want: []gpuSummary{
				{Name: "gpu-0", Product: "NVIDIA GeForce RTX 4090", BusID: "0000:01:00.0", Driver: "535.183.1", CC: "8.9.0", Arch: "Ada Lovelace", Brand: "GeForceRTX", MemoryMiB: 24564, Minor: 0, Health: "/"},
				{Name: "gpu-1", Product: "Tesla T4", BusID: "0000:3b:00.0", Driver: "535.183.1", CC: "7.5.0", Arch: "Turing", Brand: "Tesla", Minor: 1, Health: "/"},
			},
		},
		// This recording has no `topo -m`, like those made before the
		// backend ran it: the domains are left out, discovery succeeds.
		"ECC errors and a GPU needing a reset make devices unhealthy": {
			file: "nvidia-smi-h100-unhealthy.txt",
			want: func() []gpuSummary {
				out := []gpuSummary{h100(0, "18"), h100(1, "2a"), unhealthy(h100(2, "3a"), "UncorrectableECCErrors"), h100(3, "5d"), h100(4, "9a"), unhealthy(h100(5, "ab"), "GPURequiresReset"), h100(6, "ba"), h100(7, "db")}
				out[5].MemoryMiB = 0
				return out
			}(),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			gpus, err := discoverRecording(t, loadTestRecording(t, tc.file))
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			if diff := cmp.Diff(tc.want, summarizeGPUs(gpus)); diff != "" {
				t.Errorf("GPUs (-want +got):\n%s", diff)
			}
		})
	}
}

// fakeRunner returns canned output per command line, byte for byte.
type fakeRunner map[string]fakeResult

type fakeResult struct {
	out []byte
	err error
}

func (f fakeRunner) Run(_ context.Context, args ...string) ([]byte, error) {
	r, ok := f[strings.Join(args, " ")]
	if !ok {
		return nil, errors.New("unexpected command nvidia-smi " + strings.Join(args, " "))
	}
	return r.out, r.err
}

// ReadProcFile implements ProcFiles with the entries "cat <name>".
func (f fakeRunner) ReadProcFile(name string) ([]byte, error) {
	r, ok := f["cat "+name]
	if !ok {
		return nil, fmt.Errorf("no %s: %w", name, fs.ErrNotExist)
	}
	return r.out, r.err
}

// procInformation is a GPU's /proc/driver/nvidia/gpus/<bus>/information.
func procInformation(uuid, busID string, minor int) string {
	return fmt.Sprintf("Model: \t\t NVIDIA H100 80GB HBM3\nGPU UUID: \t %s\nBus Location: \t %s\nDevice Minor: \t %d\n", uuid, busID, minor)
}

const (
	goodRow  = "0, GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 81559, 550.54.15, 9.0, Disabled, 0\n"
	migRow   = "0, GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c, NVIDIA A100-SXM4-40GB, 00000000:07:00.0, 40960, 535.104.05, 8.0, Enabled, 0\n"
	listMIG  = "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c)\n  MIG 3g.20gb      Device  0: (UUID: MIG-b3e729f2-40a3-4c60-b2ec-940dcb12b6cc)\n"
	lgiRow   = "|   0  MIG 3g.20gb          9        1          4:4     |\n"
	lgipRows = "|   0  MIG 3g.20gb        9     1/2        19.62      No     42     2     0   |\n|                                                             3     0     0   |\n"
)

// query answers the query with out and, as a host where nothing is
// wrong, serves a /proc entry for each of its rows, minor = index.
func query(out string) fakeRunner {
	f := fakeRunner{strings.Join(QueryArgs, " "): {out: []byte(out)}}
	for _, row := range strings.Split(out, "\n") {
		fields := strings.Split(row, ", ")
		if len(fields) < 4 {
			continue
		}
		index, err := strconv.Atoi(fields[0])
		busID, busErr := device.NormalizePCIBusID(fields[3])
		if err != nil || busErr != nil {
			continue
		}
		f["cat "+procInfoName(busID)] = fakeResult{out: []byte(procInformation(fields[1], busID, index))}
	}
	return f
}

func withMIG(list, lgi, lgip string) fakeRunner {
	f := query(migRow)
	f[strings.Join(ListArgs, " ")] = fakeResult{out: []byte(list)}
	f[strings.Join(ListGPUInstancesArgs, " ")] = fakeResult{out: []byte(lgi)}
	f[strings.Join(ListGPUInstanceProfilesArgs, " ")] = fakeResult{out: []byte(lgip)}
	return f
}

// TestNvidiaSMIBadOutput feeds truncated, damaged and hostile output to the
// backend: each gives a clear error and no devices.
func TestNvidiaSMIBadOutput(t *testing.T) {
	tests := map[string]struct {
		runner  fakeRunner
		wantErr string
	}{
		"row cut off without final newline": {
			runner:  query(goodRow + "1, GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16d, NVIDIA H100 80GB HBM3, 00000000:2A:00"),
			wantErr: "truncated",
		},
		"row with missing fields": {
			runner:  query("0, GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c, NVIDIA H100 80GB HBM3\n"),
			wantErr: "wrong number of fields",
		},
		"comma injected into a field": {
			runner:  query("0, GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c, NVIDIA H100, evil, 00000000:18:00.0, 81559, 550.54.15, 9.0, Disabled, 0\n"),
			wantErr: "wrong number of fields",
		},
		"index is not a number": {
			runner:  query(strings.Replace(goodRow, "0,", "zero,", 1)),
			wantErr: `index "zero"`,
		},
		"UUID unavailable": {
			runner:  query(strings.Replace(goodRow, "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c", "[N/A]", 1)),
			wantErr: "no value for uuid",
		},
		"UUID is not a UUID": {
			runner:  query(strings.Replace(goodRow, "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c", "GPU-../../etc/passwd", 1)),
			wantErr: "gpus[0].uuid",
		},
		"bus ID with a domain beyond 16 bits": {
			runner:  query(strings.Replace(goodRow, "00000000:18:00.0", "00010000:18:00.0", 1)),
			wantErr: "domain does not fit",
		},
		"memory overflows": {
			runner:  query(strings.Replace(goodRow, "81559", "99999999999999999999", 1)),
			wantErr: "memory.total",
		},
		"driver version is not a version": {
			runner:  query(strings.Replace(goodRow, "550.54.15", "550.54.15-beta", 1)),
			wantErr: "version",
		},
		"unknown MIG mode": {
			runner:  query(strings.Replace(goodRow, "Disabled", "Maybe", 1)),
			wantErr: "mig.mode.current",
		},
		"duplicate GPU index": {
			runner:  query(goodRow + strings.Replace(strings.Replace(goodRow, "c16c", "c16d", 1), ":18:", ":2a:", 1)),
			wantErr: "Duplicate value",
		},
		"binary garbage": {
			runner:  query("\x00\x01\x02\xff\n"),
			wantErr: "wrong number of fields",
		},
		"a product name longer than an attribute may be": {
			runner:  query(strings.Replace(goodRow, "NVIDIA H100 80GB HBM3", strings.Repeat("A", 65), 1)),
			wantErr: "productName",
		},
		"-L lists more MIG devices than -lgi has instances": {
			runner: withMIG(listMIG+"  MIG 3g.20gb      Device  1: (UUID: MIG-f87db32f-7c86-45ae-ad92-4e06d10ad589)\n",
				lgiRow, lgipRows),
			wantErr: "lists 2 MIG 3g.20gb devices but nvidia-smi mig -lgi lists 1",
		},
		"compute-instance partitions are refused": {
			runner: withMIG(strings.Replace(listMIG, "MIG 3g.20gb ", "MIG 1c.3g.20gb", 1),
				lgiRow, lgipRows),
			wantErr: "compute-instance profiles are not supported",
		},
		"-lgi with an unknown row": {
			runner:  withMIG(listMIG, lgiRow+"|   0  rm -rf /                                      |\n", lgipRows),
			wantErr: "unexpected GPU instance row",
		},
		"-lgi row outside the table": {
			runner:  withMIG(listMIG, lgiRow+"Error: something\n", lgipRows),
			wantErr: "not a table row",
		},
		"-lgip does not list the profile": {
			runner:  withMIG(listMIG, lgiRow, strings.Replace(lgipRows, "3g.20gb", "2g.10gb", 1)),
			wantErr: "does not list profile 3g.20gb",
		},
		"-L UUID differs from the query": {
			runner:  withMIG(strings.Replace(listMIG, "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c", "GPU-00000000-06c0-7d70-1a51-e59b25b2c16c", 1), lgiRow, lgipRows),
			wantErr: "in nvidia-smi -L",
		},
		"-L with an unexpected line": {
			runner:  withMIG(listMIG+"Segmentation fault\n", lgiRow, lgipRows),
			wantErr: "unexpected line",
		},
		"nvidia-smi fails": {
			runner:  fakeRunner{strings.Join(QueryArgs, " "): {err: &ExitError{Args: QueryArgs, Code: 255, Output: []byte("Failed to initialize NVML: Driver/library version mismatch\n")}}},
			wantErr: "Driver/library version mismatch",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			gpus, err := discoverRecording(t, tc.runner)
			if err == nil {
				t.Fatalf("Discover succeeded with %v, want an error containing %q", summarizeGPUs(gpus), tc.wantErr)
			}
			if gpus != nil {
				t.Errorf("Discover returned %d GPUs with the error, want none", len(gpus))
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %q does not contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestNvidiaSMINoDevices(t *testing.T) {
	runner := fakeRunner{strings.Join(QueryArgs, " "): {err: &ExitError{Args: QueryArgs, Code: 6, Output: []byte("No devices were found\n")}}}
	gpus, err := discoverRecording(t, runner)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	if gpus == nil || len(gpus) != 0 {
		t.Errorf("Discover returned %v, want an empty, non-nil list", gpus)
	}
}

// registerMetrics registers the metrics once per test binary, also with
// -count=2.
var registerMetrics sync.Once

// commandsOnly hides a fake's ProcFiles, so that the backend reads the
// driver's /proc files from NvidiaProcDir as on a host.
type commandsOnly struct{ Runner }

func TestNvidiaSMIReadsHostTopology(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	host := newFakeHost(t, root)
	host.addGPU(fakePCIGPU{busID: "0000:18:00.0", root: "pci0000:15", numa: "1", minor: 3, uuid: "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c"})
	b := &NvidiaSMI{Runner: commandsOnly{query(goodRow)}, SysfsRoot: host.sysfs, NvidiaProcDir: host.proc}
	gpus, err := b.Discover(ctx)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	got := gpus[0]
	if got.Minor != 3 || got.PCIeRoot != "pci0000:15" || got.NUMANode == nil || *got.NUMANode != 1 {
		t.Errorf("got minor %d, PCIe root %q, NUMA node %v; want 3, pci0000:15, 1", got.Minor, got.PCIeRoot, got.NUMANode)
	}

	// A /proc entry without a minor number: the GPU is left out, not
	// published with a guessed device node.
	host.write(filepath.Join(host.proc, "gpus", "0000:18:00.0", "information"), "Model: NVIDIA H100\nFuture Field: 1\n")
	gpus, err = b.Discover(ctx)
	if err != nil || len(gpus) != 0 {
		t.Errorf("Discover with an unreadable /proc entry: %v, %v; want no GPUs and no error", err, summarizeGPUs(gpus))
	}

	// The driver's /proc entry names another GPU at that address: refuse.
	host.addGPU(fakePCIGPU{busID: "0000:18:00.0", root: "pci0000:15", numa: "1", minor: 3, uuid: "GPU-00000000-06c0-7d70-1a51-e59b25b2c16c"})
	if _, err := b.Discover(ctx); err == nil || !strings.Contains(err.Error(), "has UUID") {
		t.Errorf("Discover with mismatching /proc UUID: got error %v, want a UUID mismatch", err)
	}
}

// TestNvidiaSMIMinorNumbers: minor numbers come from the driver's /proc
// entries recorded with the nvidia-smi output, and a GPU without a usable
// one is left out and counted in refused_gpus, never given its index as
// minor number.
func TestNvidiaSMIMinorNumbers(t *testing.T) {
	registerMetrics.Do(func() { legacyregistry.MustRegister(Metrics()...) })
	l40s := func(index, minor int, bus string) gpuSummary {
		return gpuSummary{
			Name: "gpu-" + itoa(index), Product: "NVIDIA L40S", BusID: "0000:" + bus + ":00.0",
			Driver: "550.90.7", CC: "8.9.0", Arch: "Ada Lovelace", Brand: "Nvidia", MemoryMiB: 46068, Minor: minor, Health: "/",
		}
	}
	tests := map[string]struct {
		file        string
		want        []gpuSummary
		wantRefused map[string]float64
	}{
		"all entries fine": {
			file:        "nvidia-smi-l40s-4.txt",
			want:        []gpuSummary{l40s(0, 0, "01"), l40s(1, 1, "41"), l40s(2, 2, "81"), l40s(3, 3, "c1")},
			wantRefused: map[string]float64{RefusedNoProcEntry: 0, RefusedBadProcEntry: 0},
		},
		"no entry for GPU 2, minors other than the indexes": {
			file:        "nvidia-smi-l40s-4-proc-missing.txt",
			want:        []gpuSummary{l40s(0, 1, "01"), l40s(1, 0, "41"), l40s(3, 3, "c1")},
			wantRefused: map[string]float64{RefusedNoProcEntry: 1, RefusedBadProcEntry: 0},
		},
		"garbled minor of GPU 1, entry of GPU 3 cut short": {
			file:        "nvidia-smi-l40s-4-proc-garbled.txt",
			want:        []gpuSummary{l40s(0, 0, "01"), l40s(2, 2, "81")},
			wantRefused: map[string]float64{RefusedNoProcEntry: 0, RefusedBadProcEntry: 2},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			gpus, err := discoverRecording(t, loadTestRecording(t, tc.file))
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			if diff := cmp.Diff(tc.want, summarizeGPUs(gpus)); diff != "" {
				t.Errorf("GPUs (-want +got):\n%s", diff)
			}
			for reason, want := range tc.wantRefused {
				got, err := testutil.GetGaugeMetricValue(refusedGPUs.WithLabelValues(reason))
				if err != nil || got != want {
					t.Errorf("refused_gpus{reason=%q} = %v (%v), want %v", reason, got, err, want)
				}
			}
		})
	}
}

func TestExecRunner(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	script := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	tests := map[string]struct {
		runner  ExecRunner
		want    string
		wantErr string
	}{
		"arguments are passed as they are": {
			runner: ExecRunner{Path: script("echo", `printf '%s|' "$@"; echo`)},
			want:   strings.Join(QueryArgs, "|") + "|\n",
		},
		"exit status and message": {
			runner:  ExecRunner{Path: script("fail", "echo 'No devices were found'; exit 6")},
			wantErr: "exited with status 6: No devices were found",
		},
		"hung nvidia-smi is killed": {
			runner:  ExecRunner{Path: script("hang", "exec sleep 30"), Timeout: 200 * time.Millisecond},
			wantErr: "deadline exceeded",
		},
		"missing binary": {
			runner:  ExecRunner{Path: filepath.Join(dir, "missing")},
			wantErr: "no such file",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := tc.runner.Run(ctx, QueryArgs...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Run: error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if diff := cmp.Diff(tc.want, string(out)); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRecorderRoundTrip records what the backend runs and replays the
// transcript: the live path and the replay path give the same devices.
func TestRecorderRoundTrip(t *testing.T) {
	recording := loadTestRecording(t, "nvidia-smi-a100-mig.txt")
	rec := &Recorder{Runner: recording, ProcFiles: recording}
	want, err := discoverRecording(t, rec)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	if len(want) != 4 {
		t.Fatalf("recorded discovery found %d GPUs, want 4", len(want))
	}
	var transcript strings.Builder
	if _, err := rec.WriteTo(&transcript); err != nil {
		t.Fatal(err)
	}
	replay, err := ParseRecording([]byte(transcript.String()))
	if err != nil {
		t.Fatalf("ParseRecording: %v", err)
	}
	got, err := discoverRecording(t, replay)
	if err != nil {
		t.Fatalf("Discover from the transcript: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("replayed GPUs (-recorded +replayed):\n%s", diff)
	}
}

func TestParseRecordingErrors(t *testing.T) {
	tests := map[string]struct {
		data    string
		wantErr string
	}{
		"empty":                   {data: "", wantErr: "no"},
		"output before a command": {data: "0, GPU-x\n$ nvidia-smi -L\n", wantErr: "output before the first"},
		"the same command twice":  {data: "$ nvidia-smi -L\nGPU 0\n$ nvidia-smi -L\n", wantErr: "appears twice"},
		"only comments":           {data: "# nothing recorded\n", wantErr: "no"},
		"replaying a missing cmd": {data: "$ nvidia-smi -L\n", wantErr: "recording has no output for `nvidia-smi --query-gpu"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rec, err := ParseRecording([]byte(tc.data))
			if err == nil {
				_, err = discoverRecording(t, rec)
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrInvalidInput) {
				t.Errorf("got error %v, want an invalid-input error containing %q", err, tc.wantErr)
			}
		})
	}
}
