package dra

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drasched/drasched/internal/minor"
	"github.com/drasched/drasched/internal/minor/schedminor"
	"github.com/drasched/drasched/pkg/allocator"
)

// PreEnqueue keeps a pod out of the active queue while one of its claims
// does not exist yet, is being deleted or belongs to another pod. Claim
// events bring it back.
func (pl *Plugin) PreEnqueue(ctx context.Context, pod *v1.Pod) *fwk.Status {
	if _, err := pl.podClaims(pod); err != nil {
		return statusUnschedulable(klog.FromContext(ctx), []string{err.Error()}, "pod", klog.KObj(pod))
	}
	return nil
}

// podClaims returns the pod's ResourceClaims in the order of
// pod.Spec.ResourceClaims, skipping templates for which no claim is needed.
// The objects come from the tracker's assume cache and must not be
// modified.
func (pl *Plugin) podClaims(pod *v1.Pod) ([]*resourceapi.ResourceClaim, error) {
	claims, _, err := pl.podClaimEntries(pod)
	return claims, err
}

// podClaimEntries returns podClaims and, for each, its entry in
// pod.Spec.ResourceClaims.
func (pl *Plugin) podClaimEntries(pod *v1.Pod) ([]*resourceapi.ResourceClaim, []*v1.PodResourceClaim, error) {
	claims := make([]*resourceapi.ResourceClaim, 0, len(pod.Spec.ResourceClaims))
	entries := make([]*v1.PodResourceClaim, 0, len(pod.Spec.ResourceClaims))
	for i := range pod.Spec.ResourceClaims {
		entry := &pod.Spec.ResourceClaims[i]
		name, mustCheckOwner, err := resourceclaim.Name(pod, entry)
		if err != nil {
			return nil, nil, err
		}
		if name == nil {
			// No claim needed for this entry.
			continue
		}
		claim, err := pl.tracker.Claim(pod.Namespace, *name)
		if err != nil {
			return nil, nil, fmt.Errorf("waiting for resource claim %s/%s: %w", pod.Namespace, *name, err)
		}
		if claim.DeletionTimestamp != nil {
			return nil, nil, fmt.Errorf("resourceclaim %q is being deleted", claim.Name)
		}
		if mustCheckOwner {
			// With DRAWorkloadResourceClaims, a claim generated for the
			// pod's PodGroup is the pod's too.
			if err := minor.IsForPod(pod, claim, schedminor.WorkloadClaims(pl.fts)); err != nil {
				return nil, nil, err
			}
		}
		claims = append(claims, claim)
		entries = append(entries, entry)
	}
	return claims, entries, nil
}

// PreFilter gathers the pod's claims, rejects the pod while a claim is in
// use by others or being allocated for another pod, checks that all
// DeviceClasses exist, and builds one allocator for the cycle from a
// consistent snapshot of allocated devices and the slices (with
// DeviceTaintRules applied).
func (pl *Plugin) PreFilter(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if pl.resizeDeferred(pod) {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	logger := klog.FromContext(ctx)
	s := &stateData{results: &filterResults{
		allocations: make(map[string][]resourceapi.AllocationResult),
	}}
	cs.Write(stateKey, s)
	// No wait for the claim cache: kube-scheduler starts scheduling only
	// after the handlers of its informers, the claim cache's included,
	// have processed the initial lists.

	// In a pod group scheduling cycle, the group's state learns of the
	// pod first, for PodGroupPostFilter (podgroup.go).
	group, err := groupStateOf(cs)
	if err != nil {
		return nil, statusError(logger, err)
	}
	if group != nil {
		group.pods[types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}] = s
	}

	claims, entries, err := pl.podClaimEntries(pod)
	if err != nil {
		return nil, statusUnschedulable(logger, []string{err.Error()}, "pod", klog.KObj(pod))
	}
	// Extended resources backed by DRA (extended.go).
	if status := pl.preFilterExtended(logger, s, pod); status != nil {
		return nil, status
	}
	if len(claims) == 0 && s.extended == nil {
		// Skip, unless devices' CPU is uncounted (nodeallocatable_kube137.go).
		return nil, pl.preFilterUncounted()
	}
	s.claims = claims
	s.info = make([]claimInfo, len(claims))
	if s.bindTo, err = pl.claimBindings(pod, entries); err != nil {
		return nil, statusUnschedulable(logger, []string{err.Error()}, "pod", klog.KObj(pod))
	}

	// Allocated claims that are local to one node restrict the pod to it.
	var onlyNodes sets.Set[string]
	for i, claim := range claims {
		if claim.Status.Allocation != nil {
			if !resourceclaim.CanBeReserved(claim) && !pl.reservedForPod(pod, claim) {
				return nil, statusUnschedulable(logger, []string{fmt.Sprintf("resource claim %s is in use by the maximum number of other pods", klog.KObj(claim))}, "pod", klog.KObj(pod))
			}
			matcher, node, err := allocationNodes(claim.Status.Allocation)
			if err != nil {
				return nil, statusError(logger, fmt.Errorf("claim %s: node selector of allocation: %w", klog.KObj(claim), err))
			}
			s.info[i].availableOnNodes = matcher
			if node != "" {
				onlyNodes = restrictTo(onlyNodes, node)
			}
			continue
		}

		if pending := pl.tracker.PendingAllocation(claim.UID); pending != nil {
			// An allocation that a pod of the same pod group cycle put
			// in flight: this pod shares it (podgroup.go).
			if group != nil && group.pending[claim.UID] != nil {
				// Filter checks the node selector. Not narrowed here, as
				// for written allocations: upstream does not narrow
				// either, and a pod of the group whose other constraints
				// exclude that node is told "resourceclaim not available
				// on the node" there, as upstream tells it.
				matcher, _, err := allocationNodes(pending)
				if err != nil {
					return nil, statusError(logger, fmt.Errorf("claim %s: node selector of allocation in flight: %w", klog.KObj(claim), err))
				}
				s.info[i].allocation, s.info[i].availableOnNodes = pending, matcher
				s.shared = append(s.shared, i)
				logger.V(5).Info("Sharing allocation in flight of the pod group", "pod", klog.KObj(pod), "claim", klog.KObj(claim))
				continue
			}
			// An allocation in flight for another pod: wait for it to be
			// written; the claim update requeues this pod.
			return nil, statusUnschedulable(logger, []string{fmt.Sprintf("resource claim %s is in the process of being allocated", klog.KObj(claim))}, "pod", klog.KObj(pod))
		}
		if status := pl.checkClasses(logger, claim); status != nil {
			return nil, status
		}
		s.toAllocate = append(s.toAllocate, i)
	}

	// Claims with devices that stand for CPU or memory (nodeallocatable_kube137.go).
	if status := pl.preFilterNodeAllocatable(logger, s); status != nil {
		return nil, status
	}
	s.pending = make([]*resourceapi.ResourceClaim, len(s.toAllocate))
	for k, i := range s.toAllocate {
		s.pending[k] = s.claims[i]
	}
	if len(s.toAllocate) > 0 || s.extended != nil {
		// The devices nominated for preemptors that this pod yields to
		// are in use for it (nomination.go); a new leader first rebuilds
		// the nominations of the old one.
		pl.rebuildOnce.Do(func() { pl.rebuildNominations(ctx) })
		s.nominated, _ = pl.nominatedState(logger, pod)
		a, err := pl.newAllocator(ctx, s, pl.upstream)
		if err != nil {
			return nil, statusError(logger, err)
		}
		s.allocator = a
		// In pod-group preemption's simulation, the candidate victims
		// are off the snapshot, and their claims free their devices
		// (simulation.go).
		if sim := simulationOf(ctx); sim != nil {
			s.dryRun = sim.dryRun(pl)
		}
	}
	if onlyNodes != nil {
		return &fwk.PreFilterResult{NodeNames: onlyNodes}, nil
	}
	return nil, nil
}

// checkClasses verifies that the DeviceClasses of all requests exist. A
// missing class makes the pod unschedulable on every node until the class
// is created.
func (pl *Plugin) checkClasses(logger klog.Logger, claim *resourceapi.ResourceClaim) *fwk.Status {
	check := func(className, requestName string) *fwk.Status {
		if className == "" {
			return statusError(logger, fmt.Errorf("claim %s, request %s: unsupported request type", klog.KObj(claim), requestName))
		}
		if _, err := pl.tracker.DeviceClasses().Get(className); err != nil {
			if apierrors.IsNotFound(err) {
				return statusUnschedulable(logger, []string{fmt.Sprintf("request %s: device class %s does not exist", requestName, className)}, "claim", klog.KObj(claim))
			}
			return statusError(logger, fmt.Errorf("claim %s, request %s: get device class %s: %w", klog.KObj(claim), requestName, className, err))
		}
		return nil
	}
	for _, request := range claim.Spec.Devices.Requests {
		switch {
		case request.Exactly != nil:
			if status := check(request.Exactly.DeviceClassName, request.Name); status != nil {
				return status
			}
		case len(request.FirstAvailable) > 0:
			if !pl.fts.EnableDRAPrioritizedList {
				return statusUnschedulable(logger, []string{fmt.Sprintf("resource claim %s, request %s: has subrequests, but the DRAPrioritizedList feature is disabled", klog.KObj(claim), request.Name)})
			}
			for _, sub := range request.FirstAvailable {
				if status := check(sub.DeviceClassName, request.Name+"/"+sub.Name); status != nil {
					return status
				}
			}
		default:
			return statusUnschedulable(logger, []string{fmt.Sprintf("resource claim %s, request %s: unknown request type", klog.KObj(claim), request.Name)})
		}
	}
	return nil
}

// newAllocator builds the cycle's allocator from the tracker's snapshot
// and the devices nominated for the preemptors that the pod yields to
// (s.nominated): with allocator: upstream, structured.NewAllocator's, else
// drasched's. s keeps the allocated state it was built from (for
// upstream's, which cannot be edited, preemption's dry run copies it;
// dryrun.go).
func (pl *Plugin) newAllocator(ctx context.Context, s *stateData, upstream bool) (nodeAllocator, error) {
	// A new leader's first allocation waits until the old leader's last
	// writes are visible (leaderfence); a no-op without leader election
	// and after the first seconds of leadership.
	if err := pl.fence.WaitHandover(ctx); err != nil {
		return nil, err
	}
	state, slices, err := pl.gather(ctx)
	if err != nil {
		return nil, err
	}
	s.base = state
	nominated := allocator.Edits{Added: s.nominated}
	if upstream {
		s.slices = slices
		return structured.NewAllocator(ctx, pl.features, editedState(state, nominated), pl.tracker.DeviceClasses(), slices, pl.celCache())
	}
	a, err := allocator.New(ctx, pl.features, *state, pl.tracker.DeviceClasses(), slices, pl.allocatorOptions())
	if err != nil || len(s.nominated.AllocatedDevices) == 0 && len(s.nominated.AllocatedSharedDeviceIDs) == 0 {
		return a, err
	}
	return a.WithEdits(nominated), nil
}

// gather returns the tracker's allocated state and ResourceSlices as they
// are now.
func (pl *Plugin) gather(ctx context.Context) (*structured.AllocatedState, []*resourceapi.ResourceSlice, error) {
	state, err := pl.tracker.AllocatedState(ctx)
	if err != nil {
		return nil, nil, err
	}
	slices, err := pl.tracker.Slices()
	if err != nil {
		return nil, nil, fmt.Errorf("list resource slices: %w", err)
	}
	return state, slices, nil
}

// explainer returns drasched's allocator for the cycle's inputs, for
// failure reasons; with allocator: upstream the cycle's allocator cannot
// explain itself, and drasched's gives the same answers.
func (s *stateData) explainer(ctx context.Context, pl *Plugin) (*allocator.Allocator, error) {
	if a, ok := s.allocator.(*allocator.Allocator); ok {
		return a, nil
	}
	a, err := pl.newAllocator(ctx, s, false)
	if err != nil {
		return nil, err
	}
	return a.(*allocator.Allocator), nil
}

// celCache is upstream's compile cache, for allocator: upstream. The
// scheduler plugin upstream keeps 10 expressions.
func (pl *Plugin) celCache() *cel.Cache {
	pl.upstreamCELOnce.Do(func() {
		pl.upstreamCEL = cel.NewCache(10, schedminor.CELFeatures(pl.fts))
	})
	return pl.upstreamCEL
}

// resizeDeferred: the pod is a running pod whose in-place resize waits for
// resources; the scheduler runs it through a cycle only to find victims to
// preempt, and its claims are allocated already. Upstream skips it too.
func (pl *Plugin) resizeDeferred(pod *v1.Pod) bool {
	return schedminor.ResizeDeferred(pl.fts, pod)
}

// allocationNodes returns the matcher of an allocation's node selector
// (nil if it has none) and the node it selects if that is exactly one.
func allocationNodes(allocation *resourceapi.AllocationResult) (*nodeaffinity.NodeSelector, string, error) {
	selector := allocation.NodeSelector
	if selector == nil {
		return nil, "", nil
	}
	matcher, err := nodeaffinity.NewNodeSelector(selector)
	if err != nil {
		return nil, "", err
	}
	node, _ := singleNode(selector)
	return matcher, node, nil
}

// restrictTo narrows the nodes a pod may use (nil: all) to one node.
func restrictTo(nodes sets.Set[string], node string) sets.Set[string] {
	if nodes == nil {
		return sets.New(node)
	}
	return nodes.Intersection(sets.New(node))
}

// singleNode returns the node name of a selector that selects exactly one
// node by name, as allocations of node-local devices do.
func singleNode(selector *v1.NodeSelector) (string, bool) {
	if len(selector.NodeSelectorTerms) != 1 {
		return "", false
	}
	term := selector.NodeSelectorTerms[0]
	if len(term.MatchExpressions) != 0 || len(term.MatchFields) != 1 {
		return "", false
	}
	field := term.MatchFields[0]
	if field.Key != "metadata.name" || field.Operator != v1.NodeSelectorOpIn || len(field.Values) != 1 {
		return "", false
	}
	return field.Values[0], true
}
