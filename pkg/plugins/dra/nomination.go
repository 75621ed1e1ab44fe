package dra

// Claim nomination (KEP-5690), the one mechanism by which a preemptor
// keeps what its preemption freed.
//
// When the preemption plugin (StructuredDRAPreemption) nominates a pod to
// a node, the allocation that its dry run found there becomes the pod's
// nomination in the tracker: device IDs per claim and request, with
// counters and consumed capacity, the claims its victims free, and a
// deadline. From then on:
//
//   - every other pod of the nominee's priority or lower counts those
//     devices as in use, in every cycle and every dry run: it neither takes
//     them nor evicts pods for them (prefilter.go builds the cycle's
//     allocator with them, dryrun.go keeps them through a dry run's edits);
//   - a pod of higher priority does not see the nomination: it may take the
//     devices, as the scheduler lets it take any resources freed for a
//     nominee of lower priority. The nomination can then no longer be
//     honoured;
//   - the nominee sees the devices as free in its own cycles, and once its
//     victims' claims are deallocated it allocates them, first fit in the
//     order that chose them in the dry run;
//   - while a victim's claim is still allocated, the nominee does not
//     preempt again: it waits, and its status says for what and until
//     when (nominationWait).
//
// A nomination ends when the pod is bound (PreBind), deleted, nominated
// again, no longer nominated to the node (a preemptor of higher priority
// cleared it), when it can no longer be honoured (a pod of higher priority
// wrote a nominated device into its claims: ended in that pod's PreBind;
// a victim's claim gained a consumer, a nominated device is held by a
// claim that is not a victim's, or the victims are gone and the pod still
// does not fit: ended in the nominee's next cycle), and
// at the latest at its deadline: the victims' termination grace period
// plus the nomination margin (StructuredDRAArgs preemption.nominationMargin)
// after it was made. Then the pod may preempt again. A pod with no claims
// to allocate is never nominated devices, and never waits here.
//
// The nominations live in the scheduler's memory. A new leader rebuilds
// them from the API before its first cycle (rebuildNominations): the pods'
// nominatedNodeName and the claims of the pods being deleted on those
// nodes.

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"

	"github.com/drasched/drasched/pkg/allocator"
	"github.com/drasched/drasched/pkg/core"
	"github.com/drasched/drasched/pkg/tracker"
)

// nominatedState returns what the nominations of the pods that pod yields
// to hold: those of other pods of its priority or higher. Nominations that
// no longer stand (their pod is gone, bound, or not nominated to their
// node any more) end here, within one cycle of the change.
func (pl *Plugin) nominatedState(logger klog.Logger, pod *v1.Pod) (structured.AllocatedState, bool) {
	noms := pl.tracker.Nominations().List()
	if len(noms) == 0 {
		return structured.AllocatedState{}, false
	}
	priority := corev1helpers.PodPriority(pod)
	state := core.NewAllocatedState()
	held := false
	for _, n := range noms {
		if !pl.nominationStands(logger, n) || n.Pod == pod.UID || n.Priority < priority {
			continue
		}
		for i := range n.Allocations {
			core.AddAllocation(&state, &n.Allocations[i], pl.fts.EnableDRAConsumableCapacity)
		}
		held = true
	}
	return state, held
}

// nominationStands checks that the nominee still exists, is not bound and
// is still nominated to the node, and ends the nomination if not.
func (pl *Plugin) nominationStands(logger klog.Logger, n *tracker.Nomination) bool {
	pod, err := pl.fh.SharedInformerFactory().Core().V1().Pods().Lister().Pods(n.Namespace).Get(n.Name)
	var reason tracker.EndReason
	switch {
	case err != nil || pod.UID != n.Pod:
		reason = tracker.EndPodGone
	case pod.Spec.NodeName != "":
		reason = tracker.EndBound
	case !pl.nominatedTo(n.Pod, n.Node) && !pl.allocating(pod):
		reason = tracker.EndLost
	default:
		return true
	}
	if pl.tracker.Nominations().EndIf(n, reason) {
		logger.V(4).Info("Claim nomination ended", "pod", klog.KRef(n.Namespace, n.Name), "node", n.Node, "reason", reason)
	}
	return false
}

// allocating: a claim of the pod is in flight or reserved for it: the
// scheduler assumed the pod on a node, which takes it out of the
// nominator, and its nomination ends with PreBind (or holds on, if the
// pod group cycle that assumed it fails).
func (pl *Plugin) allocating(pod *v1.Pod) bool {
	for _, claim := range pl.claimsOfPod(pod) {
		if pl.tracker.PendingAllocation(claim.UID) != nil || pl.reservedForPod(pod, claim) {
			return true
		}
	}
	return false
}

// nominatedTo: the scheduler has the pod nominated to the node. Its
// nominator learns of a nomination when the cycle that made it ends,
// before the next cycle starts, and of a cleared one from the pod's
// update.
func (pl *Plugin) nominatedTo(pod types.UID, node string) bool {
	for _, p := range pl.fh.NominatedPodsForNode(node) {
		if p.GetPod().UID == pod {
			return true
		}
	}
	return false
}

// nominate records the pod's claim nomination on node from what the dry
// run found there. Pods that allocate nothing are not nominated devices.
func (pl *Plugin) nominate(logger klog.Logger, pod *v1.Pod, node, group string, results []resourceapi.AllocationResult, victims []*v1.Pod, freed []*resourceapi.ResourceClaim) {
	if len(results) == 0 {
		return
	}
	now := time.Now()
	n := &tracker.Nomination{
		Pod:         pod.UID,
		Namespace:   pod.Namespace,
		Name:        pod.Name,
		Group:       group,
		Node:        node,
		Priority:    corev1helpers.PodPriority(pod),
		Allocations: slices.Clone(results),
		Victims:     victimClaims(freed),
		VictimPods:  podUIDs(victims),
		Expires:     now.Add(terminationBound(victims, now) + pl.nominationMargin),
	}
	pl.tracker.Nominations().Add(n)
	nominations.WithLabelValues("Nominated").Inc()
	logger.V(4).Info("Claim nomination", "pod", klog.KObj(pod), "node", node, "victimClaims", len(n.Victims), "expires", n.Expires)
}

// victimClaims records the claims the victims free.
func victimClaims(freed []*resourceapi.ResourceClaim) []tracker.VictimClaim {
	out := make([]tracker.VictimClaim, 0, len(freed))
	for _, claim := range freed {
		out = append(out, tracker.VictimClaim{UID: claim.UID, Namespace: claim.Namespace, Name: claim.Name, Allocation: claim.Status.Allocation})
	}
	return out
}

// podUIDs returns the pods' UIDs.
func podUIDs(pods []*v1.Pod) []types.UID {
	uids := make([]types.UID, 0, len(pods))
	for _, pod := range pods {
		uids = append(uids, pod.UID)
	}
	return uids
}

// terminationBound is how long the victims may take to terminate: the
// longest grace period among them, counted from now (from their deletion
// for those being deleted already).
func terminationBound(victims []*v1.Pod, now time.Time) time.Duration {
	var longest time.Duration
	for _, pod := range victims {
		var d time.Duration
		switch {
		case pod.DeletionTimestamp != nil:
			d = pod.DeletionTimestamp.Sub(now)
		case pod.Spec.TerminationGracePeriodSeconds != nil:
			d = time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
		default:
			d = v1.DefaultTerminationGracePeriodSeconds * time.Second
		}
		longest = max(longest, d)
	}
	return longest
}

// endNomination ends the pod's nomination, if it has one.
func (pl *Plugin) endNomination(logger klog.Logger, pod *v1.Pod, reason tracker.EndReason) {
	if pl.tracker.Nominations().End(pod.UID, reason) {
		logger.V(4).Info("Claim nomination ended", "pod", klog.KObj(pod), "reason", reason)
	}
}

// nominationWait decides, for a pod that did not fit, whether it waits
// for the victims of its nomination instead of preempting again: while a
// victim's claim is still allocated (or was when the cycle began) and
// nothing shows that the nomination can no longer be honoured, until the
// nomination's deadline. The message says what the pod waits for and
// until when. A nomination that cannot be honoured ends here, and the pod
// may preempt again.
//
// base is the allocated state the pod's cycle saw; nil if it saw none.
func (pl *Plugin) nominationWait(ctx context.Context, base *structured.AllocatedState, pod *v1.Pod) (*tracker.Nomination, string) {
	logger := klog.FromContext(ctx)
	n := pl.tracker.Nominations().Get(pod.UID)
	if n == nil {
		return nil, ""
	}
	unusable := func(why string) (*tracker.Nomination, string) {
		if pl.tracker.Nominations().EndIf(n, tracker.EndUnusable) {
			logger.V(4).Info("Claim nomination can no longer be honoured", "pod", klog.KObj(pod), "node", n.Node, "why", why)
		}
		return nil, ""
	}
	if !time.Now().Before(n.Expires) {
		pl.tracker.Nominations().EndIf(n, tracker.EndExpired)
		return nil, ""
	}
	victims := core.NewAllocatedState()
	pending := 0
	for _, v := range n.Victims {
		core.AddAllocation(&victims, v.Allocation, pl.fts.EnableDRAConsumableCapacity)
		live, err := pl.tracker.Claim(v.Namespace, v.Name)
		if err == nil && live.UID == v.UID && live.Status.Allocation != nil {
			if consumer, ok := pl.liveConsumer(live, n.VictimPods...); ok {
				return unusable(fmt.Sprintf("claim %s of a preempted pod is in use by %s", klog.KObj(live), consumer))
			}
			pending++
			continue
		}
		if base == nil || !countsAny(base, v.Allocation, pl.fts.EnableDRAConsumableCapacity) {
			continue
		}
		// The cycle's snapshot counts the victim's devices, but the
		// claim is freed. Either it was freed after the snapshot, and
		// its event requeues the pod to a cycle that sees the devices
		// free; or another claim holds them now, and that pod will not
		// give them back. Telling the two apart by the devices alone
		// made the nominee wait for its bound for victims that were
		// long gone.
		if other, ok := pl.heldByOther(n, v.Allocation); ok {
			return unusable(fmt.Sprintf("the devices of claim %s of a preempted pod are allocated to claim %s", klog.KRef(v.Namespace, v.Name), other))
		}
		pending++
	}
	if pending == 0 {
		return unusable("the preempted pods' claims are freed and the pod still does not fit")
	}
	if base != nil {
		for i := range n.Allocations {
			for _, r := range n.Allocations[i].Devices.Results {
				id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
				if r.ShareID == nil && base.AllocatedDevices.Has(id) && !victims.AllocatedDevices.Has(id) {
					return unusable(fmt.Sprintf("device %s is allocated to a claim of a pod that was not preempted", id))
				}
			}
		}
	}
	return n, fmt.Sprintf("waiting for %d resource claims of preempted pods on node %s to be freed; their devices are nominated for the pod until %s",
		pending, n.Node, n.Expires.UTC().Format(time.RFC3339))
}

// heldByOther returns an allocated claim that is not one of the
// nomination's victims' and takes a device or share of the allocation.
// Allocations in flight do not count: they may be dropped again. It lists
// every claim: it runs only for a nominee whose victim's claim was freed
// after its cycle's snapshot.
func (pl *Plugin) heldByOther(n *tracker.Nomination, allocation *resourceapi.AllocationResult) (string, bool) {
	victim := sets.New[types.UID]()
	for _, v := range n.Victims {
		victim.Insert(v.UID)
	}
	mine := core.NewAllocatedState()
	core.AddAllocation(&mine, allocation, pl.fts.EnableDRAConsumableCapacity)
	claims, err := pl.tracker.Claims()
	if err != nil {
		return "", false
	}
	for _, claim := range claims {
		if a := claim.Status.Allocation; a != nil && !victim.Has(claim.UID) && countsAny(&mine, a, pl.fts.EnableDRAConsumableCapacity) {
			return klog.KObj(claim).String(), true
		}
	}
	return "", false
}

// endNominationsTakenBy ends the nominations of other pods whose devices
// the pod's claims, just written, hold. Every pod of a nominee's priority
// or lower counts a nomination's devices as in use, so only a pod of
// higher priority can take them, and it will not give them back: the
// nomination can no longer be honoured. Ending it on this event lets the
// nominee preempt elsewhere at once; waiting for its victims would last
// until the nomination's bound, since their devices are not coming back.
// It runs once the allocations are written, not at Reserve: a pod group
// cycle reserves devices for pods that it may unreserve again when the
// group does not fit, and a nominee that preempted again for that would
// evict pods for nothing.
func (pl *Plugin) endNominationsTakenBy(logger klog.Logger, pod *v1.Pod, claims []*resourceapi.ResourceClaim) {
	if pl.tracker.Nominations().Len() == 0 {
		return
	}
	taken := core.NewAllocatedState()
	for _, claim := range claims {
		core.AddAllocation(&taken, claim.Status.Allocation, pl.fts.EnableDRAConsumableCapacity)
	}
	for _, n := range pl.tracker.Nominations().List() {
		if n.Pod == pod.UID || !nominationTakes(n, &taken, pl.fts.EnableDRAConsumableCapacity) {
			continue
		}
		if pl.tracker.Nominations().EndIf(n, tracker.EndUnusable) {
			logger.V(4).Info("Claim nomination can no longer be honoured: a pod of higher priority took its devices",
				"pod", klog.KRef(n.Namespace, n.Name), "node", n.Node, "takenBy", klog.KObj(pod))
		}
	}
}

// nominationTakes reports whether state counts a device or share of the
// nomination's allocations.
func nominationTakes(n *tracker.Nomination, state *structured.AllocatedState, consumableCapacity bool) bool {
	for i := range n.Allocations {
		if countsAny(state, &n.Allocations[i], consumableCapacity) {
			return true
		}
	}
	return false
}

// liveConsumer returns a consumer of the claim that is not a pod being
// deleted or gone, nor one of the evicted pods: while it uses the claim,
// the claim is not freed.
func (pl *Plugin) liveConsumer(claim *resourceapi.ResourceClaim, evicted ...types.UID) (string, bool) {
	pods := pl.fh.SharedInformerFactory().Core().V1().Pods().Lister().Pods(claim.Namespace)
	for _, consumer := range claim.Status.ReservedFor {
		if consumer.APIGroup != "" || consumer.Resource != "pods" {
			return consumer.Resource + " " + consumer.Name, true
		}
		if slices.Contains(evicted, consumer.UID) {
			continue
		}
		pod, err := pods.Get(consumer.Name)
		if err == nil && pod.UID == consumer.UID && pod.DeletionTimestamp == nil {
			return "pod " + consumer.Name, true
		}
	}
	return "", false
}

// countsAny reports whether state counts a device or share of the
// allocation.
func countsAny(state *structured.AllocatedState, allocation *resourceapi.AllocationResult, consumableCapacity bool) bool {
	mine := core.NewAllocatedState()
	core.AddAllocation(&mine, allocation, consumableCapacity)
	return state.AllocatedDevices.HasAny(mine.AllocatedDevices.UnsortedList()...) ||
		state.AllocatedSharedDeviceIDs.HasAny(mine.AllocatedSharedDeviceIDs.UnsortedList()...)
}

// nominationAffected: the claim change may end one of the pod's
// nomination's grounds: a victim's claim changed its consumers, or a claim
// took a device that is nominated for the pod. The queueing hint requeues
// the pod so that it finds out in its next cycle instead of at the
// deadline. It only reads.
func (pl *Plugin) nominationAffected(pod *v1.Pod, claim *resourceapi.ResourceClaim) bool {
	n := pl.tracker.Nominations().Get(pod.UID)
	return n != nil && pl.nominationTouches(n, claim)
}

// nominationTouches: the claim is one of the nomination's victims', or its
// allocation takes a device or share that the nomination holds.
func (pl *Plugin) nominationTouches(n *tracker.Nomination, claim *resourceapi.ResourceClaim) bool {
	if claim == nil {
		return false
	}
	for _, v := range n.Victims {
		if v.UID == claim.UID {
			return true
		}
	}
	if claim.Status.Allocation == nil {
		return false
	}
	nominated := core.NewAllocatedState()
	for i := range n.Allocations {
		core.AddAllocation(&nominated, &n.Allocations[i], pl.fts.EnableDRAConsumableCapacity)
	}
	return countsAny(&nominated, claim.Status.Allocation, pl.fts.EnableDRAConsumableCapacity)
}

// nomineesTouchedBy returns the pods whose nominations the claim touches.
func (pl *Plugin) nomineesTouchedBy(claim *resourceapi.ResourceClaim) []types.NamespacedName {
	var pods []types.NamespacedName
	for _, n := range pl.tracker.Nominations().List() {
		if pl.nominationTouches(n, claim) {
			pods = append(pods, types.NamespacedName{Namespace: n.Namespace, Name: n.Name})
		}
	}
	return pods
}

// nominationEnded counts ended nominations and requeues the pods that
// wait for devices: those the nomination held are free to them now, and
// no claim event says so.
func nominationEnded(logger klog.Logger, activate func(klog.Logger)) func(*tracker.Nomination, tracker.EndReason) {
	return func(n *tracker.Nomination, reason tracker.EndReason) {
		nominations.WithLabelValues(string(reason)).Inc()
		if reason == tracker.EndExpired {
			logger.V(2).Info("Claim nomination expired: the preempted pods or their claims did not go in time", "pod", klog.KRef(n.Namespace, n.Name), "node", n.Node)
		}
		// A bound nominee may have taken other devices than those
		// nominated; they are free now too.
		if reason != tracker.EndRenominated {
			activate(logger)
		}
	}
}

// rebuildNominations rebuilds, once per process before the plugin's first
// cycle, the nominations that a previous leader held: for each pending pod
// of this profile that is nominated to a node, in order of priority
// (highest first, then oldest), the devices its claims get on that node
// once the claims of the pods being deleted (or gone) there are freed, if
// they fit. Without it, the devices freed for a
// preemptor of the old leader go to the first pod that asks, and the
// preemptor evicts again. It runs in the first cycle's PreFilter, and each
// nominee's search is bounded by filterTimeout as Filter's is: a nominee
// whose devices are not found in time gets no nomination, and the first
// cycle waits at most that long per nominee.
func (pl *Plugin) rebuildNominations(ctx context.Context) {
	logger := klog.FromContext(ctx)
	pods, err := pl.fh.SharedInformerFactory().Core().V1().Pods().Lister().List(labels.Everything())
	if err != nil {
		logger.Error(err, "List pods to rebuild claim nominations")
		return
	}
	byNode := map[string][]*v1.Pod{}
	for _, pod := range pods {
		if pod.Spec.NodeName == "" && pod.Status.NominatedNodeName != "" && pod.Spec.SchedulerName == pl.fh.ProfileName() &&
			pod.DeletionTimestamp == nil && len(pod.Spec.ResourceClaims) > 0 && pl.tracker.Nominations().Get(pod.UID) == nil {
			byNode[pod.Status.NominatedNodeName] = append(byNode[pod.Status.NominatedNodeName], pod)
		}
	}
	if len(byNode) == 0 {
		return
	}
	freeing, err := pl.claimsBeingFreed(sets.KeySet(byNode))
	if err != nil {
		logger.Error(err, "Find claims being freed to rebuild claim nominations")
		return
	}
	state, err := pl.tracker.AllocatedState(ctx)
	if err != nil {
		logger.Error(err, "Gather allocated devices to rebuild claim nominations")
		return
	}
	slices, err := pl.tracker.Slices()
	if err != nil {
		logger.Error(err, "List slices to rebuild claim nominations")
		return
	}
	base, err := allocator.New(ctx, pl.features, *state, pl.tracker.DeviceClasses(), slices, pl.allocatorOptions())
	if err != nil {
		logger.Error(err, "Allocator to rebuild claim nominations")
		return
	}
	for node, nominees := range byNode {
		// The claims being freed there are the nominees' victims'; with
		// none, the nominees hold what is free for them already until
		// their next cycle takes it.
		freed := freeing[node]
		nodeInfo, err := pl.fh.SnapshotSharedLister().NodeInfos().Get(node)
		if err != nil || nodeInfo.Node() == nil {
			continue
		}
		sort.Slice(nominees, func(i, j int) bool {
			pi, pj := corev1helpers.PodPriority(nominees[i]), corev1helpers.PodPriority(nominees[j])
			if pi != pj {
				return pi > pj
			}
			return nominees[i].CreationTimestamp.Before(&nominees[j].CreationTimestamp)
		})
		edits := allocator.Edits{Freed: core.NewAllocatedState(), Added: core.NewAllocatedState()}
		for _, claim := range freed {
			core.AddAllocation(&edits.Freed, claim.Status.Allocation, pl.fts.EnableDRAConsumableCapacity)
		}
		for _, n := range pl.tracker.Nominations().List() {
			for i := range n.Allocations {
				core.AddAllocation(&edits.Added, &n.Allocations[i], pl.fts.EnableDRAConsumableCapacity)
			}
		}
		var victims []*v1.Pod
		for _, claim := range freed {
			victims = append(victims, pl.consumerPods(claim)...)
		}
		for _, pod := range nominees {
			var pending []*resourceapi.ResourceClaim
			for _, claim := range pl.claimsOfPod(pod) {
				if claim.Status.Allocation == nil && pl.tracker.PendingAllocation(claim.UID) == nil {
					pending = append(pending, claim)
				}
			}
			if len(pending) == 0 {
				continue
			}
			allocCtx, cancel := pl.allocationContext(ctx)
			results, err := base.WithEdits(edits).Allocate(allocCtx, nodeInfo.Node(), pending)
			cancel()
			if allocationTimedOut(ctx, err) {
				// The pod preempts again if it must.
				logger.V(2).Info("Claim nomination not rebuilt: the pod's devices were not found within filterTimeout", "pod", klog.KObj(pod), "node", node, "filterTimeout", pl.filterTimeout)
				continue
			}
			if err != nil || len(results) != len(pending) {
				continue
			}
			pl.nominate(logger, pod, node, "", results, victims, freed)
			for i := range results {
				core.AddAllocation(&edits.Added, &results[i], pl.fts.EnableDRAConsumableCapacity)
			}
			logger.V(2).Info("Rebuilt claim nomination of a pod nominated before this scheduler led", "pod", klog.KObj(pod), "node", node)
		}
	}
}

// claimsBeingFreed returns, by node, the allocated claims on the nodes
// whose consumers are all pods that are gone or being deleted: the claim
// controller is about to deallocate or delete them, as after a preemption.
func (pl *Plugin) claimsBeingFreed(nodes sets.Set[string]) (map[string][]*resourceapi.ResourceClaim, error) {
	claims, err := pl.tracker.Claims()
	if err != nil {
		return nil, fmt.Errorf("list resource claims: %w", err)
	}
	freed := map[string][]*resourceapi.ResourceClaim{}
	for _, claim := range claims {
		allocation := claim.Status.Allocation
		if allocation == nil || len(claim.Status.ReservedFor) == 0 || allocation.NodeSelector == nil {
			continue
		}
		node, ok := singleNode(allocation.NodeSelector)
		if !ok || !nodes.Has(node) {
			continue
		}
		if _, live := pl.liveConsumer(claim); !live {
			freed[node] = append(freed[node], claim)
		}
	}
	return freed, nil
}

// consumerPods returns the pods the claim is reserved for that still
// exist.
func (pl *Plugin) consumerPods(claim *resourceapi.ResourceClaim) []*v1.Pod {
	pods := pl.fh.SharedInformerFactory().Core().V1().Pods().Lister().Pods(claim.Namespace)
	var out []*v1.Pod
	for _, consumer := range claim.Status.ReservedFor {
		if pod, err := pods.Get(consumer.Name); err == nil && pod.UID == consumer.UID {
			out = append(out, pod)
		}
	}
	return out
}
