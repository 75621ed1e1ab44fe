package integration

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/test/integration/framework"
)

// A pod with a claim template: the controller creates the claim, the
// scheduler allocates it on the pod's node, protects it with the finalizer,
// reserves it for the pod and binds the pod.
func TestClaimTemplate(t *testing.T) {
	env := framework.Setup(t)
	nodes := env.CreateNodes(2)
	env.PublishSlices(env.NodeSlice(nodes[1], builder.Devices("gpu", 1, nil)...).Obj())
	class := env.CreateClass("gpu")
	env.CreateTemplate(builder.MakeTemplate("one-gpu", builder.MakeClaim("").Request("gpu", class, 1)))
	env.StartScheduler(framework.SchedulerOptions{})

	pod := env.CreatePod(env.MakePod("pod").ClaimFromTemplate("gpu", "one-gpu"))
	pod = env.WaitForPodScheduled(pod.Name)
	if pod.Spec.NodeName != nodes[1].Name {
		t.Errorf("pod bound to node %s, want %s, the only one with a device", pod.Spec.NodeName, nodes[1].Name)
	}

	claim := env.PodClaim(pod, "gpu")
	if owner := metav1.GetControllerOf(claim); owner == nil || owner.Kind != "Pod" || owner.UID != pod.UID {
		t.Errorf("claim %s is not owned by pod %s: owner %+v", claim.Name, pod.Name, owner)
	}
	if !slices.Contains(claim.Finalizers, resourceapi.Finalizer) {
		t.Errorf("claim %s has finalizers %v, want %s", claim.Name, claim.Finalizers, resourceapi.Finalizer)
	}
	wantReservedFor := []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
	if diff := cmp.Diff(wantReservedFor, claim.Status.ReservedFor); diff != "" {
		t.Errorf("claim %s reservedFor (-want +got):\n%s", claim.Name, diff)
	}
	if claim.Status.Allocation == nil {
		t.Fatalf("claim %s is not allocated", claim.Name)
	}
	wantResults := []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: env.Driver, Pool: nodes[1].Name, Device: "gpu-0"}}
	if diff := cmp.Diff(wantResults, claim.Status.Allocation.Devices.Results); diff != "" {
		t.Errorf("claim %s allocation results (-want +got):\n%s", claim.Name, diff)
	}
	env.VerifyAllocations()
}

// One ResourceClaim used by several pods: it is allocated once, all pods run
// on the node of that allocation, and all are in reservedFor.
func TestSharedClaim(t *testing.T) {
	env := framework.Setup(t)
	nodes := env.CreateNodes(3)
	for _, node := range nodes {
		env.PublishSlices(env.NodeSlice(node, builder.Devices("gpu", 1, nil)...).Obj())
	}
	class := env.CreateClass("gpu")
	claim := env.CreateClaim(builder.MakeClaim("shared").Request("gpu", class, 1))
	allocations := watchAllocations(t, env, claim)
	env.StartScheduler(framework.SchedulerOptions{})

	const numPods = 4
	var pods []*v1.Pod
	for i := range numPods {
		pods = append(pods, env.CreatePod(env.MakePod(fmt.Sprintf("pod-%d", i)).Claim("gpu", claim.Name)))
	}
	var wantReservedFor []resourceapi.ResourceClaimConsumerReference
	for i, pod := range pods {
		pods[i] = env.WaitForPodScheduled(pod.Name)
		if pods[i].Spec.NodeName != pods[0].Spec.NodeName {
			t.Errorf("pod %s is on node %s, pod %s on %s: a shared claim keeps its pods on one node", pod.Name, pods[i].Spec.NodeName, pods[0].Name, pods[0].Spec.NodeName)
		}
		wantReservedFor = append(wantReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: pod.Name, UID: pod.UID})
	}

	claim = env.PodClaim(pods[0], "gpu")
	sortConsumers := cmpopts.SortSlices(func(a, b resourceapi.ResourceClaimConsumerReference) bool { return a.Name < b.Name })
	if diff := cmp.Diff(wantReservedFor, claim.Status.ReservedFor, sortConsumers); diff != "" {
		t.Errorf("claim reservedFor (-want +got):\n%s", diff)
	}
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("claim allocation %+v, want one device", claim.Status.Allocation)
	}
	if got := claim.Status.Allocation.Devices.Results[0].Pool; got != pods[0].Spec.NodeName {
		t.Errorf("claim allocated from pool %s, but its pods run on node %s", got, pods[0].Spec.NodeName)
	}
	if got := allocations(claim); got != 1 {
		t.Errorf("claim was allocated %d times, want once", got)
	}
	env.VerifyAllocations()
}

// watchAllocations watches the claim from now on. The function it returns
// waits until the watch has caught up with the given version of the claim
// and says how often the claim went from unallocated to allocated.
func watchAllocations(t *testing.T, env *framework.Env, claim *resourceapi.ResourceClaim) func(current *resourceapi.ResourceClaim) int {
	t.Helper()
	w, err := env.Client.ResourceV1().ResourceClaims(claim.Namespace).Watch(env.Ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", claim.Name).String(),
		ResourceVersion: claim.ResourceVersion,
	})
	if err != nil {
		t.Fatalf("watch claim %s: %v", claim.Name, err)
	}
	t.Cleanup(w.Stop)

	var mutex sync.Mutex // guards the three below
	count := 0
	allocated := claim.Status.Allocation != nil
	seen := map[string]bool{claim.ResourceVersion: true}
	go func() {
		for event := range w.ResultChan() {
			claim, ok := event.Object.(*resourceapi.ResourceClaim)
			if !ok {
				continue
			}
			mutex.Lock()
			if !allocated && claim.Status.Allocation != nil {
				count++
			}
			allocated = claim.Status.Allocation != nil
			seen[claim.ResourceVersion] = true
			mutex.Unlock()
		}
	}()
	return func(current *resourceapi.ResourceClaim) int {
		t.Helper()
		env.WaitFor(framework.Timeout, "the claim watch to catch up", func(context.Context) (bool, string, error) {
			mutex.Lock()
			defer mutex.Unlock()
			return seen[current.ResourceVersion], fmt.Sprintf("%d versions seen", len(seen)), nil
		})
		mutex.Lock()
		defer mutex.Unlock()
		return count
	}
}
