package dra

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingapi "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
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

// groupStateOf returns the plugin's state in the pod group scheduling
// cycle that the pod's cycle is part of, creating it on first use; nil
// outside such a cycle (no GenericWorkload, a pod without a group, or the
// binding cycle, which the framework runs without it).
func groupStateOf(cs fwk.CycleState) (*groupState, error) {
	if cs == nil {
		return nil, nil
	}
	return groupStateIn(cs.GetPodGroupSchedulingCycle(), true)
}

// groupStateIn returns the plugin's state in a pod group cycle state, or
// nil if there is none (and create is false).
func groupStateIn(pcs fwk.PodGroupCycleState, create bool) (*groupState, error) {
	if pcs == nil {
		return nil, nil
	}
	data, err := pcs.Read(stateKey)
	switch {
	case errors.Is(err, fwk.ErrNotFound):
		if !create {
			return nil, nil
		}
		g := &groupState{
			pending: make(map[types.UID]sets.Set[types.UID]),
			pods:    make(map[types.NamespacedName]*stateData),
		}
		pcs.Write(stateKey, g)
		return g, nil
	case err != nil:
		return nil, err
	}
	g, ok := data.(*groupState)
	if !ok {
		return nil, fmt.Errorf("unexpected pod group state of type %T", data)
	}
	return g, nil
}

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

// podGroup returns the pod's PodGroup from the cycle's snapshot, or nil if
// the pod has none or GenericWorkload is off.
func (pl *Plugin) podGroup(pod *v1.Pod) (*schedulingapi.PodGroup, error) {
	if !pl.fts.EnableGenericWorkload || pod.Spec.SchedulingGroup == nil || pod.Spec.SchedulingGroup.PodGroupName == nil {
		return nil, nil
	}
	return pl.fh.SnapshotSharedLister().PodGroups().Get(pod.Namespace, *pod.Spec.SchedulingGroup.PodGroupName)
}

// podReference is the consumer reference of the pod itself.
func podReference(pod *v1.Pod) resourceapi.ResourceClaimConsumerReference {
	return resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: pod.Name, UID: pod.UID}
}

// claimBindings returns, for each of the pod's claims (the entries of
// podClaimEntries), what its reservedFor must name: the pod, or (feature
// gate DRAWorkloadResourceClaims) the PodGroup whose claim it is. Nil
// means the pod for all.
func (pl *Plugin) claimBindings(pod *v1.Pod, entries []*v1.PodResourceClaim) ([]resourceapi.ResourceClaimConsumerReference, error) {
	if !pl.fts.EnableDRAWorkloadResourceClaims {
		return nil, nil
	}
	group, err := pl.podGroup(pod)
	if err != nil {
		return nil, fmt.Errorf("pod group of pod %s: %w", klog.KObj(pod), err)
	}
	bindings := make([]resourceapi.ResourceClaimConsumerReference, len(entries))
	for i, entry := range entries {
		binding, err := resourceclaim.BindTo(pod, group, entry)
		if err != nil {
			return nil, err
		}
		if binding.Resource == "pods" {
			// The core group is empty; upstream writes it so too.
			binding = podReference(pod)
		}
		bindings[i] = binding
	}
	return bindings, nil
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
	return resourceclaim.IsReservedForPod(pod, claim, pl.fts.EnableDRAWorkloadResourceClaims)
}

// PodGroupPostFilter runs when a pod group scheduling cycle found no
// placement for the group. Like PostFilter for a single pod, it frees an
// allocated claim of an unscheduled pod that could not be used and that no
// one else holds. If some pod has no such claim, and no pod of the group is
// scheduled, it frees the group's own claims too: a PodGroup claim that
// could not be used is deallocated, one that could is released by the
// group (removed from reservedFor) so that the next attempt can allocate
// it afresh or another group can use it.
func (pl *Plugin) PodGroupPostFilter(ctx context.Context, pcs fwk.PodGroupCycleState, group fwk.PodGroupInfo, _ fwk.PodGroupSchedulingFunc) (*fwk.PodGroupPostFilterResult, *fwk.Status) {
	logger := klog.FromContext(ctx)
	// The framework runs no PostFilter for the pods of a pod group cycle:
	// the failures of the group's unscheduled pods are counted here.
	countGroupFailures(pcs, group)
	if group.GetType() == fwk.CompositePodGroupKeyType {
		logger.V(5).Info("PodGroupPostFilter does not handle composite pod groups", "podGroup", group.GetName())
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	if pl.fts.EnableTopologyAwareWorkloadScheduling && group.GetPodGroup() != nil && group.GetPodGroup().Spec.SchedulingConstraints != nil {
		// As upstream: freeing claims could break the placement that the
		// constraints chose.
		logger.V(5).Info("PodGroupPostFilter does not handle pod groups with scheduling constraints", "podGroup", group.GetName())
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	g, err := groupStateIn(pcs, false)
	if err != nil {
		return nil, statusError(logger, err)
	}
	unscheduled := group.GetUnscheduledPods()
	releaseGroup := false
	if g != nil {
		for _, pod := range unscheduled {
			s := g.pods[types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}]
			if s == nil {
				continue
			}
			freed, status := pl.freeUnavailable(ctx, s, pod)
			if status.IsError() {
				return nil, status
			}
			if !freed {
				releaseGroup = true
			}
		}
	}
	if releaseGroup && pl.fts.EnableDRAWorkloadResourceClaims && len(unscheduled) > 0 {
		if status := pl.releaseGroupClaims(ctx, g, unscheduled[0]); status != nil {
			return nil, status
		}
	}
	return nil, fwk.NewStatus(fwk.Unschedulable, "deallocation and deletion of ResourceClaims completed")
}

// countGroupFailures counts the allocation failures of the group's
// unscheduled pods (allocationFailures), each pod's cycle once.
func countGroupFailures(pcs fwk.PodGroupCycleState, group fwk.PodGroupInfo) {
	g, err := groupStateIn(pcs, false)
	if err != nil || g == nil {
		return
	}
	for _, pod := range group.GetUnscheduledPods() {
		if s := g.pods[types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}]; s != nil {
			s.results.countFailures()
		}
	}
}

// releaseGroupClaims frees the claims of the pod's PodGroup, as
// PodGroupPostFilter describes, unless a pod of the group is assumed or
// bound: it uses them. It returns a status if it freed one.
func (pl *Plugin) releaseGroupClaims(ctx context.Context, g *groupState, pod *v1.Pod) *fwk.Status {
	if pod.Spec.SchedulingGroup == nil || pod.Spec.SchedulingGroup.PodGroupName == nil {
		return nil
	}
	logger := klog.FromContext(ctx)
	// The live state, which counts pods assumed before this cycle and
	// bound ones, not those this cycle assumed and reverted.
	state, err := pl.fh.PodGroupManager().PodGroupStates().Get(pod.Namespace, *pod.Spec.SchedulingGroup.PodGroupName)
	if err != nil {
		return statusError(logger, err)
	}
	if state.ScheduledPodsCount() > 0 {
		return nil
	}
	group, err := pl.podGroup(pod)
	if err != nil {
		return statusError(logger, err)
	}
	if group == nil {
		return nil
	}
	// An unusable claim held by nobody or by the group alone: deallocate.
	if g != nil {
		for _, s := range g.pods {
			for _, i := range s.results.unavailableClaims() {
				claim := s.claims[i]
				if !freeable(claim, group.UID) {
					continue
				}
				if err := pl.deallocate(ctx, claim); err != nil {
					return statusError(logger, err)
				}
				logger.V(5).Info("Deallocated pod group claim", "podGroup", klog.KObj(group), "claim", klog.KObj(claim))
				return fwk.NewStatus(fwk.Unschedulable, "deallocation of PodGroup ResourceClaim completed")
			}
		}
	}
	// The group's allocated claims: the group lets go of them.
	for i := range group.Spec.ResourceClaims {
		name, mustCheckOwner, err := resourceclaim.NameFromPodGroup(group, &group.Spec.ResourceClaims[i])
		if err != nil {
			return statusError(logger, err)
		}
		if name == nil {
			continue
		}
		claim, err := pl.tracker.Claim(group.Namespace, *name)
		if err != nil {
			return statusError(logger, err)
		}
		if mustCheckOwner && resourceclaim.IsForPodGroup(group, claim) != nil {
			continue
		}
		if claim.Status.Allocation == nil || !pl.reservedForPod(pod, claim) {
			continue
		}
		if err := pl.removeReservation(ctx, claim, group.UID); err != nil {
			// The next attempt gets here again.
			logger.Error(err, "Remove pod group from reservedFor", "claim", klog.KObj(claim), "podGroup", klog.KObj(group))
			continue
		}
		logger.V(5).Info("Removed pod group from reservedFor", "claim", klog.KObj(claim), "podGroup", klog.KObj(group))
		return statusUnschedulable(logger, []string{"ResourceClaim unreserved for PodGroup"})
	}
	return nil
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
