//go:build !kube1.35 && !kube1.36

package drapreemption

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"

	draschedv1 "github.com/drasched/drasched/apis/config/v1"
)

// group is a pod group with unscheduled pods only.
type group struct {
	fwk.PodGroupInfo
	pods []*v1.Pod
}

func (g group) GetUnscheduledPods() []*v1.Pod { return g.pods }

// Pod-group preemption gets the group's pods without the nominations to
// nodes where all the pods they preempted are stuck, and with the others.
func TestWithoutStuckNominations(t *testing.T) {
	margin := draschedv1.DefaultNominationMargin
	fh := newHandle([]*v1.Pod{
		terminating("stuck", "node-a", 2*margin, 0),
		terminating("going", "node-b", margin/2, 0),
	}, []*v1.Node{node("node-a"), node("node-b"), node("node-c")})
	nominated := func(name, node string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name)}, Status: v1.PodStatus{NominatedNodeName: node}}
	}
	pods := []*v1.Pod{nominated("a", "node-a"), nominated("b", "node-b"), nominated("c", "node-c"), nominated("d", "")}
	in := group{pods: pods}
	out := withoutStuckNominations(fh, margin, in).GetUnscheduledPods()
	want := map[string]string{"a": "", "b": "node-b", "c": "node-c", "d": ""}
	for _, pod := range out {
		if pod.Status.NominatedNodeName != want[pod.Name] {
			t.Errorf("pod %s nominated to %q, want %q", pod.Name, pod.Status.NominatedNodeName, want[pod.Name])
		}
	}
	if pods[0].Status.NominatedNodeName != "node-a" {
		t.Error("the group's own pod was changed")
	}
	if got := withoutStuckNominations(fh, margin, group{pods: pods[1:]}); got.(group).pods[0] != pods[1] {
		t.Error("a group without stuck nominations was copied")
	}
}
