package dra

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/internal/metricstable"
	"github.com/drasched/drasched/pkg/allocator"
	"github.com/drasched/drasched/pkg/tracker"
	"github.com/drasched/drasched/pkg/tracker/trackertest"
)

// failureCount is the value of allocationFailures for a class and reason.
func failureCount(t *testing.T, class string, reason allocator.Reason) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(allocationFailures.WithLabelValues(class, string(reason)))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestAllocationFailuresMetric: a failed attempt counts each class and
// reason once, however many nodes gave it and however often PostFilter
// runs; an attempt that found a node counts nothing, even if other nodes
// failed.
func TestAllocationFailuresMetric(t *testing.T) {
	registerMetrics()
	class := builder.MakeClass(gpuClass)
	for name, tc := range map[string]struct {
		objects []runtime.Object
		// fits: some node fits, so PostFilter does not run.
		fits bool
		want map[allocator.Reason]float64
	}{
		"in use on one node, no device on the other": {
			objects: []runtime.Object{gpuClaim("gpu").Obj(), allocated(gpuClaim("other"), "gpu-0", "other-pod"), gpuSlice(1), class},
			want:    map[allocator.Reason]float64{allocator.ReasonDevicesInUse: 1, allocator.ReasonNoMatchingDevice: 1},
		},
		"fits on one node": {
			objects: []runtime.Object{gpuClaim("gpu").Obj(), gpuSlice(1), class},
			fits:    true,
			want:    map[allocator.Reason]float64{allocator.ReasonNoMatchingDevice: 0},
		},
		"constraint": {
			objects: []runtime.Object{
				builder.MakeClaim("gpu").Request("a", gpuClass, 1).Request("b", gpuClass, 1).MatchAttribute("gpu.example.com/model").Obj(),
				builder.MakeSlice("node-a").Node("node-a").Devices(
					builder.MakeDevice("gpu-0").String("model", "a"), builder.MakeDevice("gpu-1").String("model", "b")).Obj(),
				class,
			},
			want: map[allocator.Reason]float64{allocator.ReasonConstraintUnsatisfiable: 1, allocator.ReasonNoMatchingDevice: 1},
		},
	} {
		t.Run(name, func(t *testing.T) {
			allocationFailures.Reset()
			pod := podWithClaims("gpu")
			env := newPluginEnv(t, pod, tc.objects...)
			pl, ctx := env.plugin, env.ctx
			cs := framework.NewCycleState()
			if _, status := pl.PreFilter(ctx, cs, pod, nil); !status.IsSuccess() {
				t.Fatalf("PreFilter: %v", status)
			}
			fit := false
			// Each node twice, as with nominated pods: still one count.
			for _, node := range []*v1.Node{nodeA, nodeB, nodeA, nodeB} {
				nodeInfo := framework.NewNodeInfo()
				nodeInfo.SetNode(node)
				fit = pl.Filter(ctx, cs, pod, nodeInfo).IsSuccess() || fit
			}
			if fit != tc.fits {
				t.Fatalf("some node fits: %v, want %v", fit, tc.fits)
			}
			if !fit {
				for range 2 {
					if _, status := pl.PostFilter(ctx, cs, pod, nil); status.Code() != fwk.Unschedulable {
						t.Fatalf("PostFilter: %v", status)
					}
				}
			}
			for reason, want := range tc.want {
				if got := failureCount(t, gpuClass, reason); got != want {
					t.Errorf("%s: %v, want %v", reason, got, want)
				}
			}
		})
	}
}

func TestClassFailures(t *testing.T) {
	gpuAndNIC := builder.MakeClaim("c").Request("gpu", "gpu", 1).Request("nic", "nic", 1).Obj()
	other := builder.MakeClaim("d").Request("fpga", "fpga", 1).Obj()
	claims := []*resourceapi.ResourceClaim{gpuAndNIC, other}
	for name, tc := range map[string]struct {
		failure allocator.Failure
		want    []classFailure
	}{
		"request": {
			failure: allocator.Failure{Claim: "default/c", Request: "gpu", DeviceClass: "gpu", Reason: allocator.ReasonDevicesTainted},
			want:    []classFailure{{"gpu", allocator.ReasonDevicesTainted}},
		},
		"claim": {
			failure: allocator.Failure{Claim: "default/c", Reason: allocator.ReasonConstraintUnsatisfiable},
			want:    []classFailure{{"gpu", allocator.ReasonConstraintUnsatisfiable}, {"nic", allocator.ReasonConstraintUnsatisfiable}},
		},
		"all claims": {
			failure: allocator.Failure{Reason: allocator.ReasonContention},
			want:    []classFailure{{"gpu", allocator.ReasonContention}, {"nic", allocator.ReasonContention}, {"fpga", allocator.ReasonContention}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := classFailures(claims, []allocator.Failure{tc.failure})
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCacheCollector: the cache's statistics are counters with the names,
// labels and values of Stats.
func TestCacheCollector(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	cache := allocator.NewCache(0)
	class := builder.MakeClass(gpuClass, `device.driver == "gpu.example.com"`)
	slices := []*resourceapi.ResourceSlice{gpuSlice(4)}
	claim := gpuClaim("gpu").Obj()
	for range 2 {
		a, err := allocator.New(ctx, structured.Features{}, structured.AllocatedState{}, allocator.ClassList{class}, slices, allocator.Options{Cache: cache})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Allocate(ctx, nodeA, []*resourceapi.ResourceClaim{claim}); err != nil {
			t.Fatal(err)
		}
	}
	stats := cache.Stats()
	if stats.MatchHits == 0 || stats.SlicesPrepared == 0 {
		t.Fatalf("the allocations left no statistics: %+v", stats)
	}
	want := fmt.Sprintf(`
# HELP drasched_plugin_cel_cache_hits_total [ALPHA] Lookups in the allocator's CEL cache answered from the cache, by cache (compile, match); the others compiled or evaluated CEL.
# TYPE drasched_plugin_cel_cache_hits_total counter
drasched_plugin_cel_cache_hits_total{cache="compile"} %d
drasched_plugin_cel_cache_hits_total{cache="match"} %d
# HELP drasched_plugin_cel_cache_lookups_total [ALPHA] Lookups in the allocator's CEL cache, by cache: compile (compiled expressions) and match (a selector's result for a device).
# TYPE drasched_plugin_cel_cache_lookups_total counter
drasched_plugin_cel_cache_lookups_total{cache="compile"} %d
drasched_plugin_cel_cache_lookups_total{cache="match"} %d
# HELP drasched_plugin_resource_slices_prepared_total [ALPHA] ResourceSlice objects the allocator cache preprocessed; each version of a slice is prepared once.
# TYPE drasched_plugin_resource_slices_prepared_total counter
drasched_plugin_resource_slices_prepared_total %d
`, stats.CompileHits, stats.MatchHits, stats.CompileHits+stats.CompileMisses, stats.MatchHits+stats.MatchMisses, stats.SlicesPrepared)
	if err := testutil.CustomCollectAndCompare(newCacheCollector(cache), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// TestDevicesMetric: the devices of each class by state, from the
// tracker: 8 GPUs on node-a, two allocated, one in flight, two tainted
// (one of them allocated, which counts in both, as in a
// ResourcePoolStatusRequest), and a class that matches nothing.
func TestDevicesMetric(t *testing.T) {
	slice := builder.MakeSlice("node-a").Node("node-a").Devices(builder.Devices("gpu", 8, func(i int, d *builder.DeviceWrapper) {
		if i == 1 || i == 7 {
			d.Taint("gpu.example.com/unhealthy", resourceapi.DeviceTaintEffectNoSchedule)
		}
	})...).Obj()
	fake := trackertest.NewFake(slice, builder.MakeClass(gpuClass), builder.MakeClass("none", `device.driver == "other"`),
		allocated(gpuClaim("a"), "gpu-0"), allocated(gpuClaim("b"), "gpu-1"))
	if err := fake.Reserve(allocated(gpuClaim("c"), "gpu-2")); err != nil {
		t.Fatal(err)
	}
	collector := newDeviceCollector(func() tracker.Interface { return fake }, allocator.NewCache(0))
	want := `# HELP drasched_plugin_devices [ALPHA] ` + devicesHelp + `
# TYPE drasched_plugin_devices gauge
drasched_plugin_devices{device_class="gpu.example.com",state="allocated"} 2
drasched_plugin_devices{device_class="gpu.example.com",state="available"} 3
drasched_plugin_devices{device_class="gpu.example.com",state="in_flight"} 1
drasched_plugin_devices{device_class="gpu.example.com",state="unavailable"} 2
drasched_plugin_devices{device_class="none",state="allocated"} 0
drasched_plugin_devices{device_class="none",state="available"} 0
drasched_plugin_devices{device_class="none",state="in_flight"} 0
drasched_plugin_devices{device_class="none",state="unavailable"} 0
`
	if err := testutil.CustomCollectAndCompare(collector, strings.NewReader(want), "drasched_plugin_devices"); err != nil {
		t.Error(err)
	}
	// Without a scheduler, nothing.
	none := newDeviceCollector(func() tracker.Interface { return nil }, allocator.NewCache(0))
	if err := testutil.CustomCollectAndCompare(none, strings.NewReader(""), "drasched_plugin_devices"); err != nil {
		t.Error(err)
	}
}

// TestMetricsTable: docs/scheduler.md's metrics table lists every metric
// registerMetrics registers, with its type and labels, and nothing else.
// The device collector gets a tracker with a class, so that it reports a
// sample to read its type from.
func TestMetricsTable(t *testing.T) {
	slice := builder.MakeSlice("node-a").Node("node-a").Devices(builder.Devices("gpu", 1, nil)...).Obj()
	fake := trackertest.NewFake(slice, builder.MakeClass(gpuClass))
	problems, err := metricstable.Check("../../../docs/scheduler.md", metricsNamespace+"_"+metricsSubsystem+"_", []string{"."},
		filterDuration, allocationFailures, claimWrites, nominations, claimsInFlight,
		newCacheCollector(allocator.NewCache(0)),
		newDeviceCollector(func() tracker.Interface { return fake }, allocator.NewCache(0)))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
