package discovery

import (
	"k8s.io/component-base/metrics"
)

// Reasons for leaving a GPU out, the values of the refused_gpus metric's
// reason label.
const (
	// RefusedNoProcEntry: the driver has no /proc entry for the GPU's PCI
	// address.
	RefusedNoProcEntry = "NoProcEntry"
	// RefusedBadProcEntry: the entry cannot be read, or has no usable
	// UUID or minor number.
	RefusedBadProcEntry = "BadProcEntry"
)

var refusedGPUs = metrics.NewGaugeVec(&metrics.GaugeOpts{
	// The same prefix as the driver's other metrics:
	// drasched_gpu_driver_refused_gpus.
	Namespace: "drasched",
	Subsystem: "gpu_driver",
	Name:      "refused_gpus",
	Help: "GPUs listed by nvidia-smi in the last discovery but not published, by reason: " +
		"without the minor number from the driver's /proc entry, a claim's CDI spec could grant another GPU's /dev/nvidia<minor>.",
	StabilityLevel: metrics.ALPHA,
}, []string{"reason"})

// Metrics lists the discovery metrics, for the plugin to register with its
// other metrics. Unregistered, they record nothing.
func Metrics() []metrics.Registerable {
	return []metrics.Registerable{refusedGPUs}
}

// recordRefused sets the refused_gpus gauge of every reason, zero included,
// so that a recovered GPU brings its reason's series back to 0 rather than
// leaving the last count behind.
func recordRefused(byReason map[string]int) {
	for _, reason := range []string{RefusedNoProcEntry, RefusedBadProcEntry} {
		refusedGPUs.WithLabelValues(reason).Set(float64(byReason[reason]))
	}
}
