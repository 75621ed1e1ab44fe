package dra

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drasched/drasched/internal/minor/schedminor"
	"github.com/drasched/drasched/pkg/leaderfence"
	"github.com/drasched/drasched/pkg/tracker"
)

// bindingPollInterval is how often PreBind checks binding conditions.
const bindingPollInterval = 5 * time.Second

// preFlight is the plugin's PreBindPreFlight: PreBind has work if the pod
// has claims to write, and may run beside other plugins' PreBind.
var preFlight = schedminor.PreFlight{Run: preBindWork, Parallel: true}

// preBindWork: Skip unless PreBind has claims to write.
func preBindWork(cs fwk.CycleState, _ *v1.Pod) *fwk.Status {
	s, err := getState(cs)
	if err != nil || len(s.claims) == 0 && !s.extended.reservedExtended() {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
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
	s.releaseCycle(nodeName)
	for i, claim := range s.claims {
		if pl.reservedForPod(pod, claim) {
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
	// Devices that stand for CPU or memory (nodeallocatable_kube137.go).
	if err := pl.preBindNodeAllocatable(ctx, s, pod); err != nil {
		return statusError(logger, err, "pod", klog.KObj(pod), "node", nodeName)
	}
	// The pod's devices are written: what preemption nominated for it is
	// no longer held (nomination.go).
	pl.endNomination(logger, pod, tracker.EndBound)
	// So do the nominations of other pods whose devices it took.
	pl.endNominationsTakenBy(logger, pod, append(slices.Clip(s.claims), s.extended.boundExtended()...))

	if !pl.bindingConditions() || !hasBindingConditions(s.claims) && !hasBindingConditions(s.extended.boundExtended()) {
		return nil
	}
	pl.fh.EventRecorder().Eventf(pod, nil, v1.EventTypeNormal, "BindingConditionsPending", "Scheduling", "waiting for binding conditions of devices on node %s", nodeName)
	start := time.Now()
	err = wait.PollUntilContextTimeout(ctx, bindingPollInterval, pl.bindingTimeout, true, func(context.Context) (bool, error) {
		return pl.podReadyForBinding(s)
	})
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w: %w", errBindingTimeout, err)
	}
	// Upstream's metrics, so that its dashboards work (metrics.go).
	observeBindingConditions(pl.fh.ProfileName(), append(slices.Clip(s.claims), s.extended.boundExtended()...), time.Since(start), err)
	if err != nil {
		// The next attempt's Filter sees the failure or timeout and
		// PostFilter frees the claim.
		return statusError(logger, err, "pod", klog.KObj(pod), "node", nodeName)
	}
	return nil
}

// bindClaim records the allocation (if this cycle made or shared one) and
// the reservation for one claim: for the pod, or for its PodGroup.
func (pl *Plugin) bindClaim(ctx context.Context, s *stateData, index int, pod *v1.Pod) (*resourceapi.ResourceClaim, error) {
	claim, allocation := s.claims[index], s.info[index].allocation
	var key types.UID
	if allocation != nil {
		key = claim.UID
	}
	return pl.writeClaim(ctx, claim, allocation, s.binding(index, pod), key)
}

// writeBackoff paces retries of a claim write after a conflict or an
// unknown outcome: about 5 s in all, longer than a typical API server or
// etcd leader hiccup.
var writeBackoff = wait.Backoff{Steps: 8, Duration: 10 * time.Millisecond, Factor: 3, Jitter: 0.1, Cap: 2 * time.Second}

// errClaimReplaced: the claim was deleted and created again under the same
// name while the pod was being bound.
var errClaimReplaced = errors.New("claim was replaced by another claim of the same name")

// writeClaim records allocation (made for claim in this cycle and in
// flight under key; nil if the claim was allocated before) and the pod's
// reservation, and tells the tracker how the write went.
//
// Every write carries the resourceVersion it is based on as precondition.
// A write whose outcome is unknown (a 504, a reset connection) is retried
// unchanged: if the first one landed, the retry fails with a conflict, and
// the claim read after it shows the allocation and the reservation. If the
// outcome stays unknown, the allocation stays in flight in the tracker
// until the API tells what happened.
func (pl *Plugin) writeClaim(ctx context.Context, claim *resourceapi.ResourceClaim, allocation *resourceapi.AllocationResult, consumer resourceapi.ResourceClaimConsumerReference, key types.UID) (*resourceapi.ResourceClaim, error) {
	logger := klog.FromContext(ctx)
	claims := pl.client.ResourceV1().ResourceClaims(claim.Namespace)
	uid := claim.UID
	current := claim.DeepCopy()
	var written *resourceapi.ResourceClaim
	// maybeLanded is the version a status write with an unknown outcome
	// was based on, until a read shows whether it landed.
	var maybeLanded *resourceapi.ResourceClaim
	// refresh: the next attempt starts from a fresh read. again: the last
	// attempt failed in a way worth repeating.
	refresh, again := false, false
	err := retry.OnError(writeBackoff, func(error) bool { return again }, func() error {
		again = false
		if refresh {
			latest, err := claims.Get(ctx, current.Name, metav1.GetOptions{})
			if err != nil {
				again = retriable(err)
				return fmt.Errorf("get claim %s: %w", klog.KObj(current), err)
			}
			if latest.UID != uid {
				return fmt.Errorf("claim %s: %w", klog.KObj(current), errClaimReplaced)
			}
			refresh = false
			if maybeLanded != nil {
				// Newer than the base, so the write can no longer land
				// (its precondition fails) if it has not already.
				maybeLanded = nil
				if landed(latest, allocation, consumer) {
					logger.V(5).Info("Claim write with unknown outcome had landed", "claim", klog.KObj(latest))
					written = latest
					return nil
				}
			}
			logger.V(5).Info("Retrying claim update", "claim", klog.KObj(current))
			current = latest
		}
		if current.DeletionTimestamp != nil {
			return fmt.Errorf("claim %s got deleted in the meantime", klog.KObj(current))
		}
		if allocation != nil && current.Status.Allocation != nil {
			// Another pod of the same pod group, sharing the allocation
			// in flight, wrote it first: only the reservation is left.
			if !apiequality.Semantic.DeepEqual(current.Status.Allocation.Devices, allocation.Devices) {
				return fmt.Errorf("claim %s got allocated elsewhere in the meantime", klog.KObj(current))
			}
			if reservedFor(current, consumer.UID) {
				written = current
				return nil
			}
			allocation = nil
		}
		if allocation != nil {
			// The finalizer needs a normal update. An interrupted earlier
			// attempt may have added it already.
			if !slices.Contains(current.Finalizers, resourceapi.Finalizer) {
				update := current.DeepCopy()
				update.Finalizers = append(update.Finalizers, resourceapi.Finalizer)
				updated, err := claims.Update(ctx, update, metav1.UpdateOptions{})
				if err != nil {
					// After an unknown outcome the same update again: if
					// the first landed, this one conflicts.
					refresh, again = apierrors.IsConflict(err), retriable(err)
					return fmt.Errorf("add finalizer to claim %s: %w", klog.KObj(current), err)
				}
				current = updated
			}
		}
		update := current.DeepCopy()
		if allocation != nil {
			update.Status.Allocation = allocation.DeepCopy()
		}
		if update.Status.Allocation == nil {
			return fmt.Errorf("claim %s got deallocated in the meantime", klog.KObj(current))
		}
		// The API server rejects a reservation that is not possible (too
		// many consumers) with an error that is not a conflict.
		update.Status.ReservedFor = append(update.Status.ReservedFor, consumer)
		if pl.bindingConditions() && update.Status.Allocation.AllocationTimestamp == nil {
			update.Status.Allocation.AllocationTimestamp = &metav1.Time{Time: time.Now()}
		}
		// Under leader election the client's transport checks the lease
		// right before the request goes out (leaderfence).
		updated, err := claims.UpdateStatus(ctx, update, metav1.UpdateOptions{})
		if err != nil {
			again = retriable(err)
			switch {
			case apierrors.IsConflict(err):
				refresh = true
			case unknownOutcome(err):
				maybeLanded = current
			}
			if allocation != nil {
				return fmt.Errorf("add allocation and reservation to claim %s: %w", klog.KObj(current), err)
			}
			return fmt.Errorf("add reservation to claim %s: %w", klog.KObj(current), err)
		}
		written = updated
		maybeLanded = nil
		return nil
	})
	if err != nil {
		switch {
		case maybeLanded != nil:
			claimWrites.WithLabelValues(writeUnknown).Inc()
			if key != "" {
				// Unreserve leaves the allocation in flight; the tracker
				// settles it once the API tells.
				pl.tracker.WriteUnknown(ctx, key, maybeLanded)
			}
		case errors.Is(err, leaderfence.ErrNotLeader):
			claimWrites.WithLabelValues(writeFenced).Inc()
		default:
			claimWrites.WithLabelValues(writeFailed).Inc()
		}
		return nil, err
	}
	claimWrites.WithLabelValues(writeWritten).Inc()
	// The next cycle must see this version before the informer does, and
	// the devices must move from in flight to allocated without a gap.
	pl.tracker.Written(ctx, key, written)
	logger.V(5).Info("Claim reserved", "consumer", consumer.Resource+"/"+consumer.Name, "claim", klog.KObj(written), "allocated", allocation != nil)
	return written, nil
}

// landed: the claim carries the allocation (if any was to be written) and
// the consumer's reservation, so the write with the unknown outcome landed.
func landed(claim *resourceapi.ResourceClaim, allocation *resourceapi.AllocationResult, consumer resourceapi.ResourceClaimConsumerReference) bool {
	if claim.Status.Allocation == nil || !reservedFor(claim, consumer.UID) {
		return false
	}
	return allocation == nil || apiequality.Semantic.DeepEqual(claim.Status.Allocation.Devices, allocation.Devices)
}

// reservedFor: the claim's reservedFor names the consumer.
func reservedFor(claim *resourceapi.ResourceClaim, consumer types.UID) bool {
	return slices.ContainsFunc(claim.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == consumer })
}

// retriable: an API call worth repeating, with a fresh read (conflict) or
// unchanged (the API server did not process it, or may have).
func retriable(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsTooManyRequests(err) || unknownOutcome(err)
}

// unknownOutcome: an API call's error leaves open whether the write was
// applied. An answer of the API server with a client-error status means it
// was not; a failure to connect means it was never sent; anything else (a
// 5xx, a timeout, a connection that broke after the request went out)
// leaves it open.
func unknownOutcome(err error) bool {
	if err == nil || errors.Is(err, leaderfence.ErrNotLeader) {
		// Refused by the lease fence before it was sent.
		return false
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		code := status.Status().Code
		return code >= 500 || code == 0 || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err)
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return false
	}
	return true
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
		if latest.UID != claim.UID {
			return false, fmt.Errorf("claim %s: %w", klog.KObj(claim), errClaimReplaced)
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
