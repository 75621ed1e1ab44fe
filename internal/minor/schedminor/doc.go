// Package schedminor holds the differences between the kube-scheduler
// frameworks of the Kubernetes minors that drasched builds for, as
// internal/minor holds those of their APIs and libraries. It is a package
// of its own because it imports kube-scheduler, which kubectl-drasched must
// not link (decision 0006). Each minor has one file, selected by the same
// build tags as internal/minor's, and both define the same names;
// docs/compatibility.md lists every difference.
package schedminor

import (
	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// bindingMetrics are kube-scheduler's metrics of binding conditions: the
// status labels and the observers.
type bindingMetrics struct {
	Success, Timeout, Failed, Error string
	// ObserveWait records how long PreBind waited for a device's binding
	// conditions (scheduler_dra_bindingconditions_wait_duration_seconds).
	ObserveWait func(profile, driver, status string, seconds float64)
	// CountAllocation counts an allocated device with binding conditions
	// (scheduler_dra_bindingconditions_allocations_total).
	CountAllocation func(profile, driver, status string)
}

// PreFlight gives a PreBind plugin the PreBindPreFlight of this minor's
// framework: Run says whether PreBind has work for the pod (nil) or not
// (Skip), Parallel whether it may run beside other plugins' PreBind.
type PreFlight struct {
	Run      func(cs fwk.CycleState, pod *v1.Pod) *fwk.Status
	Parallel bool
}
