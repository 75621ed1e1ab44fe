package dra

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"

	"github.com/drasched/drasched/internal/minor/schedminor"
	"github.com/drasched/drasched/pkg/allocator"
)

// EventsToRegister lists the cluster events that can make a pod rejected
// by this plugin schedulable, each with a hint that filters out events
// that cannot help that pod.
func (pl *Plugin) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		// Node labels matter for node selectors of slices and allocations.
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel | fwk.UpdateNodeAllocatable}},
		// Claims carry allocations: a claim that appears, changes status or
		// frees devices may help.
		schedminor.WithPreQueueingHint(fwk.ClusterEventWithHint{Event: fwk.ClusterEvent{Resource: fwk.ResourceClaim, ActionType: fwk.Add | fwk.Update | fwk.Delete}, QueueingHintFn: pl.afterClaimChange}, pl.podsForClaim),
		// A victim of the pod's preemption is gone (preemption.go): while
		// its devices were being freed, DefaultPreemption gated the pod
		// and only this event can move it on.
		{Event: fwk.ClusterEvent{Resource: schedminor.AssignedPod, ActionType: fwk.Delete}, QueueingHintFn: pl.afterAssignedPodDelete},
		// The pod's generated claims get their names in the pod status.
		{Event: fwk.ClusterEvent{Resource: schedminor.TargetPod, ActionType: fwk.UpdatePodGeneratedResourceClaim}, QueueingHintFn: pl.afterPodUpdate},
		// A class that appears or changes helps pods whose requests use it.
		{Event: fwk.ClusterEvent{Resource: fwk.DeviceClass, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: pl.afterClassChange},
		// A slice helps pods with a request that one of its devices could
		// serve. Upstream requeues every DRA pod on any slice change.
		// Deleting a slice can help too: a pool whose newest generation
		// disappears falls back to the slices of an older one.
		{Event: fwk.ClusterEvent{Resource: fwk.ResourceSlice, ActionType: fwk.Add | fwk.Update | fwk.Delete}, QueueingHintFn: pl.afterSliceChange},
	}, nil
}

// claimIndex is the name of the pod indexer by referenced claim.
func claimIndex(profile string) string { return "drasched-claims-" + profile }

// indexPodsByClaim adds an index of pods by "namespace/claim name" to the
// shared pod informer.
func (pl *Plugin) indexPodsByClaim(profile string) error {
	informer := pl.fh.SharedInformerFactory().Core().V1().Pods().Informer()
	name := claimIndex(profile)
	if err := informer.AddIndexers(cache.Indexers{name: podClaimKeys}); err != nil {
		return fmt.Errorf("add pod indexer %s: %w", name, err)
	}
	pl.podsByClaim = informer.GetIndexer()
	pl.claimIndexName = name
	return nil
}

// podClaimKeys indexes a pod by the "namespace/name" of its claims.
func podClaimKeys(obj any) ([]string, error) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return nil, nil
	}
	keys := sets.New[string]()
	for i := range pod.Spec.ResourceClaims {
		claimName, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil || claimName == nil {
			continue
		}
		keys.Insert(pod.Namespace + "/" + *claimName)
	}
	return keys.UnsortedList(), nil
}

// podsForClaim narrows a claim event to the pods that reference the claim,
// except when the event frees devices, which may help any pod.
func (pl *Plugin) podsForClaim(_ klog.Logger, oldObj, newObj any) (schedminor.PreQueueingHintResult, error) {
	oldClaim, _ := oldObj.(*resourceapi.ResourceClaim)
	newClaim, _ := newObj.(*resourceapi.ResourceClaim)
	if oldClaim != nil && oldClaim.Status.Allocation != nil && (newClaim == nil || newClaim.Status.Allocation == nil) {
		return schedminor.PreQueueingHintResult{AllPods: true}, nil
	}
	claim := newClaim
	if claim == nil {
		claim = oldClaim
	}
	if claim == nil {
		return schedminor.PreQueueingHintResult{AllPods: true}, nil
	}
	objs, err := pl.podsByClaim.ByIndex(pl.claimIndexName, claim.Namespace+"/"+claim.Name)
	if err != nil {
		return schedminor.PreQueueingHintResult{}, fmt.Errorf("look up pods of claim %s: %w", klog.KObj(claim), err)
	}
	pods := make([]types.NamespacedName, 0, len(objs))
	for _, obj := range objs {
		if pod, ok := obj.(*v1.Pod); ok {
			pods = append(pods, types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name})
		}
	}
	// A claim for extended resources is not in its pod's spec, only its
	// owner reference names the pod (extended.go).
	if pod, ok := extendedClaimPod(claim); ok {
		pods = append(pods, pod)
	}
	// Preemptors whose claim nomination waits for the claim, or whose
	// nominated devices it took (nomination.go).
	pods = append(pods, pl.nomineesTouchedBy(claim)...)
	return schedminor.PreQueueingHintResult{Pods: pods}, nil
}

// afterClaimChange: a claim was deallocated (devices became free), or one
// of the pod's claims appeared or changed its status.
func (pl *Plugin) afterClaimChange(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	if newObj == nil {
		if _, unknown := oldObj.(cache.DeletedFinalStateUnknown); unknown {
			// We may have missed the deallocation; play safe.
			return fwk.Queue, nil
		}
	}
	original, modified, err := schedutil.As[*resourceapi.ResourceClaim](oldObj, newObj)
	if err != nil {
		return fwk.Queue, fmt.Errorf("unexpected object in claim hint: %w", err)
	}
	if modified == nil && isExtendedClaimOf(pod, original) {
		// PostFilter deleted a claim for the pod's extended resources left
		// from an earlier attempt (extended.go); the next attempt creates
		// a new one.
		logger.V(5).Info("Claim for extended resources of pod deleted", "pod", klog.KObj(pod), "claim", klog.KObj(original))
		return fwk.Queue, nil
	}
	if modified == nil {
		// Deleted with known final state. Claims are allocated only by the
		// scheduler through the assume cache, so the deallocation was seen
		// as an update already, unless it was deleted while allocated.
		if original.Status.Allocation == nil {
			return fwk.QueueSkip, nil
		}
		return fwk.Queue, nil
	}
	deallocated := original != nil && original.Status.Allocation != nil && modified.Status.Allocation == nil
	if !deallocated && !namesClaim(pod, modified) && !pl.nominationAffected(pod, modified) {
		// Another pod's claim: what the rest would answer, found without
		// a lookup. The scheduling queue asks this for every pending pod
		// on every claim event, and while many pods wait for their claims
		// (pods created at once), that is most of the hint's work.
		return fwk.QueueSkip, nil
	}
	uses := false
	claims, err := pl.podClaims(pod)
	if err != nil {
		// Still missing or broken: not schedulable yet.
		if loggerV := logger.V(6); loggerV.Enabled() {
			loggerV.Info("Pod not schedulable after claim change", "pod", klog.KObj(pod), "claim", klog.KObj(modified), "reason", err.Error())
		}
		return fwk.QueueSkip, nil
	}
	for _, claim := range claims {
		if claim.UID == modified.UID {
			uses = true
		}
	}
	switch {
	case deallocated:
		logger.V(6).Info("Claim deallocated, devices may be free", "pod", klog.KObj(pod), "claim", klog.KObj(modified))
		return fwk.Queue, nil
	case pl.nominationAffected(pod, modified):
		// A claim that the pod's claim nomination waits for, or that took
		// a nominated device: the nomination may no longer be honoured,
		// and the pod may have to preempt again (nomination.go).
		logger.V(5).Info("Claim change affects the pod's claim nomination", "pod", klog.KObj(pod), "claim", klog.KObj(modified))
		return fwk.Queue, nil
	case !uses:
		return fwk.QueueSkip, nil
	case original == nil:
		logger.V(5).Info("Claim of pod created", "pod", klog.KObj(pod), "claim", klog.KObj(modified))
		return fwk.Queue, nil
	case apiequality.Semantic.DeepEqual(&original.Status, &modified.Status):
		// A finalizer or label, nothing the pod waits for.
		return fwk.QueueSkip, nil
	}
	logger.V(5).Info("Status of pod's claim changed", "pod", klog.KObj(pod), "claim", klog.KObj(modified))
	return fwk.Queue, nil
}

// namesClaim: the pod refers to the claim by name, in its spec or, for a
// claim generated from a template, in its status. Every claim podClaims
// returns is named so. It allocates nothing.
func namesClaim(pod *v1.Pod, claim *resourceapi.ResourceClaim) bool {
	if pod.Namespace != claim.Namespace {
		return false
	}
	for i := range pod.Spec.ResourceClaims {
		if name := pod.Spec.ResourceClaims[i].ResourceClaimName; name != nil && *name == claim.Name {
			return true
		}
	}
	for i := range pod.Status.ResourceClaimStatuses {
		if name := pod.Status.ResourceClaimStatuses[i].ResourceClaimName; name != nil && *name == claim.Name {
			return true
		}
	}
	return false
}

// afterAssignedPodDelete: the pod is nominated to the node of a deleted pod
// that held claims, as the victims of its preemption do. With async
// preemption, DefaultPreemption gates the preemptor until its last victim
// is deleted and then listens only to pod deletions, with a hint that
// leaves requeueing to the plugins that rejected the pod: without this one
// a preemptor for devices would wait for the queue's periodic flush. The
// claims are deallocated a moment later; their events requeue the pod
// again if it comes too early. The nomination is read from the pod: hints
// run under the queue's lock, which the nominator's lookups take too.
func (pl *Plugin) afterAssignedPodDelete(logger klog.Logger, pod *v1.Pod, oldObj, _ any) (fwk.QueueingHint, error) {
	deleted, _, err := schedutil.As[*v1.Pod](oldObj, nil)
	if err != nil {
		return fwk.Queue, fmt.Errorf("unexpected object in pod deletion hint: %w", err)
	}
	if deleted == nil || deleted.Spec.NodeName == "" || len(deleted.Spec.ResourceClaims) == 0 && deleted.Status.ExtendedResourceClaimStatus == nil {
		return fwk.QueueSkip, nil
	}
	// The pod's own copy may not show its nomination yet when its first
	// victims are gone: a deleted pod of lower priority may be a victim
	// too.
	if pod.Status.NominatedNodeName != deleted.Spec.NodeName && corev1helpers.PodPriority(deleted) >= corev1helpers.PodPriority(pod) {
		return fwk.QueueSkip, nil
	}
	logger.V(5).Info("Pod with claims deleted, possibly a victim of the pod's preemption", "pod", klog.KObj(pod), "deleted", klog.KObj(deleted), "node", deleted.Spec.NodeName)
	return fwk.Queue, nil
}

// afterPodUpdate: the pod's generated claims may all be known now.
func (pl *Plugin) afterPodUpdate(logger klog.Logger, pod *v1.Pod, _, newObj any) (fwk.QueueingHint, error) {
	_, modified, err := schedutil.As[*v1.Pod](nil, newObj)
	if err != nil {
		return fwk.Queue, fmt.Errorf("unexpected object in pod hint: %w", err)
	}
	if modified.UID != pod.UID {
		// Another pod's update: 1.36 reports those too (it has no
		// TargetPod event resource).
		return fwk.QueueSkip, nil
	}
	if _, err := pl.podClaims(modified); err != nil {
		logger.V(6).Info("Pod still waits for claims", "pod", klog.KObj(pod), "reason", err.Error())
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

// afterClassChange: the class is used by a request of one of the pod's
// claims, and for an update, something that matters changed.
func (pl *Plugin) afterClassChange(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	original, modified, err := schedutil.As[*resourceapi.DeviceClass](oldObj, newObj)
	if err != nil {
		return fwk.Queue, fmt.Errorf("unexpected object in class hint: %w", err)
	}
	if original != nil && apiequality.Semantic.DeepEqual(original.Spec, modified.Spec) {
		return fwk.QueueSkip, nil
	}
	if classBacksExtendedResource(pod, original, modified) {
		// Its mapping or selectors changed (extended.go).
		logger.V(5).Info("Class of pod's extended resource changed", "pod", klog.KObj(pod), "class", klog.KObj(modified))
		return fwk.Queue, nil
	}
	claims, err := pl.podClaims(pod)
	if err != nil {
		return fwk.QueueSkip, nil
	}
	for _, claim := range claims {
		if claim.Status.Allocation != nil {
			continue
		}
		for _, class := range requestClasses(claim) {
			if class == modified.Name {
				logger.V(5).Info("Class of pod's request changed", "pod", klog.KObj(pod), "class", klog.KObj(modified))
				return fwk.Queue, nil
			}
		}
	}
	return fwk.QueueSkip, nil
}

// hintCostBudget is what afterSliceChange may spend on CEL evaluations
// for one pod and one event, in CEL cost units (allocator.CostBudget):
// results the allocator's cache holds are free. kube-scheduler runs
// queueing hints synchronously, for every pending pod the event may help,
// under the scheduling queue's lock, which every pod added to the queue
// and every scheduling cycle's Pop take too: while a hint evaluates,
// nothing is scheduled. The API server admits any selector whose cost on
// one device is within 1,000,000 units, and one that uses it all takes
// about half a second per device, so a pending pod with such a selector
// and an update of a pool of thousands of devices would stall the queue
// for minutes. 100,000 units are 20,000 evaluations of a selector that
// compares an attribute (about 5 units), enough to answer exactly for a
// pool of 2,048 devices and a few such selectors, and some 50 ms of CEL
// at the half microsecond a unit takes on a current CPU; the evaluation
// under way when the budget runs out may cost up to one selector's limit
// on top. A budget in units rather than time gives the same answers on
// any machine and under any load.
const hintCostBudget = 100_000

// afterSliceChange: some device of the new or updated slice could serve
// one of the pod's unallocated requests (its class's and the request's
// selectors match). A slice without such devices can still complete a pool
// whose other slices have them; that is covered by also queueing when the
// slice's pool has matching devices in the slices already known. A deleted
// slice helps when the rest of its pool has matching devices: the pool's
// newest generation may have gone with it, which makes an older one
// current. When hintCostBudget runs out before the answer is known, the
// pod is queued: when in doubt, try again, and Filter, which has
// filterTimeout, decides. The results evaluated so far stay in the cache,
// so the next hint for the same slices resumes where this one stopped.
func (pl *Plugin) afterSliceChange(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	original, modified, err := schedutil.As[*resourceapi.ResourceSlice](oldObj, newObj)
	if err != nil {
		return fwk.Queue, fmt.Errorf("unexpected object in slice hint: %w", err)
	}
	deleted := modified == nil
	changed := modified
	if deleted {
		if original == nil {
			return fwk.Queue, errors.New("slice hint without a slice")
		}
		changed = original
	} else if original != nil && apiequality.Semantic.DeepEqual(original.Spec, modified.Spec) {
		return fwk.QueueSkip, nil
	}
	claims, err := pl.podClaims(pod)
	if err != nil {
		return fwk.QueueSkip, nil
	}
	var pool []*resourceapi.ResourceSlice
	if !deleted {
		pool = append(pool, modified)
	}
	if all, err := pl.tracker.Slices(); err == nil {
		for _, s := range all {
			if s.Spec.Driver == changed.Spec.Driver && s.Spec.Pool.Name == changed.Spec.Pool.Name && s.Name != changed.Name {
				pool = append(pool, s)
			}
		}
	}
	if len(pool) == 0 {
		return fwk.QueueSkip, nil
	}
	budget := allocator.NewCostBudget(hintCostBudget)
	// Devices for the pod's extended resources (extended.go).
	if match, err := pl.sliceServesExtendedResource(pod, pool, budget); err != nil || match {
		logger.V(5).Info("Slice may have devices for pod's extended resources", "pod", klog.KObj(pod), "slice", klog.KObj(changed), "err", err)
		return fwk.Queue, nil
	}
	for _, claim := range claims {
		if claim.Status.Allocation != nil {
			continue
		}
		for _, request := range requestSelectors(claim) {
			match, err := pl.anyDeviceMatches(request, pool, budget)
			if errors.Is(err, allocator.ErrBudgetSpent) {
				logger.V(5).Info("Slice may have devices for pod; the hint's CEL budget is spent, Filter decides", "pod", klog.KObj(pod), "slice", klog.KObj(changed), "claim", klog.KObj(claim))
				return fwk.Queue, nil
			}
			if err != nil {
				// When in doubt, try again.
				return fwk.Queue, nil
			}
			if match {
				logger.V(5).Info("Slice has devices for pod", "pod", klog.KObj(pod), "slice", klog.KObj(modified))
				return fwk.Queue, nil
			}
		}
	}
	return fwk.QueueSkip, nil
}

// requestSelector is what a (sub)request asks of a device.
type requestSelector struct {
	class     string
	selectors []resourceapi.DeviceSelector
}

func requestSelectors(claim *resourceapi.ResourceClaim) []requestSelector {
	var result []requestSelector
	for _, request := range claim.Spec.Devices.Requests {
		if request.Exactly != nil {
			result = append(result, requestSelector{class: request.Exactly.DeviceClassName, selectors: request.Exactly.Selectors})
		}
		for _, sub := range request.FirstAvailable {
			result = append(result, requestSelector{class: sub.DeviceClassName, selectors: sub.Selectors})
		}
	}
	return result
}

func requestClasses(claim *resourceapi.ResourceClaim) []string {
	var classes []string
	for _, request := range requestSelectors(claim) {
		classes = append(classes, request.class)
	}
	return classes
}

// anyDeviceMatches evaluates the class's and the request's selectors on
// the devices of the slices until one matches, or until the budget is
// spent (allocator.ErrBudgetSpent). Results come from the allocator's
// cache, so each device and expression is evaluated once per slice
// version, however many pods ask.
func (pl *Plugin) anyDeviceMatches(request requestSelector, slices []*resourceapi.ResourceSlice, budget *allocator.CostBudget) (bool, error) {
	class, err := pl.tracker.DeviceClasses().Get(request.class)
	if err != nil {
		// A missing class is handled by its own event.
		return false, nil
	}
	var expressions []string
	for _, selector := range append(append([]resourceapi.DeviceSelector{}, class.Spec.Selectors...), request.selectors...) {
		if selector.CEL == nil {
			return false, fmt.Errorf("selector of unknown type")
		}
		expressions = append(expressions, selector.CEL.Expression)
	}
	features := schedminor.CELFeatures(pl.fts)
	for _, slice := range slices {
		for i := range slice.Spec.Devices {
			matches := true
			for _, expr := range expressions {
				// Hints have no context; the budget bounds them.
				ok, err := pl.cache.MatchesWithin(context.Background(), budget, features, slice, i, expr)
				if err != nil {
					return false, err
				}
				if !ok {
					matches = false
					break
				}
			}
			if matches {
				return true, nil
			}
		}
	}
	return false, nil
}
