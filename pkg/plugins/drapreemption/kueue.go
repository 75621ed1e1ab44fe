package drapreemption

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// Labels by which Kueue marks what it manages: the queue of a Job (or of a
// plain pod), and the pods of its plain-pod integration.
const (
	kueueQueueLabel   = "kueue.x-k8s.io/queue-name"
	kueueManagedLabel = "kueue.x-k8s.io/managed"
)

// kueueRule is the division of preemption between Kueue and drasched
// (docs/kueue.md): Kueue decides which of the workloads it manages run, and
// evicts whole workloads to make room within its quotas before it admits
// another; drasched places what Kueue admitted. So drasched never evicts a
// pod of a workload Kueue manages (that would stop part of a workload Kueue
// counts as admitted, and its Job would recreate the pod into a wait), and a
// pod Kueue manages never preempts: the devices it needs are those Kueue's
// own evictions free, and it waits for them as an unschedulable pod that
// comes back when they are freed.
//
// A pod is Kueue's when it carries Kueue's queue or managed label, or when
// its controller is a batch/v1 Job with the queue label (Kueue labels no
// pod of a Job it admits). Jobs that Kueue manages without the label
// (manageJobsWithoutQueueName) are not recognised.
type kueueRule struct {
	jobs batchlisters.JobLister
}

// newKueueRule watches Jobs through the scheduler's informer factory.
func newKueueRule(fh fwk.Handle) kueueRule {
	factory := fh.SharedInformerFactory()
	if factory == nil {
		return kueueRule{}
	}
	return kueueRule{jobs: factory.Batch().V1().Jobs().Lister()}
}

// managed says whether Kueue manages the pod's workload.
func (r kueueRule) managed(pod *v1.Pod) bool {
	if pod.Labels[kueueQueueLabel] != "" || pod.Labels[kueueManagedLabel] == "true" {
		return true
	}
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.Kind != "Job" || owner.APIVersion != "batch/v1" || r.jobs == nil {
		return false
	}
	job, err := r.jobs.Jobs(pod.Namespace).Get(owner.Name)
	if err != nil || job.UID != owner.UID {
		return false
	}
	return job.Labels[kueueQueueLabel] != ""
}

// preemptorMessage is why a pod Kueue manages does not preempt.
const kueuePreemptorMessage = "the pod's workload is managed by Kueue, which makes room for the workloads it admits by evicting others: drasched does not preempt for it, the pod waits for the devices Kueue's evictions free"

// victimsStatus fails a node whose victims include a pod Kueue manages.
func (r kueueRule) victimsStatus(victims []*v1.Pod) *fwk.Status {
	for _, victim := range victims {
		if r.managed(victim) {
			return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("preemption would evict pod %s/%s of a workload managed by Kueue", victim.Namespace, victim.Name))
		}
	}
	return nil
}
