package dra

import (
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

const (
	metricsNamespace = "drasched"
	metricsSubsystem = "plugin"
)

var (
	filterDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "filter_allocation_duration_seconds",
		Help:           "Time Filter spent allocating devices on one node, by result (fit, nofit, error).",
		Buckets:        metrics.ExponentialBuckets(0.00001, 4, 10),
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	celHitRatio = metrics.NewGaugeFunc(&metrics.GaugeOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "cel_match_cache_hit_ratio",
		Help:           "Share of CEL selector evaluations answered from the cache since start.",
		StabilityLevel: metrics.ALPHA,
	}, func() float64 { return sharedCache.Stats().MatchHitRatio() })

	slicesPrepared = metrics.NewGaugeFunc(&metrics.GaugeOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "resource_slices_prepared",
		Help:           "ResourceSlice objects preprocessed since start; each object is prepared once.",
		StabilityLevel: metrics.ALPHA,
	}, func() float64 { return float64(sharedCache.Stats().SlicesPrepared) })

	claimWrites = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: metricsNamespace,
		Subsystem: metricsSubsystem,
		Name:      "claim_writes_total",
		Help: "Claim writes of PreBind by outcome: written; unknown (the API server's answer was lost, " +
			"the devices stay in flight until the outcome is known); fenced (refused: the leader lease may have expired); failed.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"outcome"})

	claimsInFlight = metrics.NewGaugeFunc(&metrics.GaugeOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "claims_in_flight",
		Help:           "Allocations between Reserve and the claim cache: reserved, written but not yet in the cache, or written with an unknown outcome.",
		StabilityLevel: metrics.ALPHA,
	}, inFlightCount)

	registerOnce sync.Once
)

// Outcomes of claimWrites.
const (
	writeWritten = "written"
	writeUnknown = "unknown"
	writeFenced  = "fenced"
	writeFailed  = "failed"
)

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(filterDuration, claimWrites)
		legacyregistry.RawMustRegister(celHitRatio, slicesPrepared, claimsInFlight)
	})
}

func observeFilter(start time.Time, fit bool, err error) {
	result := "nofit"
	switch {
	case err != nil:
		result = "error"
	case fit:
		result = "fit"
	}
	filterDuration.WithLabelValues(result).Observe(time.Since(start).Seconds())
}
