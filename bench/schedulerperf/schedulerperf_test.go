//go:build schedulerperf

package schedulerperf

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
	perf "k8s.io/kubernetes/test/integration/scheduler_perf"
	"k8s.io/kubernetes/test/utils/client-go/ktesting"

	_ "github.com/drasched/drasched/apis/config/scheme" // StructuredDRAArgs in the scheduler configuration
	"github.com/drasched/drasched/bench/internal/results"
	draplugins "github.com/drasched/drasched/pkg/plugins"
	"github.com/drasched/drasched/pkg/plugins/dra"
)

var (
	flagOut      = flag.String("drasched-out", "", "directory for the results (scheduler_perf.json), generated configurations and per-run data; required")
	flagQuick    = flag.Bool("drasched-quick", false, "run only the quick cases")
	flagCases    = flag.String("drasched-cases", "", "regular expression: run only the cases whose names match")
	flagRuns     = flag.Int("drasched-runs", 1, "runs per case and scheduler, interleaved (upstream, drasched, upstream, ...)")
	flagDuration = flag.String("drasched-duration", "", "steady-state duration of the workloads instead of upstream's (10s)")
	flagConfig   = flag.String("drasched-scheduler-config", "../../config/scheduler-config.yaml", "drasched's shipped scheduler configuration, whose profile is benchmarked")
	flagCommand  = flag.String("drasched-command", "", "the command that reproduces this run, recorded in the results")
	flagList     = flag.String("drasched-list", "", "write the names of the selected cases to this file, one per line, and run none: how `make bench` resumes case by case")
	flagProgress = flag.String("drasched-progress", "/dev/stderr", "where the progress display goes; the logs of scheduler_perf's components also go to stderr, so scripts pass another file descriptor")
)

func TestMain(m *testing.M) {
	// InitTests parses the flags (ours too) and configures logging as
	// upstream's scheduler_perf tests do.
	if err := perf.InitTests(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// BenchmarkSchedulerPerf runs upstream's scheduler_perf workloads (Cases)
// with both schedulers, interleaved, and writes the summary to
// -drasched-out/scheduler_perf.json. Run it through `make bench` or
// hack/bench-scheduler-perf.sh, which build etcd and put it on PATH.
func BenchmarkSchedulerPerf(b *testing.B) {
	if *flagOut == "" {
		b.Fatal("-drasched-out is required")
	}
	out, err := filepath.Abs(*flagOut)
	if err != nil {
		b.Fatal(err)
	}
	opts := Options{Quick: *flagQuick, Runs: *flagRuns}
	if *flagCases != "" {
		if opts.Cases, err = regexp.Compile(*flagCases); err != nil {
			b.Fatalf("-drasched-cases: %v", err)
		}
	}
	if *flagList != "" {
		var names strings.Builder
		for _, c := range Select(Cases, opts) {
			fmt.Fprintln(&names, c.Name)
		}
		if err := os.WriteFile(*flagList, []byte(names.String()), 0o644); err != nil {
			b.Fatal(err)
		}
		return
	}
	upstreamDir, err := UpstreamDir()
	if err != nil {
		b.Fatal(err)
	}
	shipped, err := os.ReadFile(*flagConfig)
	if err != nil {
		b.Fatal(err)
	}
	schedConfig, err := SchedulerConfig(shipped)
	if err != nil {
		b.Fatal(err)
	}
	configDir := filepath.Join(out, "configs")
	if err := os.MkdirAll(configDir, 0o755); err != nil {
		b.Fatal(err)
	}
	schedConfigPath := filepath.Join(configDir, "drasched-scheduler-config.yaml")
	if err := os.WriteFile(schedConfigPath, schedConfig, 0o644); err != nil {
		b.Fatal(err)
	}

	// The generated configurations select their workloads; labels are
	// gone, so no label filter may apply.
	perf.PerfSchedulingLabelFilter = ""
	registry := draplugins.Registry(dra.ProcessOptions{})

	plan := Plan(Select(Cases, opts), opts.Runs)
	if len(plan) == 0 {
		b.Fatal("no case selected")
	}
	progressOut, err := os.OpenFile(*flagProgress, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer progressOut.Close()
	progress := NewProgress(progressOut, len(plan))
	start := time.Now()
	var measured []Measurement
	for _, r := range plan {
		configOpts := ConfigOptions{
			Duration:        *flagDuration,
			Plugins:         []string{names.DynamicResources, dra.Name},
			ExtensionPoints: schedmetrics.ExtensionPoints,
		}
		if r.Scheduler == Drasched {
			configOpts.SchedulerConfigPath = schedConfigPath
		}
		configFile, err := WorkloadConfig(upstreamDir, filepath.Join(configDir, string(r.Scheduler)), r.Case, configOpts)
		if err != nil {
			b.Fatal(err)
		}
		runDir := filepath.Join(out, "runs", r.Dir())
		if err := os.RemoveAll(runDir); err != nil {
			b.Fatal(err)
		}
		// scheduler_perf writes data items, the progress file and
		// profiles there.
		if err := flag.Set("data-items-dir", runDir); err != nil {
			b.Fatal(err)
		}
		progress.Start(r, opts.Runs)
		runStart := time.Now()
		b.Run(r.Name(), func(b *testing.B) {
			// The topic selects thresholds; none are keyed by this one.
			perf.RunBenchmarkPerfScheduling(b, configFile, "drasched_bench", registry, perf.WithPrepareFn(checkFeatureGates(r.Case)))
		})
		m, err := ReadMeasurement(runDir)
		if err != nil {
			m.Err = err
		}
		m.Wall = time.Since(runStart)
		measured = append(measured, m)
		progress.Done(m)
	}
	progress.Finish()

	f := Summarize(plan, measured)
	f.Durations = map[string]float64{results.SuiteSchedulerPerf: time.Since(start).Seconds()}
	if *flagCommand != "" {
		f.Commands = []string{*flagCommand}
	}
	if err := results.Write(filepath.Join(out, "scheduler_perf.json"), f); err != nil {
		b.Fatal(err)
	}
	if err := writePluginDurations(filepath.Join(out, "plugin_durations.txt"), plan, measured); err != nil {
		b.Fatal(err)
	}
}

// checkFeatureGates is scheduler_perf's prepare hook for a run of c: it
// runs once the scheduler is up. It fails the run if a gate of the case
// is not in effect (a run that measured the default queue under a +pqh
// name would compare the wrong thing and look fine), and logs, when the
// run ends, whether the scheduling queue ran PreQueueingHints: the queue
// reads SchedulerPreQueueingHints once, when it is created, and counts
// scheduler_pre_queueing_hint_evaluations_total only when it is on.
func checkFeatureGates(c Case) perf.HookFn {
	return func(tCtx ktesting.TContext) error {
		for name, want := range c.FeatureGates {
			if got := utilfeature.DefaultFeatureGate.Enabled(name); got != want {
				return fmt.Errorf("case %s: feature gate %s is %t, want %t", c.Name, name, got, want)
			}
		}
		// As scheduler_perf's own lines: the test's log is cut to ten
		// lines in benchmark output, the global one goes to test.log.
		logger := tCtx.Logger()
		if !perf.UseTestingLog {
			logger = klog.LoggerWithName(logger, tCtx.Name())
		}
		enabled := utilfeature.DefaultFeatureGate.Enabled(features.SchedulerPreQueueingHints)
		// Registered after scheduler_perf's cleanup, so it runs before
		// that one stops the scheduler and resets the metrics.
		tCtx.TB().Cleanup(func() {
			evaluations, err := preQueueingHintEvaluations()
			if err != nil {
				logger.Error(err, "Read the scheduler's metrics", "metric", preQueueingHintEvaluationsMetric)
				return
			}
			logger.Info("Scheduling queue", "featureGate", features.SchedulerPreQueueingHints, "enabled", enabled, "metric", preQueueingHintEvaluationsMetric, "evaluations", evaluations)
		})
		return nil
	}
}

const preQueueingHintEvaluationsMetric = "scheduler_pre_queueing_hint_evaluations_total"

// preQueueingHintEvaluations returns the scheduler's PreQueueingHint
// evaluations so far, "plugin/result=count" sorted, or "none".
func preQueueingHintEvaluations() (string, error) {
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		return "", err
	}
	var counts []string
	for _, family := range families {
		if family.GetName() != preQueueingHintEvaluationsMetric {
			continue
		}
		for _, m := range family.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			counts = append(counts, fmt.Sprintf("%s/%s=%g", labels["plugin"], labels["result"], m.GetCounter().GetValue()))
		}
	}
	if len(counts) == 0 {
		return "none", nil
	}
	slices.Sort(counts)
	return strings.Join(counts, " "), nil
}

// writePluginDurations keeps the DRA plugin's extension point durations of
// every run, for looking into where a scheduler spends its time.
func writePluginDurations(path string, plan []Run, measured []Measurement) error {
	var sb strings.Builder
	fmt.Fprintf(&sb, "# scheduler_plugin_execution_duration_seconds of DynamicResources (upstream) and StructuredDRA (drasched), ms\n")
	for i, m := range measured {
		for _, ep := range []string{"PreEnqueue", "PreFilter", "Filter", "PostFilter", "Score", "Reserve", "PreBind"} {
			d, ok := m.Plugins[ep]
			if !ok {
				continue
			}
			fmt.Fprintf(&sb, "%-60s %-10s avg %8.3f p50 %8.3f p90 %8.3f p99 %8.3f\n", plan[i].Name(), ep, d["Average"], d["Perc50"], d["Perc90"], d["Perc99"])
		}
	}
	return os.WriteFile(path, []byte(sb.String()), 0o644)
}
