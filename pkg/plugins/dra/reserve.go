package dra

import (
	"context"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drasched/drasched/internal/minor"
)

// Reserve takes the allocation that Filter found on the chosen node and
// marks it in flight in the tracker: from now until PreBind writes it (or
// Unreserve drops it), the next pod's cycle sees these devices as taken
// and this claim as being allocated.
func (pl *Plugin) Reserve(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	logger := klog.FromContext(ctx)
	s, err := getState(cs)
	if err != nil {
		return statusError(logger, err)
	}
	group, err := groupStateOf(cs)
	if err != nil {
		return statusError(logger, err)
	}
	// Allocations in flight for the pod group that this pod shares.
	for _, i := range s.shared {
		claim := s.claims[i]
		held, err := pl.tracker.Share(claim)
		if err != nil {
			return statusError(logger, err, "pod", klog.KObj(pod))
		}
		if held {
			s.held = append(s.held, claim.UID)
		}
		group.share(claim.UID, pod.UID)
		logger.V(5).Info("Sharing allocation in flight", "pod", klog.KObj(pod), "claim", klog.KObj(claim))
	}
	// Devices that stand for CPU or memory (nodeallocatable_kube137.go).
	if status := pl.reserveNodeAllocatable(logger, s, pod, nodeName); status != nil {
		return status
	}
	if s.allocator == nil {
		return nil
	}
	results, _ := s.results.allocation(nodeName)
	if len(results) < len(s.toAllocate) {
		// Filter accepted the node, so this cannot happen.
		return statusError(logger, fmt.Errorf("internal error: no allocation for node %s", nodeName))
	}
	for k, i := range s.toAllocate {
		allocation := &results[k]
		s.info[i].allocation = allocation
		claim := s.claims[i].DeepCopy()
		if !slices.Contains(claim.Finalizers, resourceapi.Finalizer) {
			claim.Finalizers = append(claim.Finalizers, resourceapi.Finalizer)
		}
		claim.Status.Allocation = allocation
		if err := pl.tracker.Reserve(claim); err != nil {
			return statusError(logger, err, "pod", klog.KObj(pod))
		}
		s.held = append(s.held, claim.UID)
		// The group's later pods share it.
		group.share(claim.UID, pod.UID)
		logger.V(5).Info("Allocation in flight", "pod", klog.KObj(pod), "claim", klog.KObj(claim), "allocation", klog.Format(allocation))
	}
	// The claim for extended resources (extended.go).
	if status := pl.reserveExtended(logger, s, pod, nodeName, results[len(s.toAllocate):]); status != nil {
		return status
	}
	// A pod group cycle may run Reserve again on the same state, and
	// PodGroupPostFilter reads it; PreBind releases those.
	if group == nil {
		s.releaseCycle(nodeName)
	}
	return nil
}

// Unreserve rolls back what Reserve and PreBind did for a pod that will not
// be bound: allocations still in flight are dropped, and the pod is removed
// from reservedFor of claims PreBind already updated. It is idempotent.
func (pl *Plugin) Unreserve(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, _ string) {
	logger := klog.FromContext(ctx)
	s, err := getState(cs)
	if err != nil {
		return
	}
	// Nil in the binding cycle: a pod group's pending set is then no
	// longer used.
	group, _ := groupStateOf(cs)
	// Exactly the shares Reserve took, once: another pod of the group may
	// hold a share of the same allocation.
	for _, uid := range s.held {
		dropped := pl.tracker.Unreserve(uid)
		group.unshare(uid, pod.UID, dropped)
		if dropped {
			logger.V(5).Info("Dropped allocation in flight", "pod", klog.KObj(pod), "claim", uid)
		}
	}
	s.held = nil
	for _, claim := range s.claims {
		// Only the pod's own entry: a claim reserved for the pod's
		// PodGroup stays so, for the group's other pods;
		// PodGroupPostFilter releases it if the group does not fit.
		if claim.Status.Allocation == nil || !minor.IsReservedForPod(pod, claim, false) {
			continue
		}
		if err := pl.removeReservation(ctx, claim, pod.UID); err != nil {
			// The next scheduling attempt gets here again.
			logger.Error(err, "Remove pod from reservedFor", "claim", klog.KObj(claim), "pod", klog.KObj(pod))
			continue
		}
		logger.V(5).Info("Removed pod from reservedFor", "claim", klog.KObj(claim), "pod", klog.KObj(pod))
	}
	// The claim for extended resources (extended.go).
	pl.unreserveExtended(ctx, s, pod)
	// Devices that stand for CPU or memory (nodeallocatable_kube137.go).
	pl.unreserveNodeAllocatable(ctx, s, pod)
}
