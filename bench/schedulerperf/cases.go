// Package schedulerperf runs upstream's own scheduler_perf DRA workloads
// (k8s.io/kubernetes/test/integration/scheduler_perf, read from the module
// cache, never copied) once with kube-scheduler's in-tree DynamicResources
// plugin and once with drasched's StructuredDRA in its place, in the same
// process, and reports SchedulingThroughput side by side.
//
// The benchmark itself, BenchmarkSchedulerPerf, is in a test file behind
// the build tag schedulerperf, so that `go test ./...` neither builds nor
// runs it; `make bench` and hack/bench-scheduler-perf.sh run it. This file
// and config.go hold what it is built from (the cases, the configurations
// it generates, how results are read and summarized), tested without the
// tag.
package schedulerperf

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"k8s.io/component-base/featuregate"
	"k8s.io/kubernetes/pkg/features"
)

// Scheduler is one side of the comparison.
type Scheduler string

const (
	// Upstream is kube-scheduler's default configuration: the in-tree
	// DynamicResources plugin.
	Upstream Scheduler = "upstream"
	// Drasched is the profile of config/scheduler-config.yaml:
	// StructuredDRA instead of DynamicResources.
	Drasched Scheduler = "drasched"
)

// Case is one workload of an upstream scheduler_perf configuration file.
type Case struct {
	// Name identifies the case in results.
	Name string
	// Config is the upstream configuration file, relative to
	// test/integration/scheduler_perf in the k8s.io/kubernetes module.
	Config string
	// TestCase and Workload name the workload in that file.
	TestCase, Workload string
	// WithoutClaims turns the workload into the same one without
	// ResourceClaims: its pods reference no claims and no claims or
	// claim templates are created; nodes, slices and DeviceClasses stay.
	WithoutClaims bool
	// FeatureGates are set for the case, on top of those of the upstream
	// test case, in both schedulers' runs: scheduler_perf sets a test
	// case's featureGates in the process before it starts the apiserver
	// and the scheduler.
	FeatureGates map[featuregate.Feature]bool
	// Quick cases run with QUICK=1.
	Quick bool
	// DRA cases must never be slower with drasched; the others are
	// references (non-DRA pods must not be slower either, but a few
	// percent of noise is expected there).
	DRA bool
	// Target is drasched's goal for drasched/upstream throughput;
	// 0 means only "never slower" (DRA cases) or none.
	Target float64
}

const (
	draConfig           = "dra/performance-config.yaml"
	partitionableConfig = "dra/partitionabledevices/performance-config.yaml"
	consumableConfig    = "dra/consumablecapacity/performance-config.yaml"
	miscConfig          = "misc/performance-config.yaml"

	claimTemplateTestCase = "SchedulingWithResourceClaimTemplate"
)

// preQueueingHints turns on the alpha PreQueueingHint extension point of
// the scheduling queue (off by default in 1.37): on a claim event, the
// DRA plugin names the pods the event can help instead of the queue
// asking every unschedulable pod's hints. Both DynamicResources and
// StructuredDRA implement it.
var preQueueingHints = map[featuregate.Feature]bool{features.SchedulerPreQueueingHints: true}

// Cases are the cases of `make bench`, in the order they run. The
// steady-state cases keep the cluster at its initial utilization for 10
// seconds (upstream's duration); 5000pods_500nodes schedules 2500 pods
// into a half-full cluster as fast as it can. A "+pqh" case is the case
// before it with SchedulerPreQueueingHints on for both schedulers
// (upstream at its best): drasched must not be slower there either.
var Cases = []Case{
	{Name: "empty_500nodes", Config: draConfig, TestCase: claimTemplateTestCase, Workload: "empty_500nodes", Quick: true, DRA: true, Target: 2},
	{Name: "empty_500nodes+pqh", Config: draConfig, TestCase: claimTemplateTestCase, Workload: "empty_500nodes", FeatureGates: preQueueingHints, DRA: true},
	{Name: "selector_empty_500nodes", Config: draConfig, TestCase: claimTemplateTestCase, Workload: "selector_empty_500nodes", Quick: true, DRA: true, Target: 2},
	{Name: "match_empty_500nodes", Config: draConfig, TestCase: claimTemplateTestCase, Workload: "match_empty_500nodes", Quick: true, DRA: true, Target: 3},
	{Name: "5000pods_500nodes", Config: draConfig, TestCase: claimTemplateTestCase, Workload: "5000pods_500nodes", DRA: true, Target: 1.3},
	{Name: "5000pods_500nodes+pqh", Config: draConfig, TestCase: claimTemplateTestCase, Workload: "5000pods_500nodes", FeatureGates: preQueueingHints, DRA: true},
	{Name: "partitionable_empty_500nodes", Config: partitionableConfig, TestCase: "Partitionable", Workload: "empty_500nodes", Quick: true, DRA: true, Target: 3},
	{Name: "partitionable_backtracking_empty_500nodes", Config: partitionableConfig, TestCase: "PartitionableBacktracking", Workload: "empty_500nodes", DRA: true, Target: 3},
	{Name: "consumablecapacity_empty_500nodes", Config: consumableConfig, TestCase: "ConsumableCapacity", Workload: "empty_500nodes", DRA: true},
	{Name: "noclaims_empty_500nodes", Config: draConfig, TestCase: claimTemplateTestCase, Workload: "empty_500nodes", WithoutClaims: true, Quick: true},
	{Name: "basic_500nodes", Config: miscConfig, TestCase: "SchedulingBasic", Workload: "500Nodes"},
}

// Options select what a run of the suite does.
type Options struct {
	// Quick runs only the Quick cases.
	Quick bool
	// Cases, if set, selects cases by name (after Quick).
	Cases *regexp.Regexp
	// Runs is the number of runs per case and scheduler.
	Runs int
	// Duration, if set, replaces the steady-state duration of the
	// workloads (upstream: 10s).
	Duration time.Duration
}

// Run is one run of one case with one scheduler.
type Run struct {
	Case      Case
	Scheduler Scheduler
	// Index counts the runs of this case and scheduler from 1.
	Index int
}

// Name is the run's sub-benchmark name.
func (r Run) Name() string {
	return fmt.Sprintf("case=%s/scheduler=%s/run=%d", r.Case.Name, r.Scheduler, r.Index)
}

// Dir is the name of the run's folder under runs/: its name, one path
// element.
func (r Run) Dir() string {
	return strings.ReplaceAll(r.Name(), "/", "_")
}

// Select returns the cases that opts select, in the order of cases.
func Select(cases []Case, opts Options) []Case {
	var selected []Case
	for _, c := range cases {
		if opts.Quick && !c.Quick {
			continue
		}
		if opts.Cases != nil && !opts.Cases.MatchString(c.Name) {
			continue
		}
		selected = append(selected, c)
	}
	return selected
}

// Plan returns the runs in the order they should happen: case by case, the
// two schedulers alternating (upstream, drasched, upstream, drasched, ...)
// so that a slow phase of a noisy machine hits both alike.
func Plan(cases []Case, runs int) []Run {
	var plan []Run
	for _, c := range cases {
		for i := 1; i <= runs; i++ {
			plan = append(plan, Run{Case: c, Scheduler: Upstream, Index: i}, Run{Case: c, Scheduler: Drasched, Index: i})
		}
	}
	return plan
}
