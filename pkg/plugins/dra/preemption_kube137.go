//go:build !kube1.35 && !kube1.36

package dra

// Pod-group preemption with claim nomination: StructuredDRAPreemption's
// PodGroupPostFilter (pkg/plugins/drapreemption) calls these. Before 1.37
// the framework has no PodGroupPostFilter for plugins, and pod-group
// preemption is DefaultPreemption's alone (preemption_kube136.go).

import (
	"context"
	"maps"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drasched/drasched/pkg/allocator"
	"github.com/drasched/drasched/pkg/core"
)

// groupNominator is what pod-group preemption calls.
type groupNominator interface {
	// GroupNominationWait is NominationWait for the pods of a group: the
	// nominations to keep and what they wait for; nil if the group does
	// not wait.
	GroupNominationWait(ctx context.Context, pcs fwk.PodGroupCycleState, group fwk.PodGroupInfo) (map[types.NamespacedName]*fwk.NominatingInfo, string)
	// NominateGroup turns pod-group preemption's nominations of the
	// group's pods into claim nominations, held as one.
	NominateGroup(ctx context.Context, group string, assignments []fwk.ProposedAssignment, infos map[types.NamespacedName]*fwk.NominatingInfo)
}

// GroupNominationWait implements Nominator: the group waits while one of
// its pods waits (nominationWait) and none has ended.
func (nm nominator) GroupNominationWait(ctx context.Context, pcs fwk.PodGroupCycleState, group fwk.PodGroupInfo) (map[types.NamespacedName]*fwk.NominatingInfo, string) {
	pl := nm.pl
	g, _ := groupStateIn(pcs, false)
	infos := map[types.NamespacedName]*fwk.NominatingInfo{}
	var messages []string
	for _, pod := range group.GetUnscheduledPods() {
		key := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
		if pl.tracker.Nominations().Get(pod.UID) == nil {
			continue
		}
		var base *structured.AllocatedState
		if g != nil && g.pods[key] != nil {
			base = g.pods[key].base
		}
		n, msg := pl.nominationWait(ctx, base, pod)
		if n == nil {
			// Ended, and with it the group's: the group preempts again.
			return nil, ""
		}
		infos[key] = &fwk.NominatingInfo{NominatingMode: fwk.ModeOverride, NominatedNodeName: n.Node}
		messages = append(messages, pod.Name+": "+msg)
	}
	if len(infos) == 0 {
		return nil, ""
	}
	slices.Sort(messages)
	return infos, strings.Join(messages, "; ")
}

// NominateGroup implements Nominator.
func (nm nominator) NominateGroup(ctx context.Context, group string, assignments []fwk.ProposedAssignment, infos map[types.NamespacedName]*fwk.NominatingInfo) {
	pl := nm.pl
	pl.nominateGroup(ctx, group, assignments, infos)
}

// nominateGroup records the claim nominations of the pods of a PodGroup
// that pod-group preemption nominated, held as one. On its node, each pod's
// claims get, in the group's order, what fits once the victims' claims are
// freed, next to what the pods before it get and what other preemptors
// hold: the allocations that the simulation found for the pods one by one
// while it spared victims need not fit together.
func (pl *Plugin) nominateGroup(ctx context.Context, group string, assignments []fwk.ProposedAssignment, infos map[types.NamespacedName]*fwk.NominatingInfo) {
	logger := klog.FromContext(ctx)
	var victims []*v1.Pod
	var freed []*resourceapi.ResourceClaim
	var edits allocator.Edits
	for i, a := range assignments {
		pod := a.GetPod()
		info := infos[types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}]
		s, err := getState(a.GetCycleState())
		if info == nil || info.NominatedNodeName == "" || err != nil || s.allocator == nil || len(s.pending) == 0 {
			continue
		}
		if victims == nil {
			// The simulation removed the same victims in the state of
			// every pod of the group.
			victims = slices.Collect(maps.Values(s.dryRun.removedPods()))
			freed = pl.freedClaims(s.dryRun)
			edits = pl.edits(s)
			edits.Added = core.NewAllocatedState()
			others, _ := pl.nominatedState(logger, pod)
			core.AddState(&edits.Added, others)
		}
		nodeInfo, err := pl.fh.SnapshotSharedLister().NodeInfos().Get(info.NominatedNodeName)
		if err != nil || nodeInfo.Node() == nil {
			continue
		}
		results, err := pl.allocateForGroup(ctx, s, edits, nodeInfo.Node())
		switch {
		case allocationTimedOut(ctx, err):
			logger.V(2).Info("No claim nomination for a pod of the group: its devices were not found within filterTimeout", "pod", klog.KObj(pod), "node", info.NominatedNodeName, "filterTimeout", pl.filterTimeout)
			continue
		case err != nil:
			logger.V(4).Info("No claim nomination for a pod of the group", "pod", klog.KObj(pod), "node", info.NominatedNodeName, "err", err)
			continue
		case len(results) != len(s.pending):
			logger.V(4).Info("No claim nomination for a pod of the group: its claims do not fit next to the others'", "pod", klog.KObj(pod), "node", info.NominatedNodeName, "index", i)
			continue
		}
		pl.nominate(logger, pod, info.NominatedNodeName, group, results, victims, freed)
		for j := range results {
			core.AddAllocation(&edits.Added, &results[j], pl.fts.EnableDRAConsumableCapacity)
		}
	}
}

// allocateForGroup allocates the pod's pending claims on the node next to
// edits, within filterTimeout as Filter does: PodGroupPostFilter runs in
// the group's scheduling cycle.
func (pl *Plugin) allocateForGroup(ctx context.Context, s *stateData, edits allocator.Edits, node *v1.Node) ([]resourceapi.AllocationResult, error) {
	ctx, cancel := pl.allocationContext(ctx)
	defer cancel()
	a, err := pl.liveAllocator(ctx, s, edits)
	if err != nil {
		return nil, err
	}
	return a.Allocate(ctx, node, s.pending)
}
