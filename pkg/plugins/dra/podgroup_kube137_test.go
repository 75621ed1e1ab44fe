//go:build !kube1.35 && !kube1.36

package dra

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	schedulingapi "k8s.io/api/scheduling/v1beta1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/drasched/drasched/internal/builder"
)

// fakeGroupInfo is the framework's view of a pod group for
// PodGroupPostFilter.
type fakeGroupInfo struct {
	fwk.PodGroupInfo
	kind  fwk.EntityKeyType
	group *schedulingapi.PodGroup
	pods  []*v1.Pod
}

func (g fakeGroupInfo) GetUnscheduledPods() []*v1.Pod        { return g.pods }
func (g fakeGroupInfo) GetName() string                      { return "group" }
func (g fakeGroupInfo) GetNamespace() string                 { return "default" }
func (g fakeGroupInfo) GetType() fwk.EntityKeyType           { return g.kind }
func (g fakeGroupInfo) GetPodGroup() *schedulingapi.PodGroup { return g.group }

// TestPodGroupPostFilter: after a failed pod group cycle, an allocated
// claim of an unscheduled pod that could not be used and that no one holds
// is deallocated, as PostFilter does for a single pod. Composite pod
// groups, and (TopologyAwareWorkloadScheduling) groups with scheduling
// constraints, are left alone, as upstream leaves them.
func TestPodGroupPostFilter(t *testing.T) {
	stale := allocated(gpuClaim("shared"), "gpu-0")
	stale.ResourceVersion = "1"
	// Allocated on node-a; the pod can only go elsewhere.
	stale.Status.Allocation.NodeSelector.NodeSelectorTerms[0].MatchFields[0].Values = []string{"node-c"}

	run := func(t *testing.T, info func(pod *v1.Pod) fakeGroupInfo, topologyAware bool) (*pluginEnv, *fwk.Status) {
		env := newPluginEnv(t, nil, stale.DeepCopy(), gpuSlice(2), builder.MakeClass(gpuClass))
		env.plugin.fts.EnableTopologyAwareWorkloadScheduling = topologyAware
		pod := groupPod("pod")
		group := framework.NewCycleState()
		cs := framework.NewCycleState()
		cs.SetPodGroupSchedulingCycle(group)
		if _, status := env.plugin.PreFilter(env.ctx, cs, pod, nil); !status.IsSuccess() {
			t.Fatalf("PreFilter: %v", status)
		}
		nodeInfo := framework.NewNodeInfo()
		nodeInfo.SetNode(nodeA)
		if status := env.plugin.Filter(env.ctx, cs, pod, nodeInfo); status.IsSuccess() {
			t.Fatal("Filter accepted a node the claim is not available on")
		}
		env.client.ClearActions()
		_, status := env.plugin.PodGroupPostFilter(env.ctx, group, info(pod), nil)
		return env, status
	}

	t.Run("deallocate", func(t *testing.T) {
		env, status := run(t, func(pod *v1.Pod) fakeGroupInfo {
			return fakeGroupInfo{kind: fwk.PodGroupKeyType, group: &schedulingapi.PodGroup{}, pods: []*v1.Pod{pod}}
		}, false)
		if status.Code() != fwk.Unschedulable {
			t.Errorf("status %v, want Unschedulable", status)
		}
		if got := env.writes(); len(got) != 1 || got[0] != "update resourceclaims/status" {
			t.Errorf("writes %v, want the claim's deallocation", got)
		}
		if claim := env.apiClaim(t, "shared"); claim.Status.Allocation != nil {
			t.Errorf("claim still allocated: %v", claim.Status.Allocation)
		}
	})
	for name, tc := range map[string]struct {
		info          func(pod *v1.Pod) fakeGroupInfo
		topologyAware bool
	}{
		"composite": {info: func(pod *v1.Pod) fakeGroupInfo {
			return fakeGroupInfo{kind: fwk.CompositePodGroupKeyType, pods: []*v1.Pod{pod}}
		}},
		"scheduling constraints": {topologyAware: true, info: func(pod *v1.Pod) fakeGroupInfo {
			group := &schedulingapi.PodGroup{Spec: schedulingapi.PodGroupSpec{SchedulingConstraints: &schedulingapi.PodGroupSchedulingConstraints{}}}
			return fakeGroupInfo{kind: fwk.PodGroupKeyType, group: group, pods: []*v1.Pod{pod}}
		}},
	} {
		t.Run(name, func(t *testing.T) {
			env, status := run(t, tc.info, tc.topologyAware)
			if status.Code() != fwk.Unschedulable {
				t.Errorf("status %v, want Unschedulable", status)
			}
			if got := env.writes(); len(got) != 0 {
				t.Errorf("writes %v, want none", got)
			}
		})
	}
}
