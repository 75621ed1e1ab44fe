package dra

import (
	"fmt"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/pkg/allocator"
)

// TestBestFitScore: two nodes of two PCIe roots with two GPUs each, one
// with a GPU in use, one with a root in use. MostAllocated prefers the
// fuller node, where a 1-GPU pod breaks the whole root and strands its
// other GPU; with BestFit, the node where the pod completes the half-used
// root and leaves a whole root free wins.
func TestBestFitScore(t *testing.T) {
	const root = "resource.kubernetes.io/pcieRoot"
	slice := func(node string) *resourceapi.ResourceSlice {
		return builder.MakeSlice(node).Node(node).Devices(builder.Devices("gpu", 4, func(i int, d *builder.DeviceWrapper) {
			d.String(root, fmt.Sprintf("pci%d", i/2))
		})...).Obj()
	}
	on := func(name, node, device string) *resourceapi.ResourceClaim {
		claim := builder.MakeClaim(name).Request("gpu", gpuClass, 1).Obj()
		claim.Finalizers = []string{resourceapi.Finalizer}
		claim.Status.Allocation = &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "gpu", Driver: "gpu.example.com", Pool: node, Device: device,
			}}},
			NodeSelector: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
				MatchFields: []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{node}}},
			}}},
		}
		return claim
	}
	objects := []runtime.Object{
		gpuClaim("gpu").Obj(), builder.MakeClass(gpuClass), slice("node-a"), slice("node-b"),
		on("a0", "node-a", "gpu-0"),
		on("b0", "node-b", "gpu-0"), on("b1", "node-b", "gpu-1"),
	}
	for name, tc := range map[string]struct {
		policy allocator.Policy
		want   map[string]int64
		device string
	}{
		// Devices in use after the pod: 2 of 4, 3 of 4.
		"FirstFit": {policy: allocator.PolicyFirstFit, want: map[string]int64{"node-a": 50, "node-b": 75}, device: "gpu-1"},
		// The averages with the free GPUs left in whole roots: node-a 2 of
		// 2, node-b 0 of 1.
		"BestFit": {policy: allocator.PolicyBestFit, want: map[string]int64{"node-a": 75, "node-b": 37}, device: "gpu-1"},
	} {
		t.Run(name, func(t *testing.T) {
			pod := podWithClaims("gpu")
			env := newPluginEnv(t, pod, objects...)
			pl := env.plugin
			pl.policy, pl.topology = tc.policy, []resourceapi.FullyQualifiedName{root}
			cs := framework.NewCycleState()
			if _, status := pl.PreFilter(env.ctx, cs, pod, nil); !status.IsSuccess() {
				t.Fatalf("PreFilter: %v", status)
			}
			for _, node := range []*v1.Node{nodeA, nodeB} {
				nodeInfo := framework.NewNodeInfo()
				nodeInfo.SetNode(node)
				if status := pl.Filter(env.ctx, cs, pod, nodeInfo); !status.IsSuccess() {
					t.Fatalf("Filter %s: %v", node.Name, status)
				}
				score, status := pl.Score(env.ctx, cs, pod, nodeInfo)
				if !status.IsSuccess() {
					t.Fatalf("Score %s: %v", node.Name, status)
				}
				if score != tc.want[node.Name] {
					t.Errorf("Score %s: %d, want %d", node.Name, score, tc.want[node.Name])
				}
			}
			s, err := getState(cs)
			if err != nil {
				t.Fatal(err)
			}
			results, _ := s.results.allocation("node-a")
			if len(results) != 1 || results[0].Devices.Results[0].Device != tc.device {
				t.Errorf("allocation on node-a: %v, want %s", results, tc.device)
			}
		})
	}
}

// TestPreScore: Score is skipped for a pod with nothing to allocate (no
// claims, all claims allocated, PreFilter skipped) and runs for one with a
// claim to allocate.
func TestPreScore(t *testing.T) {
	objects := []runtime.Object{builder.MakeClass(gpuClass), builder.MakeSlice("node-a").Node("node-a").Devices(builder.Devices("gpu", 2, nil)...).Obj()}
	for name, tc := range map[string]struct {
		claims    []runtime.Object
		pod       *v1.Pod
		preFilter bool
		wantSkip  bool
	}{
		"no claims":          {pod: podWithClaims(), preFilter: true, wantSkip: true},
		"claim to allocate":  {claims: []runtime.Object{gpuClaim("gpu").Obj()}, pod: podWithClaims("gpu"), preFilter: true},
		"claim allocated":    {claims: []runtime.Object{allocated(gpuClaim("gpu"), "gpu-0")}, pod: podWithClaims("gpu"), preFilter: true, wantSkip: true},
		"no PreFilter state": {pod: podWithClaims(), wantSkip: true},
	} {
		t.Run(name, func(t *testing.T) {
			env := newPluginEnv(t, tc.pod, append(slices.Clone(objects), tc.claims...)...)
			cs := framework.NewCycleState()
			if tc.preFilter {
				if _, status := env.plugin.PreFilter(env.ctx, cs, tc.pod, nil); status.Code() == fwk.Error || status.Code() == fwk.UnschedulableAndUnresolvable {
					t.Fatalf("PreFilter: %v", status)
				}
			}
			status := env.plugin.PreScore(env.ctx, cs, tc.pod, nil)
			if got := status.IsSkip(); got != tc.wantSkip || (!got && !status.IsSuccess()) {
				t.Errorf("PreScore: %v, want skip %v", status, tc.wantSkip)
			}
		})
	}
}
