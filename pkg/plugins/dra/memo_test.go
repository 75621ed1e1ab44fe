package dra

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-base/metrics/testutil"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/drasched/drasched/internal/builder"
)

// allocatedOn returns the claim allocated device of pool, usable on node
// only, or on every node if node is "" (a network-attached device),
// reserved for the pod.
func allocatedOn(c *builder.ClaimWrapper, pool, node, device string, pod types.UID) *resourceapi.ResourceClaim {
	claim := allocated(c, device, pod)
	claim.Status.Allocation.Devices.Results[0].Pool = pool
	claim.Status.Allocation.NodeSelector = nil
	if node != "" {
		claim.Status.Allocation.NodeSelector = &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchFields: []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{node}}},
		}}}
	}
	return claim
}

// searches counts the searches Filter made: its duration histogram's
// samples.
func searches(t *testing.T) uint64 {
	t.Helper()
	var n uint64
	for _, result := range []string{"fit", "nofit", "error"} {
		count, err := testutil.GetHistogramMetricCount(filterDuration.WithLabelValues(result))
		if err != nil {
			t.Fatal(err)
		}
		n += count
	}
	return n
}

// In pod-group preemption's simulation, Filter answers from its memo what
// it searched before on a node whose devices no edit touched since:
// victims added back or removed on another node, allocations in flight on
// another node. An edit on the node, of a victim with a device usable on
// every node, or an allocation in flight on the node searches again. And
// whatever the edits, what Filter answers and keeps for Reserve with the
// memo is what it answers without.
func TestSimulationFilterMemo(t *testing.T) {
	nodes := []*v1.Node{nodeA, nodeB}
	var objects []runtime.Object
	var victims []*v1.Pod
	victim := func(name, pool, node, device string, on string) {
		pod := builder.MakePod("pod-"+name).Claim("gpu", name+"-gpu").Obj()
		pod.UID = types.UID(name)
		pod.Spec.NodeName = on
		victims = append(victims, pod)
		objects = append(objects, allocatedOn(gpuClaim(name+"-gpu"), pool, node, device, pod.UID))
	}
	for i := range 4 {
		victim(fmt.Sprintf("a%d", i), "node-a", "node-a", fmt.Sprintf("gpu-%d", i), "node-a")
		victim(fmt.Sprintf("b%d", i), "node-b", "node-b", fmt.Sprintf("gpu-%d", i), "node-b")
	}
	// n0 and n1 run on node-a and hold devices of the fabric, usable on
	// every node.
	victim("n0", "fabric", "", "net-0", "node-a")
	victim("n1", "fabric", "", "net-1", "node-a")
	preemptor := builder.MakePod("preemptor").Claim("gpu", "preemptor-gpu").Obj()
	preemptor.UID = "preemptor"
	objects = append(objects, builder.MakeClass(gpuClass),
		gpuSlice(4),
		builder.MakeSlice("node-b").Node("node-b").Devices(builder.Devices("gpu", 4, nil)...).Obj(),
		builder.MakeSlice("fabric").AllNodes().Devices(builder.Devices("net", 2, nil)...).Obj(),
		builder.MakeClaim("preemptor-gpu").Request("gpu", gpuClass, 2).Obj())
	env := newNominationEnv(t, preemptor, objects...)

	newState := func() fwk.CycleState {
		cs := framework.NewCycleState()
		if _, status := env.plugin.PreFilter(env.ctx, cs, preemptor, nil); !status.IsSuccess() {
			t.Fatalf("PreFilter: %v", status)
		}
		return cs
	}
	memoized, reference := newState(), newState()
	editBoth := func(pod *v1.Pod, remove bool) {
		t.Helper()
		editDryRun(t, env, memoized, preemptor, pod, remove)
		editDryRun(t, env, reference, preemptor, pod, remove)
	}
	// The reference state searches every time.
	editBoth(victims[0], true)
	ref, err := getState(reference)
	if err != nil {
		t.Fatal(err)
	}
	if ref.dryRun == nil || ref.dryRun.memo == nil {
		t.Fatal("the state of the simulation has no memo")
	}
	ref.dryRun.memo = nil

	type answer struct {
		Code    fwk.Code
		Reasons []string
		Kept    []resourceapi.AllocationResult
	}
	filter := func(cs fwk.CycleState, node *v1.Node) answer {
		t.Helper()
		nodeInfo := framework.NewNodeInfo()
		nodeInfo.SetNode(node)
		status := env.plugin.Filter(env.ctx, cs, preemptor, nodeInfo)
		s, err := getState(cs)
		if err != nil {
			t.Fatal(err)
		}
		kept, _ := s.results.allocation(node.Name)
		var reasons []string
		if status != nil {
			reasons = status.Reasons()
		}
		return answer{Code: status.Code(), Reasons: reasons, Kept: kept}
	}
	// check filters on node with and without the memo, and wants as many
	// searches with it as given.
	check := func(step string, node *v1.Node, wantSearches uint64, wantFits bool) {
		t.Helper()
		before := searches(t)
		got := filter(memoized, node)
		if n := searches(t) - before; wantSearches != ^uint64(0) && n != wantSearches {
			t.Errorf("%s: Filter on %s searched %d times, want %d", step, node.Name, n, wantSearches)
		}
		want := filter(reference, node)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("%s: Filter on %s with the memo differs from without (-without +with):\n%s", step, node.Name, diff)
		}
		if fits := got.Code == fwk.Success; wantFits != fits && wantSearches != ^uint64(0) {
			t.Fatalf("%s: Filter on %s: %v, want fits %v", step, node.Name, got, wantFits)
		}
	}
	const any = ^uint64(0)

	editBoth(victims[2], true) // a1: gpu-1 of node-a free with gpu-0
	check("a0, a1 removed", nodeA, 1, true)
	check("a0, a1 removed", nodeB, 1, false)
	check("nothing changed", nodeA, 0, true)
	check("nothing changed", nodeB, 0, false)

	editBoth(victims[1], true) // b0
	check("b0 removed", nodeA, 0, true)
	check("b0 removed", nodeB, 1, false)

	editBoth(victims[8], true) // n0, on node-a, holds net-0 of the fabric
	check("n0 removed: net-0 free for every node", nodeA, 1, true)
	check("n0 removed: net-0 free for every node", nodeB, 1, true)

	// In flight on node-a: node-b's answer stands.
	inFlightA := allocatedOn(builder.MakeClaim("late-a").Request("gpu", gpuClass, 1), "node-a", "node-a", "gpu-0", "")
	inFlightA.UID = "late-a"
	if err := env.tracker.Reserve(inFlightA); err != nil {
		t.Fatal(err)
	}
	check("gpu-0 of node-a in flight", nodeB, 0, true)
	check("gpu-0 of node-a in flight", nodeA, 1, true)
	editBoth(victims[2], false) // a1 back: gpu-1 taken again
	check("a1 added back, gpu-0 in flight: net-0 alone", nodeA, 1, false)
	check("a1 added back", nodeB, 0, true)
	if !env.tracker.Unreserve(inFlightA.UID) {
		t.Fatal("late-a did not leave flight")
	}
	check("gpu-0 of node-a out of flight", nodeA, 1, true)
	check("gpu-0 of node-a out of flight", nodeB, 0, true)

	// Random edits and allocations in flight: with the memo, Filter
	// answers what it answers without.
	rng := rand.New(rand.NewPCG(7, 8))
	var inFlight []types.UID
	for i := range 300 {
		switch op := rng.IntN(5); {
		case op < 3:
			editBoth(victims[rng.IntN(len(victims))], rng.IntN(2) == 0)
		case op == 3 || len(inFlight) == 0:
			node := nodes[rng.IntN(len(nodes))].Name
			pool, device := node, fmt.Sprintf("gpu-%d", rng.IntN(4))
			if rng.IntN(4) == 0 {
				pool, node, device = "fabric", "", fmt.Sprintf("net-%d", rng.IntN(2))
			}
			claim := allocatedOn(builder.MakeClaim(fmt.Sprintf("late-%d", i)).Request("gpu", gpuClass, 1), pool, node, device, "")
			claim.UID = types.UID(claim.Name)
			if err := env.tracker.Reserve(claim); err == nil {
				inFlight = append(inFlight, claim.UID)
			}
		default:
			k := rng.IntN(len(inFlight))
			env.tracker.Unreserve(inFlight[k])
			inFlight = append(inFlight[:k], inFlight[k+1:]...)
		}
		for _, node := range nodes {
			check(fmt.Sprintf("random step %d", i), node, any, false)
		}
	}
}
