package gpu

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/drasched/drasched/pkg/driver/gpu/checkpoint"
	"github.com/drasched/drasched/pkg/driver/gpu/device"
)

const cdiKind = DefaultDriverName + "/gpu="

func configJSON(sharing string) string {
	return `{"apiVersion":"gpu.drasched.dev/v1alpha1","kind":"GPUConfig","sharing":` + sharing + `}`
}

// TestNodePrepareResources calls the plugin's DRA socket as the kubelet
// does, for one claim at a time.
func TestNodePrepareResources(t *testing.T) {
	a100 := loadInventory(t, "a100-mig-8.yaml")
	mig00 := a100[0].MIGName(&a100[0].MIG[0])
	defaultSharing := []string{"DRASCHED_GPU_SHARING=TimeSlicing", "DRASCHED_GPU_TIMESLICE_INTERVAL=Default"}
	// edits are a claim's device edits: the sharing configuration and the
	// device nodes, a MIG device's nvidia-caps nodes with its GPU's node.
	edits := func(env []string, nodes ...string) []string {
		return append(slices.Clone(env), nodes...)
	}
	caps := func(migs ...device.MIGDevice) []string {
		var nodes []string
		for _, m := range migs {
			nodes = append(nodes, m.Caps.DeviceNodes()...)
		}
		return nodes
	}
	tests := map[string]struct {
		claim       *resourceapi.ResourceClaim
		wantErr     string
		wantDevices []string
		wantEdits   []string
	}{
		"whole GPU": {
			claim:       newClaim("whole").Allocated("gpu", DefaultDriverName, testNode, "gpu-6").Obj(),
			wantDevices: []string{"gpu-6"},
			wantEdits:   edits(defaultSharing, "/dev/nvidia6"),
		},
		"two GPUs in one claim": {
			claim:       newClaim("two").Allocated("gpus", DefaultDriverName, testNode, "gpu-6").Allocated("gpus", DefaultDriverName, testNode, "gpu-7").Obj(),
			wantDevices: []string{"gpu-6", "gpu-7"},
			wantEdits:   edits(defaultSharing, "/dev/nvidia6", "/dev/nvidia7"),
		},
		"MIG device": {
			claim:       newClaim("mig").Allocated("mig", DefaultDriverName, testNode, mig00).Obj(),
			wantDevices: []string{mig00},
			wantEdits:   edits(defaultSharing, append([]string{"/dev/nvidia0"}, caps(a100[0].MIG[0])...)...),
		},
		"whole GPU in MIG mode exposes its MIG devices": {
			claim:       newClaim("whole-mig").Allocated("gpu", DefaultDriverName, testNode, "gpu-5").Obj(),
			wantDevices: []string{"gpu-5"},
			wantEdits:   edits(defaultSharing, append([]string{"/dev/nvidia5"}, caps(a100[5].MIG...)...)...),
		},
		"claim configuration overrides the class configuration": {
			claim: newClaim("mps").Allocated("gpu", DefaultDriverName, testNode, "gpu-6").
				AllocationConfig(resourceapi.AllocationConfigSourceClass, DefaultDriverName, configJSON(`{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}`)).
				AllocationConfig(resourceapi.AllocationConfigSourceClaim, DefaultDriverName, configJSON(`{"strategy":"MPS","mps":{"activeThreadPercentage":50}}`)).Obj(),
			wantDevices: []string{"gpu-6"},
			wantEdits:   edits([]string{"DRASCHED_GPU_SHARING=MPS", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50"}, "/dev/nvidia6"),
		},
		"class configuration applies": {
			claim: newClaim("short").Allocated("gpu", DefaultDriverName, testNode, "gpu-6").
				AllocationConfig(resourceapi.AllocationConfigSourceClass, DefaultDriverName, configJSON(`{"strategy":"TimeSlicing","timeSlicing":{"interval":"Short"}}`)).Obj(),
			wantDevices: []string{"gpu-6"},
			wantEdits:   edits([]string{"DRASCHED_GPU_SHARING=TimeSlicing", "DRASCHED_GPU_TIMESLICE_INTERVAL=Short"}, "/dev/nvidia6"),
		},
		"configuration for another request does not apply": {
			claim: newClaim("other-request").Allocated("gpu", DefaultDriverName, testNode, "gpu-6").
				AllocationConfig(resourceapi.AllocationConfigSourceClaim, DefaultDriverName, configJSON(`{"strategy":"MPS"}`), "other").Obj(),
			wantDevices: []string{"gpu-6"},
			wantEdits:   edits(defaultSharing, "/dev/nvidia6"),
		},
		"devices of other drivers are left alone": {
			claim:       newClaim("mixed").Allocated("gpu", DefaultDriverName, testNode, "gpu-7").Allocated("nic", "nic.example.com", testNode, "nic-0").Obj(),
			wantDevices: []string{"gpu-7"},
			wantEdits:   edits(defaultSharing, "/dev/nvidia7"),
		},
		"device in another node's pool": {
			claim:   newClaim("wrong-pool").Allocated("gpu", DefaultDriverName, "node-2", "gpu-6").Obj(),
			wantErr: "claim is not allocated on this node: device gpu-6 is in pool node-2",
		},
		"allocation for another node": {
			claim:   newClaim("wrong-node").Allocated("gpu", DefaultDriverName, testNode, "gpu-6").AllocatedOn("node-2").Obj(),
			wantErr: "node selector does not match node node-1",
		},
		"no device of this driver": {
			claim:   newClaim("not-ours").Allocated("nic", "nic.example.com", testNode, "nic-0").Obj(),
			wantErr: "claim has no devices of this driver",
		},
		"device that is not here": {
			claim:   newClaim("unknown-device").Allocated("gpu", DefaultDriverName, testNode, "gpu-42").Obj(),
			wantErr: "allocated device does not exist on this node: gpu-42",
		},
		"configuration with an unknown field": {
			claim: newClaim("typo").Allocated("gpu", DefaultDriverName, testNode, "gpu-6").
				AllocationConfig(resourceapi.AllocationConfigSourceClaim, DefaultDriverName, configJSON(`{"strategy":"MPS","mps":{"activeThreadPercent":50}}`)).Obj(),
			wantErr: `unknown field "sharing.mps.activeThreadPercent"`,
		},
		"configuration out of range": {
			claim: newClaim("range").Allocated("gpu", DefaultDriverName, testNode, "gpu-6").
				AllocationConfig(resourceapi.AllocationConfigSourceClaim, DefaultDriverName, configJSON(`{"strategy":"MPS","mps":{"activeThreadPercentage":150}}`)).Obj(),
			wantErr: "sharing.mps.activeThreadPercentage: Invalid value: 150: must be between 1 and 100",
		},
		"different configurations for the devices of one claim": {
			claim: newClaim("two-configs").Allocated("a", DefaultDriverName, testNode, "gpu-6").Allocated("b", DefaultDriverName, testNode, "gpu-7").
				AllocationConfig(resourceapi.AllocationConfigSourceClaim, DefaultDriverName, configJSON(`{"strategy":"MPS"}`), "a").Obj(),
			wantErr: "one configuration per claim is supported",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			env := setup(t, envOptions{}, tc.claim)
			resp, err := env.prepare(t, tc.claim)
			if err != nil {
				t.Fatalf("NodePrepareResources: %v", err)
			}
			got := resp.Claims[string(tc.claim.UID)]
			if got == nil {
				t.Fatalf("no result for the claim in %v", resp)
			}
			cp := env.loadCheckpoint(t)
			if tc.wantErr != "" {
				if !strings.Contains(got.Error, tc.wantErr) {
					t.Errorf("claim error %q, want one containing %q", got.Error, tc.wantErr)
				}
				if len(got.Devices) > 0 || len(cp.Claims) > 0 || len(env.cdiSpecs(t)) > 0 {
					t.Errorf("a refused claim left devices %v, checkpoint %v, CDI specs %v", got.Devices, cp.Claims, env.cdiSpecs(t))
				}
				return
			}
			if got.Error != "" {
				t.Fatalf("claim error: %s", got.Error)
			}
			cdiID := cdiKind + string(tc.claim.UID)
			var names []string
			for _, d := range got.Devices {
				names = append(names, d.DeviceName)
				if diff := cmp.Diff([]string{cdiID}, d.CdiDeviceIds); diff != "" {
					t.Errorf("CDI IDs of %s (-want +got):\n%s", d.DeviceName, diff)
				}
				if d.PoolName != testNode || len(d.RequestNames) != 1 {
					t.Errorf("device %s: pool %q, requests %v", d.DeviceName, d.PoolName, d.RequestNames)
				}
			}
			if diff := cmp.Diff(tc.wantDevices, names); diff != "" {
				t.Errorf("devices (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(map[string][]string{cdiID: tc.wantEdits}, env.cdiSpecs(t)); diff != "" {
				t.Errorf("CDI devices (-want +got):\n%s", diff)
			}
			if c := cp.Claims[string(tc.claim.UID)]; c == nil || c.State != checkpoint.PrepareCompleted {
				t.Errorf("checkpoint entry %+v, want PrepareCompleted", c)
			}
		})
	}
}

// TestNodePrepareResourcesCallErrors: claims the kubelet plugin helper
// cannot fetch fail the whole call, before the driver runs.
func TestNodePrepareResourcesCallErrors(t *testing.T) {
	tests := map[string]struct {
		stored  *resourceapi.ResourceClaim // in the apiserver; nil for none
		asked   *resourceapi.ResourceClaim
		wantErr string
	}{
		"claim not allocated": {
			stored:  newClaim("pending").Obj(),
			wantErr: "not allocated",
		},
		"claim does not exist": {
			asked:   newClaim("gone").Allocated("gpu", DefaultDriverName, testNode, "gpu-6").Obj(),
			wantErr: "not found",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var env *testEnv
			if tc.stored != nil {
				env = setup(t, envOptions{}, tc.stored)
				tc.asked = tc.stored
			} else {
				env = setup(t, envOptions{})
			}
			resp, err := env.prepare(t, tc.asked)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("NodePrepareResources: response %v, error %v; want an error containing %q", resp, err, tc.wantErr)
			}
		})
	}
}

func TestPrepareIsIdempotentAndUnprepareCleansUp(t *testing.T) {
	claim := newClaim("idempotent").Allocated("gpu", DefaultDriverName, testNode, "gpu-6").Allocated("gpu", DefaultDriverName, testNode, "gpu-7").Obj()
	unknown := newClaim("never-prepared").Allocated("gpu", DefaultDriverName, testNode, "gpu-1").Obj()
	env := setup(t, envOptions{}, claim)
	operations := func(op string) float64 {
		v, err := testutil.GetCounterMetricValue(claimOperations.WithLabelValues(op))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	preparesBefore, unpreparesBefore := operations(operationPrepare), operations(operationUnprepare)

	first, err := env.prepare(t, claim)
	if err != nil {
		t.Fatal(err)
	}
	specPath := env.driver.cdi.SpecPath(string(claim.UID))
	specBefore, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatalf("CDI spec: %v", err)
	}
	checkpointBefore := env.loadCheckpoint(t)

	// The kubelet asks again, e.g. after its restart: same answer, nothing
	// rewritten.
	second, err := env.prepare(t, claim)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(first.Claims, second.Claims, cmp.Comparer(func(a, b *drapbv1.NodePrepareResourceResponse) bool {
		return a.String() == b.String()
	})); diff != "" {
		t.Errorf("second prepare differs (-first +second):\n%s", diff)
	}
	specAfter, _ := os.ReadFile(specPath)
	if string(specAfter) != string(specBefore) {
		t.Errorf("second prepare rewrote the CDI spec")
	}
	if diff := cmp.Diff(checkpointBefore, env.loadCheckpoint(t)); diff != "" {
		t.Errorf("second prepare changed the checkpoint (-before +after):\n%s", diff)
	}
	gauge, _ := testutil.GetGaugeMetricValue(preparedDevices)
	if gauge != 2 {
		t.Errorf("prepared_devices = %v, want 2", gauge)
	}

	// Unprepare removes everything; unpreparing again, or a claim that was
	// never prepared, succeeds.
	for i := range 2 {
		resp, err := env.unprepare(t, claim, unknown)
		if err != nil {
			t.Fatalf("unprepare #%d: %v", i+1, err)
		}
		for uid, r := range resp.Claims {
			if r.Error != "" {
				t.Errorf("unprepare #%d of %s: %s", i+1, uid, r.Error)
			}
		}
	}
	if _, err := os.Stat(specPath); !os.IsNotExist(err) {
		t.Errorf("CDI spec still there after unprepare: %v", err)
	}
	if cp := env.loadCheckpoint(t); len(cp.Claims) != 0 {
		t.Errorf("checkpoint still holds %v", cp.Claims)
	}
	if got := operations(operationPrepare) - preparesBefore; got != 2 {
		t.Errorf("claim_operations_total{operation=prepare} grew by %v, want 2", got)
	}
	if got := operations(operationUnprepare) - unpreparesBefore; got != 4 {
		t.Errorf("claim_operations_total{operation=unprepare} grew by %v, want 4", got)
	}
}

// TestDeviceAlreadyPrepared: hardware held by one claim is refused to
// another, whichever device names they use: a whole GPU and each of its MIG
// devices exclude each other, MIG devices of one GPU only when their
// placements share a memory slice; admin access is not exclusive. Each
// case's steps run in order on one plugin.
func TestDeviceAlreadyPrepared(t *testing.T) {
	a100 := loadInventory(t, "a100-mig-8.yaml")
	mig := func(gpu, i int) string { return a100[gpu].MIGName(&a100[gpu].MIG[i]) }
	alloc := func(name, device string) *resourceapi.ResourceClaim {
		return newClaim(name).Allocated("gpu", DefaultDriverName, testNode, device).Obj()
	}
	// relayout replaces GPU 0's first two 1g.5gb devices (memory slices 0
	// and 1) with one 2g.10gb device over both, as an administrator does
	// with nvidia-smi mig -dgi and -cgi.
	const relaidMIG = "MIG-0c1d2e3f-4a5b-4c6d-8e7f-8091a2b3c4d5"
	relaid := a100[0].MIGName(&device.MIGDevice{UUID: relaidMIG})
	relayout := func(t *testing.T, env *testEnv) {
		// Published, the plugin watches the inventory (as in
		// TestDevicesAppearAndDisappear).
		waitFor(t, "published slices", func() (bool, string) {
			return len(env.publishedSlices(t)) > 0, "no slices"
		})
		env.editInventory(t, func(s string) string {
			return strings.Replace(s, `    - uuid: `+a100[0].MIG[0].UUID+`
      profile: 1g.5gb
      placement: {start: 0, size: 1}
      memory: 4864Mi
      caps: {gpuInstance: 3, computeInstance: 4}
    - uuid: `+a100[0].MIG[1].UUID+`
      profile: 1g.5gb
      placement: {start: 1, size: 1}
      memory: 4864Mi
      caps: {gpuInstance: 12, computeInstance: 13}
`, `    - uuid: `+relaidMIG+`
      profile: 2g.10gb
      placement: {start: 0, size: 2}
      memory: 9856Mi
      caps: {gpuInstance: 3, computeInstance: 4}
`, 1)
		})
		waitFor(t, "the new MIG layout", func() (bool, string) {
			_, index := env.driver.devices()
			_, ok := index[relaid]
			return ok, "device " + relaid + " not discovered"
		})
	}
	// previousVersion records a prepared claim as the version before memory
	// slices were hardware keys wrote it, with these keys: a MIG device's
	// UUID and its GPU's, or a GPU's UUID and its MIG devices'.
	previousVersion := func(claim *resourceapi.ResourceClaim, device string, keys ...string) func(t *testing.T, env *testEnv) {
		return func(t *testing.T, env *testEnv) {
			uid := string(claim.UID)
			uuids, err := json.Marshal(keys)
			if err != nil {
				t.Fatal(err)
			}
			raw := `{"state":"PrepareCompleted","namespace":"default","name":"` + claim.Name + `","devices":[{"requests":["gpu"],"pool":"` + testNode +
				`","device":"` + device + `","uuids":` + string(uuids) + `,"cdiDeviceIDs":["` + cdiKind + uid + `"]}],"cdiSpecName":"` + DefaultDriverName + `-gpu_` + uid + `.json"}`
			var entry checkpoint.Claim
			dec := json.NewDecoder(strings.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&entry); err != nil {
				t.Fatalf("entry of the previous version: %v", err)
			}
			f := checkpoint.File{Path: filepath.Join(env.cfg.StateDir, checkpointFileName)}
			cp, err := f.Load()
			if err != nil {
				t.Fatal(err)
			}
			cp.Claims[uid] = &entry
			if err := f.Store(cp); err != nil {
				t.Fatal(err)
			}
		}
	}
	migUUIDs := func(gpu int) []string {
		var uuids []string
		for _, m := range a100[gpu].MIG {
			uuids = append(uuids, m.UUID)
		}
		return uuids
	}
	whole0 := alloc("whole-0", "gpu-0")
	mig00, mig01, mig02, mig03 := alloc("mig-0-0", mig(0, 0)), alloc("mig-0-1", mig(0, 1)), alloc("mig-0-2", mig(0, 2)), alloc("mig-0-3", mig(0, 3))
	oldMIG00, oldGone, oldWhole2 := newClaim("old-mig-0-0").Obj(), newClaim("old-gone").Obj(), newClaim("old-whole-2").Obj()
	gpu0 := a100[0].UUID

	type step struct {
		prepare   *resourceapi.ResourceClaim
		wantErr   string
		unprepare *resourceapi.ResourceClaim
		// change changes the node before the next step.
		change func(t *testing.T, env *testEnv)
	}
	tests := map[string][]step{
		"whole GPU and its MIG device exclude each other": {
			{prepare: whole0},
			{prepare: mig03, wantErr: "device is already prepared for another claim: " + mig(0, 3) + " (" + gpu0 + ") is held by claim default/whole-0"},
			{unprepare: whole0},
			{prepare: mig03},
			{prepare: whole0, wantErr: "device is already prepared for another claim: gpu-0 (" + gpu0 + "/memory-slice-3) is held by claim default/mig-0-3"},
		},
		"MIG devices of one GPU with disjoint placements": {
			{prepare: mig00},
			{prepare: mig01},
			{prepare: mig03},
			{prepare: whole0, wantErr: "device is already prepared for another claim: gpu-0 (" + gpu0 + "/memory-slice-"},
			{unprepare: mig01},
			{prepare: alloc("mig-0-1-again", mig(0, 1))},
		},
		"one MIG device for two claims": {
			{prepare: mig00},
			{prepare: alloc("mig-0-0-again", mig(0, 0)), wantErr: "(" + a100[0].MIG[0].UUID + ") is held by claim default/mig-0-0"},
		},
		"a claim with a GPU and one of its MIG devices": {
			{prepare: newClaim("both").Allocated("gpu", DefaultDriverName, testNode, "gpu-0").Allocated("mig", DefaultDriverName, testNode, mig(0, 2)).Obj(),
				wantErr: "is held by claim this claim's device gpu-0"},
		},
		"one GPU for two claims, and admin access": {
			{prepare: alloc("first-6", "gpu-6")},
			{prepare: alloc("second-6", "gpu-6"), wantErr: "device is already prepared for another claim: gpu-6 (" + a100[6].UUID + ") is held by claim default/first-6"},
			{prepare: newClaim("monitor-6").Allocated("gpu", DefaultDriverName, testNode, "gpu-6").AllocatedAdminAccess().Obj()},
			{prepare: mig00},
			{prepare: newClaim("monitor-0").Allocated("gpu", DefaultDriverName, testNode, "gpu-0").AllocatedAdminAccess().Obj()},
			{prepare: mig01},
		},
		"overlapping placements after the GPU's MIG layout changed": {
			{prepare: mig00, change: relayout},
			{prepare: alloc("relaid", relaid), wantErr: relaid + " (" + gpu0 + "/memory-slice-0) is held by claim default/mig-0-0"},
			{prepare: mig02},
		},
		"a MIG device created after its GPU was prepared whole": {
			{prepare: whole0, change: relayout},
			{prepare: alloc("relaid", relaid), wantErr: relaid + " (" + gpu0 + ") is held by claim default/whole-0"},
		},
		// The version before memory slices were hardware keys recorded a
		// MIG device as [MIG UUID, GPU UUID] and a whole GPU as [GPU
		// UUID, MIG UUIDs...]. After an upgrade, an entry of a MIG device
		// that is still here holds that device's memory slices; one of a
		// MIG device that is gone holds its whole GPU; one of a whole GPU
		// holds the GPU.
		"claims prepared by the previous version": {
			{change: previousVersion(oldMIG00, mig(0, 0), a100[0].MIG[0].UUID, gpu0)},
			{change: previousVersion(oldGone, "gpu-1-mig-00000000-1111-4222-8333-444455556666", "MIG-00000000-1111-4222-8333-444455556666", a100[1].UUID)},
			{change: previousVersion(oldWhole2, "gpu-2", append([]string{a100[2].UUID}, migUUIDs(2)...)...)},
			{prepare: whole0, wantErr: "gpu-0 (" + gpu0 + "/memory-slice-0) is held by claim default/old-mig-0-0"},
			{prepare: alloc("mig-0-0-again", mig(0, 0)), wantErr: "(" + a100[0].MIG[0].UUID + ") is held by claim default/old-mig-0-0"},
			{prepare: mig01},
			{prepare: alloc("mig-1-0", mig(1, 0)), wantErr: "(" + a100[1].UUID + ") is held by claim default/old-gone"},
			{prepare: alloc("whole-1", "gpu-1"), wantErr: "gpu-1 (" + a100[1].UUID + ") is held by claim default/old-gone"},
			{prepare: alloc("mig-2-0", mig(2, 0)), wantErr: "is held by claim default/old-whole-2"},
			{prepare: alloc("whole-2", "gpu-2"), wantErr: "gpu-2 (" + a100[2].UUID + ") is held by claim default/old-whole-2"},
			{unprepare: oldGone},
			{prepare: alloc("mig-1-0-after", mig(1, 0))},
		},
	}
	for name, steps := range tests {
		t.Run(name, func(t *testing.T) {
			var claims []*resourceapi.ResourceClaim
			for _, s := range steps {
				if s.prepare != nil && !slices.Contains(claims, s.prepare) {
					claims = append(claims, s.prepare)
				}
			}
			env := setup(t, envOptions{}, claims...)
			errorsBefore, err := testutil.GetCounterMetricValue(claimOperationErrors.WithLabelValues(operationPrepare))
			if err != nil {
				t.Fatal(err)
			}
			callsBefore, err := testutil.GetHistogramMetricCount(operationDuration.WithLabelValues(operationPrepare))
			if err != nil {
				t.Fatal(err)
			}
			calls, refused := 0, 0
			for i, s := range steps {
				switch {
				case s.unprepare != nil:
					if _, err := env.unprepare(t, s.unprepare); err != nil {
						t.Fatalf("step %d: unprepare %s: %v", i, s.unprepare.Name, err)
					}
				case s.prepare != nil:
					resp, err := env.prepare(t, s.prepare)
					if err != nil {
						t.Fatalf("step %d: prepare %s: %v", i, s.prepare.Name, err)
					}
					calls++
					got := resp.Claims[string(s.prepare.UID)].Error
					if (s.wantErr == "") != (got == "") || !strings.Contains(got, s.wantErr) {
						t.Errorf("step %d: prepare %s: error %q, want %q", i, s.prepare.Name, got, s.wantErr)
					}
					if s.wantErr != "" {
						refused++
					}
				}
				if s.change != nil {
					s.change(t, env)
				}
			}
			if v, _ := testutil.GetCounterMetricValue(claimOperationErrors.WithLabelValues(operationPrepare)); v-errorsBefore != float64(refused) {
				t.Errorf("claim_operation_errors_total{operation=prepare} grew by %v, want %d", v-errorsBefore, refused)
			}
			if v, _ := testutil.GetHistogramMetricCount(operationDuration.WithLabelValues(operationPrepare)); v-callsBefore != uint64(calls) {
				t.Errorf("operation_duration_seconds{operation=prepare} observed %d calls, want %d", v-callsBefore, calls)
			}
		})
	}
}

// TestConcurrentPrepare races prepares of many claims, some competing for
// the same GPU, through the gRPC socket and through a second driver
// instance sharing the state directory (as during a rolling update). Each
// GPU must end up prepared for exactly one claim, and the checkpoint and CDI
// specs must agree with the answers.
func TestConcurrentPrepare(t *testing.T) {
	const perDevice = 3
	devices := []string{"gpu-6", "gpu-7", "gpu-0", "gpu-1"}
	var claims []*resourceapi.ResourceClaim
	for _, dev := range devices {
		for i := range perDevice {
			claims = append(claims, newClaim(fmt.Sprintf("%s-%d", dev, i)).Allocated("gpu", DefaultDriverName, testNode, dev).Obj())
		}
	}
	env := setup(t, envOptions{}, claims...)
	_, ctx := ktesting.NewTestContext(t)
	second, err := New(ctx, env.cfg)
	if err != nil {
		t.Fatalf("second instance: %v", err)
	}

	var mu sync.Mutex
	succeeded := map[string][]string{} // device → claims
	record := func(claim *resourceapi.ResourceClaim, errText string) {
		mu.Lock()
		defer mu.Unlock()
		if errText == "" {
			dev := claim.Status.Allocation.Devices.Results[0].Device
			succeeded[dev] = append(succeeded[dev], claim.Name)
		} else if !strings.Contains(errText, "already prepared") {
			t.Errorf("claim %s: unexpected error %s", claim.Name, errText)
		}
	}
	var wg sync.WaitGroup
	for i, claim := range claims {
		wg.Go(func() {
			if i%2 == 0 {
				resp, err := env.prepare(t, claim)
				if err != nil {
					t.Errorf("prepare %s: %v", claim.Name, err)
					return
				}
				record(claim, resp.Claims[string(claim.UID)].Error)
				return
			}
			results, err := second.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim})
			if err != nil {
				t.Errorf("prepare %s in the second instance: %v", claim.Name, err)
				return
			}
			errText := ""
			if e := results[claim.UID].Err; e != nil {
				errText = e.Error()
			}
			record(claim, errText)
		})
	}
	wg.Wait()

	cp := env.loadCheckpoint(t)
	var inCheckpoint []string
	for _, c := range cp.Claims {
		if c.State != checkpoint.PrepareCompleted {
			t.Errorf("claim %s left in %s", c.Name, c.State)
		}
		inCheckpoint = append(inCheckpoint, c.Name)
	}
	var winners []string
	for _, dev := range devices {
		if len(succeeded[dev]) != 1 {
			t.Errorf("%s prepared for %v, want exactly one claim", dev, succeeded[dev])
		}
		winners = append(winners, succeeded[dev]...)
	}
	sort.Strings(winners)
	sort.Strings(inCheckpoint)
	if diff := cmp.Diff(winners, inCheckpoint); diff != "" {
		t.Errorf("checkpoint claims (-prepared +checkpoint):\n%s", diff)
	}
	if specs := env.cdiSpecs(t); len(specs) != len(winners) {
		t.Errorf("%d CDI devices for %d prepared claims", len(specs), len(winners))
	}
}

func TestRegistration(t *testing.T) {
	env := setup(t, envOptions{})
	_, ctx := ktesting.NewTestContext(t)
	info, err := env.registrar.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("GetInfo: %v", err)
	}
	if info.Type != registerapi.DRAPlugin || info.Name != DefaultDriverName || !strings.HasSuffix(info.Endpoint, "/plug/dra.sock") {
		t.Errorf("GetInfo = %v", info)
	}
}

// TestUnprepareWithoutClaimObject: the kubelet unprepares with UID, name
// and namespace only; the claim may be gone from the apiserver.
func TestUnprepareWithoutClaimObject(t *testing.T) {
	claim := newClaim("deleted-later").Allocated("gpu", DefaultDriverName, testNode, "gpu-6").Obj()
	env := setup(t, envOptions{noRun: true})
	_, ctx := ktesting.NewTestContext(t)
	if _, err := env.driver.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim}); err != nil {
		t.Fatal(err)
	}
	results, err := env.driver.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{
		UID: claim.UID, NamespacedName: types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name},
	}})
	if err != nil || results[claim.UID] != nil {
		t.Errorf("UnprepareResourceClaims: %v, %v", results, err)
	}
	if cp := env.loadCheckpoint(t); len(cp.Claims) != 0 {
		t.Errorf("checkpoint still holds %v", cp.Claims)
	}
}
