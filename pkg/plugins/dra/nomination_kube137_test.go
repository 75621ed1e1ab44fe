//go:build !kube1.35 && !kube1.36

package dra

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// Pod-group preemption's claim nominations are 1.37's
// (drapreemption_kube137.go).

// assignment is a pod of a pod group that pod-group preemption placed.
type assignment struct {
	fwk.ProposedAssignment
	pod   *v1.Pod
	state fwk.CycleState
}

func (a assignment) GetPod() *v1.Pod               { return a.pod }
func (a assignment) GetCycleState() fwk.CycleState { return a.state }

// TestNominateGroupBounded: PodGroupPostFilter's claim nominations for the
// pods of a group are searched within filterTimeout as Filter's: a pod
// whose devices are not found in time gets no nomination, and the group's
// cycle goes on.
func TestNominateGroupBounded(t *testing.T) {
	for name, tc := range boundedNominationCases {
		t.Run(name, func(t *testing.T) {
			pod := prioritized("member", 100)
			env := slowNominationEnv(t, pod, tc.selector)
			state := framework.NewCycleState()
			if _, status := env.plugin.PreFilter(env.ctx, state, pod, nil); !status.IsSuccess() {
				t.Fatalf("PreFilter: %v", status)
			}
			infos := map[types.NamespacedName]*fwk.NominatingInfo{{Namespace: pod.Namespace, Name: pod.Name}: {NominatedNodeName: "node-a"}}
			env.returns("nominateGroup", func(ctx context.Context) {
				env.plugin.nominateGroup(ctx, "default/group", []fwk.ProposedAssignment{assignment{pod: pod, state: state}}, infos)
			})
			if got := env.tracker.Nominations().Get(pod.UID) != nil; got != tc.want {
				t.Errorf("nomination: %v, want %v", got, tc.want)
			}
		})
	}
}
