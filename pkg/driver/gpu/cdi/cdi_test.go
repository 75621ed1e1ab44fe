package cdi

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

const claimUID = "5f0c1c9e-2a4b-4c4e-9d7a-3b6e2f1d0a11"

func setup(t *testing.T) (*Writer, string) {
	t.Helper()
	root := devRoot(t, "nvidia0", "nvidia3", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
	// The spec names host paths only for a device root other than /: the
	// writer sees the host's / at root, as the plugin's container does.
	return setupWith(t, Options{DevRoot: "/", ContainerDevRoot: root})
}

func setupWith(t *testing.T, opts Options) (*Writer, string) {
	t.Helper()
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
		if err := os.WriteFile(filepath.Join(root, "dev", n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
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
		ClaimUID:    claimUID,
		DeviceNodes: []string{"/dev/nvidia0", "/dev/nvidia3"},
		Env:         []string{"NVIDIA_VISIBLE_DEVICES=GPU-a,GPU-b"},
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
	want := &cdispec.Spec{
		Version: got.Version,
		Kind:    "gpu.drasched.dev/gpu",
		Devices: []cdispec.Device{{
			Name: claimUID,
			ContainerEdits: cdispec.ContainerEdits{
				Env:         []string{"NVIDIA_VISIBLE_DEVICES=GPU-a,GPU-b"},
				DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/nvidia0"}, {Path: "/dev/nvidia3"}},
			},
		}},
		ContainerEdits: cdispec.ContainerEdits{
			DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/nvidiactl"}, {Path: "/dev/nvidia-uvm"}, {Path: "/dev/nvidia-uvm-tools"}},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
}

func TestRemoveIsIdempotent(t *testing.T) {
	w, dir := setup(t)
	_, ctx := ktesting.NewTestContext(t)
	if _, err := w.Write(ctx, ClaimEdits{ClaimUID: claimUID, DeviceNodes: []string{"/dev/nvidia0"}}); err != nil {
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
		"host device root": {
			nodes:    all,
			hostRoot: true,
			// Filled in below: the paths depend on the temporary directory.
		},
	} {
		t.Run(name, func(t *testing.T) {
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
			id, err := w.Write(ctx, ClaimEdits{ClaimUID: claimUID, DeviceNodes: gpu})
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
