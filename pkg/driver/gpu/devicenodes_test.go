package gpu

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
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
