package dra

import (
	"context"
	"errors"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/dynamic-resource-allocation/structured"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"

	"github.com/drasched/drasched/internal/minor/schedminor"
	"github.com/drasched/drasched/pkg/allocator"
	"github.com/drasched/drasched/pkg/capacity"
	"github.com/drasched/drasched/pkg/core"
	"github.com/drasched/drasched/pkg/tracker"
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

	allocationFailures = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: metricsNamespace,
		Subsystem: metricsSubsystem,
		Name:      "allocation_failures_total",
		Help: "Scheduling attempts that found no node for a pod, by a DeviceClass of its claims and the reason some node " +
			"gave for not allocating it (NoMatchingDevice, PoolIncomplete, DevicesInUse, DevicesTainted, CountersExhausted, " +
			"CapacityExhausted, DevicesIncompatible, NodeOperationsUnsupported, ConstraintUnsatisfiable, Contention; " +
			"Unexplained when the reason could not be found in time). Counted once per attempt, class and reason, however " +
			"many nodes gave it, and only when the attempt failed: a rate above zero means pods wait for devices of the " +
			"class for that reason (DevicesInUse: the class is full; DevicesTainted: unhealthy devices).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"device_class", "reason"})

	claimWrites = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: metricsNamespace,
		Subsystem: metricsSubsystem,
		Name:      "claim_writes_total",
		Help: "Claim writes of PreBind by outcome: written; unknown (the API server's answer was lost, " +
			"the devices stay in flight until the outcome is known); fenced (refused: the leader lease may have expired); failed.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"outcome"})

	nominations = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: metricsNamespace,
		Subsystem: metricsSubsystem,
		Name:      "claim_nominations_total",
		Help: "Claim nominations of preemptors: made (Nominated), and ended, by reason: Bound, PodGone, Renominated, " +
			"NominationLost (a preemptor of higher priority cleared it), Unusable (it could no longer be honoured), " +
			"Expired (the preempted pods did not go within their grace period and the nomination margin). " +
			"A rate of Expired above zero means preempted pods or their claims are stuck.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"event"})

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

// reasonUnexplained labels allocationFailures when Explain gave no reason
// (it ran out of time): the attempt still failed for the claims' classes.
const reasonUnexplained allocator.Reason = "Unexplained"

// registerMetrics registers the plugin's metrics once per process.
//
// Upstream's DRA metrics (scheduler_dra_bindingconditions_*,
// dynamic_resource_allocation_resourceclaim_creates_total) are kube-scheduler's own objects:
// kube-scheduler registers them (scheduler.New calls schedmetrics.Register
// before it builds any plugin), and the plugin only observes them.
// Registering metrics of the same names again would make MustRegister
// panic. The call here is a no-op in kube-scheduler; where the plugin is
// built without a scheduler (tests, tools), it creates those objects, which
// are nil until then.
func registerMetrics() {
	registerOnce.Do(func() {
		schedmetrics.Register()
		legacyregistry.MustRegister(filterDuration, allocationFailures, claimWrites, nominations)
		legacyregistry.RawMustRegister(claimsInFlight)
		legacyregistry.CustomMustRegister(newCacheCollector(sharedCache))
		legacyregistry.CustomMustRegister(newDeviceCollector(anyTracker, sharedCache))
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

// observeBindingConditions records, as upstream's PreBind does, how long
// PreBind waited for the binding conditions of the claims' devices and how
// it ended: one duration per allocated device, one count per device with
// binding conditions, both by profile, driver and status.
func observeBindingConditions(profile string, claims []*resourceapi.ResourceClaim, waited time.Duration, err error) {
	m := schedminor.BindingConditions
	status := m.Success
	switch {
	case err == nil:
	case errors.Is(err, errBindingTimeout):
		status = m.Timeout
	case errors.Is(err, errBindingFailed):
		status = m.Failed
	default:
		status = m.Error
	}
	for _, claim := range claims {
		if claim == nil || claim.Status.Allocation == nil {
			continue
		}
		for _, result := range claim.Status.Allocation.Devices.Results {
			m.ObserveWait(profile, result.Driver, status, waited.Seconds())
			if len(result.BindingConditions) > 0 {
				m.CountAllocation(profile, result.Driver, status)
			}
		}
	}
}

// cacheCollector exposes the allocator cache's cumulative statistics as
// counters, read at each scrape: the allocator keeps them as atomics and
// knows nothing of metrics. Ratios such as the hit ratio are for queries:
// rate(hits) / rate(lookups).
type cacheCollector struct {
	metrics.BaseStableCollector
	cache *allocator.Cache
}

var (
	celCacheLookupsDesc = metrics.NewDesc(
		metrics.BuildFQName(metricsNamespace, metricsSubsystem, "cel_cache_lookups_total"),
		"Lookups in the allocator's CEL cache, by cache: compile (compiled expressions) and match (a selector's result for a device).",
		[]string{"cache"}, nil, metrics.ALPHA, "")
	celCacheHitsDesc = metrics.NewDesc(
		metrics.BuildFQName(metricsNamespace, metricsSubsystem, "cel_cache_hits_total"),
		"Lookups in the allocator's CEL cache answered from the cache, by cache (compile, match); the others compiled or evaluated CEL.",
		[]string{"cache"}, nil, metrics.ALPHA, "")
	slicesPreparedDesc = metrics.NewDesc(
		metrics.BuildFQName(metricsNamespace, metricsSubsystem, "resource_slices_prepared_total"),
		"ResourceSlice objects the allocator cache preprocessed; each version of a slice is prepared once.",
		nil, nil, metrics.ALPHA, "")
)

func newCacheCollector(cache *allocator.Cache) *cacheCollector {
	return &cacheCollector{cache: cache}
}

// DescribeWithStability implements metrics.StableCollector.
func (c *cacheCollector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- celCacheLookupsDesc
	ch <- celCacheHitsDesc
	ch <- slicesPreparedDesc
}

// CollectWithStability implements metrics.StableCollector.
func (c *cacheCollector) CollectWithStability(ch chan<- metrics.Metric) {
	stats := c.cache.Stats()
	for _, s := range []struct {
		cache        string
		hits, misses int64
	}{
		{"compile", stats.CompileHits, stats.CompileMisses},
		{"match", stats.MatchHits, stats.MatchMisses},
	} {
		ch <- metrics.NewLazyConstMetric(celCacheLookupsDesc, metrics.CounterValue, float64(s.hits+s.misses), s.cache)
		ch <- metrics.NewLazyConstMetric(celCacheHitsDesc, metrics.CounterValue, float64(s.hits), s.cache)
	}
	ch <- metrics.NewLazyConstMetric(slicesPreparedDesc, metrics.CounterValue, float64(stats.SlicesPrepared))
}

// deviceCollector counts the devices of each DeviceClass by state at each
// scrape, from the tracker's view (slices with DeviceTaintRules applied,
// the claim cache, the allocations in flight), with pkg/capacity's rules
// (those of kubectl drasched top and KEP-5677's ResourcePoolStatusRequest)
// and the allocator cache's selector results. The labels are classes and
// states only: the cardinality is bounded by the DeviceClasses.
type deviceCollector struct {
	metrics.BaseStableCollector
	tracker  func() tracker.Interface
	cache    *allocator.Cache
	features structured.Features
}

// Device states of devicesDesc.
const (
	deviceAllocated   = "allocated"
	deviceInFlight    = "in_flight"
	deviceAvailable   = "available"
	deviceUnavailable = "unavailable"
)

// devicesHelp is devicesDesc's help text.
const devicesHelp = "DRA devices that a DeviceClass matches, by state: allocated (to claims), in_flight (put in flight for a pod, " +
	"not written yet), unavailable (a NoSchedule or NoExecute taint: failing or drained; allocated or not), available (the rest of " +
	"those neither allocated, in flight nor unavailable). Devices of pools being republished are left out; a device counts for " +
	"every class that matches it."

var devicesDesc = metrics.NewDesc(metrics.BuildFQName(metricsNamespace, metricsSubsystem, "devices"), devicesHelp,
	[]string{"device_class", "state"}, nil, metrics.ALPHA, "")

func newDeviceCollector(t func() tracker.Interface, cache *allocator.Cache) *deviceCollector {
	return &deviceCollector{tracker: t, cache: cache, features: core.DefaultFeatures()}
}

// DescribeWithStability implements metrics.StableCollector.
func (c *deviceCollector) DescribeWithStability(ch chan<- *metrics.Desc) { ch <- devicesDesc }

// CollectWithStability implements metrics.StableCollector. Without a
// scheduler (none started yet, or a read that failed) it reports nothing.
func (c *deviceCollector) CollectWithStability(ch chan<- metrics.Metric) {
	t := c.tracker()
	if t == nil {
		return
	}
	resourceSlices, err := t.Slices()
	if err != nil {
		return
	}
	claims, err := t.Claims()
	if err != nil {
		return
	}
	classes, err := t.DeviceClasses().List()
	if err != nil {
		return
	}
	var inFlight []*resourceapi.AllocationResult
	for _, uid := range t.InFlight() {
		inFlight = append(inFlight, t.PendingAllocation(uid))
	}
	counts, err := capacity.CountByClass(context.Background(), resourceSlices, claims, classes, inFlight, c.cache, c.features)
	if err != nil {
		return
	}
	for _, cc := range counts {
		for state, n := range map[string]int32{
			deviceAllocated: cc.Allocated, deviceInFlight: cc.InFlight, deviceAvailable: cc.Available, deviceUnavailable: cc.Unavailable,
		} {
			ch <- metrics.NewLazyConstMetric(devicesDesc, metrics.GaugeValue, float64(n), cc.Class, state)
		}
	}
}
