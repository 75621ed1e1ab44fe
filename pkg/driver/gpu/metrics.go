package gpu

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/drasched/drasched/pkg/driver/gpu/discovery"
)

// Metric name parts: drasched_gpu_driver_<name>.
const (
	metricsNamespace = "drasched"
	metricsSubsystem = "gpu_driver"
)

// Operation label values.
const (
	operationPrepare   = "prepare"
	operationUnprepare = "unprepare"
)

var (
	claimOperations = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "claim_operations_total",
		Help:           "Claims handled by NodePrepareResources (operation=prepare) and NodeUnprepareResources (operation=unprepare), successful or not.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"operation"})

	claimOperationErrors = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "claim_operation_errors_total",
		Help:           "Claims whose prepare or unprepare failed, including calls that failed as a whole.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"operation"})

	operationDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "operation_duration_seconds",
		Help:           "Duration of NodePrepareResources and NodeUnprepareResources calls, including waiting for the node-wide lock.",
		Buckets:        metrics.ExponentialBuckets(0.001, 2, 15),
		StabilityLevel: metrics.ALPHA,
	}, []string{"operation"})

	preparedDevices = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "prepared_devices",
		Help:           "Devices currently prepared for claims on this node.",
		StabilityLevel: metrics.ALPHA,
	})

	unhealthyDevices = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "unhealthy_devices",
		Help:           "Published devices that are unhealthy (and tainted).",
		StabilityLevel: metrics.ALPHA,
	})

	publishedDevices = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "published_devices",
		Help:           "Devices in the ResourceSlices of this node.",
		StabilityLevel: metrics.ALPHA,
	})

	discoveryErrors = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "discovery_errors_total",
		Help:           "Device rescans that failed; the previous devices stay published.",
		StabilityLevel: metrics.ALPHA,
	})
)

var registerMetrics sync.Once

// RegisterMetrics registers the driver's metrics with the legacy registry
// served on /metrics. Metrics record nothing until registered.
func RegisterMetrics() {
	registerMetrics.Do(func() {
		legacyregistry.MustRegister(claimOperations, claimOperationErrors, operationDuration,
			preparedDevices, unhealthyDevices, publishedDevices, discoveryErrors)
		legacyregistry.MustRegister(discovery.Metrics()...)
	})
}
