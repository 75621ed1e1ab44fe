//go:build kube1.35 || kube1.36

package drapreemption

import (
	"context"

	v1 "k8s.io/api/core/v1"
	policy "k8s.io/api/policy/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// SelectVictimsOnNode is DefaultPreemption's (1.36's signature), with the
// node named in the dry run's state (selectVictims).
func (h *preemptionHooks) SelectVictimsOnNode(ctx context.Context, cs fwk.CycleState, preemptor *v1.Pod, nodeInfo fwk.NodeInfo, pdbs []*policy.PodDisruptionBudget) ([]*v1.Pod, int, *fwk.Status) {
	return h.selectVictims(cs, nodeInfo.Node().Name, func() ([]*v1.Pod, int, *fwk.Status) {
		return h.DefaultPreemption.SelectVictimsOnNode(ctx, cs, preemptor, nodeInfo, pdbs)
	})
}
