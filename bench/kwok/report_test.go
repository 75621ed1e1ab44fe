package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/drasched/drasched/bench/internal/results"
)

func testRun(scheduler string, run int, latency float64, unbound, allocationErrors int) runResult {
	r := runResult{
		Scheduler: scheduler, Run: run, Nodes: 100,
		NodeMix:  map[string]int{kindH100: 80, kindL40S: 10, kindA100: 10},
		Fraction: 0.9, ChurnBase: 0.3, ChurnRate: 10, ChurnLifetimeSeconds: 5,
		PreemptShare: 0.25, PreemptWaitSeconds: 60,
	}
	for _, name := range caseNames {
		c := caseResult{Name: name, Pods: 4 + unbound, Unbound: unbound, AllocationErrors: allocationErrors, Seconds: 2}
		for i := range 4 {
			c.Latencies = append(c.Latencies, latency*float64(i+1))
			c.BoundAt = append(c.BoundAt, 0.5*float64(i+1))
		}
		if allocationErrors > 0 {
			c.Errors = []string{"device twice"}
		}
		if name == casePreempt {
			c.HighPriorityBound, c.Preempted = 4, 12
		}
		r.Cases = append(r.Cases, c)
	}
	return r
}

func TestSuiteFile(t *testing.T) {
	runs := []runResult{
		testRun(upstream, 1, 1, 0, 0),
		testRun(drasched, 1, 0.5, 0, 0),
		testRun(upstream, 2, 3, 0, 0),
		testRun(drasched, 2, 0.5, 1, 2),
	}
	f, err := suiteFile(runs, "hack/bench-kwok.sh", 120)
	if err != nil {
		t.Fatal(err)
	}
	// Every metric of every case, but high_priority_bound,
	// preempted_pods and wasted_gpus only of preempt.
	if got, want := len(f.Cases), len(caseNames)*(len(metrics)-3)+3; got != want {
		t.Fatalf("%d cases, want %d", got, want)
	}
	get := func(name, metric string) results.Case {
		t.Helper()
		for _, c := range f.Cases {
			if c.Name == name && c.Metric == metric {
				return c
			}
		}
		t.Fatalf("no case %s/%s", name, metric)
		return results.Case{}
	}
	// p99 of latencies {L, 2L, 3L, 4L} is 4L; upstream's runs 4 and 12, median 8; drasched's 2 and 2.
	p99 := get(caseFill, "p99_seconds")
	if p99.Upstream != 8 || p99.Drasched != 2 || p99.Ratio != 4 || p99.Better != results.Lower {
		t.Errorf("fill p99: %+v", p99)
	}
	if p99.Target == "" || p99.TargetMet == nil || !*p99.TargetMet {
		t.Errorf("fill p99 target: %q %v, want met", p99.Target, p99.TargetMet)
	}
	if c := get(caseMatch, "p99_seconds"); c.Target != "" {
		t.Errorf("match has a p99 target %q, only fill should", c.Target)
	}
	pps := get(caseChurn, "pods_per_second")
	if pps.Upstream != 2 || pps.Drasched != 2 || pps.Better != results.Higher {
		t.Errorf("churn pods/s: %+v", pps)
	}
	errs := get(caseMIG, metricAllocationErrors)
	if diff := cmp.Diff([]float64{0, 2}, errs.DraschedRuns); diff != "" {
		t.Errorf("allocation errors runs (-want +got):\n%s", diff)
	}
	if errs.TargetMet == nil || *errs.TargetMet {
		t.Errorf("allocation errors target met with errors: %+v", errs)
	}
	note := get(caseFill, "pods_per_second").Note
	for _, want := range []string{"4 pods of 8, 4, 2 and 1 H100 GPUs", "90% of the GPUs of 80 H100 nodes", "drasched run 2: 1 of 5 pods not bound"} {
		if !strings.Contains(note, want) {
			t.Errorf("fill note %q does not say %q", note, want)
		}
	}
	if !strings.Contains(get(caseChurn, "pods_per_second").Note, "10 pods/s") {
		t.Errorf("churn note without the rate: %q", get(caseChurn, "pods_per_second").Note)
	}

	// Two series (throughput, latency CDF) per case, scheduler and run.
	if got, want := len(f.Series), len(caseNames)*2*2*2; got != want {
		t.Errorf("%d series, want %d", got, want)
	}
	for _, s := range f.Series {
		if s.Suite != results.SuiteKwok || (s.Metric != "pods_per_second" && s.Metric != metricLatencyCDF) || len(s.Points) == 0 {
			t.Errorf("series %+v", s)
		}
	}
	if f.Durations[results.SuiteKwok] != 120 || len(f.Commands) != 1 {
		t.Errorf("durations %v, commands %v", f.Durations, f.Commands)
	}
}

func TestSuiteFileNeedsBoth(t *testing.T) {
	if _, err := suiteFile([]runResult{testRun(upstream, 1, 1, 0, 0)}, "", 0); err == nil || !strings.Contains(err.Error(), "no run of drasched") {
		t.Errorf("got error %v", err)
	}
}

// Upstream cannot preempt for devices: none of its high-priority pods is
// bound and it evicts nothing. The report says so as it is: upstream's
// count 0 without a ratio, no upstream latency, the target met by drasched
// binding them all.
func TestSuiteFilePreemptUpstreamNone(t *testing.T) {
	up := testRun(upstream, 1, 1, 0, 0)
	dr := testRun(drasched, 1, 0.5, 0, 0)
	for i := range up.Cases {
		if c := &up.Cases[i]; c.Name == casePreempt {
			*c = caseResult{Name: casePreempt, Pods: 27, Unbound: 27}
		}
	}
	for i := range dr.Cases {
		if c := &dr.Cases[i]; c.Name == casePreempt {
			c.Pods, c.HighPriorityBound, c.Preempted, c.WastedGPUs = 4, 4, 12, 2
		}
	}
	f, err := suiteFile([]runResult{up, dr}, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	byMetric := map[string]results.Case{}
	for _, c := range f.Cases {
		if c.Name == casePreempt {
			byMetric[c.Metric] = c
		}
	}
	bound := byMetric[metricHighPriorityBound]
	if bound.Upstream != 0 || bound.Drasched != 4 || bound.Ratio != 0 || bound.Better != results.Higher {
		t.Errorf("high_priority_bound: %+v, want upstream 0, drasched 4, no ratio", bound)
	}
	if bound.TargetMet == nil || !*bound.TargetMet || !strings.Contains(bound.Target, "every high-priority pod") {
		t.Errorf("high_priority_bound target %q met %v, want met", bound.Target, bound.TargetMet)
	}
	preempted := byMetric[metricPreemptedPods]
	if preempted.Upstream != 0 || preempted.Drasched != 12 || preempted.Ratio != 0 || preempted.Better != results.Lower {
		t.Errorf("preempted_pods: %+v", preempted)
	}
	wasted := byMetric[metricWastedGPUs]
	if wasted.Upstream != 0 || wasted.Drasched != 2 || wasted.Better != results.Lower {
		t.Errorf("wasted_gpus: %+v", wasted)
	}
	p99 := byMetric["p99_seconds"]
	if p99.Upstream != 0 || p99.Drasched != 2 || p99.Ratio != 0 || p99.TargetMet != nil {
		t.Errorf("p99_seconds: %+v, want no upstream value and no ratio", p99)
	}
	note := byMetric["pods_per_second"].Note
	for _, want := range []string{"80 H100 nodes 100% full", "27 high-priority pods of 8 and 4 GPUs (25% of the GPUs)", "1m0s", "upstream run 1: 27 of 27 high-priority pods not bound"} {
		if !strings.Contains(note, want) {
			t.Errorf("preempt note %q does not say %q", note, want)
		}
	}
	var md strings.Builder
	if err := results.Markdown(&md, f); err != nil {
		t.Fatal(err)
	}
	if want := "| preempt | – → 2.00 (–) | – → 1.00 s (–) | – → 2.00 s (–) | – → 2.00 s (–) | 0 → 0 (–) | 0 → 4 (–) | 0 → 12 (–) |"; !strings.Contains(md.String(), want) {
		t.Errorf("Markdown lacks %q:\n%s", want, md.String())
	}
	// A drasched run that leaves one unbound misses the target.
	dr.Cases[len(dr.Cases)-1].HighPriorityBound = 3
	f, err = suiteFile([]runResult{up, dr}, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range f.Cases {
		if c.Name == casePreempt && c.Metric == metricHighPriorityBound && (c.TargetMet == nil || *c.TargetMet) {
			t.Errorf("target met with 3 of 4 bound: %+v", c)
		}
	}
}
