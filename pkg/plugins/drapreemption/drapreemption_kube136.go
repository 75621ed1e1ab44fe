//go:build kube1.35 || kube1.36

package drapreemption

import (
	"context"

	v1 "k8s.io/api/core/v1"
	policy "k8s.io/api/policy/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	fwk "k8s.io/kube-scheduler/framework"
)

// SelectVictimsOnNode is DefaultPreemption's (1.36's signature), with the
// node named in the dry run's state (selectVictims).
func (h *preemptionHooks) SelectVictimsOnNode(ctx context.Context, cs fwk.CycleState, preemptor *v1.Pod, nodeInfo fwk.NodeInfo, pdbs []*policy.PodDisruptionBudget) ([]*v1.Pod, int, *fwk.Status) {
	return h.selectVictims(cs, nodeInfo.Node().Name, func() ([]*v1.Pod, int, *fwk.Status) {
		return h.DefaultPreemption.SelectVictimsOnNode(ctx, cs, preemptor, nodeInfo, pdbs)
	})
}

// Less is the queue sort's order (less) for the queue's pods of 1.35 and
// 1.36, with PrioritySort's priorities (corev1helpers.PodPriority).
func (q *QueueSort) Less(p1, p2 fwk.QueuedPodInfo) bool {
	pod1, pod2 := p1.GetPodInfo().GetPod(), p2.GetPodInfo().GetPod()
	if less, ok := byNomination(corev1helpers.PodPriority(pod1) == corev1helpers.PodPriority(pod2), nominated(pod1), nominated(pod2)); ok {
		return less
	}
	return q.prioritySort.Less(p1, p2)
}
