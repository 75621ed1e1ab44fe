//go:build !kube1.35 && !kube1.36

package schedminor

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	resourcehelper "k8s.io/component-helpers/resource"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"
)

// AssignedPod and TargetPod are the event resources of a bound pod and of
// the pod a hint is asked about.
const (
	AssignedPod = fwk.AssignedPod
	TargetPod   = fwk.TargetPod
)

// PreQueueingHints is true: the scheduling queue asks a plugin which pods an
// event concerns before it asks each pod's hint (feature gate
// SchedulerPreQueueingHints).
const PreQueueingHints = true

// BatchRescoresLastNode is true: opportunistic batching rescores the node it
// gave the last pod, so a batch's ranking serves the next pod even where
// that node still has room.
const BatchRescoresLastNode = true

// PreQueueingHintResult says which pods an event concerns.
type PreQueueingHintResult = fwk.PreQueueingHintResult

// PreQueueingHintFn answers which pods an event concerns.
type PreQueueingHintFn = fwk.PreQueueingHintFn

// WithPreQueueingHint returns e with fn as its pre-queueing hint.
func WithPreQueueingHint(e fwk.ClusterEventWithHint, fn PreQueueingHintFn) fwk.ClusterEventWithHint {
	e.PreQueueingHintFn = fn
	return e
}

// ResizeDeferred reports whether the pod is a running pod whose in-place
// resize waits for room, which the scheduler puts through a cycle only to
// preempt for it (feature gate
// InPlacePodVerticalScalingSchedulerPreemption).
func ResizeDeferred(fts feature.Features, pod *v1.Pod) bool {
	return fts.EnableInPlacePodVerticalScalingSchedulerPreemption && resourcehelper.IsPodResizeDeferred(pod)
}

// PreemptionPriority is the pod's priority as preemption compares it: with
// GenericWorkload, a pod of a PodGroup (or of a CompositePodGroup) has its
// group's.
func PreemptionPriority(fh fwk.Handle, fts feature.Features, pod *v1.Pod) int32 {
	var groups fwk.PodGroupLister
	var composites fwk.CompositePodGroupLister
	if fts.EnableGenericWorkload {
		groups = PodGroups(fh)
		if fts.EnableCompositePodGroup {
			composites = fh.SnapshotSharedLister().CompositePodGroups()
		}
	}
	return preemption.GetPodPriority(pod, groups, composites)
}

// WorkloadClaims reports whether DRAWorkloadResourceClaims is on (PodGroup
// claims).
func WorkloadClaims(fts feature.Features) bool { return fts.EnableDRAWorkloadResourceClaims }

// PodGroups lists the PodGroups of the cycle's snapshot.
func PodGroups(fh fwk.Handle) fwk.PodGroupLister { return fh.SnapshotSharedLister().PodGroups() }

// TerminatingByPreemption reports whether the pod is terminating because the
// scheduler preempted it.
func TerminatingByPreemption(pod *v1.Pod) bool { return preemption.PodTerminatingByPreemption(pod) }

// NameInformers names the scheduler's shared informers in client-go's
// informer metrics, as kube-scheduler's command does.
func NameInformers(opts *options.Options) error {
	if opts.InformerName != nil {
		return nil
	}
	name, err := cache.NewInformerName("kube-scheduler")
	if err != nil {
		return err
	}
	opts.InformerName = name
	return nil
}

// InformerFactory is kube-scheduler's informer factory on client, for
// schedulers that tests start, without informer names.
func InformerFactory(client kubernetes.Interface) informers.SharedInformerFactory {
	return scheduler.NewInformerFactory(client, 0, nil)
}

// PostFilterReasons are the reasons of upstream's PostFilter when it freed
// nothing: none.
var PostFilterReasons []string

// PreBindPreFlight implements fwk.PreBindPlugin.
func (p PreFlight) PreBindPreFlight(_ context.Context, cs fwk.CycleState, pod *v1.Pod, _ string) (*fwk.PreBindPreFlightResult, *fwk.Status) {
	if status := p.Run(cs, pod); !status.IsSuccess() {
		return nil, status
	}
	return &fwk.PreBindPreFlightResult{AllowParallel: p.Parallel}, nil
}

// FilterTimeoutIsError is true: Filter reports a search that ran out of
// filterTimeout as an error, so that the pod goes through backoff.
const FilterTimeoutIsError = true
