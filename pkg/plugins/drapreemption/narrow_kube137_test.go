//go:build !kube1.35 && !kube1.36

package drapreemption

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"
)

// staticNodes lists fixed NodeInfos.
type staticNodes struct {
	fwk.NodeInfoLister
	nodes []fwk.NodeInfo
}

func (s staticNodes) List() ([]fwk.NodeInfo, error) { return s.nodes, nil }

// The narrowed view lists the nodes the group takes whole, and the others
// without the pods it could preempt; each node is still the node, with its
// pods' requests, and the snapshot's own nodes are not changed.
func TestNarrowedNodes(t *testing.T) {
	pod := func(name string, priority int32) *v1.Pod {
		return &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
			Spec:       v1.PodSpec{Priority: ptr.To(priority)},
		}
	}
	nodeInfo := func(name string, pods ...*v1.Pod) fwk.NodeInfo {
		info := framework.NewNodeInfo(pods...)
		info.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		return info
	}
	taken := nodeInfo("taken", pod("t-low", 1), pod("t-high", 100))
	other := nodeInfo("other", pod("o-low", 1), pod("o-high", 100), pod("o-low2", 2))
	high := nodeInfo("high", pod("h-high", 100))
	nodes := narrowedNodes{
		NodeInfoLister: staticNodes{nodes: []fwk.NodeInfo{taken, other, high}},
		keep:           sets.New("taken"),
		hide:           func(p *v1.Pod) bool { return *p.Spec.Priority < 50 },
	}
	list, err := nodes.List()
	if err != nil {
		t.Fatal(err)
	}
	names := func(info fwk.NodeInfo) []string {
		var out []string
		for _, pi := range info.GetPods() {
			out = append(out, pi.GetPod().Name)
		}
		return out
	}
	want := map[string][]string{"taken": {"t-low", "t-high"}, "other": {"o-high"}, "high": {"h-high"}}
	for _, info := range list {
		if got := names(info); !slices.Equal(got, want[info.Node().Name]) {
			t.Errorf("node %s lists pods %v, want %v", info.Node().Name, got, want[info.Node().Name])
		}
	}
	if list[0] != taken || list[2] != high {
		t.Error("a node the group takes, or one without candidate victims, is not the snapshot's own")
	}
	if got := list[1].GetGeneration(); got != other.GetGeneration() {
		t.Errorf("narrowed node's generation %d, want the node's %d", got, other.GetGeneration())
	}
	if got := names(other); len(got) != 3 {
		t.Errorf("the snapshot's node lists %v after narrowing, want its three pods", got)
	}
}
