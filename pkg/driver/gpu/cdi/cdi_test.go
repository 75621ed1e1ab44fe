package cdi

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

const (
	claimUID      = "5f0c1c9e-2a4b-4c4e-9d7a-3b6e2f1d0a11"
	driverVersion = "570.86.15"
	libDir        = "/usr/lib/x86_64-linux-gnu"
)

func setup(t *testing.T) (*Writer, string) {
	t.Helper()
	root := devRoot(t, "nvidia0", "nvidia3", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
	// The spec names host paths only for a device root other than /: the
	// writer sees the host's / at root, as the plugin's container does.
	return setupWith(t, Options{DevRoot: "/", ContainerDevRoot: root})
}

// setupWith creates a writer; without a driver root in opts, it sees
// driverRoot's at the host's /.
func setupWith(t *testing.T, opts Options) (*Writer, string) {
	t.Helper()
	if opts.DriverRoot == "" {
		opts.DriverRoot, opts.ContainerDriverRoot = "/", driverRoot(t)
	}
	dir := filepath.Join(t.TempDir(), "cdi")
	w, err := NewWriter(dir, "gpu.drasched.dev", opts)
	if err != nil {
		t.Fatalf("NewWriter: %v", err)
	}
	return w, dir
}

// devRoot returns a directory whose dev/ holds the named nodes. Write only
// checks that they exist, so plain files stand in for device nodes.
func devRoot(t *testing.T, nodes ...string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, "dev", n)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "dev", n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// driverRoot returns a directory with an NVIDIA driver of driverVersion
// as its installer lays it out: libraries with the links the loader uses
// (libnvidia-glcore has none: its SONAME is its file name), a binary, GSP
// firmware, and a library of an older driver. Find's own tests cover the
// layouts; these check what the spec makes of them.
func driverRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	write := func(p string, mode os.FileMode) {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(p), mode); err != nil {
			t.Fatal(err)
		}
	}
	link := func(p, target string) {
		if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
			t.Fatal(err)
		}
	}
	for _, lib := range []string{"libcuda.so", "libnvidia-ml.so", "libnvidia-glcore.so"} {
		write(libDir+"/"+lib+"."+driverVersion, 0o644)
	}
	link(libDir+"/libcuda.so.1", "libcuda.so."+driverVersion)
	link(libDir+"/libcuda.so", "libcuda.so.1")
	link(libDir+"/libnvidia-ml.so.1", "libnvidia-ml.so."+driverVersion)
	write(libDir+"/libnvidia-ml.so.560.35.03", 0o644)
	write("/usr/bin/nvidia-smi", 0o755)
	write("/lib/firmware/nvidia/"+driverVersion+"/gsp_ga10x.bin", 0o644)
	return root
}

// driverMount is the spec's mount of a driver file.
func driverMount(hostPath, containerPath string) *cdispec.Mount {
	return &cdispec.Mount{HostPath: hostPath, ContainerPath: containerPath, Type: "bind", Options: []string{"ro", "nosuid", "nodev", "bind"}}
}

// readSpec loads the spec of id as a container runtime does.
func readSpec(t *testing.T, dir, id string) *cdispec.Spec {
	t.Helper()
	runtime, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := runtime.Refresh(); err != nil {
		t.Fatalf("runtime cache refresh: %v", err)
	}
	dev := runtime.GetDevice(id)
	if dev == nil {
		t.Fatalf("runtime does not know device %s; has %v", id, runtime.ListDevices())
	}
	return dev.GetSpec().Spec
}

func TestWriteReadByRuntime(t *testing.T) {
	w, dir := setup(t)
	_, ctx := ktesting.NewTestContext(t)
	id, err := w.Write(ctx, ClaimEdits{
		ClaimUID:      claimUID,
		DeviceNodes:   []string{"/dev/nvidia0", "/dev/nvidia3"},
		Env:           []string{"DRASCHED_GPU_SHARING=TimeSlicing"},
		DriverVersion: "570.86.15",
	})
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if want := "gpu.drasched.dev/gpu=" + claimUID; id != want {
		t.Errorf("device ID %q, want %q", id, want)
	}
	wantFile := "gpu.drasched.dev-gpu_" + claimUID + ".json"
	if _, err := os.Stat(filepath.Join(dir, wantFile)); err != nil {
		t.Fatalf("spec file %s: %v", wantFile, err)
	}

	got := readSpec(t, dir, id)
	lib := func(name string) string { return libDir + "/" + name + "." + driverVersion }
	want := &cdispec.Spec{
		Version: got.Version,
		Kind:    "gpu.drasched.dev/gpu",
		Devices: []cdispec.Device{{
			Name: claimUID,
			ContainerEdits: cdispec.ContainerEdits{
				Env:         []string{"DRASCHED_GPU_SHARING=TimeSlicing"},
				DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/nvidia0"}, {Path: "/dev/nvidia3"}},
			},
		}},
		ContainerEdits: cdispec.ContainerEdits{
			// The hook of the NVIDIA runtime, where one runs, adds nothing.
			Env:         []string{"NVIDIA_VISIBLE_DEVICES=void"},
			DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/nvidiactl"}, {Path: "/dev/nvidia-uvm"}, {Path: "/dev/nvidia-uvm-tools"}},
			// The libraries of the driver's version where they are and
			// under the names of their links there, then under those
			// names (or their own) in LibraryDir, the binary, the
			// firmware; not the library of the older driver.
			Mounts: []*cdispec.Mount{
				driverMount(lib("libcuda.so"), lib("libcuda.so")),
				driverMount(lib("libcuda.so"), libDir+"/libcuda.so"),
				driverMount(lib("libcuda.so"), libDir+"/libcuda.so.1"),
				driverMount(lib("libnvidia-glcore.so"), lib("libnvidia-glcore.so")),
				driverMount(lib("libnvidia-ml.so"), lib("libnvidia-ml.so")),
				driverMount(lib("libnvidia-ml.so"), libDir+"/libnvidia-ml.so.1"),
				driverMount(lib("libcuda.so"), "/usr/local/nvidia/lib64/libcuda.so"),
				driverMount(lib("libcuda.so"), "/usr/local/nvidia/lib64/libcuda.so.1"),
				driverMount(lib("libnvidia-glcore.so"), "/usr/local/nvidia/lib64/libnvidia-glcore.so."+driverVersion),
				driverMount(lib("libnvidia-ml.so"), "/usr/local/nvidia/lib64/libnvidia-ml.so.1"),
				driverMount("/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi"),
				driverMount("/lib/firmware/nvidia/"+driverVersion+"/gsp_ga10x.bin", "/lib/firmware/nvidia/"+driverVersion+"/gsp_ga10x.bin"),
			},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
}

func TestRemoveIsIdempotent(t *testing.T) {
	w, dir := setup(t)
	_, ctx := ktesting.NewTestContext(t)
	if _, err := w.Write(ctx, ClaimEdits{ClaimUID: claimUID, DeviceNodes: []string{"/dev/nvidia0"}, DriverVersion: driverVersion}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := w.Remove(claimUID); err != nil {
			t.Fatalf("Remove #%d: %v", i+1, err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("%d files left after Remove", len(entries))
	}
}

func TestInvalidNames(t *testing.T) {
	if _, err := NewWriter(t.TempDir(), "-bad", Options{}); err == nil {
		t.Error("NewWriter accepted an invalid vendor")
	}
	if _, err := NewWriter(t.TempDir(), "gpu.drasched.dev", Options{DevRoot: "run/nvidia/driver"}); err == nil {
		t.Error("NewWriter accepted a relative device root")
	}
	w, _ := setup(t)
	_, ctx := ktesting.NewTestContext(t)
	if _, err := w.Write(ctx, ClaimEdits{ClaimUID: "../../etc/passwd"}); err == nil {
		t.Error("Write accepted a claim UID that is not a valid device name")
	}
}

// TestDeviceNodes: a spec names the nodes that exist under the device root,
// host paths included; it leaves out the UVM nodes until the NVIDIA driver
// creates them, and is not written at all while a node the GPU cannot do
// without is missing, because the runtime would fail every container of
// the claim on it.
func TestDeviceNodes(t *testing.T) {
	gpu := []string{"/dev/nvidia0", "/dev/nvidia3"}
	all := []string{"nvidia0", "nvidia3", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}
	node := func(p string) *cdispec.DeviceNode { return &cdispec.DeviceNode{Path: p} }
	for name, tc := range map[string]struct {
		gpu         []string // the claim's device nodes; default gpu
		nodes       []string // under <root>/dev
		hostRoot    bool     // DevRoot is the test's directory, not /
		wantDevice  []*cdispec.DeviceNode
		wantControl []*cdispec.DeviceNode
		wantErr     error
	}{
		"all nodes": {
			nodes:       all,
			wantDevice:  []*cdispec.DeviceNode{node("/dev/nvidia0"), node("/dev/nvidia3")},
			wantControl: []*cdispec.DeviceNode{node("/dev/nvidiactl"), node("/dev/nvidia-uvm"), node("/dev/nvidia-uvm-tools")},
		},
		"no UVM nodes yet": {
			nodes:       []string{"nvidia0", "nvidia3", "nvidiactl"},
			wantDevice:  []*cdispec.DeviceNode{node("/dev/nvidia0"), node("/dev/nvidia3")},
			wantControl: []*cdispec.DeviceNode{node("/dev/nvidiactl")},
		},
		"UVM tools missing": {
			nodes:       []string{"nvidia0", "nvidia3", "nvidiactl", "nvidia-uvm"},
			wantDevice:  []*cdispec.DeviceNode{node("/dev/nvidia0"), node("/dev/nvidia3")},
			wantControl: []*cdispec.DeviceNode{node("/dev/nvidiactl"), node("/dev/nvidia-uvm")},
		},
		"a GPU node missing": {
			nodes:   []string{"nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"},
			wantErr: ErrDeviceNodeMissing,
		},
		"nvidiactl missing": {
			nodes:   []string{"nvidia0", "nvidia3", "nvidia-uvm", "nvidia-uvm-tools"},
			wantErr: ErrDeviceNodeMissing,
		},
		"a MIG device's nvidia-caps node missing": {
			gpu:     []string{"/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13"},
			nodes:   []string{"nvidia0", "nvidia-caps/nvidia-cap12", "nvidiactl"},
			wantErr: ErrDeviceNodeMissing,
		},
		"a MIG device's nvidia-caps nodes": {
			gpu:         []string{"/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13"},
			nodes:       []string{"nvidia0", "nvidia-caps/nvidia-cap12", "nvidia-caps/nvidia-cap13", "nvidiactl"},
			wantDevice:  []*cdispec.DeviceNode{node("/dev/nvidia0"), node("/dev/nvidia-caps/nvidia-cap12"), node("/dev/nvidia-caps/nvidia-cap13")},
			wantControl: []*cdispec.DeviceNode{node("/dev/nvidiactl")},
		},
		"host device root": {
			nodes:    all,
			hostRoot: true,
			// Filled in below: the paths depend on the temporary directory.
		},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.gpu == nil {
				tc.gpu = gpu
			}
			root := devRoot(t, tc.nodes...)
			opts := Options{DevRoot: "/", ContainerDevRoot: root}
			if tc.hostRoot {
				opts = Options{DevRoot: root}
				for _, p := range gpu {
					tc.wantDevice = append(tc.wantDevice, &cdispec.DeviceNode{Path: p, HostPath: filepath.Join(root, p)})
				}
				for _, p := range ControlDeviceNodes {
					tc.wantControl = append(tc.wantControl, &cdispec.DeviceNode{Path: p, HostPath: filepath.Join(root, p)})
				}
			}
			w, dir := setupWith(t, opts)
			_, ctx := ktesting.NewTestContext(t)
			id, err := w.Write(ctx, ClaimEdits{ClaimUID: claimUID, DeviceNodes: tc.gpu, DriverVersion: driverVersion})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Write: error %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr != nil {
				if _, err := os.Stat(w.SpecPath(claimUID)); !os.IsNotExist(err) {
					t.Errorf("a spec was written although Write failed: %v", err)
				}
				return
			}
			spec := readSpec(t, dir, id)
			if diff := cmp.Diff(tc.wantDevice, spec.Devices[0].ContainerEdits.DeviceNodes); diff != "" {
				t.Errorf("claim's device nodes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantControl, spec.ContainerEdits.DeviceNodes); diff != "" {
				t.Errorf("control device nodes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDriverFiles: a spec takes the driver's files from the driver root as
// it is at the time of writing, on the host path under a driver root other
// than /, and is not written while the libraries of the claim's driver
// version are missing: a container without them could not use the GPU.
func TestDriverFiles(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	devices := devRoot(t, "nvidia0", "nvidiactl")
	edits := ClaimEdits{ClaimUID: claimUID, DeviceNodes: []string{"/dev/nvidia0"}, DriverVersion: driverVersion}

	// The GPU operator's layout: the driver container's root, seen by the
	// plugin elsewhere.
	local := driverRoot(t)
	w, dir := setupWith(t, Options{DevRoot: "/", ContainerDevRoot: devices, DriverRoot: "/run/nvidia/driver", ContainerDriverRoot: local})
	id, err := w.Write(ctx, edits)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	mounts := readSpec(t, dir, id).ContainerEdits.Mounts
	if want := driverMount("/run/nvidia/driver"+libDir+"/libcuda.so."+driverVersion, "/usr/local/nvidia/lib64/libcuda.so.1"); !slices.ContainsFunc(mounts, func(m *cdispec.Mount) bool {
		return cmp.Equal(m, want)
	}) {
		t.Errorf("mounts %v do not contain %v", mounts, want)
	}

	for name, tc := range map[string]struct {
		edit    func(root string)
		version string
		wantErr string
	}{
		"libcuda missing": {
			edit:    func(root string) { mustRemove(t, filepath.Join(root, libDir, "libcuda.so."+driverVersion)) },
			wantErr: "libcuda.so." + driverVersion + " under /run/nvidia/driver",
		},
		"driver upgraded on disk, not yet loaded": {
			version: "580.65.06",
			wantErr: "there are libraries of version 560.35.03, 570.86.15",
		},
		"driver version unknown": {
			version: " ",
			wantErr: "driver version",
		},
	} {
		t.Run(name, func(t *testing.T) {
			root := driverRoot(t)
			if tc.edit != nil {
				tc.edit(root)
			}
			w, _ := setupWith(t, Options{DevRoot: "/", ContainerDevRoot: devices, DriverRoot: "/run/nvidia/driver", ContainerDriverRoot: root})
			e := edits
			if tc.version != "" {
				e.DriverVersion = tc.version
			}
			_, err := w.Write(ctx, e)
			if !errors.Is(err, ErrDriverFilesMissing) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Write: %v, want ErrDriverFilesMissing saying %q", err, tc.wantErr)
			}
			if _, err := os.Stat(w.SpecPath(claimUID)); !os.IsNotExist(err) {
				t.Errorf("a spec was written although Write failed: %v", err)
			}
		})
	}
}

func mustRemove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}
