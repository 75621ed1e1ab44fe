//go:build !kube1.35 && !kube1.36

package drapreemption

// Pod-group preemption on the nodes the group takes.
//
// Upstream's pod-group evaluator takes every pod of lower priority in the
// cluster as a candidate victim: it removes them all from the snapshot,
// places the group (the group's scheduling algorithm), then adds them back
// one at a time, most important first, and preempts those without which
// the group no longer fits. Each add-back filters and reserves every pod of
// the group again, so a group's preemption costs the number of
// lower-priority pods in the cluster: 4,800 on 1,000 nodes in
// preempt_gang, where it took half of the scheduler's CPU
// (docs/design/2026-12-07-preemption-timeline.md).
//
// A victim on a node where the group places none of its pods never stops
// the group from fitting, where every Filter of the profile looks at the
// node's own pods and devices: the evaluator adds it back and preempts
// nothing there. So the plugin runs the evaluator in two steps:
//
//  1. place (placeGroup): with the candidate victims of 100 nodes removed
//     from the snapshot, those whose candidates matter least, the group's
//     scheduling algorithm places the group; if it does not fit there,
//     with those of all nodes removed, as upstream removes them;
//  2. preempt: upstream's evaluator (its victim order, PodDisruptionBudgets,
//     actuation and all) on a view of the snapshot in which the nodes the
//     group does not take list no pod that it could preempt
//     (narrowedHandle). It removes and adds back only the victims on the
//     group's nodes.
//
// Where a victim elsewhere can matter (a pod of the group with inter-pod
// affinity or hard topology spread, pods in the cluster with required
// anti-affinity), and where the second step finds no placement, the
// plugin runs upstream's evaluator on the whole cluster instead. What the
// second step preempts is upstream's choice on the nodes it took: a victim
// is preempted only if the group does not fit with it added back.

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"

	"github.com/drasched/drasched/internal/minor/schedminor"
)

// narrowedPodGroupPostFilter runs pod-group preemption on the nodes the
// group takes. ok false: the caller runs upstream's on the whole cluster;
// nothing was preempted. newSimulation gives the group's scheduling
// algorithm in a fresh simulation, one per step.
func (p *Preemption) narrowedPodGroupPostFilter(ctx context.Context, group fwk.PodGroupInfo, newSimulation func() fwk.PodGroupSchedulingFunc) (result *fwk.PodGroupPostFilterResult, status *fwk.Status, ok bool) {
	logger := klog.FromContext(ctx)
	pg := group.GetPodGroup()
	pods := group.GetUnscheduledPods()
	if pg == nil || group.GetCompositePodGroup() != nil || len(pods) == 0 || !p.narrowable(pg, pods) {
		return nil, nil, false
	}
	defer func() {
		if ok {
			metrics.WorkloadPreemptionAttempts.WithLabelValues(status.Code().String()).Inc()
		}
	}()
	priority := schedutil.PodGroupPriority(pg)
	victim := func(pod *v1.Pod) bool { return schedminor.PreemptionPriority(p.fh, p.fts, pod) < priority }

	nodes, status := p.placeGroup(ctx, victim, newSimulation)
	if status != nil {
		// As upstream answers when the group does not fit with all
		// lower-priority pods gone, or there are none.
		return nil, status, true
	}
	logger.V(4).Info("Pod group preemption on the nodes the group takes", "podGroup", group.GetKey(), "nodes", sets.List(nodes))

	mutable := p.fh.MutableSnapshotSharedLister()
	if err := mutable.StartMutations(); err != nil {
		return nil, fwk.AsStatus(fmt.Errorf("pod group preemption: failed to start mutations: %w", err)), true
	}
	defer func() {
		if err := mutable.EndMutations(); err != nil {
			result, status = nil, fwk.AsStatus(fmt.Errorf("pod group preemption: failed to end mutations: %w", err))
		}
	}()
	narrowed := &narrowedHandle{Handle: p.fh, lister: &narrowedLister{
		MutableSnapshotSharedLister: mutable,
		nodes:                       narrowedNodes{NodeInfoLister: mutable.NodeInfos(), keep: nodes, hide: victim},
	}}
	evaluator := preemption.NewPodGroupEvaluator(narrowed, p.DefaultPreemption.Executor, p.fts)
	result, status = evaluator.Preempt(ctx, group, newSimulation())
	if !status.IsSuccess() {
		logger.V(4).Info("Pod group preemption found no placement on the nodes the group takes; trying the whole cluster", "podGroup", group.GetKey(), "status", status)
		return nil, nil, false
	}
	return result, status, true
}

// narrowable: no pod of the group may keep from fitting because of a pod
// on another node, the group may preempt, and none of its pods is
// nominated (upstream's evaluator then checks whether a preemption for it
// is still under way on the nominated nodes, with their pods).
func (p *Preemption) narrowable(pg *schedulingv1beta1.PodGroup, pods []*v1.Pod) bool {
	if policy := pg.Spec.PreemptionPolicy; policy != nil && *policy == schedulingv1beta1.PreemptNever {
		return false
	}
	for _, pod := range pods {
		if pod.Status.NominatedNodeName != "" {
			return false
		}
		if policy := pod.Spec.PreemptionPolicy; policy != nil && *policy == v1.PreemptNever {
			return false
		}
		if a := pod.Spec.Affinity; a != nil && (a.PodAffinity != nil || a.PodAntiAffinity != nil) {
			return false
		}
		for _, c := range pod.Spec.TopologySpreadConstraints {
			if c.WhenUnsatisfiable == v1.DoNotSchedule {
				return false
			}
		}
	}
	withAntiAffinity, err := p.fh.SnapshotSharedLister().NodeInfos().HavePodsWithRequiredAntiAffinityList()
	return err == nil && len(withAntiAffinity) == 0
}

// placeSample is how many nodes with candidate victims the first
// placement tries, as many as DefaultPreemption dry-runs at least for a
// pod (its minCandidateNodesAbsolute).
const placeSample = 100

// candidateNode is a node with candidate victims.
type candidateNode struct {
	victims []*v1.Pod
	// top is the highest priority among the victims.
	top int32
}

// placeGroup returns the nodes that the group's scheduling algorithm
// places the group on with the candidate victims removed, or the status
// of a group that does not fit even so. It tries the placeSample nodes
// whose candidates are the least important first (the lowest highest
// priority, then the fewest, as DefaultPreemption ranks its candidates;
// ties from a random node on, as it samples): a placement there costs the
// victims of those nodes, not of the cluster. Then, if the group does not
// fit there, all nodes with candidates, as upstream's evaluator.
func (p *Preemption) placeGroup(ctx context.Context, victim func(*v1.Pod) bool, newSimulation func() fwk.PodGroupSchedulingFunc) (sets.Set[string], *fwk.Status) {
	all, err := p.fh.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	var candidates []candidateNode
	for _, nodeInfo := range all {
		var c candidateNode
		for _, pi := range nodeInfo.GetPods() {
			if pod := pi.GetPod(); victim(pod) {
				if pr := schedminor.PreemptionPriority(p.fh, p.fts, pod); len(c.victims) == 0 || pr > c.top {
					c.top = pr
				}
				c.victims = append(c.victims, pod)
			}
		}
		if len(c.victims) > 0 {
			candidates = append(candidates, c)
		}
	}
	if len(candidates) == 0 {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "pod group preemption: No preemption victims found for incoming preemptor")
	}
	if len(candidates) > placeSample {
		offset := rand.IntN(len(candidates))
		candidates = append(candidates[offset:], candidates[:offset]...)
		slices.SortStableFunc(candidates, func(a, b candidateNode) int {
			return cmp.Or(cmp.Compare(a.top, b.top), cmp.Compare(len(a.victims), len(b.victims)))
		})
		if nodes, status := p.placeOn(ctx, candidates[:placeSample], newSimulation()); status == nil {
			return nodes, nil
		}
	}
	return p.placeOn(ctx, candidates, newSimulation())
}

// placeOn places the group with the victims of the candidate nodes
// removed from the snapshot.
func (p *Preemption) placeOn(ctx context.Context, candidates []candidateNode, schedule fwk.PodGroupSchedulingFunc) (sets.Set[string], *fwk.Status) {
	logger := klog.FromContext(ctx)
	mutable := p.fh.MutableSnapshotSharedLister()
	if err := mutable.StartMutations(); err != nil {
		return nil, fwk.AsStatus(err)
	}
	// EndMutations puts the removed pods back.
	defer func() {
		if err := mutable.EndMutations(); err != nil {
			logger.Error(err, "Ending the snapshot's mutations")
		}
	}()
	for _, c := range candidates {
		for _, pod := range c.victims {
			if err := mutable.RemovePod(logger, pod, pod.Spec.NodeName); err != nil {
				return nil, fwk.AsStatus(err)
			}
		}
	}
	assignments, status := schedule(ctx)
	if !status.IsSuccess() {
		return nil, fwk.NewStatus(status.Code(), "pod group preemption: "+status.Message())
	}
	nodes := sets.New[string]()
	for _, assignment := range assignments.ProposedAssignments {
		if node := assignment.GetNodeName(); node != "" {
			nodes.Insert(node)
		}
	}
	return nodes, nil
}

// narrowedHandle is the scheduler's handle with a snapshot in which the
// nodes outside a set list no candidate victim: upstream's pod-group
// evaluator takes its candidates from the pods of the nodes it lists.
type narrowedHandle struct {
	fwk.Handle
	lister *narrowedLister
}

func (h *narrowedHandle) MutableSnapshotSharedLister() fwk.MutableSnapshotSharedLister {
	return h.lister
}

type narrowedLister struct {
	fwk.MutableSnapshotSharedLister
	nodes narrowedNodes
}

func (l *narrowedLister) NodeInfos() fwk.NodeInfoLister { return l.nodes }

// narrowedNodes lists the nodes outside keep without the pods that hide
// says could be victims. Get and the other lists are the snapshot's.
type narrowedNodes struct {
	fwk.NodeInfoLister
	keep sets.Set[string]
	hide func(*v1.Pod) bool
}

func (n narrowedNodes) List() ([]fwk.NodeInfo, error) {
	all, err := n.NodeInfoLister.List()
	if err != nil {
		return nil, err
	}
	out := make([]fwk.NodeInfo, len(all))
	for i, nodeInfo := range all {
		out[i] = nodeInfo
		if nodeInfo.Node() == nil || n.keep.Has(nodeInfo.Node().Name) {
			continue
		}
		var pods []fwk.PodInfo
		hidden := false
		for _, pi := range nodeInfo.GetPods() {
			if n.hide(pi.GetPod()) {
				hidden = true
				continue
			}
			pods = append(pods, pi)
		}
		if hidden {
			out[i] = withoutVictims{NodeInfo: nodeInfo, pods: pods}
		}
	}
	return out, nil
}

// withoutVictims is a node whose pods list leaves out the candidate
// victims; everything else is the node's. The evaluator reads the pods to
// find candidates; it also filters a pod of the group on its node again
// after each add-back, and a pod of the group placed on such a node (one
// with room for it as it is) was placed there with all its pods, none of
// which the evaluator removes or adds back: a Filter that reads the pods
// (volume conflicts) finds fewer of them, and its answer stays a fit.
type withoutVictims struct {
	fwk.NodeInfo
	pods []fwk.PodInfo
}

func (w withoutVictims) GetPods() []fwk.PodInfo { return w.pods }
