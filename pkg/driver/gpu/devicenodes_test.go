package gpu

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// TestPrepareDeviceNodes: what Prepare does when device nodes are missing on
// the host, whichever backend found the GPUs. The UVM nodes, which the
// NVIDIA driver creates lazily, are left out of a claim's spec until they
// exist; a claim whose GPU node (or /dev/nvidiactl) is missing is refused
// with an error naming the node, nothing is left behind, and the kubelet's
// retry succeeds once the node is there.
func TestPrepareDeviceNodes(t *testing.T) {
	before := newClaim("before-uvm").Allocated("gpu", DefaultDriverName, testNode, "gpu-6").Obj()
	after := newClaim("after-uvm").Allocated("gpu", DefaultDriverName, testNode, "gpu-7").Obj()
	missing := map[string]*resourceapi.ResourceClaim{
		"nvidia6":   newClaim("missing-gpu-node").Allocated("gpu", DefaultDriverName, testNode, "gpu-6").Obj(),
		"nvidiactl": newClaim("missing-nvidiactl").Allocated("gpu", DefaultDriverName, testNode, "gpu-6").Obj(),
	}
	env := setup(t, envOptions{}, before, after, missing["nvidia6"], missing["nvidiactl"])
	host := func(node string) string { return filepath.Join(env.cfg.ContainerDevRoot, "dev", node) }
	for _, n := range []string{"nvidia-uvm", "nvidia-uvm-tools"} {
		if err := os.Remove(host(n)); err != nil {
			t.Fatal(err)
		}
	}

	// No UVM nodes yet: the claim gets its GPU and /dev/nvidiactl.
	env.mustPrepare(t, before)
	if diff := cmp.Diff([]string{"/dev/nvidiactl"}, env.controlNodes(t, before.UID)); diff != "" {
		t.Errorf("control nodes without UVM nodes on the host (-want +got):\n%s", diff)
	}
	// The driver creates them; the next claim gets them too.
	for _, n := range []string{"nvidia-uvm", "nvidia-uvm-tools"} {
		writeFile(t, host(n), nil)
	}
	env.mustPrepare(t, after)
	if diff := cmp.Diff([]string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}, env.controlNodes(t, after.UID)); diff != "" {
		t.Errorf("control nodes with UVM nodes on the host (-want +got):\n%s", diff)
	}
	if _, err := env.unprepare(t, before, after); err != nil {
		t.Fatal(err)
	}

	// A GPU node or nvidiactl is missing: refused, nothing prepared.
	for node, claim := range missing {
		t.Run(node, func(t *testing.T) {
			if err := os.Remove(host(node)); err != nil {
				t.Fatal(err)
			}
			resp, err := env.prepare(t, claim)
			if err != nil {
				t.Fatal(err)
			}
			msg := resp.Claims[string(claim.UID)].GetError()
			for _, want := range []string{"device node does not exist on the host", "/dev/" + node} {
				if !strings.Contains(msg, want) {
					t.Errorf("prepare error %q does not say %q", msg, want)
				}
			}
			if _, ok := env.loadCheckpoint(t).Claims[string(claim.UID)]; ok {
				t.Error("the refused claim is in the checkpoint")
			}
			if _, err := os.Stat(env.driver.cdi.SpecPath(string(claim.UID))); !os.IsNotExist(err) {
				t.Errorf("the refused claim has a CDI spec: %v", err)
			}

			writeFile(t, host(node), nil)
			env.mustPrepare(t, claim)
			if _, err := env.unprepare(t, claim); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// mustPrepare prepares claims and fails the test on any error.
func (e *testEnv) mustPrepare(t *testing.T, claims ...*resourceapi.ResourceClaim) {
	t.Helper()
	resp, err := e.prepare(t, claims...)
	if err != nil {
		t.Fatal(err)
	}
	for uid, r := range resp.Claims {
		if r.GetError() != "" {
			t.Fatalf("prepare claim %s: %s", uid, r.GetError())
		}
	}
}

// controlNodes returns the container paths of the spec-wide device nodes of
// a claim's CDI spec.
func (e *testEnv) controlNodes(t *testing.T, uid types.UID) []string {
	t.Helper()
	data, err := os.ReadFile(e.driver.cdi.SpecPath(string(uid)))
	if err != nil {
		t.Fatal(err)
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, n := range spec.ContainerEdits.DeviceNodes {
		paths = append(paths, n.Path)
	}
	return slices.Clip(paths)
}

// TestPrepareMIGCapsAndDriverFiles: a MIG device reaches a container only
// through its nvidia-caps nodes, and a GPU only with the driver's
// libraries. Prepare refuses a claim whose MIG device's caps discovery
// could not read, whose caps node is missing on the host, or whose driver
// version has no libraries under the driver root, naming what is missing;
// nothing is left behind, and the retry succeeds once it is there.
func TestPrepareMIGCapsAndDriverFiles(t *testing.T) {
	a100 := loadInventory(t, "a100-mig-8.yaml")
	mig := func(i int) string { return a100[0].MIGName(&a100[0].MIG[i]) }
	claims := map[string]*resourceapi.ResourceClaim{
		"caps unknown":      newClaim("caps-unknown").Allocated("mig", DefaultDriverName, testNode, mig(2)).Obj(),
		"caps node missing": newClaim("caps-node").Allocated("mig", DefaultDriverName, testNode, mig(1)).Obj(),
		"no libcuda":        newClaim("no-libcuda").Allocated("gpu", DefaultDriverName, testNode, "gpu-6").Obj(),
	}
	env := setup(t, envOptions{}, claims["caps unknown"], claims["caps node missing"], claims["no libcuda"])
	capsNode := filepath.Join(env.cfg.ContainerDevRoot, a100[0].MIG[1].Caps.DeviceNodes()[1])
	libcuda := filepath.Join(env.cfg.DriverRoot, "usr", "lib64", "libcuda.so."+a100[0].DriverVersion)

	// Discovery loses the caps of MIG device 2 (the inventory stands in
	// for an unreadable /proc/driver/nvidia/capabilities).
	raw, err := os.ReadFile(env.inventory)
	if err != nil {
		t.Fatal(err)
	}
	withoutCaps := strings.Replace(string(raw), fmt.Sprintf("      caps: {gpuInstance: %d, computeInstance: %d}\n",
		a100[0].MIG[2].Caps.GPUInstance, a100[0].MIG[2].Caps.ComputeInstance), "", 1)
	// A rescan now rather than the watch's: it may not have started yet.
	_, ctx := ktesting.NewTestContext(t)
	writeFile(t, env.inventory, []byte(withoutCaps))
	env.driver.rescan(ctx, &recordingPublisher{})
	if _, index := env.driver.devices(); index[mig(2)].MIG.Caps != nil {
		t.Fatalf("MIG device 2 still has caps after the inventory lost them")
	}

	for name, tc := range map[string]struct {
		breakIt, fixIt func()
		wantErr        []string
	}{
		"caps unknown": {
			breakIt: func() {},
			fixIt: func() {
				writeFile(t, env.inventory, raw)
				env.driver.rescan(ctx, &recordingPublisher{})
			},
			wantErr: []string{"nvidia-caps device nodes of the MIG device are unknown", a100[0].MIG[2].UUID},
		},
		"caps node missing": {
			breakIt: func() { mustRemove(t, capsNode) },
			fixIt:   func() { writeFile(t, capsNode, nil) },
			wantErr: []string{"device node does not exist on the host", a100[0].MIG[1].Caps.DeviceNodes()[1]},
		},
		"no libcuda": {
			breakIt: func() { mustRemove(t, libcuda) },
			fixIt:   func() { writeFile(t, libcuda, nil) },
			wantErr: []string{"NVIDIA driver libraries not found", "libcuda.so." + a100[0].DriverVersion},
		},
	} {
		t.Run(name, func(t *testing.T) {
			claim := claims[name]
			tc.breakIt()
			resp, err := env.prepare(t, claim)
			if err != nil {
				t.Fatal(err)
			}
			msg := resp.Claims[string(claim.UID)].GetError()
			for _, want := range tc.wantErr {
				if !strings.Contains(msg, want) {
					t.Errorf("prepare error %q does not say %q", msg, want)
				}
			}
			if _, ok := env.loadCheckpoint(t).Claims[string(claim.UID)]; ok {
				t.Error("the refused claim is in the checkpoint")
			}
			if _, err := os.Stat(env.driver.cdi.SpecPath(string(claim.UID))); !os.IsNotExist(err) {
				t.Errorf("the refused claim has a CDI spec: %v", err)
			}
			tc.fixIt()
			env.mustPrepare(t, claim)
			if _, err := env.unprepare(t, claim); err != nil {
				t.Fatal(err)
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
