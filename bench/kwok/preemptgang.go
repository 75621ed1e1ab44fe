package main

import (
	"context"
	"fmt"
	"time"
)

// The preempt_gang case is preempt with gangs as the preemptors: the same
// low-priority fill takes all H100 GPUs, then high-priority PodGroups with
// gang policy (minCount = the group's size), the PodGroup and its pods of
// the high PriorityClass, about preempt's share of the GPUs, are created at
// once. A group fits only if low-priority pods are evicted, and only as a
// whole: pod-group preemption (PodGroupPostFilter) must free the GPUs of
// all its pods in one go. Like gang, it needs the GenericWorkload feature
// gate and the scheduling.k8s.io/v1beta1 API, so hack/bench-kwok.sh runs it
// on the gang case's cluster.
const casePreemptGang = "preempt_gang"

// preemptGangShape is the shape of preempt_gang's groups: 2 pods × 4 H100
// GPUs, which fit on one node or on two.
var preemptGangShape = gangShape{pods: 2, gpus: 4}

// preemptGangGroups returns high-priority groups of preemptGangShape that
// take share of gpus, rounded down to whole groups, and at least one group
// where the GPUs hold one.
func preemptGangGroups(gpus int, share float64) []gangGroup {
	size := gangGroupGPUs(preemptGangShape)
	budget := int(float64(gpus) * share)
	if gpus >= size {
		budget = max(budget, size)
	}
	var groups []gangGroup
	for range min(budget, gpus) / size {
		groups = append(groups, newGangGroup(fmt.Sprintf("preempt-gang-%04d", len(groups)), preemptGangShape, highPriorityClass))
	}
	return groups
}

// measurePreemptGang fills all H100 GPUs with low-priority pods, as
// measurePreempt does, then creates the high-priority groups at once, each
// PodGroup just before its pods, and measures creation → bound of their
// pods and of each group (PodGroup creation → bind of its last pod). It
// waits at most PreemptWait for them: groups left pending are the result
// (upstream's DynamicResources cannot preempt for devices), not an error;
// then, if not all were bound, until binds have settled. It counts the
// low-priority pods evicted and their GPUs that no bound pod got, and the
// groups bound whole and partly; a partly bound group is an error, as in
// the gang case.
func (r *runner) measurePreemptGang(ctx context.Context, c *caseResult, capa capacity) {
	low, ok := r.fillLowPriority(ctx, c, capa)
	if !ok {
		return
	}
	groups := preemptGangGroups(capa.h100, r.cfg.PreemptShare)
	pods := gangPods(groups)
	names := podNames(pods)
	c.Pods, c.Groups = len(pods), len(groups)
	start := time.Now()
	if err := r.createGroups(ctx, c.Name, groups); err != nil {
		c.addErrors(err)
	}
	r.waitPreemptors(ctx, c, names, start)
	if c.HighPriorityBound < len(names) {
		r.settle(ctx, names)
		r.fill(c, names, start)
		c.HighPriorityBound = len(c.Latencies)
	}
	c.GroupLatencies = r.tracker.measureGroups(groups).latencies
	bound, ok := r.countPreempted(ctx, c, low, pods)
	if !ok {
		return
	}
	c.PartialGroups, c.GroupsBound = partialGroups(groups, bound)
	if c.PartialGroups > 0 {
		c.addErrors(fmt.Errorf("%d of %d groups partly bound", c.PartialGroups, len(groups)))
	}
}
