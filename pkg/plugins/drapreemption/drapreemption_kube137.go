//go:build !kube1.35 && !kube1.36

package drapreemption

// Pod-group preemption with claim nomination, and the evaluator hook in
// 1.37's signature. In 1.36, PodGroupPostFilter is DefaultPreemption's
// alone (with another signature, promoted from the embedded plugin as it
// is): pod-group preemption there frees no devices that StructuredDRA would
// see as free in its simulation, as upstream 1.36's does not.

import (
	"context"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	policy "k8s.io/api/policy/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"

	"github.com/drasched/drasched/pkg/plugins/dra"
)

var _ fwk.PodGroupPostFilterPlugin = &Preemption{}

// PodGroupPostFilter runs pod-group preemption with a simulation that sees
// the devices of the victims it removes as free, and turns its nominations
// into claim nominations held as one; a group whose victims' claims are
// still being freed waits for them instead.
func (p *Preemption) PodGroupPostFilter(ctx context.Context, state fwk.PodGroupCycleState, group fwk.PodGroupInfo, pgSchedulingFunc fwk.PodGroupSchedulingFunc) (*fwk.PodGroupPostFilterResult, *fwk.Status) {
	pl := dra.NominatorOf(p.fh)
	if pl == nil {
		return p.DefaultPreemption.PodGroupPostFilter(ctx, state, group, pgSchedulingFunc)
	}
	if infos, msg := pl.GroupNominationWait(ctx, state, group); infos != nil {
		// As upstream answers for a preemption still under way: the
		// pods keep their nominations and come back when it is done.
		return &fwk.PodGroupPostFilterResult{NominatingInfos: infos}, fwk.NewStatus(fwk.Success, "pod group preemption: "+msg)
	}
	group = withoutStuckNominations(p.fh, pl.NominationMargin(), group)
	// The group's scheduling algorithm in a simulation of its own for
	// each run; the assignments are the last run's, the one that
	// preempted.
	var assignments []fwk.ProposedAssignment
	newSimulation := func() fwk.PodGroupSchedulingFunc {
		sim := pl.NewSimulation()
		return func(ctx context.Context) (*fwk.PodGroupAssignments, *fwk.Status) {
			result, status := pgSchedulingFunc(sim.Context(ctx))
			if result != nil {
				assignments = result.ProposedAssignments
			}
			return result, status
		}
	}
	// On the nodes the group takes (narrow_kube137.go), or else on the
	// whole cluster as upstream.
	result, status, narrowed := p.narrowedPodGroupPostFilter(ctx, group, newSimulation)
	if !narrowed {
		result, status = p.DefaultPreemption.PodGroupPostFilter(ctx, state, group, newSimulation())
	}
	if !status.IsSuccess() || result == nil {
		return result, status
	}
	key := ""
	if pg := group.GetPodGroup(); pg != nil {
		key = pg.Namespace + "/" + pg.Name
	}
	pl.NominateGroup(ctx, key, assignments, result.NominatingInfos)
	return result, status
}

// SelectVictimsOnNode is DefaultPreemption's, with the node named in the
// dry run's state (selectVictims). Pods Kueue manages are no possible
// victims: they stay on the node in the dry run, and other pods may be
// chosen in their place (kueueRule).
func (h *preemptionHooks) SelectVictimsOnNode(ctx context.Context, cs fwk.CycleState, preemptor *v1.Pod, nodeInfo fwk.NodeInfo, allPossibleVictims []*preemption.DomainVictim, pdbs []*policy.PodDisruptionBudget) ([]*v1.Pod, int, *fwk.Status) {
	kueues := func(victim *preemption.DomainVictim) bool {
		return slices.ContainsFunc(victim.Pods(), func(pi fwk.PodInfo) bool { return h.kueue.managed(pi.GetPod()) })
	}
	// Called per candidate node: copy the evaluator's list only when a
	// victim has to go.
	if slices.ContainsFunc(allPossibleVictims, kueues) {
		allPossibleVictims = slices.DeleteFunc(slices.Clone(allPossibleVictims), kueues)
	}
	return h.selectVictims(cs, nodeInfo.Node().Name, func() ([]*v1.Pod, int, *fwk.Status) {
		return h.DefaultPreemption.SelectVictimsOnNode(ctx, cs, preemptor, nodeInfo, allPossibleVictims, pdbs)
	})
}

// withoutStuckNominations returns the group with its pods' nominations
// cleared where every pod preempted on the nominated node is stuck: upstream's
// pod-group preemption does not preempt while such a pod terminates there,
// without a bound (its isOngoingPreemption). A group none of whose pods is
// affected is returned as it is.
func withoutStuckNominations(fh fwk.Handle, margin time.Duration, group fwk.PodGroupInfo) fwk.PodGroupInfo {
	pods := group.GetUnscheduledPods()
	var out []*v1.Pod
	now := time.Now()
	for i, pod := range pods {
		node := pod.Status.NominatedNodeName
		if node == "" {
			continue
		}
		if until := preemptedUntil(fh, margin, node); until.IsZero() || now.Before(until) {
			continue
		}
		if out == nil {
			out = slices.Clone(pods)
		}
		cleared := pod.DeepCopy()
		cleared.Status.NominatedNodeName = ""
		out[i] = cleared
	}
	if out == nil {
		return group
	}
	return groupWithPods{PodGroupInfo: group, pods: out}
}

// groupWithPods is a pod group whose unscheduled pods are the given ones.
type groupWithPods struct {
	fwk.PodGroupInfo
	pods []*v1.Pod
}

func (g groupWithPods) GetUnscheduledPods() []*v1.Pod { return g.pods }

// Less is the queue sort's order (less) for 1.37's queue entries: a pod,
// or a pod group.
func (q *QueueSort) Less(e1, e2 fwk.QueuedEntityInfo) bool {
	if less, ok := byNomination(e1.GetPriority() == e2.GetPriority(), entityNominated(e1), entityNominated(e2)); ok {
		return less
	}
	return q.prioritySort.Less(e1, e2)
}

// entityNominated: the entry is a pod nominated to a node, or a pod group
// whose queued pods all are.
func entityNominated(e fwk.QueuedEntityInfo) bool {
	switch e := e.(type) {
	case *framework.QueuedPodInfo:
		return nominated(e.Pod)
	case *framework.QueuedPodGroupInfo:
		some := false
		for _, pods := range e.QueuedPodInfos {
			for _, p := range pods {
				if !nominated(p.Pod) {
					return false
				}
				some = true
			}
		}
		return some
	}
	return false
}
