//go:build !kube1.35

package dra

// Pod group cycles (GenericWorkload, from 1.36 on): the plugin's state in
// the cycle of a pod group, the pod's PodGroup, and what reservedFor names
// for PodGroup claims. Kubernetes 1.35 has no pod group cycles and no
// PodGroup API (podgroupcycle_kube135.go).

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drasched/drasched/internal/minor"
	"github.com/drasched/drasched/internal/minor/schedminor"
)

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

// currentGroupState is groupStateOf without creating the state.
func currentGroupState(cs fwk.CycleState) (*groupState, error) {
	if cs == nil {
		return nil, nil
	}
	return groupStateIn(cs.GetPodGroupSchedulingCycle(), false)
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

// podGroup returns the pod's PodGroup from the cycle's snapshot, or nil if
// the pod has none or GenericWorkload is off.
func (pl *Plugin) podGroup(pod *v1.Pod) (*minor.PodGroup, error) {
	name := minor.PodGroupName(pod)
	if !pl.fts.EnableGenericWorkload || name == nil {
		return nil, nil
	}
	return schedminor.PodGroups(pl.fh).Get(pod.Namespace, *name)
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
