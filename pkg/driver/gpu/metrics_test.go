package gpu

import (
	"testing"

	"github.com/drasched/drasched/internal/metricstable"
	"github.com/drasched/drasched/pkg/driver/gpu/discovery"
)

// TestMetricsTable: docs/gpu-driver.md's metrics table lists every metric
// RegisterMetrics registers, discovery's included, with its type and
// labels, and nothing else.
func TestMetricsTable(t *testing.T) {
	collectors := []any{claimOperations, claimOperationErrors, operationDuration,
		preparedDevices, unhealthyDevices, publishedDevices, discoveryErrors}
	for _, m := range discovery.Metrics() {
		collectors = append(collectors, m)
	}
	problems, err := metricstable.Check("../../../docs/gpu-driver.md", metricsNamespace+"_"+metricsSubsystem+"_",
		[]string{".", "discovery"}, collectors...)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
