package dra

import (
	"testing"

	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/drasched/drasched/internal/builder"
)

// Once Reserve has put the allocation in flight, the state keeps only what
// the binding cycle needs: the claims and the chosen allocation, not the
// cycle's snapshot, allocator or the other nodes' allocations.
func TestReserveReleasesCycle(t *testing.T) {
	pod := podWithClaims("gpu")
	env := newPluginEnv(t, pod, builder.MakeClass(gpuClass), gpuSlice(2), gpuClaim("gpu").Obj())
	pl := env.plugin
	cs := framework.NewCycleState()
	if _, status := pl.PreFilter(env.ctx, cs, pod, nil); !status.IsSuccess() {
		t.Fatalf("PreFilter: %v", status)
	}
	nodeInfo := framework.NewNodeInfo()
	nodeInfo.SetNode(nodeA)
	if status := pl.Filter(env.ctx, cs, pod, nodeInfo); !status.IsSuccess() {
		t.Fatalf("Filter: %v", status)
	}
	s, err := getState(cs)
	if err != nil {
		t.Fatal(err)
	}
	s.results.store("node-b", nil) // what Filter found on another node
	if s.base == nil || s.allocator == nil {
		t.Fatal("the cycle has no snapshot or allocator before Reserve")
	}
	if status := pl.Reserve(env.ctx, cs, pod, "node-a"); !status.IsSuccess() {
		t.Fatalf("Reserve: %v", status)
	}
	if s.base != nil || s.allocator != nil || s.pending != nil || s.slices != nil {
		t.Errorf("after Reserve the state keeps the cycle's snapshot %v, allocator %v, pending %v", s.base != nil, s.allocator != nil, s.pending != nil)
	}
	if _, ok := s.results.allocation("node-b"); ok {
		t.Error("after Reserve the state keeps another node's allocation")
	}
	if s.info[0].allocation == nil {
		t.Error("Reserve dropped the claim's chosen allocation")
	}
	if status := pl.PreBind(env.ctx, cs, pod, "node-a"); !status.IsSuccess() {
		t.Fatalf("PreBind after the release: %v", status)
	}
}
