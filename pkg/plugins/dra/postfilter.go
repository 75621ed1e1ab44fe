package dra

import (
	"context"
	"errors"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drasched/drasched/internal/minor/schedminor"
)

// PostFilter runs when no node fits. If an allocated claim of the pod could
// not be used on some node and no other pod holds it, its allocation is
// dropped so that the next attempt can allocate it elsewhere. A claim
// reserved for other pods is left alone: they use its devices.
func (pl *Plugin) PostFilter(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, _ fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	if pl.resizeDeferred(pod) {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	logger := klog.FromContext(ctx)
	s, err := getState(cs)
	if errors.Is(err, fwk.ErrNotFound) {
		// Another PreFilter plugin rejected the pod before ours ran:
		// there is nothing to free.
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	if err != nil {
		return nil, statusError(logger, err)
	}
	// No node fits: the attempt failed, for the reasons Filter found.
	s.results.countFailures()
	if freed, status := pl.freeUnavailable(ctx, s, pod); freed || status.Code() == fwk.Error {
		return nil, status
	}
	if status := pl.postFilterGroup(ctx, cs, pod); status != nil {
		return nil, status
	}
	// Whether a preemptor waits for its victims is the preemption
	// plugin's to decide (StructuredDRAPreemption, nomination.go): this
	// plugin does not end the PostFilter chain for it.
	return nil, fwk.NewStatus(fwk.Unschedulable, schedminor.PostFilterReasons...)
}

// freeUnavailable frees what blocks the pod on every node: a claim for
// extended resources left from an earlier attempt, or an allocated claim
// that could not be used on some node and that no other consumer holds
// (its allocation is dropped, so that the next attempt can allocate it
// elsewhere). It reports whether it freed one. A claim reserved for others
// is left alone: they use its devices.
func (pl *Plugin) freeUnavailable(ctx context.Context, s *stateData, pod *v1.Pod) (bool, *fwk.Status) {
	logger := klog.FromContext(ctx)
	// A claim for extended resources left from an earlier attempt
	// (extended.go).
	if status := pl.postFilterExtended(ctx, s, pod); status != nil {
		return true, status
	}
	// Lowest index first: deterministic, and no better heuristic exists.
	for _, i := range s.results.unavailableClaims() {
		claim := s.claims[i]
		if !freeable(claim, pod.UID) {
			continue
		}
		logger.V(5).Info("Deallocating ResourceClaim", "pod", klog.KObj(pod), "claim", klog.KObj(claim))
		if err := pl.deallocate(ctx, claim); err != nil {
			return true, statusError(logger, err)
		}
		return true, fwk.NewStatus(fwk.Unschedulable, "deallocation of ResourceClaim completed")
	}
	return false, nil
}

// freeable: the claim is allocated (not only in flight for a pod group
// cycle) and held by nobody but the consumer, so deallocating it takes
// devices from no one else.
func freeable(claim *resourceapi.ResourceClaim, consumer types.UID) bool {
	reserved := claim.Status.ReservedFor
	return claim.Status.Allocation != nil && (len(reserved) == 0 || len(reserved) == 1 && reserved[0].UID == consumer)
}
