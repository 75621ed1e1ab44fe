//go:build kube1.35 || kube1.36

package schedminor

// What the builds for Kubernetes 1.35 and 1.36 share: the differences of
// their frameworks from 1.37's. Each minor's own file (kube135.go,
// kube136.go) holds the rest.

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
)

// AssignedPod and TargetPod: 1.36 has one event resource for all pods, and
// a hint sees the events of every pod (1.37 split it).
const (
	AssignedPod = fwk.Pod
	TargetPod   = fwk.Pod
)

// PreQueueingHints is false: 1.36's scheduling queue asks every pod's hint
// for every event.
const PreQueueingHints = false

// BatchRescoresLastNode is false: 1.36's opportunistic batching gives the
// next pod a hint only once the last pod's node is full.
const BatchRescoresLastNode = false

// PreQueueingHintResult: 1.36 has none; the type has 1.37's fields so that
// the plugin's hint is the same code, unregistered.
type PreQueueingHintResult struct {
	AllPods bool
	Pods    []types.NamespacedName
}

// PreQueueingHintFn: see PreQueueingHintResult.
type PreQueueingHintFn func(logger klog.Logger, oldObj, newObj any) (PreQueueingHintResult, error)

// WithPreQueueingHint returns e: 1.36 has no pre-queueing hints.
func WithPreQueueingHint(e fwk.ClusterEventWithHint, _ PreQueueingHintFn) fwk.ClusterEventWithHint {
	return e
}

// ResizeDeferred: 1.36's scheduler does not preempt for in-place resizes.
func ResizeDeferred(feature.Features, *v1.Pod) bool { return false }

// TerminatingByPreemption: the pod is terminating because the scheduler
// preempted it (its DisruptionTarget condition says so). 1.36's
// DefaultPreemption keeps this check to itself.
func TerminatingByPreemption(pod *v1.Pod) bool {
	if pod.DeletionTimestamp == nil {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.DisruptionTarget {
			return c.Status == v1.ConditionTrue && c.Reason == v1.PodReasonPreemptionByScheduler
		}
	}
	return false
}

// NameInformers: 1.36's informers have no names.
func NameInformers(*options.Options) error { return nil }

// InformerFactory is kube-scheduler's informer factory on client, for
// schedulers that tests start.
func InformerFactory(client kubernetes.Interface) informers.SharedInformerFactory {
	return scheduler.NewInformerFactory(client, 0)
}

// PostFilterReasons are the reasons of upstream's PostFilter when it freed
// nothing, which the pod's condition shows: 1.35's and 1.36's say so.
var PostFilterReasons = []string{"still not schedulable"}
