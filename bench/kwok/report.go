package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/bench/internal/results"
)

// Schedulers, as results name them.
const (
	upstream = "upstream"
	drasched = "drasched"
)

// Metrics of the suite beyond those of results.
const (
	metricAllocationErrors = "allocation_errors"
	// metricLatencyCDF is the series of the latency distribution: points
	// (seconds, fraction of pods bound within them).
	metricLatencyCDF = "latency_cdf"
	// cdfPoints is the most points a latency CDF series has.
	cdfPoints = 200
)

// readRun reads a file that bench/kwok run wrote.
func readRun(path string) (runResult, error) {
	var r runResult
	data, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// metric is how a case's metric is computed from one run.
type metric struct {
	name   string
	better results.Better
	value  func(caseResult) float64
	// only is the case the metric is of; every case if empty.
	only string
}

// of says whether the case has the metric.
func (m metric) of(name string) bool { return m.only == "" || m.only == name }

// Metrics of the preempt case only.
const (
	metricHighPriorityBound = "high_priority_bound"
	metricPreemptedPods     = "preempted_pods"
	metricWastedGPUs        = "wasted_gpus"
)

var metrics = []metric{
	{"pods_per_second", results.Higher, func(c caseResult) float64 {
		return sample{latencies: c.Latencies, seconds: c.Seconds}.podsPerSecond()
	}, ""},
	{"p50_seconds", results.Lower, func(c caseResult) float64 { return percentile(c.Latencies, 0.5) }, ""},
	{"p90_seconds", results.Lower, func(c caseResult) float64 { return percentile(c.Latencies, 0.9) }, ""},
	{"p99_seconds", results.Lower, func(c caseResult) float64 { return percentile(c.Latencies, 0.99) }, ""},
	{metricAllocationErrors, results.Lower, func(c caseResult) float64 { return float64(c.AllocationErrors) }, ""},
	// The high-priority pods bound, and at what cost: fewer evictions for
	// the same pods bound is better.
	{metricHighPriorityBound, results.Higher, func(c caseResult) float64 { return float64(c.HighPriorityBound) }, casePreempt},
	{metricPreemptedPods, results.Lower, func(c caseResult) float64 { return float64(c.Preempted) }, casePreempt},
	{metricWastedGPUs, results.Lower, func(c caseResult) float64 { return float64(c.WastedGPUs) }, casePreempt},
}

// suiteFile turns the runs of both schedulers into the suite's file of the
// results format: per case and metric the median of each scheduler's runs,
// the targets of the issue (fill: p99 latency no worse than upstream's;
// preempt: every high-priority pod bound; no allocation errors), notes on what each workload is and on pods that were
// not bound, and the series for plots (throughput over time, latency CDF).
func suiteFile(runs []runResult, command string, seconds float64) (results.File, error) {
	byScheduler := map[string][]runResult{}
	for _, r := range runs {
		byScheduler[r.Scheduler] = append(byScheduler[r.Scheduler], r)
	}
	for _, s := range []string{upstream, drasched} {
		if len(byScheduler[s]) == 0 {
			return results.File{}, fmt.Errorf("no run of %s", s)
		}
		slices.SortFunc(byScheduler[s], func(a, b runResult) int { return a.Run - b.Run })
	}
	f := results.File{
		Date:      results.Now(),
		Machine:   results.CurrentMachine(),
		Durations: map[string]float64{results.SuiteKwok: seconds},
		Cases:     []results.Case{},
	}
	if command != "" {
		f.Commands = []string{command}
	}
	for _, name := range caseNames {
		cases := map[string][]caseResult{}
		for _, s := range []string{upstream, drasched} {
			for _, r := range byScheduler[s] {
				if c, ok := findCase(r, name); ok {
					cases[s] = append(cases[s], c)
				}
			}
		}
		if len(cases[upstream]) == 0 || len(cases[drasched]) == 0 {
			continue
		}
		first := true
		for _, m := range metrics {
			if !m.of(name) {
				continue
			}
			var up, dr []float64
			for _, c := range cases[upstream] {
				up = append(up, m.value(c))
			}
			for _, c := range cases[drasched] {
				dr = append(dr, m.value(c))
			}
			c := results.NewCase(results.SuiteKwok, name, m.name, m.better, up, dr)
			switch {
			case m.name == "p99_seconds" && name == caseFill:
				c.Target = "p99 ≤ upstream's"
				c.TargetMet = ptr.To(c.Drasched > 0 && c.Upstream > 0 && c.Drasched <= c.Upstream)
			case m.name == metricHighPriorityBound:
				// All of them fit once low-priority pods are evicted.
				c.Target = "drasched binds every high-priority pod that fits after eviction"
				met := true
				for _, d := range cases[drasched] {
					met = met && d.Pods > 0 && d.HighPriorityBound == d.Pods
				}
				c.TargetMet = ptr.To(met)
			case m.name == metricAllocationErrors:
				c.Target = "no allocation errors"
				c.TargetMet = ptr.To(slices.Max(dr) == 0)
			}
			if first {
				c.Note = caseNote(name, byScheduler[upstream][0], cases)
				first = false
			}
			f.Cases = append(f.Cases, c)
		}
		for _, s := range []string{upstream, drasched} {
			for _, r := range byScheduler[s] {
				c, _ := findCase(r, name)
				if len(c.Latencies) == 0 {
					continue
				}
				f.Series = append(f.Series,
					results.Series{Suite: results.SuiteKwok, Case: name, Scheduler: s, Run: r.Run, Metric: "pods_per_second", Points: throughputSeries(c.BoundAt)},
					results.Series{Suite: results.SuiteKwok, Case: name, Scheduler: s, Run: r.Run, Metric: metricLatencyCDF, Points: cdfSeries(c.Latencies, cdfPoints)})
			}
		}
	}
	if len(f.Cases) == 0 {
		return f, fmt.Errorf("no case measured for both schedulers")
	}
	return f, nil
}

func findCase(r runResult, name string) (caseResult, bool) {
	for _, c := range r.Cases {
		if c.Name == name {
			return c, true
		}
	}
	return caseResult{}, false
}

// caseNote says what the workload was, and which runs left pods unbound
// or had errors.
func caseNote(name string, r runResult, cases map[string][]caseResult) string {
	pods := cases[upstream][0].Pods
	var what string
	switch name {
	case caseFill:
		what = fmt.Sprintf("%d pods of 8, 4, 2 and 1 H100 GPUs, largest first, created at once: %.0f%% of the GPUs of %d H100 nodes.",
			pods, r.Fraction*100, r.NodeMix[kindH100])
	case caseChurn:
		what = fmt.Sprintf("%d pods of 1, 2 and 4 H100 GPUs at %.0f pods/s on %d H100 nodes %.0f%% full, each deleted %s after it was bound.",
			pods, r.ChurnRate, r.NodeMix[kindH100], r.ChurnBase*100, time.Duration(r.ChurnLifetimeSeconds*float64(time.Second)))
	case caseMatch:
		what = fmt.Sprintf("%d pods of %d L40S GPUs on one PCIe root (matchAttribute %s), created at once: %.0f%% of the slots of %d L40S nodes.",
			pods, matchSize, pcieRootAttribute, r.Fraction*100, r.NodeMix[kindL40S])
	case caseMIG:
		what = fmt.Sprintf("%d pods of one MIG device each (1g.5gb, 2g.10gb, 3g.20gb, 7g.40gb), created at once: %.0f%% of the MIG devices of %d A100 nodes.",
			pods, r.Fraction*100, r.NodeMix[kindA100])
	case casePreempt:
		what = fmt.Sprintf("The %d H100 nodes 100%% full of low-priority pods of 2 and 1 GPUs, then %d high-priority pods of 8 and 4 GPUs (%.0f%% of the GPUs) created at once, "+
			"waited for at most %s; latencies and pods/s are of the high-priority pods bound, preempted pods are the low-priority pods evicted.",
			r.NodeMix[kindH100], pods, r.PreemptShare*100, time.Duration(r.PreemptWaitSeconds*float64(time.Second)))
	}
	var problems []string
	for _, s := range []string{upstream, drasched} {
		for i, c := range cases[s] {
			if c.Unbound > 0 {
				what := "pods"
				if name == casePreempt {
					what = "high-priority pods"
				}
				problems = append(problems, fmt.Sprintf("%s run %d: %d of %d %s not bound", s, i+1, c.Unbound, c.Pods, what))
			}
			if n := len(c.Errors); n > 0 && c.Unbound == 0 && c.AllocationErrors == 0 {
				problems = append(problems, fmt.Sprintf("%s run %d: %s", s, i+1, c.Errors[0]))
			}
		}
	}
	if len(problems) > 0 {
		what += " " + strings.Join(problems, "; ") + "."
	}
	return what
}
