package cdi

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

const claimUID = "5f0c1c9e-2a4b-4c4e-9d7a-3b6e2f1d0a11"

func setup(t *testing.T) (*Writer, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "cdi")
	w, err := NewWriter(dir, "gpu.drasched.dev")
	if err != nil {
		t.Fatalf("NewWriter: %v", err)
	}
	return w, dir
}

func TestWriteReadByRuntime(t *testing.T) {
	w, dir := setup(t)
	id, err := w.Write(ClaimEdits{
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

	// Read the spec the way a container runtime does.
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
	got := dev.GetSpec().Spec
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
	if _, err := w.Write(ClaimEdits{ClaimUID: claimUID, DeviceNodes: []string{"/dev/nvidia0"}}); err != nil {
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
	if _, err := NewWriter(t.TempDir(), "-bad"); err == nil {
		t.Error("NewWriter accepted an invalid vendor")
	}
	w, _ := setup(t)
	if _, err := w.Write(ClaimEdits{ClaimUID: "../../etc/passwd"}); err == nil {
		t.Error("Write accepted a claim UID that is not a valid device name")
	}
}
