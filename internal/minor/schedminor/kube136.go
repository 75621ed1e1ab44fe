//go:build kube1.36

package schedminor

import (
	"context"

	v1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"
)

// PreemptionPriority is the pod's priority as 1.36's preemption compares
// it: with WorkloadAwarePreemption, a pod of a PodGroup has its group's.
func PreemptionPriority(fh fwk.Handle, fts feature.Features, pod *v1.Pod) int32 {
	if fts.EnableWorkloadAwarePreemption && pod.Spec.SchedulingGroup != nil && pod.Spec.SchedulingGroup.PodGroupName != nil {
		if pg, err := PodGroups(fh).Get(pod.Namespace, *pod.Spec.SchedulingGroup.PodGroupName); err == nil && pg != nil {
			return schedutil.PodGroupPriority(pg)
		}
	}
	return corev1helpers.PodPriority(pod)
}

// WorkloadClaims: DRAWorkloadResourceClaims is on (PodGroup claims).
func WorkloadClaims(fts feature.Features) bool { return fts.EnableDRAWorkloadResourceClaims }

// PodGroups lists the PodGroups: 1.36's framework has them from its DRA
// manager, not from the cycle's snapshot.
func PodGroups(fh fwk.Handle) fwk.PodGroupLister { return fh.SharedDRAManager().PodGroups() }

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
