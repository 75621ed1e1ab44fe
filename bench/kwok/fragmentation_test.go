package main

import (
	"fmt"
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
