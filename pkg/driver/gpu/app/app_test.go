package app

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/drasched/drasched/internal/manifest"
	"github.com/drasched/drasched/pkg/driver/gpu"
	"github.com/drasched/drasched/pkg/driver/gpu/discovery"
	"github.com/drasched/drasched/pkg/version"
)

var (
	inventories = filepath.Join("..", "..", "..", "..", "config", "inventory")
	recordings  = filepath.Join("..", "discovery", "testdata")
)

// runCommand runs the command line as the binary would and returns what it
// printed on stdout.
func runCommand(t *testing.T, args ...string) (string, error) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	// Logging is configured once per process; undo what an earlier
	// command line applied.
	if err := logsapi.ResetForTest(nil); err != nil {
		t.Fatal(err)
	}
	cmd := NewCommand()
	var stdout, stderr bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	return stdout.String(), err
}

// decodeSlices decodes the printed stream strictly: every document must be
// a resource.k8s.io/v1 ResourceSlice.
func decodeSlices(t *testing.T, out string) []resourceapi.ResourceSlice {
	t.Helper()
	objects, err := manifest.Decode([]byte(out))
	if err != nil {
		t.Fatalf("output is not a YAML stream of ResourceSlices: %v\n%s", err, out)
	}
	var slices []resourceapi.ResourceSlice
	for _, obj := range objects {
		s, ok := obj.(*resourceapi.ResourceSlice)
		if !ok || s.APIVersion != "resource.k8s.io/v1" {
			t.Fatalf("document is a %s, want resource.k8s.io/v1 ResourceSlice", obj.GetObjectKind().GroupVersionKind())
		}
		slices = append(slices, *s)
	}
	return slices
}

func deviceNames(slices []resourceapi.ResourceSlice) []string {
	var names []string
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			names = append(names, d.Name)
		}
	}
	return names
}

func TestVersion(t *testing.T) {
	out, err := runCommand(t, "--version")
	if err != nil {
		t.Fatal(err)
	}
	if want := version.Get().String() + "\n"; out != want {
		t.Errorf("--version printed %q, want %q", out, want)
	}
}

// TestDiscoverPrintSlices: each backend's dry run prints what the plugin
// would publish, through the same code path (BuildResourceSlices).
func TestDiscoverPrintSlices(t *testing.T) {
	a100Inventory := filepath.Join(inventories, "a100-mig-8.yaml")
	tests := map[string]struct {
		args        []string
		wantSlices  int
		wantDevices int
		wantDriver  string
	}{
		"inventory": {
			args:       []string{"--backend=inventory", "--inventory=" + a100Inventory},
			wantSlices: 2, wantDevices: 33, wantDriver: gpu.DefaultDriverName,
		},
		"inventory under another driver name": {
			args:       []string{"--backend=inventory", "--inventory=" + filepath.Join(inventories, "h100-hgx-8.yaml"), "--driver-name=gpu.example.com"},
			wantSlices: 1, wantDevices: 8, wantDriver: "gpu.example.com",
		},
		"recorded nvidia-smi output": {
			args:       []string{"--nvidia-smi-output=" + filepath.Join(recordings, "nvidia-smi-a100-mig.txt")},
			wantSlices: 2, wantDevices: 4 + 7 + 2 + 3, wantDriver: gpu.DefaultDriverName,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := runCommand(t, append([]string{"discover", "--print-slices", "--node-name=worker-7"}, tc.args...)...)
			if err != nil {
				t.Fatalf("discover: %v", err)
			}
			slices := decodeSlices(t, out)
			if len(slices) != tc.wantSlices || len(deviceNames(slices)) != tc.wantDevices {
				t.Errorf("got %d slices with %d devices, want %d and %d", len(slices), len(deviceNames(slices)), tc.wantSlices, tc.wantDevices)
			}
			for _, s := range slices {
				if s.Spec.Driver != tc.wantDriver || s.Spec.Pool.Name != "worker-7" || s.Spec.NodeName == nil || *s.Spec.NodeName != "worker-7" {
					t.Errorf("slice %s: driver %s, pool %s, node %v", s.Name, s.Spec.Driver, s.Spec.Pool.Name, s.Spec.NodeName)
				}
			}
		})
	}

	// The printed slices are exactly what the Go API builds.
	out, err := runCommand(t, "discover", "--print-slices", "--node-name=worker-7", "--backend=inventory", "--inventory="+a100Inventory)
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	gpus, err := (&discovery.Inventory{Path: a100Inventory}).Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, err := gpu.BuildResourceSlices(gpu.SliceOptions{NodeName: "worker-7"}, gpus)
	if err != nil {
		t.Fatal(err)
	}
	got := decodeSlices(t, out)
	for i := range want {
		if diff := cmp.Diff(*want[i], got[i]); diff != "" {
			t.Errorf("printed slice %d differs from BuildResourceSlices (-api +printed):\n%s", i, diff)
		}
	}
}

// TestDiscoverLiveNvidiaSMI runs a stand-in nvidia-smi binary: the live
// path (exec with fixed arguments) with recorded answers, and records a
// transcript that replays to the same slices.
func TestDiscoverLiveNvidiaSMI(t *testing.T) {
	dir := t.TempDir()
	rec, err := os.ReadFile(filepath.Join(recordings, "nvidia-smi-a100-mig.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// Split the transcript into one answer file per command.
	var script strings.Builder
	script.WriteString("#!/bin/sh\ncase \"$*\" in\n")
	var current *strings.Builder
	n := 0
	flush := func(args string, body *strings.Builder) {
		n++
		file := filepath.Join(dir, "answer"+string(rune('0'+n)))
		if err := os.WriteFile(file, []byte(body.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		script.WriteString("  '" + args + "') cat '" + file + "' ;;\n")
	}
	// The driver's /proc files of the transcript become a host directory.
	procDir := filepath.Join(dir, "proc")
	var args, procFile string
	var procContent *strings.Builder
	writeProc := func() {
		if procFile == "" {
			return
		}
		path := filepath.Join(procDir, filepath.FromSlash(procFile))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(procContent.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		procFile = ""
	}
	for _, line := range strings.SplitAfter(string(rec), "\n") {
		if strings.HasPrefix(line, "$ ") {
			if current != nil {
				flush(args, current)
				current = nil
			}
			writeProc()
		}
		switch {
		case strings.HasPrefix(line, "$ nvidia-smi "):
			args = strings.TrimSpace(strings.TrimPrefix(line, "$ nvidia-smi "))
			current = &strings.Builder{}
		case strings.HasPrefix(line, "$ cat /proc/driver/nvidia/"):
			procFile = strings.TrimSpace(strings.TrimPrefix(line, "$ cat /proc/driver/nvidia/"))
			procContent = &strings.Builder{}
		case current != nil:
			current.WriteString(line)
		case procFile != "":
			procContent.WriteString(line)
		}
	}
	if current != nil {
		flush(args, current)
	}
	writeProc()
	script.WriteString("  *) echo \"unexpected arguments: $*\" >&2; exit 2 ;;\nesac\n")
	fake := filepath.Join(dir, "nvidia-smi")
	if err := os.WriteFile(fake, []byte(script.String()), 0o755); err != nil {
		t.Fatal(err)
	}

	transcript := filepath.Join(dir, "transcript.txt")
	host := "--sysfs-root=" + t.TempDir()
	live, err := runCommand(t, "discover", "--print-slices", "--node-name=n", host, "--nvidia-proc-dir="+procDir, "--nvidia-smi="+fake, "--record-nvidia-smi="+transcript)
	if err != nil {
		t.Fatalf("discover with the stand-in nvidia-smi: %v", err)
	}
	replayed, err := runCommand(t, "discover", "--print-slices", "--node-name=n", host, "--nvidia-smi-output="+transcript)
	if err != nil {
		t.Fatalf("discover replaying the transcript: %v", err)
	}
	if live != replayed {
		t.Errorf("replaying the recorded transcript printed other slices:\nlive:\n%s\nreplayed:\n%s", live, replayed)
	}
	if got := len(deviceNames(decodeSlices(t, live))); got != 16 {
		t.Errorf("%d devices, want 16", got)
	}
}

// TestDiscoverSysfsDryRun runs the sysfs backend on a copied host tree.
func TestDiscoverSysfsDryRun(t *testing.T) {
	root := t.TempDir()
	sysfs, proc := filepath.Join(root, "sys"), filepath.Join(root, "proc")
	const bus = "0000:18:00.0"
	rel := filepath.Join("devices", "pci0000:15", "0000:15:01.0", bus)
	files := map[string]string{
		filepath.Join(sysfs, rel, "vendor"):             "0x10de\n",
		filepath.Join(sysfs, rel, "class"):              "0x030200\n",
		filepath.Join(sysfs, rel, "device"):             "0x2330\n",
		filepath.Join(sysfs, rel, "numa_node"):          "1\n",
		filepath.Join(proc, "gpus", bus, "information"): "Model: \t\t NVIDIA H100 80GB HBM3\nGPU UUID: \t GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c\nDevice Minor: \t 0\n",
		filepath.Join(proc, "version"):                  "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n",
	}
	for path, content := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		filepath.Join(sysfs, "bus", "pci", "devices", bus): filepath.Join("..", "..", "..", rel),
		filepath.Join(sysfs, rel, "driver"):                filepath.Join("..", "..", "..", "..", "bus", "pci", "drivers", "nvidia"),
	}
	for link, target := range links {
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	out, err := runCommand(t, "discover", "--print-slices", "--node-name=n", "--backend=sysfs", "--sysfs-root="+sysfs, "--nvidia-proc-dir="+proc)
	if err != nil {
		t.Fatalf("discover: %v", err)
	}
	slices := decodeSlices(t, out)
	if len(slices) != 1 || len(slices[0].Spec.Devices) != 1 {
		t.Fatalf("want one slice with one device, got %d slices:\n%s", len(slices), out)
	}
	attrs := slices[0].Spec.Devices[0].Attributes
	for name, want := range map[resourceapi.QualifiedName]string{
		"resource.kubernetes.io/pcieRoot": "pci0000:15",
		"resource.kubernetes.io/pciBusID": bus,
		"uuid":                            "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c",
	} {
		if got := attrs[name].StringValue; got == nil || *got != want {
			t.Errorf("attribute %s = %v, want %s", name, got, want)
		}
	}
	if numa := attrs["resource.kubernetes.io/numaNode"].IntValue; numa == nil || *numa != 1 {
		t.Errorf("numaNode = %v, want 1", numa)
	}
}

func TestDiscoverTable(t *testing.T) {
	out, err := runCommand(t, "discover", "--node-name=n", "--backend=inventory", "--inventory="+filepath.Join(inventories, "l40s-4.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[1], "gpu-0") || !strings.Contains(lines[1], "NVIDIA L40S") || !strings.Contains(lines[1], "46068Mi") {
		t.Errorf("unexpected table:\n%s", out)
	}
}

// TestCommandErrors: bad command lines and bad input fail with a clear
// message and print nothing on stdout.
func TestCommandErrors(t *testing.T) {
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken.yaml")
	if err := os.WriteFile(broken, []byte("apiVersion: gpu.drasched.dev/v1alpha1\nkind: GPUInventory\ngpus:\n- uuid: GPU-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(dir, "truncated.txt")
	rec, err := os.ReadFile(filepath.Join(recordings, "nvidia-smi-h100-8.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(truncated, rec[:len(rec)-40], 0o644); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		args    []string
		wantErr string
	}{
		"unknown backend":              {args: []string{"discover", "--node-name=n", "--backend=nvml"}, wantErr: `--backend="nvml": want one of`},
		"inventory without file":       {args: []string{"discover", "--node-name=n", "--backend=inventory"}, wantErr: "--backend=inventory needs --inventory"},
		"inventory with other backend": {args: []string{"discover", "--node-name=n", "--inventory=x.yaml"}, wantErr: "--inventory is only used with --backend=inventory"},
		"unknown flag":                 {args: []string{"discover", "--gpus=8"}, wantErr: "unknown flag: --gpus"},
		"positional argument":          {args: []string{"discover", "extra"}, wantErr: "unknown command"},
		"broken inventory":             {args: []string{"discover", "--print-slices", "--node-name=n", "--backend=inventory", "--inventory=" + broken}, wantErr: "gpus[0].memory: Required value"},
		"truncated recording":          {args: []string{"discover", "--print-slices", "--node-name=n", "--nvidia-smi-output=" + truncated}, wantErr: "nvidia-smi"},
		"missing recording":            {args: []string{"discover", "--node-name=n", "--nvidia-smi-output=" + filepath.Join(dir, "nope")}, wantErr: "no such file"},
		"record with another backend":  {args: []string{"discover", "--node-name=n", "--backend=sysfs", "--record-nvidia-smi=x"}, wantErr: "--record-nvidia-smi needs --backend=nvidia-smi"},
		"run without node name":        {args: []string{"run", "--node-name="}, wantErr: "--node-name (or $NODE_NAME) is required"},
		"run with a tiny rescan":       {args: []string{"run", "--node-name=n", "--rescan-interval=10ms"}, wantErr: "--rescan-interval must be at least 1s"},
		"run without grace period":     {args: []string{"run", "--node-name=n", "--discovery-grace-period=0s"}, wantErr: "--discovery-grace-period must be positive"},
		"run with a relative dev root": {args: []string{"run", "--node-name=n", "--dev-root=run/nvidia/driver"}, wantErr: `--dev-root="run/nvidia/driver": want an absolute path`},
		"run with a certificate only":  {args: []string{"run", "--node-name=n", "--tls-cert-file=tls.crt"}, wantErr: "--tls-cert-file and --tls-private-key-file go together"},
		"healthcheck of no plugin":     {args: []string{"healthcheck", "--health-probe-bind-address=127.0.0.1:1", "--timeout=1s"}, wantErr: "ask the plugin's health"},
		"bad logging flag":             {args: []string{"discover", "--node-name=n", "--logging-format=xml"}, wantErr: "format"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := runCommand(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %v, want one containing %q", err, tc.wantErr)
			}
			if out != "" {
				t.Errorf("printed %q on stdout despite the error", out)
			}
		})
	}
}
