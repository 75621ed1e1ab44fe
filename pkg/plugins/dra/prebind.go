package dra

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

// bindingPollInterval is how often PreBind checks binding conditions.
const bindingPollInterval = 5 * time.Second

// PreBindPreFlight tells the framework whether PreBind has work to do; it
// may run in parallel with other plugins' PreBind.
func (pl *Plugin) PreBindPreFlight(_ context.Context, cs fwk.CycleState, _ *v1.Pod, _ string) (*fwk.PreBindPreFlightResult, *fwk.Status) {
	result := &fwk.PreBindPreFlightResult{AllowParallel: true}
	s, err := getState(cs)
	if err != nil || len(s.claims) == 0 && !s.extended.reservedExtended() {
		return result, fwk.NewStatus(fwk.Skip)
	}
	return result, nil
}

// PreBind writes what Reserve decided: for each claim not yet reserved for
// the pod, the finalizer, the allocation, the pod in reservedFor and the
// allocation timestamp, retrying on conflicts. Each written claim is
// committed to the tracker at once. Then, if devices have binding
// conditions, it waits for them (up to bindingTimeout).
func (pl *Plugin) PreBind(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	logger := klog.FromContext(ctx)
	s, err := getState(cs)
	if err != nil {
		return statusError(logger, err)
	}
	for i, claim := range s.claims {
		if resourceclaim.IsReservedForPod(pod, claim, false) {
			continue
		}
		written, err := pl.bindClaim(ctx, s, i, pod)
		if err != nil {
			return statusError(logger, err, "pod", klog.KObj(pod), "node", nodeName)
		}
		// Unreserve works with what was written.
		s.claims[i] = written
	}
	// The claim for extended resources (extended.go).
	if err := pl.bindExtended(ctx, s, pod); err != nil {
		return statusError(logger, err, "pod", klog.KObj(pod), "node", nodeName)
	}

	if !pl.bindingConditions() || !hasBindingConditions(s.claims) && !hasBindingConditions(s.extended.boundExtended()) {
		return nil
	}
	pl.fh.EventRecorder().Eventf(pod, nil, v1.EventTypeNormal, "BindingConditionsPending", "Scheduling", "waiting for binding conditions of devices on node %s", nodeName)
	err = wait.PollUntilContextTimeout(ctx, bindingPollInterval, pl.bindingTimeout, true, func(context.Context) (bool, error) {
		return pl.podReadyForBinding(s)
	})
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w: %w", errBindingTimeout, err)
	}
	if err != nil {
		// The next attempt's Filter sees the failure or timeout and
		// PostFilter frees the claim.
		return statusError(logger, err, "pod", klog.KObj(pod), "node", nodeName)
	}
	return nil
}

// bindClaim records the allocation (if this cycle made one) and the
// reservation for one claim, and commits the result to the tracker.
func (pl *Plugin) bindClaim(ctx context.Context, s *stateData, index int, pod *v1.Pod) (*resourceapi.ResourceClaim, error) {
	return pl.writeClaim(ctx, s.claims[index], s.info[index].allocation, pod)
}

// writeClaim is bindClaim for a claim and the allocation made for it in
// this cycle, or nil.
func (pl *Plugin) writeClaim(ctx context.Context, claim *resourceapi.ResourceClaim, allocation *resourceapi.AllocationResult, pod *v1.Pod) (*resourceapi.ResourceClaim, error) {
	logger := klog.FromContext(ctx)
	claim = claim.DeepCopy()
	claims := pl.client.ResourceV1().ResourceClaims(claim.Namespace)
	refresh := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if refresh {
			latest, err := claims.Get(ctx, claim.Name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("get claim %s after conflict: %w", klog.KObj(claim), err)
			}
			logger.V(5).Info("Retrying claim update after conflict", "claim", klog.KObj(claim))
			claim = latest
		}
		// Every further attempt starts from the latest version.
		refresh = true

		if claim.DeletionTimestamp != nil {
			return fmt.Errorf("claim %s got deleted in the meantime", klog.KObj(claim))
		}
		if allocation != nil {
			if claim.Status.Allocation != nil {
				return fmt.Errorf("claim %s got allocated elsewhere in the meantime", klog.KObj(claim))
			}
			// The finalizer needs a normal update. An interrupted earlier
			// attempt may have added it already.
			if !slices.Contains(claim.Finalizers, resourceapi.Finalizer) {
				claim.Finalizers = append(claim.Finalizers, resourceapi.Finalizer)
				updated, err := claims.Update(ctx, claim, metav1.UpdateOptions{})
				if err != nil {
					return fmt.Errorf("add finalizer to claim %s: %w", klog.KObj(claim), err)
				}
				claim = updated
			}
			claim.Status.Allocation = allocation
		}
		if claim.Status.Allocation == nil {
			return fmt.Errorf("claim %s got deallocated in the meantime", klog.KObj(claim))
		}
		// Adding the pod needs no precondition: the apiserver rejects it
		// with a non-conflict error if it is not possible.
		claim.Status.ReservedFor = append(claim.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{
			Resource: "pods", Name: pod.Name, UID: pod.UID,
		})
		if pl.bindingConditions() && claim.Status.Allocation.AllocationTimestamp == nil {
			claim.Status.Allocation.AllocationTimestamp = &metav1.Time{Time: time.Now()}
		}
		updated, err := claims.UpdateStatus(ctx, claim, metav1.UpdateOptions{})
		if err != nil {
			if allocation != nil {
				return fmt.Errorf("add allocation and reservation to claim %s: %w", klog.KObj(claim), err)
			}
			return fmt.Errorf("add reservation to claim %s: %w", klog.KObj(claim), err)
		}
		claim = updated
		return nil
	})
	if err != nil {
		return nil, err
	}
	// The next cycle must see this version before the informer does, and
	// the devices must move from in flight to allocated without a gap.
	pl.tracker.Commit(ctx, claim)
	logger.V(5).Info("Claim reserved for pod", "pod", klog.KObj(pod), "claim", klog.KObj(claim), "allocated", allocation != nil)
	return claim, nil
}

// hasBindingConditions: some allocated device has binding conditions.
func hasBindingConditions(claims []*resourceapi.ResourceClaim) bool {
	for _, claim := range claims {
		if claim.Status.Allocation == nil {
			continue
		}
		for _, result := range claim.Status.Allocation.Devices.Results {
			if len(result.BindingConditions) > 0 {
				return true
			}
		}
	}
	return false
}

// podReadyForBinding checks the latest claims: ready when all binding
// conditions are true; an error when a failure condition is true or the
// binding timed out.
func (pl *Plugin) podReadyForBinding(s *stateData) (bool, error) {
	for i, claim := range s.claims {
		latest, err := pl.tracker.Claim(claim.Namespace, claim.Name)
		if err != nil {
			return false, err
		}
		s.claims[i] = latest
		ready, err := readyForBinding(latest)
		if err != nil {
			return false, err
		}
		if !ready {
			if pl.bindingTimedOut(latest) {
				return false, fmt.Errorf("%w: claim %s", errBindingTimeout, klog.KObj(latest))
			}
			return false, nil
		}
	}
	return pl.extendedReadyForBinding(s)
}
