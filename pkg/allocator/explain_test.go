package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/pkg/allocator"
)

const gpuDriver = "gpu.example.com"

var gpuClass = builder.MakeClass("gpu", `device.driver == "gpu.example.com"`)

// explainCase is a case of TestExplain. features default to the test's
// allFeatures, node to node-0 as it is.
type explainCase struct {
	features *structured.Features
	node     *v1.Node
	slices   []*resourceapi.ResourceSlice
	state    structured.AllocatedState
	claims   []*resourceapi.ResourceClaim
	want     []allocator.Failure
	message  string
}

func TestExplain(t *testing.T) {
	allFeatures := structured.Features{
		AdminAccess: true, PrioritizedList: true, PartitionableDevices: true, DeviceTaints: true,
		ConsumableCapacity: true, DeviceBindingAndStatus: true,
	}
	fourGPUs := builder.MakeSlice("node-0").Node("node-0").Devices(builder.Devices("gpu", 4, func(i int, d *builder.DeviceWrapper) {
		d.String("resource.kubernetes.io/pcieRoot", []string{"pci0", "pci1"}[i%2]).String("model", "h100")
	})...).Obj()
	allocated := func(names ...string) structured.AllocatedState {
		state := structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID]()}
		for _, name := range names {
			state.AllocatedDevices.Insert(structured.MakeDeviceID(gpuDriver, "node-0", name))
		}
		return state
	}

	withoutPartitions := allFeatures
	withoutPartitions.PartitionableDevices = false

	cases := map[string]explainCase{
		"fits": {
			slices: []*resourceapi.ResourceSlice{fourGPUs},
			claims: []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", 4).Obj()},
		},
		"no matching device": {
			slices:  []*resourceapi.ResourceSlice{fourGPUs},
			claims:  []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", 1, `device.attributes["gpu.example.com"].model == "b200"`).Obj()},
			want:    []allocator.Failure{{Claim: "default/c", Request: "gpu", DeviceClass: "gpu", Reason: allocator.ReasonNoMatchingDevice, Need: 1}},
			message: `request "gpu": no device matches the class and selectors`,
		},
		"in use": {
			slices:  []*resourceapi.ResourceSlice{fourGPUs},
			state:   allocated("gpu-0", "gpu-1", "gpu-3"),
			claims:  []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", 2).Obj()},
			want:    []allocator.Failure{{Claim: "default/c", Request: "gpu", DeviceClass: "gpu", Reason: allocator.ReasonDevicesInUse, Need: 2, Matching: 4, Free: 1, InUse: 3}},
			message: `request "gpu": 1 of 4 matching devices free, need 2 (3 in use)`,
		},
		"tainted beats in use when it blocks more": {
			slices: []*resourceapi.ResourceSlice{builder.MakeSlice("node-0").Node("node-0").Devices(
				builder.MakeDevice("gpu-0"), builder.MakeDevice("gpu-1").Taint("ecc", resourceapi.DeviceTaintEffectNoSchedule),
				builder.MakeDevice("gpu-2").Taint("ecc", resourceapi.DeviceTaintEffectNoExecute), builder.MakeDevice("gpu-3")).Obj()},
			state:   allocated("gpu-0"),
			claims:  []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", 2).Obj()},
			want:    []allocator.Failure{{Claim: "default/c", Request: "gpu", DeviceClass: "gpu", Reason: allocator.ReasonDevicesTainted, Need: 2, Matching: 4, Free: 1, InUse: 1, Tainted: 2}},
			message: `request "gpu": 1 of 4 matching devices free, need 2 (1 in use, 2 tainted)`,
		},
		"counters exhausted": {
			slices: []*resourceapi.ResourceSlice{
				builder.MakeSlice("counters").Node("node-0").Pool("node-0", 1, 2).Counters(builder.CounterSet("gpu-0", map[string]string{"memory": "40Gi"})).Obj(),
				builder.MakeSlice("parts").Node("node-0").Pool("node-0", 1, 2).Devices(
					builder.MakeDevice("whole").Consumes("gpu-0", map[string]string{"memory": "40Gi"}),
					builder.MakeDevice("half-0").Consumes("gpu-0", map[string]string{"memory": "20Gi"}),
					builder.MakeDevice("half-1").Consumes("gpu-0", map[string]string{"memory": "20Gi"})).Obj(),
			},
			state:   allocated("half-0"),
			claims:  []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", 1, `device.attributes["gpu.example.com"].model == "whole" || true`).Obj()},
			want:    nil, // half-1 still fits
			message: "",
		},
		"counters exhausted for the larger partitions": {
			slices: []*resourceapi.ResourceSlice{
				builder.MakeSlice("counters").Node("node-0").Pool("node-0", 1, 2).Counters(builder.CounterSet("gpu-0", map[string]string{"memory": "40Gi"})).Obj(),
				builder.MakeSlice("parts").Node("node-0").Pool("node-0", 1, 2).Devices(
					builder.MakeDevice("whole").Consumes("gpu-0", map[string]string{"memory": "40Gi"}),
					builder.MakeDevice("three-quarters").Consumes("gpu-0", map[string]string{"memory": "30Gi"}),
					builder.MakeDevice("half-0").Consumes("gpu-0", map[string]string{"memory": "20Gi"}),
					builder.MakeDevice("half-1").Consumes("gpu-0", map[string]string{"memory": "20Gi"})).Obj(),
			},
			state:   allocated("half-0"),
			claims:  []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", 2).Obj()},
			want:    []allocator.Failure{{Claim: "default/c", Request: "gpu", DeviceClass: "gpu", Reason: allocator.ReasonCountersExhausted, Need: 2, Matching: 4, Free: 1, InUse: 1, CountersExhausted: 2}},
			message: `request "gpu": 1 of 4 matching devices free, need 2 (1 in use, 2 counters exhausted)`,
		},
		"first check in the search's order": {
			// The whole GPU is tainted, but the search finds its counters
			// exhausted first.
			slices: []*resourceapi.ResourceSlice{
				builder.MakeSlice("counters").Node("node-0").Pool("node-0", 1, 2).Counters(builder.CounterSet("gpu-0", map[string]string{"memory": "40Gi"})).Obj(),
				builder.MakeSlice("parts").Node("node-0").Pool("node-0", 1, 2).Devices(
					builder.MakeDevice("whole").Consumes("gpu-0", map[string]string{"memory": "40Gi"}).Taint("ecc", resourceapi.DeviceTaintEffectNoSchedule),
					builder.MakeDevice("half-0").Consumes("gpu-0", map[string]string{"memory": "20Gi"}),
					builder.MakeDevice("half-1").Consumes("gpu-0", map[string]string{"memory": "20Gi"})).Obj(),
			},
			state:   allocated("half-0"),
			claims:  []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", 2).Obj()},
			want:    []allocator.Failure{{Claim: "default/c", Request: "gpu", DeviceClass: "gpu", Reason: allocator.ReasonDevicesInUse, Need: 2, Matching: 3, Free: 1, InUse: 1, CountersExhausted: 1}},
			message: `request "gpu": 1 of 3 matching devices free, need 2 (1 in use, 1 counters exhausted)`,
		},
		"partitionable devices disabled": {
			// A device that consumes counters is not there for a scheduler
			// without partitionable devices; its counters are not the
			// problem.
			features: &withoutPartitions,
			slices: []*resourceapi.ResourceSlice{builder.MakeSlice("node-0").Node("node-0").Devices(
				builder.MakeDevice("part").Consumes("gpu-0", map[string]string{"memory": "20Gi"}), builder.MakeDevice("gpu-1")).Obj()},
			claims:  []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", 2).Obj()},
			want:    []allocator.Failure{{Claim: "default/c", Request: "gpu", DeviceClass: "gpu", Reason: allocator.ReasonDevicesInUse, Need: 2, Matching: 1, Free: 1}},
			message: `request "gpu": 1 of 1 matching devices free, need 2`,
		},
		"capacity exhausted": {
			slices: []*resourceapi.ResourceSlice{builder.MakeSlice("node-0").Node("node-0").Devices(
				builder.MakeDevice("nic").Capacity("bandwidth", "10G").Shareable(nil)).Obj()},
			state: structured.AllocatedState{AggregatedCapacity: structured.ConsumedCapacityCollection{
				structured.MakeDeviceID(gpuDriver, "node-0", "nic"): {"bandwidth": ptr.To(resource.MustParse("8G"))},
			}},
			claims:  []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("net", "gpu", 1).CapacityRequest("bandwidth", "4G").Obj()},
			want:    []allocator.Failure{{Claim: "default/c", Request: "net", DeviceClass: "gpu", Reason: allocator.ReasonCapacityExhausted, Need: 1, Matching: 1, CapacityExhausted: 1}},
			message: `request "net": 0 of 1 matching devices free, need 1 (1 capacity exhausted)`,
		},
		"constraint": {
			slices:  []*resourceapi.ResourceSlice{fourGPUs},
			claims:  []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", 3).MatchAttribute("resource.kubernetes.io/pcieRoot").Obj()},
			want:    []allocator.Failure{{Claim: "default/c", Reason: allocator.ReasonConstraintUnsatisfiable, Constraint: `matchAttribute "resource.kubernetes.io/pcieRoot"`}},
			message: `claim default/c: constraint matchAttribute "resource.kubernetes.io/pcieRoot" unsatisfiable`,
		},
		"requests of a claim compete": {
			slices:  []*resourceapi.ResourceSlice{fourGPUs},
			claims:  []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("a", "gpu", 3).Request("b", "gpu", 2).Obj()},
			want:    []allocator.Failure{{Claim: "default/c", Reason: allocator.ReasonContention}},
			message: `claim default/c: requests compete for the same devices`,
		},
		"claims compete": {
			slices:  []*resourceapi.ResourceSlice{fourGPUs},
			claims:  []*resourceapi.ResourceClaim{builder.MakeClaim("c1").Request("a", "gpu", 3).Obj(), builder.MakeClaim("c2").Request("b", "gpu", 2).Obj()},
			want:    []allocator.Failure{{Reason: allocator.ReasonContention}},
			message: `claims compete for the same devices`,
		},
		"pool being updated": {
			slices:  []*resourceapi.ResourceSlice{builder.MakeSlice("node-0").Node("node-0").Pool("node-0", 1, 2).Devices(builder.MakeDevice("gpu-0")).Obj()},
			claims:  []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", 1).Obj()},
			want:    []allocator.Failure{{Claim: "default/c", Request: "gpu", DeviceClass: "gpu", Reason: allocator.ReasonPoolIncomplete, Need: 1, Pool: "gpu.example.com/node-0"}},
			message: `request "gpu": no matching device; resource pool gpu.example.com/node-0 is being updated`,
		},
		"closest subrequest": {
			slices: []*resourceapi.ResourceSlice{fourGPUs},
			state:  allocated("gpu-0", "gpu-1"),
			claims: []*resourceapi.ResourceClaim{builder.MakeClaim("c").FirstAvailable("gpu",
				builder.SubRequest("eight", "gpu", 8), builder.SubRequest("three", "gpu", 3)).Obj()},
			want:    []allocator.Failure{{Claim: "default/c", Request: "gpu", DeviceClass: "gpu", Reason: allocator.ReasonDevicesInUse, Need: 3, Matching: 4, Free: 2, InUse: 2}},
			message: `request "gpu": 2 of 4 matching devices free, need 3 (2 in use)`,
		},
	}
	maps.Copy(cases, newerExplainCases(allFeatures, allocated))
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			features := allFeatures
			if tc.features != nil {
				features = *tc.features
			}
			node := tc.node
			if node == nil {
				node = builder.MakeNode("node-0")
			}
			a, err := allocator.New(ctx, features, tc.state, allocator.ClassList{gpuClass}, tc.slices, allocator.Options{})
			if err != nil {
				t.Fatal(err)
			}
			results, err := a.Allocate(ctx, node, tc.claims)
			if err != nil {
				t.Fatalf("Allocate: %v", err)
			}
			if (results == nil) != (tc.want != nil) {
				t.Fatalf("Allocate returned %d results, but the case expects failures %v", len(results), tc.want)
			}
			got, err := a.Explain(ctx, node, tc.claims)
			if err != nil {
				t.Fatalf("Explain: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("failures (-want +got):\n%s", diff)
			}
			if len(got) > 0 {
				if msg := got[0].Message(); msg != tc.message {
					t.Errorf("message:\n got %s\nwant %s", msg, tc.message)
				}
			}
		})
	}
}

// TestExplainContext: Explain stops when its context is done and says so,
// like Allocate, so that the plugin can bound it by Filter's timeout.
func TestExplainContext(t *testing.T) {
	// Ten requests need pairwise distinct rows and columns, but six rows
	// only have devices in five columns. Neither the bounds nor the memo
	// see that, so the search takes far longer than any test may.
	const k = 10
	var devices []*builder.DeviceWrapper
	for row := range k {
		for col := range k {
			if row <= k/2 && col >= k/2 {
				continue
			}
			devices = append(devices, builder.MakeDevice(fmt.Sprintf("gpu-%d-%d", row, col)).Int("row", int64(row)).Int("col", int64(col)))
		}
	}
	hard := []*resourceapi.ResourceSlice{builder.MakeSlice("node-0").Node("node-0").Devices(devices...).Obj()}
	latin := builder.MakeClaim("c")
	for i := range k {
		latin.Request(fmt.Sprintf("gpu-%d", i), "gpu", 1)
	}
	latin.DistinctAttribute("gpu.example.com/row").DistinctAttribute("gpu.example.com/col")
	cause := errors.New("scheduler shutting down")

	for name, tc := range map[string]struct {
		slices []*resourceapi.ResourceSlice
		claims []*resourceapi.ResourceClaim
		// context derives the context Explain runs with.
		context func(ctx context.Context) (context.Context, context.CancelFunc)
		want    error
	}{
		"cancelled before": {
			slices: hard,
			claims: []*resourceapi.ResourceClaim{latin.Obj()},
			context: func(ctx context.Context) (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancelCause(ctx)
				cancel(cause)
				return ctx, func() {}
			},
			want: cause,
		},
		"deadline during the search": {
			slices: hard,
			claims: []*resourceapi.ResourceClaim{latin.Obj()},
			context: func(ctx context.Context) (context.Context, context.CancelFunc) {
				return context.WithTimeout(ctx, 5*time.Millisecond)
			},
			want: context.DeadlineExceeded,
		},
		// Here the per-request pass has the answer without searching,
		// which must not hide that the caller gave up.
		"cancelled before, request fails on its own": {
			slices: []*resourceapi.ResourceSlice{builder.MakeSlice("node-0").Node("node-0").Devices(builder.MakeDevice("gpu-0")).Obj()},
			claims: []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", 2).Obj()},
			context: func(ctx context.Context) (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancelCause(ctx)
				cancel(cause)
				return ctx, func() {}
			},
			want: cause,
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			a, err := allocator.New(ctx, structured.Features{}, structured.AllocatedState{}, allocator.ClassList{gpuClass}, tc.slices, allocator.Options{})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := tc.context(ctx)
			defer cancel()
			failures, err := a.Explain(ctx, builder.MakeNode("node-0"), tc.claims)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Explain returned failures %v and error %v, want an error wrapping %v", failures, err, tc.want)
			}
		})
	}
}
