package drapreemption

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
)

// QueueSortName is the name in profiles of the queue sort that takes
// PrioritySort's place.
const QueueSortName = "StructuredDRAQueueSort"

// QueueSort is upstream's PrioritySort (higher priority first, then the
// earlier time in the queue) with one change: of two pods of the same
// priority, one nominated to a node (status.nominatedNodeName) comes first.
//
// Why: a pod nominated after preempting is in the active queue again only
// once an event says its victims' devices may be free (or a bound on its
// wait has passed), and those devices are held for it alone (claim
// nomination). PrioritySort orders it by the time it last failed, behind
// every pod of its priority that arrived before that, for example every
// other preemptor created with it: with 267 such pods on 1,000 nodes each
// nominee waited for all of their preemptions (25 s) before its own binding
// cycle, with its devices free and held idle the whole time
// (docs/design/2026-12-07-preemption-timeline.md). Nominees first binds
// each one as soon as its devices are free.
//
// A pod group (Kubernetes 1.37, where a group is one entry of the queue)
// counts as nominated when all its queued pods are: pod-group preemption
// nominates every pod of the group, and a group that waits for its victims
// past its claim nominations' bound would preempt again.
//
// Pods of higher priority still come first: the order changes only among
// entries of the same priority, and a nominee enters the active queue only
// as often as PrioritySort would let it (events and backoff are the
// queue's, unchanged). The key is the pods' status, so it changes only
// through a pod update, which the queue re-sorts (a group member's update
// re-sorts its group).
type QueueSort struct{}

var _ fwk.QueueSortPlugin = &QueueSort{}

// NewQueueSort builds the queue sort; it has no args.
func NewQueueSort(_ context.Context, _ runtime.Object, _ fwk.Handle) (fwk.Plugin, error) {
	return &QueueSort{}, nil
}

// Name returns the plugin's name.
func (*QueueSort) Name() string { return QueueSortName }

// less orders two queue entries of the given priorities, nominations (a
// pod nominated to a node, or a pod group whose queued pods all are) and
// times in the queue.
func less(prio1, prio2 int32, nominated1, nominated2 bool, t1, t2 time.Time) bool {
	if prio1 != prio2 {
		return prio1 > prio2
	}
	if nominated1 != nominated2 {
		return nominated1
	}
	return t1.Before(t2)
}

func nominated(pod *v1.Pod) bool {
	return pod != nil && pod.Status.NominatedNodeName != ""
}
