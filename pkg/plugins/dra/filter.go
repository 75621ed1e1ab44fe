package dra

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drasched/drasched/internal/minor"
	"github.com/drasched/drasched/internal/minor/schedminor"
	"github.com/drasched/drasched/pkg/allocator"
)

// errBindingFailed: a device's binding failure condition is true.
var errBindingFailed = errors.New("device binding failed")

// errBindingTimeout: binding conditions were not met within bindingTimeout.
var errBindingTimeout = errors.New("device binding timeout")

// Filter checks that the pod's allocated claims can be used on the node and
// allocates the others there. The allocation is remembered for Reserve. If
// the claims do not fit, the status says why, per request.
func (pl *Plugin) Filter(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) (status *fwk.Status) {
	if pl.resizeDeferred(pod) {
		return nil
	}
	logger := klog.FromContext(ctx)
	s, err := getState(cs)
	if err != nil {
		return statusError(logger, err)
	}
	if len(s.claims) == 0 && s.extended == nil {
		// Devices' CPU the cache does not count yet (nodeallocatable_kube137.go).
		return pl.filterUncounted(pod, nodeInfo)
	}
	node := nodeInfo.Node()
	// Once the claims fit: the node's room for the resources of their
	// devices that stand for CPU or memory (nodeallocatable_kube137.go).
	var results []resourceapi.AllocationResult
	defer func() {
		if status.IsSuccess() {
			status = pl.filterNodeAllocatable(ctx, s, pod, nodeInfo, results)
		}
	}()

	// The pods of the pod group cycle that share allocations in flight
	// (podgroup.go), for the node-allocatable sharing check.
	var sharers pendingSharers
	if group, err := currentGroupState(cs); err != nil {
		return statusError(logger, err)
	} else if group != nil {
		sharers = func(claim types.UID) sets.Set[types.UID] { return group.pending[claim] }
	}
	var unavailable []int
	for i, claim := range s.claims {
		allocation := claim.Status.Allocation
		if allocation == nil && slices.Contains(s.shared, i) {
			// Allocated in flight for the pod group: as good as
			// allocated, but not written, so no binding conditions yet.
			allocation = s.info[i].allocation
		}
		if allocation == nil {
			continue
		}
		if selector := s.info[i].availableOnNodes; selector != nil && !selector.Match(node) {
			logger.V(5).Info("Allocation's node selector does not match", "pod", klog.KObj(pod), "node", klog.KObj(node), "claim", klog.KObj(claim))
			unavailable = append(unavailable, i)
			continue
		}
		if requiresOptionalNodeOperations(allocation) && !slices.Contains(node.Status.DeclaredFeatures, minor.OptionalNodeOperationsFeature) {
			logger.V(5).Info("Allocation needs DRAOptionalNodeOperations, the node lacks it", "pod", klog.KObj(pod), "node", klog.KObj(node), "claim", klog.KObj(claim))
			unavailable = append(unavailable, i)
			continue
		}
		if pl.bindingConditions() && claim.Status.Allocation != nil {
			// A claim whose devices failed to bind, or did not bind in
			// time, should be deallocated by PostFilter so that other
			// devices can be tried.
			ready, err := readyForBinding(claim)
			if err != nil || !ready && pl.bindingTimedOut(claim) {
				logger.V(5).Info("Claim's binding conditions failed or timed out", "pod", klog.KObj(pod), "node", klog.KObj(node), "claim", klog.KObj(claim), "err", err)
				unavailable = append(unavailable, i)
			}
		}
		if status := pl.checkNodeAllocatableSharing(s, pod, i, sharers); status != nil {
			return status
		}
	}
	if len(unavailable) > 0 {
		s.results.mutex.Lock()
		defer s.results.mutex.Unlock()
		if s.results.unavailable == nil {
			s.results.unavailable = sets.New[int]()
		}
		s.results.unavailable.Insert(unavailable...)
		return statusUnschedulable(logger, []string{"resourceclaim not available on the node"}, "pod", klog.KObj(pod), "node", klog.KObj(node))
	}
	// The claim for extended resources that this node needs, allocated
	// last, as upstream does (extended.go).
	forExtended, status := pl.filterExtended(logger, s, pod, nodeInfo)
	if status != nil {
		return status
	}
	if s.allocator == nil {
		return nil
	}
	claims := s.pending
	if forExtended != nil {
		// A copy: Filter runs for several nodes at once.
		claims = append(slices.Clip(claims), forExtended)
	}
	if len(claims) == 0 {
		return nil
	}

	allocCtx := ctx
	if loggerV := logger.V(5); loggerV.Enabled() {
		allocCtx = klog.NewContext(allocCtx, klog.LoggerWithValues(logger, "node", klog.KObj(node)))
	}
	allocCtx, cancel := pl.allocationContext(allocCtx)
	defer cancel()
	a := s.allocator
	remembered := false
	var memo *filterMemo
	var inFlight map[types.UID]*resourceapi.AllocationResult
	if s.dryRun.active() {
		// Preemption's dry run: the state's edits (dryrun.go), and in
		// pod-group preemption's simulation what the same search found
		// before (memo.go).
		if s.dryRun.simulation {
			inFlight = pl.inFlightAllocations()
			memo = s.dryRun.memo
		}
		if memo != nil {
			results, err, remembered = memo.get(node.Name, claims, inFlight)
		}
		if !remembered {
			if a, err = pl.dryRunAllocator(allocCtx, s, inFlight); err != nil {
				if ctx.Err() != nil {
					return statusStopped(logger, context.Cause(ctx), pod, node)
				}
				return statusError(logger, err, "pod", klog.KObj(pod), "node", klog.KObj(node))
			}
		}
	}
	if !remembered {
		start := time.Now()
		results, err = a.Allocate(allocCtx, node, claims)
		observeFilter(start, results != nil, err)
		if memo != nil && (err == nil || errors.Is(err, structured.ErrFailedAllocationOnNode)) {
			memo.put(node.Name, claims, inFlight, results, err)
		}
	}
	switch {
	case allocationTimedOut(ctx, err) && !schedminor.FilterTimeoutIsError:
		// As 1.35's upstream: the node is unschedulable for the pod.
		return statusUnschedulable(logger, []string{"timed out trying to allocate devices"}, "pod", klog.KObj(pod), "node", klog.KObj(node), "claims", klog.KObjSlice(claims))
	case allocationTimedOut(ctx, err):
		// Possibly transient: an error sends the pod through backoff
		// instead of waiting for a cluster event.
		return statusError(logger, fmt.Errorf("node %s: timed out trying to allocate devices", node.Name), "pod", klog.KObj(pod), "claims", klog.KObjSlice(claims))
	case errors.Is(err, structured.ErrFailedAllocationOnNode):
		// Only this node fails.
		return statusUnschedulable(logger, []string{err.Error()}, "pod", klog.KObj(pod), "node", klog.KObj(node))
	case ctx.Err() != nil:
		return statusStopped(logger, context.Cause(ctx), pod, node)
	case err != nil:
		// Something is wrong with a claim or class (a CEL runtime error,
		// say); every node would fail the same way.
		return statusError(logger, err, "pod", klog.KObj(pod), "node", klog.KObj(node), "claims", klog.KObjSlice(claims))
	case len(results) != len(claims) && len(s.dryRun.removedPods()) > 0:
		// Preemption's dry run only asks whether the pod fits.
		return statusUnschedulable(logger, []string{"devices do not fit after evicting the pods"}, "pod", klog.KObj(pod), "node", klog.KObj(node))
	case len(results) != len(claims):
		// Explaining searches again: under the same timeout.
		reasons := pl.explain(allocCtx, s, a, node, claims)
		if pl.preemptionMayHelp(allocCtx, s, pod, nodeInfo, claims) {
			return statusPreemptible(logger, reasons, "pod", klog.KObj(pod), "node", klog.KObj(node))
		}
		return statusUnschedulable(logger, reasons, "pod", klog.KObj(pod), "node", klog.KObj(node))
	case s.dryRun.preempting():
		// DefaultPreemption's dry run: devices of pods that are still
		// there, nothing for Reserve, and the results are shared with the
		// cycle's state. The fit is what the pod gets once the victims
		// are gone, its claim nomination if it is nominated here
		// (dryrun.go).
		s.dryRun.fit.set(results)
		return nil
	}
	s.results.store(node.Name, results)
	return nil
}

// allocationContext bounds the search for one pod's devices on one node
// by filterTimeout, if there is one (0: none). Filter searches under it,
// and so does claim nomination, whose searches also run in a scheduling
// cycle (nomination.go): without the bound, a claim whose selectors are
// valid but slow to evaluate would hold that cycle, and every pod behind
// it, for as long as they take.
func (pl *Plugin) allocationContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if pl.filterTimeout > 0 {
		return context.WithTimeout(ctx, pl.filterTimeout)
	}
	return ctx, func() {}
}

// allocationTimedOut: err is the end of allocationContext(ctx)'s bound, not
// of ctx itself.
func allocationTimedOut(ctx context.Context, err error) bool {
	return errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
}

// statusStopped is Filter's answer when its caller stopped it: the
// framework cancels the Filter calls still running once it has found
// enough nodes, and an error from any of them would fail the whole cycle.
func statusStopped(logger klog.Logger, cause error, pod *v1.Pod, node *v1.Node) *fwk.Status {
	return statusUnschedulable(logger, []string{fmt.Sprintf("asked by caller to stop allocating devices: %v", cause)}, "pod", klog.KObj(pod), "node", klog.KObj(node))
}

// explain turns the allocator's failure reasons into the status reasons of
// a node; if they cannot be had (the timeout expired), the in-tree plugin's
// message. The scheduler counts equal reasons over all nodes, which gives
// messages like "0/500 nodes are available: 480 request "gpu": 2 of 8
// matching devices free, need 4, 20 claim default/c: constraint
// matchAttribute ... unsatisfiable."
func (pl *Plugin) explain(ctx context.Context, s *stateData, used nodeAllocator, node *v1.Node, claims []*resourceapi.ResourceClaim) []string {
	const fallback = "cannot allocate all claims"
	a, ok := used.(*allocator.Allocator)
	if !ok {
		// allocator: upstream; the edits of the cycle's nominations and
		// of a dry run apply to drasched's too.
		var err error
		if a, err = s.explainer(ctx, pl); err != nil {
			return []string{fallback}
		}
		if s.dryRun.active() {
			a = a.WithEdits(pl.edits(s))
		}
	}
	failures, err := a.Explain(ctx, node, claims)
	if err != nil || len(failures) == 0 {
		s.results.recordFailures(classFailures(claims, []allocator.Failure{{Reason: reasonUnexplained}}))
		return []string{fallback}
	}
	s.results.recordFailures(classFailures(claims, failures))
	reasons := make([]string, 0, len(failures))
	for _, f := range failures {
		reasons = append(reasons, s.extended.message(f))
	}
	return reasons
}

// classFailures attributes the allocator's failures to DeviceClasses: a
// request's failure to its class, a claim's (a constraint, contention) to
// every class the claim asks for, and one of all claims together to every
// class they ask for.
func classFailures(claims []*resourceapi.ResourceClaim, failures []allocator.Failure) []classFailure {
	var out []classFailure
	for _, f := range failures {
		if f.DeviceClass != "" {
			out = append(out, classFailure{class: f.DeviceClass, reason: f.Reason})
			continue
		}
		for _, claim := range claims {
			if f.Claim != "" && f.Claim != klog.KObj(claim).String() {
				continue
			}
			for _, class := range requestClasses(claim) {
				out = append(out, classFailure{class: class, reason: f.Reason})
			}
		}
	}
	return out
}

func (pl *Plugin) bindingConditions() bool {
	return pl.fts.EnableDRADeviceBindingConditions && pl.fts.EnableDRAResourceClaimDeviceStatus
}

// requiresOptionalNodeOperations: some allocated device skips node
// operations, which only nodes declaring DRAOptionalNodeOperations support.
func requiresOptionalNodeOperations(allocation *resourceapi.AllocationResult) bool {
	if allocation == nil {
		return false
	}
	for _, result := range allocation.Devices.Results {
		if len(minor.ResultSkipNodeOperations(&result)) > 0 {
			return true
		}
	}
	return false
}

// readyForBinding reports whether all binding conditions of the claim's
// devices are true (trivially, without any). A true binding failure
// condition is an error.
func readyForBinding(claim *resourceapi.ResourceClaim) (bool, error) {
	if claim.Status.Allocation == nil {
		return false, nil
	}
	for _, result := range claim.Status.Allocation.Devices.Results {
		if len(result.BindingConditions) == 0 {
			continue
		}
		status := deviceStatus(claim, &result)
		if status == nil {
			return false, nil
		}
		for _, condition := range result.BindingFailureConditions {
			if failed := apimeta.FindStatusCondition(status.Conditions, condition); failed != nil && failed.Status == metav1.ConditionTrue {
				return false, fmt.Errorf("%w: claim %s, device %s: %s: %s", errBindingFailed, klog.KObj(claim), result.Device, failed.Reason, failed.Message)
			}
		}
		for _, condition := range result.BindingConditions {
			if !apimeta.IsStatusConditionTrue(status.Conditions, condition) {
				return false, nil
			}
		}
	}
	return true, nil
}

// bindingTimedOut: the claim has devices with binding conditions and was
// allocated longer than bindingTimeout ago.
func (pl *Plugin) bindingTimedOut(claim *resourceapi.ResourceClaim) bool {
	allocation := claim.Status.Allocation
	if allocation == nil || allocation.AllocationTimestamp == nil {
		return false
	}
	for _, result := range allocation.Devices.Results {
		if result.BindingConditions != nil && allocation.AllocationTimestamp.Add(pl.bindingTimeout).Before(time.Now()) {
			return true
		}
	}
	return false
}

func deviceStatus(claim *resourceapi.ResourceClaim, result *resourceapi.DeviceRequestAllocationResult) *resourceapi.AllocatedDeviceStatus {
	for i := range claim.Status.Devices {
		status := &claim.Status.Devices[i]
		if status.Driver == result.Driver && status.Pool == result.Pool && status.Device == result.Device {
			return status
		}
	}
	return nil
}
