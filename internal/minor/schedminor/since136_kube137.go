//go:build !kube1.35

package schedminor

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/dynamic-resource-allocation/cel"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
	"k8s.io/kubernetes/pkg/scheduler/profile"

	"github.com/drasched/drasched/internal/minor"
)

// PendingAllocation is the allocation that claims holds in flight for the
// claim, nil if none.
func PendingAllocation(claims fwk.ResourceClaimTracker, uid types.UID) *resourceapi.AllocationResult {
	return claims.GetPendingAllocation(uid)
}

// HasPendingAllocation reports whether claims holds an allocation in flight
// for the claim.
func HasPendingAllocation(claims fwk.ResourceClaimTracker, uid types.UID) bool {
	return claims.GetPendingAllocation(uid) != nil
}

// RemovePendingAllocation takes the claim's allocation out of flight. The
// claim cache holds each allocation once, whatever shares the tracker
// counts: force.
func RemovePendingAllocation(claims fwk.ResourceClaimTracker, uid types.UID) {
	claims.MaybeRemoveClaimPendingAllocation(uid, true)
}

// MaxScore is the highest score a Score plugin returns.
const MaxScore = fwk.MaxScore

// CELFeatures are the CEL compiler's features that the scheduler's gates
// enable.
func CELFeatures(fts feature.Features) cel.Features {
	return minor.CELFeatures(fts.EnableDRAConsumableCapacity, fts.EnableDRAListTypeAttributes)
}

// NodeAllocatableResources reports whether DRANodeAllocatableResources is
// on.
func NodeAllocatableResources(fts feature.Features) bool {
	return fts.EnableDRANodeAllocatableResources
}

// BindingConditionsMetrics is true: kube-scheduler has metrics of binding
// conditions (scheduler_dra_bindingconditions_*).
const BindingConditionsMetrics = true

// BindingConditions are the status labels of kube-scheduler's metrics of
// binding conditions, and their observers.
var BindingConditions = bindingMetrics{
	Success: schedmetrics.BindingConditionsStatusSuccess,
	Timeout: schedmetrics.BindingConditionsStatusTimeout,
	Failed:  schedmetrics.BindingConditionsStatusFailed,
	Error:   schedmetrics.BindingConditionsStatusError,
	ObserveWait: func(profile, driver, status string, seconds float64) {
		schedmetrics.DRABindingConditionsPreBindDuration.WithLabelValues(profile, driver, status).Observe(seconds)
	},
	CountAllocation: func(profile, driver, status string) {
		schedmetrics.DRABindingConditionsAllocationsTotal.WithLabelValues(profile, driver, status).Inc()
	},
}

// RecorderFactory is the scheduler's factory of event recorders, one per
// profile, from newRecorder (the event broadcaster's, as kube-scheduler's
// command does).
func RecorderFactory(newRecorder func(name string) events.EventRecorderLogger) profile.RecorderFactory {
	return func(name string) events.EventRecorderLogger { return newRecorder(name) }
}
