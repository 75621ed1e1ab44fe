package dra

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drasched/drasched/internal/minor"
	"github.com/drasched/drasched/internal/minor/schedminor"
)

// Pod groups (feature gate GenericWorkload). kube-scheduler schedules the
// pods of a PodGroup in one pod group scheduling cycle: PreFilter, Filter,
// Score and Reserve for each pod in turn, each pod seeing the ones before
// it as assumed; then, if the group's policy is met, a binding cycle per
// pod, else Unreserve for every reserved pod and PodGroupPostFilter.
//
// So the tracker holds every allocation of the group in flight before any
// PreBind writes one, and a group that does not fit leaves nothing behind:
// Unreserve drops what Reserve put in flight. What the plugin adds is
// sharing: a claim used by several pods of the group (a PodGroup's claim,
// or a user claim they all name) is allocated for the first of them, and
// the others take a share of that allocation in flight instead of waiting
// for it to be written, as they would across cycles. The allocation leaves
// flight with the last share's Unreserve or with the first write.

// groupState is the plugin's state in a pod group scheduling cycle. The
// framework uses it only in the cycle's synchronous phases, one pod at a
// time, so it needs no lock.
type groupState struct {
	// pending are the claims whose allocation a pod of this cycle put in
	// flight, with the pods holding a share of it.
	pending map[types.UID]sets.Set[types.UID]
	// pods are the states of the cycle's pods, for PodGroupPostFilter.
	pods map[types.NamespacedName]*stateData
}

// Clone returns the state itself: it belongs to the pod group cycle, not
// to one pod's cycle, and is never cloned for a dry run.
func (g *groupState) Clone() fwk.StateData { return g }

// shares: the pod holds a share of the claim's allocation in flight.
func (g *groupState) share(claim types.UID, pod types.UID) {
	if g == nil {
		return
	}
	if g.pending[claim] == nil {
		g.pending[claim] = sets.New[types.UID]()
	}
	g.pending[claim].Insert(pod)
}

// unshare: the pod dropped its share; dropped says whether the allocation
// left flight with it.
func (g *groupState) unshare(claim types.UID, pod types.UID, dropped bool) {
	if g == nil {
		return
	}
	if dropped {
		delete(g.pending, claim)
		return
	}
	if pods := g.pending[claim]; pods != nil {
		pods.Delete(pod)
	}
}

// podReference is the consumer reference of the pod itself.
func podReference(pod *v1.Pod) resourceapi.ResourceClaimConsumerReference {
	return resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: pod.Name, UID: pod.UID}
}

// binding returns what reservedFor of the claim at index must name.
func (s *stateData) binding(index int, pod *v1.Pod) resourceapi.ResourceClaimConsumerReference {
	if index < len(s.bindTo) {
		return s.bindTo[index]
	}
	return podReference(pod)
}

// reservedForPod: the claim is reserved for the pod or, with
// DRAWorkloadResourceClaims, for its PodGroup.
func (pl *Plugin) reservedForPod(pod *v1.Pod, claim *resourceapi.ResourceClaim) bool {
	return minor.IsReservedForPod(pod, claim, schedminor.WorkloadClaims(pl.fts))
}

// deallocate clears a claim's allocation and reservations, based on the
// version the cycle saw: a conflict means someone changed it since, and
// the next attempt decides again.
func (pl *Plugin) deallocate(ctx context.Context, claim *resourceapi.ResourceClaim) error {
	claim = claim.DeepCopy()
	claim.Status.ReservedFor = nil
	claim.Status.Allocation = nil
	claim.Status.Devices = nil
	_, err := pl.client.ResourceV1().ResourceClaims(claim.Namespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{})
	return err
}

// removeReservation removes one consumer from a claim's reservedFor. A
// strategic merge patch removes just that entry without needing the
// latest version of the claim; the UID precondition keeps it off a claim
// of the same name created since.
func (pl *Plugin) removeReservation(ctx context.Context, claim *resourceapi.ResourceClaim, consumer types.UID) error {
	patch := fmt.Sprintf(`{"metadata":{"uid":%q},"status":{"reservedFor":[{"$patch":"delete","uid":%q}]}}`, claim.UID, consumer)
	_, err := pl.client.ResourceV1().ResourceClaims(claim.Namespace).Patch(ctx, claim.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
	return err
}
