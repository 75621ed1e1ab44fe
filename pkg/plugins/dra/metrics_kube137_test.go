//go:build !kube1.35

package dra

// kube-scheduler's metrics of binding conditions are 1.36's and later's.

import (
	"errors"
	"fmt"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/component-base/metrics/testutil"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
)

// TestBindingConditionsMetrics: PreBind's wait is recorded in upstream's
// metric objects, with upstream's labels and status values.
func TestBindingConditionsMetrics(t *testing.T) {
	registerMetrics()
	withConditions := allocated(gpuClaim("a"), "gpu-0")
	withConditions.Status.Allocation.Devices.Results[0].BindingConditions = []string{"attached"}
	plain := allocated(gpuClaim("b"), "gpu-1")
	claims := []*resourceapi.ResourceClaim{withConditions, plain, nil}
	for name, tc := range map[string]struct {
		err    error
		status string
	}{
		"success": {status: "success"},
		"timeout": {err: fmt.Errorf("%w: claim default/a", errBindingTimeout), status: "timeout"},
		"failure": {err: fmt.Errorf("%w: claim default/a", errBindingFailed), status: "failure"},
		"error":   {err: errors.New("claim cache gone"), status: "error"},
	} {
		t.Run(name, func(t *testing.T) {
			schedmetrics.DRABindingConditionsAllocationsTotal.Reset()
			schedmetrics.DRABindingConditionsPreBindDuration.Reset()
			observeBindingConditions("drasched", claims, 2*time.Second, tc.err)
			count, err := testutil.GetCounterMetricValue(schedmetrics.DRABindingConditionsAllocationsTotal.WithLabelValues("drasched", "gpu.example.com", tc.status))
			if err != nil {
				t.Fatal(err)
			}
			// Only the device with binding conditions counts.
			if count != 1 {
				t.Errorf("allocations: %v, want 1", count)
			}
			// Every allocated device's wait is observed, as upstream does.
			testutil.AssertHistogramTotalCount(t, "scheduler_dra_bindingconditions_wait_duration_seconds",
				map[string]string{"profile": "drasched", "driver": "gpu.example.com", "status": tc.status}, 2)
		})
	}
}
