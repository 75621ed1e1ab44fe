//go:build kube1.35

package schedminor

import (
	"context"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/dynamic-resource-allocation/cel"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/profile"

	"github.com/drasched/drasched/internal/minor"
)

// PreemptionPriority is the pod's priority: 1.35 has no pod groups.
func PreemptionPriority(_ fwk.Handle, _ feature.Features, pod *v1.Pod) int32 {
	return corev1helpers.PodPriority(pod)
}

// WorkloadClaims: 1.35 has no PodGroup claims.
func WorkloadClaims(feature.Features) bool { return false }

// PendingAllocation: 1.35's claim cache says that a claim has an
// allocation in flight, not which; the tracker knows its own.
func PendingAllocation(fwk.ResourceClaimTracker, types.UID) *resourceapi.AllocationResult {
	return nil
}

// HasPendingAllocation: claims holds an allocation in flight for the
// claim.
func HasPendingAllocation(claims fwk.ResourceClaimTracker, uid types.UID) bool {
	return claims.ClaimHasPendingAllocation(uid)
}

// RemovePendingAllocation takes the claim's allocation out of flight.
func RemovePendingAllocation(claims fwk.ResourceClaimTracker, uid types.UID) {
	claims.RemoveClaimPendingAllocation(uid)
}

// MaxScore is the highest score a Score plugin returns.
const MaxScore = fwk.MaxNodeScore

// CELFeatures are the CEL compiler's features that the scheduler's gates
// enable: 1.35 has no list-type attributes.
func CELFeatures(fts feature.Features) cel.Features {
	return minor.CELFeatures(fts.EnableDRAConsumableCapacity, false)
}

// NodeAllocatableResources: 1.35 has no such gate.
func NodeAllocatableResources(feature.Features) bool { return false }

// BindingConditionsMetrics: 1.35's kube-scheduler has no metrics of
// binding conditions (scheduler_dra_bindingconditions_*).
const BindingConditionsMetrics = false

// BindingConditions: 1.35's kube-scheduler has no metrics of binding
// conditions; the labels are 1.36's, and nothing is observed.
var BindingConditions = bindingMetrics{
	Success: "success", Timeout: "timeout", Failed: "failed", Error: "error",
	ObserveWait:     func(string, string, string, float64) {},
	CountAllocation: func(string, string, string) {},
}

// RecorderFactory is the scheduler's factory of event recorders, one per
// profile, from newRecorder (the event broadcaster's, as kube-scheduler's
// command does).
func RecorderFactory(newRecorder func(name string) events.EventRecorderLogger) profile.RecorderFactory {
	return func(name string) events.EventRecorder { return newRecorder(name) }
}

// PreBindPreFlight implements fwk.PreBindPlugin (1.35's signature:
// PreBind plugins never run in parallel there).
func (p PreFlight) PreBindPreFlight(_ context.Context, cs fwk.CycleState, pod *v1.Pod, _ string) *fwk.Status {
	return p.Run(cs, pod)
}

// FilterTimeoutIsError is false: 1.35's Filter reports a search that ran
// out of filterTimeout as the node being unschedulable for the pod.
const FilterTimeoutIsError = false
