//go:build !kube1.35

package dra

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/drasched/drasched/internal/builder"
)

// groupPod is a pod of a pod group with the claim "shared".
func groupPod(name string) *v1.Pod {
	pod := builder.MakePod(name).Claim("shared", "shared").PodGroup("group").Obj()
	pod.UID = types.UID(name + "-uid")
	return pod
}

// sharedClaim is the unallocated claim "shared" at resourceVersion 1, so
// that a write based on it conflicts once it changed.
func sharedClaim() *resourceapi.ResourceClaim {
	claim := gpuClaim("shared").Obj()
	claim.ResourceVersion = "1"
	return claim
}

// cycle runs a pod of a pod group cycle through PreFilter, Filter on node-a
// and Reserve, and returns its cycle state.
func cycle(t *testing.T, env *pluginEnv, group fwk.PodGroupCycleState, pod *v1.Pod) *framework.CycleState {
	t.Helper()
	cs := framework.NewCycleState()
	cs.SetPodGroupSchedulingCycle(group)
	if _, status := env.plugin.PreFilter(env.ctx, cs, pod, nil); !status.IsSuccess() {
		t.Fatalf("PreFilter %s: %v", pod.Name, status)
	}
	nodeInfo := framework.NewNodeInfo()
	nodeInfo.SetNode(nodeA)
	if status := env.plugin.Filter(env.ctx, cs, pod, nodeInfo); !status.IsSuccess() {
		t.Fatalf("Filter %s: %v", pod.Name, status)
	}
	if status := env.plugin.Reserve(env.ctx, cs, pod, "node-a"); !status.IsSuccess() {
		t.Fatalf("Reserve %s: %v", pod.Name, status)
	}
	return cs
}

// TestPodGroupSharesAllocation: pods of one pod group cycle share the
// allocation of a claim that the first of them put in flight, instead of
// waiting for it to be written; it leaves flight with the last share. A
// pod outside the cycle still waits.
func TestPodGroupSharesAllocation(t *testing.T) {
	objects := []runtime.Object{sharedClaim(), gpuSlice(2), builder.MakeClass(gpuClass)}
	first, second := groupPod("first"), groupPod("second")
	env := newPluginEnv(t, nil, objects...)
	group := framework.NewCycleState()

	cs1 := cycle(t, env, group, first)
	cs2 := cycle(t, env, group, second)
	s2, err := getState(cs2)
	if err != nil {
		t.Fatal(err)
	}
	if len(s2.shared) != 1 || len(s2.toAllocate) != 0 {
		t.Errorf("second pod: shared %v, to allocate %v; want the claim shared, nothing to allocate", s2.shared, s2.toAllocate)
	}
	if got := env.tracker.Calls(); len(got) != 2 || got[0] != "Reserve default/shared" || got[1] != "Share default/shared" {
		t.Errorf("tracker calls %v, want Reserve then Share", got)
	}

	// A pod that is not part of the cycle waits for the write.
	outside := framework.NewCycleState()
	if _, status := env.plugin.PreFilter(env.ctx, outside, groupPod("later"), nil); status.Code() != fwk.UnschedulableAndUnresolvable {
		t.Errorf("PreFilter of a pod outside the cycle: %v, want unschedulable while the claim is being allocated", status)
	}

	// The group does not fit after all: the framework unreserves every
	// pod. The allocation stays in flight until the last share is gone.
	env.plugin.Unreserve(env.ctx, cs2, second, "node-a")
	if len(env.tracker.InFlight()) != 1 {
		t.Fatalf("the first pod's share was dropped with the second's: in flight %v", env.tracker.InFlight())
	}
	env.plugin.Unreserve(env.ctx, cs2, second, "node-a") // idempotent
	if len(env.tracker.InFlight()) != 1 {
		t.Fatalf("a second Unreserve of the same pod dropped another pod's share: in flight %v", env.tracker.InFlight())
	}
	env.plugin.Unreserve(env.ctx, cs1, first, "node-a")
	if got := env.tracker.InFlight(); len(got) != 0 {
		t.Errorf("in flight after every pod was unreserved: %v", got)
	}
	g, err := groupStateIn(group, false)
	if err != nil || g == nil || len(g.pending) != 0 || len(g.pods) != 2 {
		t.Errorf("group state: %+v (%v), want no pending allocation and both pods", g, err)
	}
}

// TestPodGroupSiblingWroteFirst: two pods of a group share an allocation;
// the second one's PreBind finds it written by the first and adds only its
// reservation, with the first one's devices.
func TestPodGroupSiblingWroteFirst(t *testing.T) {
	first, second := groupPod("first"), groupPod("second")
	env := newPluginEnv(t, nil, sharedClaim(), gpuSlice(2), builder.MakeClass(gpuClass))
	group := framework.NewCycleState()
	cs1 := cycle(t, env, group, first)
	cs2 := cycle(t, env, group, second)
	// The binding cycles run without the pod group cycle.
	cs1.SetPodGroupSchedulingCycle(nil)
	cs2.SetPodGroupSchedulingCycle(nil)

	if status := env.plugin.PreBind(env.ctx, cs1, first, "node-a"); !status.IsSuccess() {
		t.Fatalf("PreBind first: %v", status)
	}
	if status := env.plugin.PreBind(env.ctx, cs2, second, "node-a"); !status.IsSuccess() {
		t.Fatalf("PreBind second: %v", status)
	}
	claim := env.apiClaim(t, "shared")
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("claim not allocated one device: %+v", claim.Status.Allocation)
	}
	var reserved []types.UID
	for _, r := range claim.Status.ReservedFor {
		reserved = append(reserved, r.UID)
	}
	if len(reserved) != 2 || reserved[0] != first.UID || reserved[1] != second.UID {
		t.Errorf("reservedFor %v, want both pods", reserved)
	}
	if got := env.tracker.InFlight(); len(got) != 0 {
		t.Errorf("in flight after both writes: %v", got)
	}
	// Unreserve after the write (a later plugin failed) frees nothing.
	env.plugin.Unreserve(env.ctx, cs2, second, "node-a")
	if claim := env.apiClaim(t, "shared"); claim.Status.Allocation == nil || len(claim.Status.ReservedFor) != 1 || claim.Status.ReservedFor[0].UID != first.UID {
		t.Errorf("after the second pod's Unreserve: reservedFor %v, allocation %v; want the first pod's only, allocated", claim.Status.ReservedFor, claim.Status.Allocation)
	}
}

// TestPodGroupSiblingOtherDevices: a claim found allocated with other
// devices than the ones this pod shares is an error, not a reservation of
// devices the pod was not scheduled for.
func TestPodGroupSiblingOtherDevices(t *testing.T) {
	env := newPluginEnv(t, nil, sharedClaim(), gpuSlice(2), builder.MakeClass(gpuClass))
	stale := env.apiClaim(t, "shared")
	// Allocated elsewhere since the cycle saw it.
	current := stale.DeepCopy()
	current.Status = allocated(gpuClaim("shared"), "gpu-1").Status
	if _, err := env.client.ResourceV1().ResourceClaims("default").UpdateStatus(env.ctx, current, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	mine := allocated(gpuClaim("shared"), "gpu-0").Status.Allocation
	consumer := resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "pod", UID: "pod-uid"}
	if _, err := env.plugin.writeClaim(env.ctx, stale, mine, consumer, ""); err == nil || !strings.Contains(err.Error(), "allocated elsewhere") {
		t.Fatalf("writeClaim over an allocation of other devices: %v, want allocated elsewhere", err)
	}
	if got := env.apiClaim(t, "shared"); len(got.Status.ReservedFor) != 0 {
		t.Errorf("reservedFor %v: the pod was added to devices it was not scheduled for", got.Status.ReservedFor)
	}
}
