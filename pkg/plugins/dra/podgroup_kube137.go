//go:build !kube1.35 && !kube1.36

package dra

// PodGroupPostFilter is a plugin extension point of Kubernetes 1.37: in
// 1.36 only DefaultPreemption has it (with another signature), and each
// pod's PostFilter frees the group's claims instead, as upstream's
// DynamicResources of 1.36 does (podgroup_kube136.go).

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

var _ fwk.PodGroupPostFilterPlugin = &Plugin{}

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

// postFilterGroup: in 1.37 the group's claims are PodGroupPostFilter's to
// free (releaseGroupClaims), not each pod's PostFilter's.
func (pl *Plugin) postFilterGroup(context.Context, fwk.CycleState, *v1.Pod) *fwk.Status { return nil }
