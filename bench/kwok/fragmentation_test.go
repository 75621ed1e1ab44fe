package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/drasched/drasched/pkg/driver/gpu"
)

var planOptions = cmp.AllowUnexported(churnPlan{}, churnKind{}, plannedPod{}, churnStep{})

func h100Kinds() []churnKind {
	var kinds []churnKind
	for _, size := range fragSizes {
		kinds = append(kinds, churnKind{template: h100Template(size), size: size, weight: 1})
	}
	return kinds
}

// TestChurnPlanSeed: a seed is the whole plan, the same for every
// scheduler; another seed or stream is another plan.
func TestChurnPlanSeed(t *testing.T) {
	plan := newChurnPlan(h100Kinds(), 448, 24, 8, 1, 1)
	if diff := cmp.Diff(plan, newChurnPlan(h100Kinds(), 448, 24, 8, 1, 1), planOptions); diff != "" {
		t.Errorf("same seed, other plan (-first +second):\n%s", diff)
	}
	for name, other := range map[string]churnPlan{
		"seed":   newChurnPlan(h100Kinds(), 448, 24, 8, 2, 1),
		"stream": newChurnPlan(h100Kinds(), 448, 24, 8, 1, 2),
	} {
		if cmp.Equal(plan, other, planOptions) {
			t.Errorf("another %s, the same plan", name)
		}
	}
	// A plan does not depend on how long it goes on: a longer one starts
	// alike (what a shorter run measures is a prefix of a longer one).
	longer := newChurnPlan(h100Kinds(), 448, 30, 8, 1, 1)
	for s := range plan.steps {
		if diff := cmp.Diff(plan.steps[s].creates, longer.steps[s].creates); diff != "" {
			t.Fatalf("step %d creates other pods in a longer plan:\n%s", s, diff)
		}
	}
}

// TestChurnPlanSteady: every step ends with the target requested (plus
// less than the largest pod), pods die at the end of their lifetime, and
// sizes and lifetimes are spread as documented.
func TestChurnPlanSteady(t *testing.T) {
	const target, steps, lifetime = 448, 24, 8
	plan := newChurnPlan(h100Kinds(), target, steps, lifetime, 7, 1)
	if len(plan.steps) != steps+1 {
		t.Fatalf("%d steps, want the fill and %d", len(plan.steps), steps)
	}
	if len(plan.steps[0].deletes) != 0 {
		t.Errorf("the fill deletes %d pods", len(plan.steps[0].deletes))
	}
	alive := sets.New[int]()
	next := 0
	for s, st := range plan.steps {
		for _, i := range st.deletes {
			p := plan.pods[i]
			if !alive.Has(i) || p.step+p.lifetime != s {
				t.Fatalf("step %d deletes pod %d (created at step %d, lifetime %d)", s, i, p.step, p.lifetime)
			}
			alive.Delete(i)
		}
		for _, i := range st.creates {
			if i != next || plan.pods[i].step != s {
				t.Fatalf("step %d creates pod %d, want %d", s, i, next)
			}
			next++
			alive.Insert(i)
		}
		if got := sets.New(plan.alive(s)...); !got.Equal(alive) {
			t.Fatalf("step %d: alive %v, want %v", s, sets.List(got), sets.List(alive))
		}
		if r := plan.requested(s); r < target || r > target+3 {
			t.Errorf("step %d: %d GPUs requested, want %d to %d", s, r, target, target+3)
		}
		// The initial pods are gone after 2·lifetime−1 steps.
		if s >= 2*lifetime-1 {
			for i := range alive {
				if plan.pods[i].step == 0 {
					t.Errorf("step %d: pod %d of the fill is still alive", s, i)
				}
			}
		}
	}
	bySize := map[int]int{}
	total := 0
	for _, p := range plan.pods {
		if p.lifetime < 1 || p.lifetime > 2*lifetime-1 {
			t.Errorf("lifetime %d out of 1 ... %d", p.lifetime, 2*lifetime-1)
		}
		total += p.lifetime
		bySize[plan.kinds[p.kind].size]++
	}
	if avg := float64(total) / float64(len(plan.pods)); avg < lifetime-1 || avg > lifetime+1 {
		t.Errorf("average lifetime %.2f, want about %d", avg, lifetime)
	}
	for _, size := range fragSizes {
		if share := float64(bySize[size]) / float64(len(plan.pods)); share < 0.25 || share > 0.42 {
			t.Errorf("%.0f%% of the pods have %d GPUs, want about a third", share*100, size)
		}
	}
}

func TestChurnPlanWeights(t *testing.T) {
	kinds := []churnKind{{"a", 1, 3}, {"b", 2, 1}, {"never", 4, 0}}
	plan := newChurnPlan(kinds, 200, 10, 4, 1, 2)
	byKind := map[string]int{}
	for _, p := range plan.pods {
		byKind[kinds[p.kind].template]++
	}
	if byKind["never"] != 0 {
		t.Errorf("%d pods of weight 0", byKind["never"])
	}
	if ratio := float64(byKind["a"]) / float64(byKind["b"]); ratio < 2.4 || ratio > 3.6 {
		t.Errorf("pods of weight 3 and 1: %v, want about 3:1", byKind)
	}
	if p := newChurnPlan(nil, 100, 5, 4, 1, 1); len(p.pods) != 0 || len(p.steps) != 0 {
		t.Errorf("a plan without kinds: %+v", p)
	}
}

// allocatedClaims are claims of the GPU driver's devices, one per device
// given as "pool/device", with an unallocated claim and one of another
// driver beside them.
func allocatedClaims(devices ...string) []*resourceapi.ResourceClaim {
	claims := []*resourceapi.ResourceClaim{
		{ObjectMeta: metav1.ObjectMeta{Name: "pending"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "other-driver"}, Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Driver: "other.example.com", Pool: "h100-0002", Device: "gpu-0"}}},
		}}},
	}
	for i, d := range devices {
		pool, device, _ := strings.Cut(d, "/")
		claims = append(claims, &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("claim-%d", i)},
			Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
				Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Driver: gpu.DefaultDriverName, Pool: pool, Device: device}}},
			}},
		})
	}
	return claims
}

func clusterSlices(t *testing.T, kind string, nodes int) []resourceapi.ResourceSlice {
	t.Helper()
	var all []*resourceapi.ResourceSlice
	for i := range nodes {
		all = append(all, driverSlices(t, kind, nodeName(kind, i))...)
	}
	return values(all)
}

// TestH100Counts counts from slices and claims: H100 GPUs 0-3 are NUMA
// node 0 of their node, 4-7 NUMA node 1.
func TestH100Counts(t *testing.T) {
	fleet := h100FleetOf(append(clusterSlices(t, kindH100, 3), clusterSlices(t, kindA100, 1)...))
	for name, tc := range map[string]struct {
		devices []string
		want    h100Counts
	}{
		"idle": {
			want: h100Counts{GPUs: 24, FreeGPUs: 24, WholeFreeNodes: 3, IdealWholeFreeNodes: 3, Free4GPUNUMA: 6, IdealFree4GPUNUMA: 6, NodesByUse: map[int]int{0: 3}},
		},
		"scattered": {
			// Node 0: one GPU on NUMA node 0. Node 1: NUMA node 0 full
			// and one GPU on NUMA node 1. Node 2 idle. The A100's GPU
			// is no H100.
			devices: []string{"h100-0000/gpu-0", "h100-0001/gpu-0", "h100-0001/gpu-1", "h100-0001/gpu-2", "h100-0001/gpu-3", "h100-0001/gpu-4", "a100-0000/gpu-6"},
			want:    h100Counts{GPUs: 24, FreeGPUs: 18, WholeFreeNodes: 1, IdealWholeFreeNodes: 2, Free4GPUNUMA: 3, IdealFree4GPUNUMA: 4, NodesByUse: map[int]int{0: 1, 1: 1, 5: 1}},
		},
		"one GPU per node": {
			devices: []string{"h100-0000/gpu-7", "h100-0001/gpu-0", "h100-0002/gpu-4"},
			want:    h100Counts{GPUs: 24, FreeGPUs: 21, WholeFreeNodes: 0, IdealWholeFreeNodes: 2, Free4GPUNUMA: 3, IdealFree4GPUNUMA: 5, NodesByUse: map[int]int{1: 3}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := fleet.count(allocatedDevices(allocatedClaims(tc.devices...)))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
		})
	}
}

// migDevice names the i-th MIG device of a profile on a GPU of an A100
// node.
func migDevice(t *testing.T, all []resourceapi.ResourceSlice, node string, gpuIndex int, profile string, i int) string {
	t.Helper()
	var names []string
	eachDevice(all, func(pool string, d *resourceapi.Device) {
		if pool == node && attribute(d, "type") == "mig" && attribute(d, "parentIndex") == fmt.Sprint(gpuIndex) && attribute(d, "profile") == profile {
			names = append(names, d.Name)
		}
	})
	if i >= len(names) {
		t.Fatalf("%s GPU %d has %d devices of %s, not %d", node, gpuIndex, len(names), profile, i+1)
	}
	return node + "/" + names[i]
}

// TestMIGCounts counts from slices and claims. The A100 inventory's GPUs
// in MIG mode: 0 and 1 seven 1g.5gb each; 2 three 2g.10gb and a 1g.5gb; 3
// two 3g.20gb; 4 a 3g.20gb, a 2g.10gb and two 1g.5gb; 5 a 7g.40gb.
func TestMIGCounts(t *testing.T) {
	all := append(clusterSlices(t, kindA100, 2), clusterSlices(t, kindH100, 1)...)
	fleet := migFleetOf(all)
	if diff := cmp.Diff([]string{"1g.5gb", "2g.10gb", "3g.20gb"}, fleet.churnProfiles()); diff != "" {
		t.Errorf("churn profiles (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"1g.5gb": 1, "2g.10gb": 2, "3g.20gb": 4, "7g.40gb": 8}, fleet.memorySlices); diff != "" {
		t.Errorf("memory slices (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"1g.5gb": 34, "2g.10gb": 8, "3g.20gb": 6, "7g.40gb": 2}, fleet.devices); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
	mig := func(node string, gpuIndex int, profile string, i int) string {
		return migDevice(t, all, node, gpuIndex, profile, i)
	}
	for name, tc := range map[string]struct {
		devices []string
		want    migCounts
	}{
		"idle": {
			want: migCounts{GPUs: 12, WholeFreeGPUs: 12, IdealWholeFreeGPUs: 12, InUse: map[string]int{}, GPUsByUse: map[string]int{"0": 12}},
		},
		"scattered": {
			// Five GPUs touched; three 1g.5gb fit on one GPU, two
			// 3g.20gb on another.
			devices: []string{
				mig("a100-0000", 0, "1g.5gb", 0), mig("a100-0001", 1, "1g.5gb", 3), mig("a100-0001", 2, "1g.5gb", 0),
				mig("a100-0001", 3, "3g.20gb", 1), mig("a100-0001", 4, "3g.20gb", 0),
				// Not in MIG mode, not counted.
				"a100-0000/gpu-6", "h100-0000/gpu-0",
			},
			want: migCounts{GPUs: 12, WholeFreeGPUs: 7, IdealWholeFreeGPUs: 10, InUse: map[string]int{"1g.5gb": 3, "3g.20gb": 2},
				GPUsByUse: map[string]int{"0": 7, "1": 3, "4": 2}},
		},
		"whole GPU in use": {
			// GPU 5 of node 0 whole, and a 2g.10gb and a 1g.5gb, which
			// GPU 2 or 4 holds alone.
			devices: []string{"a100-0000/gpu-5", mig("a100-0000", 2, "2g.10gb", 0), mig("a100-0001", 0, "1g.5gb", 0)},
			want: migCounts{GPUs: 12, WholeFreeGPUs: 9, IdealWholeFreeGPUs: 10, InUse: map[string]int{"1g.5gb": 1, "2g.10gb": 1},
				GPUsByUse: map[string]int{"0": 9, "1": 1, "2": 1, "whole": 1}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := fleet.count(allocatedDevices(allocatedClaims(tc.devices...)))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
		})
	}
}

// a100Layouts are the layouts of the GPUs in MIG mode of n A100 nodes.
func a100Layouts(n int) []map[string]int {
	var out []map[string]int
	for range n {
		out = append(out,
			map[string]int{"1g": 7}, map[string]int{"1g": 7},
			map[string]int{"2g": 3, "1g": 1}, map[string]int{"3g": 2},
			map[string]int{"3g": 1, "2g": 1, "1g": 2}, map[string]int{"7g": 1})
	}
	return out
}

func TestMinGPUs(t *testing.T) {
	for _, tc := range []struct {
		demand map[string]int
		want   int
	}{
		{map[string]int{}, 0},
		{map[string]int{"1g": 7}, 1},
		{map[string]int{"1g": 8}, 2},
		{map[string]int{"1g": 16}, 3},
		// 14 on the 1g GPUs, the rest on GPUs 2 and 4.
		{map[string]int{"1g": 17}, 4},
		{map[string]int{"2g": 4, "3g": 3}, 3},
		{map[string]int{"3g": 1, "2g": 1, "1g": 2}, 1},
		{map[string]int{"7g": 1, "1g": 1}, 2},
	} {
		if got := minGPUs(a100Layouts(1), tc.demand, 6); got != tc.want {
			t.Errorf("minGPUs(%v) = %d, want %d", tc.demand, got, tc.want)
		}
	}
	// More than the layouts hold: the upper bound given.
	if got := minGPUs(a100Layouts(1), map[string]int{"3g": 4}, 6); got != 6 {
		t.Errorf("minGPUs of too much = %d, want the upper bound 6", got)
	}
}

// TestMinGPUsBruteForce compares minGPUs with trying every set of GPUs.
func TestMinGPUsBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	layouts := a100Layouts(2)[:10]
	profiles := []string{"1g", "2g", "3g"}
	for range 200 {
		// A feasible demand: what a random set of GPUs' devices hold,
		// some of them in use.
		demand := map[string]int{}
		upper := 0
		for _, l := range layouts {
			if rng.IntN(2) == 0 {
				continue
			}
			upper++
			for _, p := range profiles {
				demand[p] += rng.IntN(l[p] + 1)
			}
		}
		want := upper
		for set := range 1 << len(layouts) {
			held := map[string]int{}
			n := 0
			for i, l := range layouts {
				if set&(1<<i) != 0 {
					n++
					for _, p := range profiles {
						held[p] += l[p]
					}
				}
			}
			if n < want && !slices.ContainsFunc(profiles, func(p string) bool { return held[p] < demand[p] }) {
				want = n
			}
		}
		if got := minGPUs(layouts, demand, upper); got != want {
			t.Fatalf("minGPUs(%v) = %d, want %d", demand, got, want)
		}
	}
}

func TestBatches(t *testing.T) {
	for _, tc := range []struct {
		cases []string
		want  [][]string
	}{
		{nil, [][]string{{caseFill}, {caseNoClaims}, {caseChurn}, {caseMatch}, {caseMIG}, {casePreempt}, {caseFragmentation, caseFragmentationMIG}, {caseGang}}},
		{[]string{caseGang}, [][]string{{caseGang}}},
		{[]string{caseFragmentationMIG, caseFragmentation}, [][]string{{caseFragmentation, caseFragmentationMIG}}},
		{[]string{caseFragmentationMIG, caseFill}, [][]string{{caseFill}, {caseFragmentationMIG}}},
	} {
		got, err := batches(tc.cases)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("batches(%v) (-want +got):\n%s", tc.cases, diff)
		}
	}
	if _, err := batches([]string{"fragmentation-mig"}); err == nil {
		t.Error("unknown case: no error")
	}
}
