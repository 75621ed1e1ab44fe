package drapreemption

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
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
type QueueSort struct {
	// prioritySort orders every two entries that a nomination does not.
	prioritySort queuesort.PrioritySort
}

var _ fwk.QueueSortPlugin = &QueueSort{}

// NewQueueSort builds the queue sort; it has no args.
func NewQueueSort(_ context.Context, _ runtime.Object, _ fwk.Handle) (fwk.Plugin, error) {
	return &QueueSort{}, nil
}

// Name returns the plugin's name.
func (*QueueSort) Name() string { return QueueSortName }

// byNomination orders two entries of which exactly one is nominated, if
// they have the same priority; ok is false where it does not decide, and
// PrioritySort does.
func byNomination(samePriority, nominated1, nominated2 bool) (less, ok bool) {
	if !samePriority || nominated1 == nominated2 {
		return false, false
	}
	return nominated1, true
}

func nominated(pod *v1.Pod) bool {
	return pod != nil && pod.Status.NominatedNodeName != ""
}
