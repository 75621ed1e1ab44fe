package main

import (
	"fmt"
	"maps"
	"slices"
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
	for _, name := range speedCases() {
		c := caseResult{Name: name, Pods: 4 + unbound, Unbound: unbound, AllocationErrors: allocationErrors, Seconds: 2}
		for i := range 4 {
			c.Latencies = append(c.Latencies, latency*float64(i+1))
			c.BoundAt = append(c.BoundAt, 0.5*float64(i+1))
		}
		if allocationErrors > 0 {
			c.Errors = []string{"device twice"}
		}
		if slices.Contains(preemptCases, name) {
			c.HighPriorityBound, c.Preempted = 4, 12
		}
		r.Cases = append(r.Cases, c)
	}
	return r
}

// speedCases are the cases that measure scheduling speed: all but the
// fragmentation cases.
func speedCases() []string {
	var out []string
	for _, name := range caseNames {
		if !fragmentationCase(name) {
			out = append(out, name)
		}
	}
	return out
}

// at100 is a case's name in the results of runs on 100 nodes.
func at100(name string) string { return name + "_100nodes" }

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
	// Pods/s, three latencies and allocation errors of every case,
	// high_priority_bound, preempted_pods and wasted_gpus of preempt and
	// preempt_gang, the two group latencies and partial groups of gang and
	// preempt_gang, groups bound of preempt_gang, and the Job latencies,
	// last Job and pod scheduling latencies of queue; the runs have no
	// fragmentation case.
	if got, want := len(f.Cases), len(speedCases())*5+2*3+2*3+1+5; got != want {
		t.Fatalf("%d cases, want %d", got, want)
	}
	get := func(name, metric string) results.Case {
		t.Helper()
		for _, c := range f.Cases {
			if c.Name == at100(name) && c.Metric == metric {
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
	if got, want := len(f.Series), len(speedCases())*2*2*2; got != want {
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
		if c.Name == at100(casePreempt) {
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
	if want := "| preempt_100nodes | – → 2.00 (–) | – → 1.00 s (–) | – → 2.00 s (–) | – → 2.00 s (–) | 0 → 0 (–) | 0 → 4 (–) | 0 → 12 (–) |"; !strings.Contains(md.String(), want) {
		t.Errorf("Markdown lacks %q:\n%s", want, md.String())
	}
	// A drasched run that leaves one unbound misses the target.
	for i := range dr.Cases {
		if dr.Cases[i].Name == casePreempt {
			dr.Cases[i].HighPriorityBound = 3
		}
	}
	f, err = suiteFile([]runResult{up, dr}, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range f.Cases {
		if c.Name == at100(casePreempt) && c.Metric == metricHighPriorityBound && (c.TargetMet == nil || *c.TargetMet) {
			t.Errorf("target met with 3 of 4 bound: %+v", c)
		}
	}
}

// preempt_gang runs on the cluster of the gang cases. Upstream cannot
// preempt for devices: none of its groups is bound, which is its result;
// drasched's target is every gang bound and no GPU evicted for nothing.
func TestSuiteFilePreemptGang(t *testing.T) {
	gangRun := func(scheduler string, groupsBound, wasted, partial int) runResult {
		r := runResult{
			Scheduler: scheduler, Run: 1, Nodes: 100,
			NodeMix:      map[string]int{kindH100: 80, kindL40S: 10, kindA100: 10},
			PreemptShare: 0.25, PreemptWaitSeconds: 60,
		}
		c := caseResult{Name: casePreemptGang, Pods: 40, Groups: 20, GroupsBound: groupsBound, PartialGroups: partial, WastedGPUs: wasted, Seconds: 3}
		bound := 2*groupsBound + partial
		for i := range bound {
			c.Latencies = append(c.Latencies, 0.5*float64(i+1))
			c.BoundAt = append(c.BoundAt, 0.1*float64(i+1))
		}
		for i := range groupsBound {
			c.GroupLatencies = append(c.GroupLatencies, float64(i+1))
		}
		c.HighPriorityBound, c.Unbound, c.Preempted = bound, c.Pods-bound, 4*bound
		r.Cases = []caseResult{c}
		return r
	}
	for name, tc := range map[string]struct {
		groupsBound, wasted, partial int
		boundMet, wastedMet          bool
	}{
		"all bound":        {groupsBound: 20, boundMet: true, wastedMet: true},
		"one left pending": {groupsBound: 19, wasted: 8, boundMet: false, wastedMet: false},
		"one partly bound": {groupsBound: 19, wasted: 4, partial: 1, boundMet: false, wastedMet: false},
	} {
		t.Run(name, func(t *testing.T) {
			runs := []runResult{gangRun(upstream, 0, 0, 0), gangRun(drasched, tc.groupsBound, tc.wasted, tc.partial)}
			f, err := suiteFile(runs, "", 0)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]results.Case{}
			for _, c := range f.Cases {
				if c.Name == at100(casePreemptGang) {
					got[c.Metric] = c
				}
			}
			metrics := slices.Sorted(maps.Keys(got))
			want := []string{metricAllocationErrors, metricGroupP50, metricGroupP99, metricGroupsBound, metricHighPriorityBound,
				"p50_seconds", "p90_seconds", "p99_seconds", metricPartialGroups, "pods_per_second", metricPreemptedPods, metricWastedGPUs}
			slices.Sort(want)
			if diff := cmp.Diff(want, metrics); diff != "" {
				t.Fatalf("metrics of preempt_gang (-want +got):\n%s", diff)
			}
			groups := got[metricGroupsBound]
			if groups.Upstream != 0 || groups.Drasched != float64(tc.groupsBound) || groups.Ratio != 0 || groups.Better != results.Higher {
				t.Errorf("groups_bound %+v, want 0 → %d without a ratio", groups, tc.groupsBound)
			}
			if groups.TargetMet == nil || *groups.TargetMet != tc.boundMet || !strings.Contains(groups.Target, "every gang") {
				t.Errorf("groups_bound target %q met %v, want %v", groups.Target, groups.TargetMet, tc.boundMet)
			}
			wasted := got[metricWastedGPUs]
			if wasted.Drasched != float64(tc.wasted) || wasted.TargetMet == nil || *wasted.TargetMet != tc.wastedMet {
				t.Errorf("wasted_gpus %+v, target met %v, want %v", wasted, wasted.TargetMet, tc.wastedMet)
			}
			// Pods bound is a figure here; the gangs are the target.
			if c := got[metricHighPriorityBound]; c.Target != "" || c.Drasched != float64(2*tc.groupsBound+tc.partial) {
				t.Errorf("high_priority_bound %+v", c)
			}
			if p := got[metricPartialGroups]; p.TargetMet == nil || *p.TargetMet != (tc.partial == 0) {
				t.Errorf("partial_groups %+v, target met %v", p, p.TargetMet)
			}
			if p99 := got["p99_seconds"]; p99.Upstream != 0 || p99.Drasched == 0 || p99.Ratio != 0 {
				t.Errorf("p99_seconds %+v, want no upstream value and no ratio", p99)
			}
			note := got["pods_per_second"].Note
			for _, want := range []string{"preempt with gangs", "80 H100 nodes 100% full", "20 high-priority PodGroups", "2 pods × 4 GPUs", "40 pods (25% of the GPUs)", "1m0s",
				"GenericWorkload", "upstream run 1: 40 of 40 high-priority pods not bound"} {
				if !strings.Contains(note, want) {
					t.Errorf("preempt_gang note %q does not say %q", note, want)
				}
			}
			var md strings.Builder
			if err := results.Markdown(&md, f); err != nil {
				t.Fatal(err)
			}
			// Upstream has no pods/s, and 0 gangs bound without a ratio,
			// before the group latencies.
			for _, want := range []string{"| " + at100(casePreemptGang) + " | – → ", fmt.Sprintf("| 0 → %d (–) | – → ", tc.groupsBound)} {
				if !strings.Contains(md.String(), want) {
					t.Errorf("Markdown lacks %q:\n%s", want, md.String())
				}
			}
		})
	}
}

// fragRun is a run of the fragmentation cases only, with these counts of
// fragmentation (whole free nodes, free 4-GPU NUMA nodes, 8-GPU pods
// placed; the ideal is 24) and fragmentation_mig (whole free GPUs, pods
// placed; the ideal is 30).
func fragRun(scheduler string, wholeFree, numa, placed, migWholeFree, migPlaced int) runResult {
	r := runResult{
		Scheduler: scheduler, Run: 1, Nodes: 100,
		NodeMix:  map[string]int{kindH100: 80, kindL40S: 10, kindA100: 10},
		FragSeed: 1, FragUse: 0.7, FragSteps: 24, FragLifetimeSteps: 8, FragIntervalSeconds: 1, FragLargeWaitSeconds: 30,
	}
	r.Cases = append(r.Cases,
		caseResult{Name: caseFragmentation, Pods: 900, Seconds: 30, WholeFree: wholeFree, IdealWholeFree: 24, Free4GPUNUMA: numa, IdealFree4GPUNUMA: 48,
			FreeGPUs: 192, LargePods: 24, LargePodsPlaced: placed, WholeFreeSeries: [][2]float64{{0, 24}, {1, float64(wholeFree)}}},
		caseResult{Name: caseFragmentationMIG, Pods: 700, Seconds: 30, WholeFree: migWholeFree, IdealWholeFree: 30,
			LargePods: 30, LargePodsPlaced: migPlaced, WholeFreeSeries: [][2]float64{{0, 30}, {1, float64(migWholeFree)}}})
	return r
}

// TestSuiteFileFragmentation: the drasched column of the fragmentation
// cases is BestFit's, the shipped configuration's figures are a line
// below the table, every scheduler has its line on the plot, and the
// target asks for twice upstream's whole free nodes and 90% of the ideal.
func TestSuiteFileFragmentation(t *testing.T) {
	up := testRun(upstream, 1, 1, 0, 0)
	up.Cases = append(up.Cases, fragRun(upstream, 3, 20, 3, 12, 12).Cases...)
	dr := testRun(drasched, 1, 0.5, 0, 0)
	dr.Cases = append(dr.Cases, fragRun(drasched, 16, 50, 16, 20, 20).Cases...)
	dr.FragSeed, dr.FragUse, dr.FragSteps, dr.FragLifetimeSteps = 1, 0.7, 24, 8
	up.FragSeed, up.FragUse, up.FragSteps, up.FragLifetimeSteps, up.FragLargeWaitSeconds = 1, 0.7, 24, 8, 30
	best := fragRun(draschedBestFit, 22, 55, 22, 26, 25)
	best.Cases[0].Unbound = 2

	f, err := suiteFile([]runResult{up, dr, best}, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	byMetric := map[[2]string]results.Case{}
	for _, c := range f.Cases {
		byMetric[[2]string{strings.TrimSuffix(c.Name, "_100nodes"), c.Metric}] = c
	}
	for _, want := range []struct {
		name, metric       string
		upstream, drasched float64
	}{
		{caseFragmentation, metricWholeFreeNodes, 3, 22},
		{caseFragmentation, metricFree4GPUNUMA, 20, 55},
		{caseFragmentation, metricLargePodsPlaced, 3, 22},
		{caseFragmentation, metricIdealWholeFreeNodes, 24, 24},
		{caseFragmentation, metricAllocationErrors, 0, 0},
		{caseFragmentationMIG, metricWholeFreeGPUs, 12, 26},
		{caseFragmentationMIG, metricLargePodsPlaced, 12, 25},
		{caseFragmentationMIG, metricIdealWholeFreeGPUs, 30, 30},
	} {
		c, ok := byMetric[[2]string{want.name, want.metric}]
		if !ok || c.Upstream != want.upstream || c.Drasched != want.drasched || c.Better != results.Higher && want.metric != metricAllocationErrors {
			t.Errorf("%s %s: %+v, want %v → %v", want.name, want.metric, c, want.upstream, want.drasched)
		}
	}
	for _, metric := range []string{"pods_per_second", "p99_seconds", metricWholeFreeGPUs} {
		if _, ok := byMetric[[2]string{caseFragmentation, metric}]; ok {
			t.Errorf("fragmentation has metric %s", metric)
		}
	}
	whole := byMetric[[2]string{caseFragmentation, metricWholeFreeNodes}]
	if whole.TargetMet == nil || !*whole.TargetMet || !strings.Contains(whole.Target, "2× upstream's") {
		t.Errorf("target %q met %v, want met (22 ≥ 2·3 and ≥ 0.9·24)", whole.Target, whole.TargetMet)
	}

	var md strings.Builder
	if err := results.Markdown(&md, f); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| fragmentation_100nodes | – | – | – | – | 0 → 0 (–) | – | – | – | 3 → 22 (7.33×) | 20 → 55 (2.75×) | 3 → 22 (7.33×) | 24 → 24 (1.00×) | – | – |",
		"\nfragmentation_100nodes: A churn of 900 pods of 1, 2 or 4 H100 GPUs (sizes and lifetimes drawn from seed 1, the same for every scheduler) on 80 H100 nodes, 70% of the GPUs requested throughout: 24 steps",
		"lifetime (1 to 15 steps)",
		"drasched is BestFit + MostAllocated. drasched-bestfit run 1: 2 of 900 churn pods never bound.",
		"\nfragmentation_100nodes: drasched with its shipped configuration (FirstFit + MostAllocated): 16 whole free H100 nodes (ideal 24), 50 free 4-GPU NUMA nodes, 16 of 24 8-GPU pods placed.\n",
		"\nfragmentation_mig_100nodes: drasched with its shipped configuration (FirstFit + MostAllocated): 20 whole free GPUs in MIG mode (ideal 30), 20 of 30 whole-GPU pods placed.\n",
		"BestFit ≥ 2× upstream's and ≥ 90% of the ideal ✓",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md.String())
		}
	}

	series := map[string][]string{}
	for _, s := range f.Series {
		if name := strings.TrimSuffix(s.Case, "_100nodes"); fragmentationCase(name) {
			series[name+" "+s.Metric] = append(series[name+" "+s.Metric], s.Scheduler)
		}
	}
	if diff := cmp.Diff(map[string][]string{
		"fragmentation whole_free_nodes":    {upstream, drasched, draschedBestFit},
		"fragmentation_mig whole_free_gpus": {upstream, drasched, draschedBestFit},
	}, series); diff != "" {
		t.Errorf("fragmentation series by scheduler (-want +got):\n%s", diff)
	}

	// Short of 90% of the ideal: missed.
	best.Cases[0].WholeFree = 20
	if f, err = suiteFile([]runResult{up, dr, best}, "", 0); err != nil {
		t.Fatal(err)
	}
	for _, c := range f.Cases {
		if c.Name == at100(caseFragmentation) && c.Metric == metricWholeFreeNodes && (c.TargetMet == nil || *c.TargetMet) {
			t.Errorf("target met with 20 of an ideal 24: %+v", c)
		}
	}

	// Without a BestFit run, drasched's column is the shipped
	// configuration's, and the target is not judged.
	if f, err = suiteFile([]runResult{up, dr}, "", 0); err != nil {
		t.Fatal(err)
	}
	for _, c := range f.Cases {
		if c.Name != caseFragmentation {
			continue
		}
		if c.Metric == metricWholeFreeNodes && (c.Drasched != 16 || c.Target != "") {
			t.Errorf("without BestFit: %+v", c)
		}
		if strings.Contains(c.Note, "shipped configuration (FirstFit + MostAllocated): 16") {
			t.Errorf("without BestFit, a FirstFit line: %q", c.Note)
		}
	}
}

// The gang case runs on a cluster of its own: its run has only that case,
// and its settings (the share of the GPUs) are that run's. Partly bound
// groups miss the target and show in the note.
func TestSuiteFileGang(t *testing.T) {
	gangRun := func(scheduler string, latency float64, partial int) runResult {
		r := runResult{
			Scheduler: scheduler, Run: 1, Nodes: 100,
			NodeMix:      map[string]int{kindH100: 80, kindL40S: 10, kindA100: 10},
			GangFraction: 0.8,
		}
		c := caseResult{Name: caseGang, Pods: 96, Groups: 16, GroupsBound: 16 - partial, PartialGroups: partial, Seconds: 4}
		for i := range 96 - partial {
			c.Latencies = append(c.Latencies, latency)
			c.BoundAt = append(c.BoundAt, 4*float64(i+1)/96)
		}
		c.Unbound = partial
		for i := range 16 - partial {
			c.GroupLatencies = append(c.GroupLatencies, latency*float64(i+1))
		}
		r.Cases = []caseResult{c}
		return r
	}
	other := func(scheduler string) runResult {
		r := testRun(scheduler, 1, 1, 0, 0)
		r.Cases = slices.DeleteFunc(r.Cases, func(c caseResult) bool { return c.Name == caseGang })
		return r
	}
	for name, tc := range map[string]struct {
		partial int
		met     bool
	}{
		"all bound":    {met: true},
		"partly bound": {partial: 1, met: false},
	} {
		t.Run(name, func(t *testing.T) {
			runs := []runResult{other(upstream), gangRun(upstream, 2, 0), other(drasched), gangRun(drasched, 1, tc.partial)}
			f, err := suiteFile(runs, "", 0)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]results.Case{}
			for _, c := range f.Cases {
				if c.Name == at100(caseGang) {
					got[c.Metric] = c
				}
			}
			var metrics []string
			for m := range got {
				metrics = append(metrics, m)
			}
			slices.Sort(metrics)
			want := []string{metricAllocationErrors, metricGroupP50, metricGroupP99, "p50_seconds", "p90_seconds", "p99_seconds", metricPartialGroups, "pods_per_second"}
			slices.Sort(want)
			if diff := cmp.Diff(want, metrics); diff != "" {
				t.Fatalf("metrics of gang (-want +got):\n%s", diff)
			}
			// Upstream's 16 group latencies 2, 4, ..., 32: p99 32, p50 16.
			if c := got[metricGroupP99]; c.Upstream != 32 || c.Better != results.Lower {
				t.Errorf("group p99 %+v", c)
			}
			if c := got[metricGroupP50]; c.Upstream != 16 {
				t.Errorf("group p50 %+v", c)
			}
			partial := got[metricPartialGroups]
			if partial.Drasched != float64(tc.partial) || partial.TargetMet == nil || *partial.TargetMet != tc.met {
				t.Errorf("partial groups %+v, target met %v, want %v", partial, partial.TargetMet, tc.met)
			}
			note := got["pods_per_second"].Note
			for _, want := range []string{"16 PodGroups with gang policy", "4 pods × 8 H100 GPUs", "8 pods × 4 GPUs", "96 pods", "80% of the GPUs of 80 H100 nodes", "GenericWorkload"} {
				if !strings.Contains(note, want) {
					t.Errorf("gang note %q does not say %q", note, want)
				}
			}
			if says := strings.Contains(note, "groups partly bound"); says != (tc.partial > 0) {
				t.Errorf("gang note %q: says partly bound groups %v, want %v", note, says, tc.partial > 0)
			}
			// The other cases are there too, from the other runs.
			if !slices.ContainsFunc(f.Cases, func(c results.Case) bool { return c.Name == at100(caseFill) }) {
				t.Error("no fill case")
			}
		})
	}
}

// sizedRun is a run on nodes nodes of fill, noclaims and churn, whose
// pods' latencies are latency, 2·latency, ...; the scheduler used cpu
// seconds per case (half of it for noclaims) and peaked at rss bytes.
func sizedRun(scheduler, variant string, nodes int, latency, cpu float64, rss uint64) runResult {
	r := runResult{Scheduler: scheduler, Variant: variant, Run: 1, Nodes: nodes,
		NodeMix: map[string]int{kindH100: nodes * 8 / 10}, Fraction: 0.9, ChurnBase: 0.3, ChurnRate: 20, ChurnLifetimeSeconds: 5, FillPods: 1000}
	for _, name := range []string{caseFill, caseNoClaims, caseChurn} {
		c := caseResult{Name: name, Pods: 4, Seconds: 2, CPUSeconds: cpu, PeakRSSBytes: rss}
		switch name {
		case caseNoClaims:
			c.CPUSeconds = cpu / 2
		case caseFill:
			c.Share = 0.25
		}
		for i := range 4 {
			c.Latencies = append(c.Latencies, latency*float64(i+1))
			c.BoundAt = append(c.BoundAt, 0.5*float64(i+1))
		}
		r.Cases = append(r.Cases, c)
	}
	return r
}

// TestSuiteFileSizesAndVariants: cases carry their cluster size and
// variant; on 5000 nodes fill's p99 is held against upstream's best of
// both variants and churn's p50 against 100 ms; CPU per DRA pod against
// CPU per plain pod.
func TestSuiteFileSizesAndVariants(t *testing.T) {
	runs := []runResult{
		// 1000 nodes: drasched 4× lower latencies, CPU 0.4 s per case.
		sizedRun(upstream, "", 1000, 0.4, 1, 300<<20),
		sizedRun(drasched, "", 1000, 0.1, 0.4, 200<<20),
		// 5000 nodes: upstream at its defaults 2 s, with pqh 0.5 s;
		// drasched 0.04 s (12.5× lower than upstream's best, p50 80 ms),
		// with pqh 0.06 s (8.3×).
		sizedRun(upstream, "", 5000, 2, 4, 900<<20),
		sizedRun(drasched, "", 5000, 0.04, 2, 1000<<20),
		sizedRun(upstream, variantPQH, 5000, 0.5, 3, 800<<20),
		sizedRun(drasched, variantPQH, 5000, 0.06, 2, 700<<20),
	}
	f, err := suiteFile(runs, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	get := func(name, metric string) results.Case {
		t.Helper()
		for _, c := range f.Cases {
			if c.Name == name && c.Metric == metric {
				return c
			}
		}
		t.Fatalf("no case %s %s", name, metric)
		return results.Case{}
	}
	// Upstream's best p99 on 5000 nodes is pqh's 4·0.5 = 2 s; drasched's
	// 0.16 s is 12.5× lower, drasched+pqh's 0.24 s only 8.3×.
	fill := get("fill_5000nodes", "p99_seconds")
	if fill.Upstream != 8 || fill.TargetMet == nil || !*fill.TargetMet || !strings.Contains(fill.Target, "10× lower than upstream's best, 2.00 s") {
		t.Errorf("fill_5000nodes p99: %+v", fill)
	}
	if pqh := get("fill_5000nodes+pqh", "p99_seconds"); pqh.Upstream != 2 || pqh.TargetMet == nil || *pqh.TargetMet {
		t.Errorf("fill_5000nodes+pqh p99: %+v, want the target missed", pqh)
	}
	if small := get("fill_1000nodes", "p99_seconds"); small.Target != "p99 ≤ upstream's" {
		t.Errorf("fill_1000nodes p99 target %q, want the one of every size", small.Target)
	}
	// Churn's p50 (2.5·latency): 100 ms for drasched, 150 ms with pqh.
	if churn := get("churn_5000nodes", "p50_seconds"); churn.TargetMet == nil || !*churn.TargetMet {
		t.Errorf("churn_5000nodes p50: %+v, want met", churn)
	}
	if churn := get("churn_5000nodes+pqh", "p50_seconds"); churn.TargetMet == nil || *churn.TargetMet {
		t.Errorf("churn_5000nodes+pqh p50: %+v, want missed", churn)
	}
	if churn := get("churn_1000nodes", "p50_seconds"); churn.Target != "" {
		t.Errorf("churn_1000nodes has target %q; only 5000 nodes have one", churn.Target)
	}
	// CPU per pod: cpu/4 pods, noclaims half of it.
	cpu := get("fill_5000nodes", results.MetricCPUPerPod)
	if cpu.Upstream != 1 || cpu.Drasched != 0.5 || cpu.Ratio != 2 || cpu.TargetMet == nil || !*cpu.TargetMet {
		t.Errorf("fill_5000nodes CPU per pod: %+v", cpu)
	}
	if plain := get("noclaims_5000nodes", results.MetricCPUPerPod); plain.Drasched != 0.25 || plain.Target != "" {
		t.Errorf("noclaims_5000nodes CPU per pod: %+v", plain)
	}
	if rss := get("fill_5000nodes", results.MetricPeakRSS); rss.TargetMet == nil || *rss.TargetMet {
		t.Errorf("fill_5000nodes peak RSS %+v: drasched's is above upstream's, want missed", rss)
	}
	if rss := get("fill_5000nodes+pqh", results.MetricPeakRSS); rss.TargetMet == nil || !*rss.TargetMet {
		t.Errorf("fill_5000nodes+pqh peak RSS %+v, want met", rss)
	}

	// The notes say what FillPods did to fill and churn.
	for name, want := range map[string]string{
		"fill_5000nodes":     "25% of the GPUs of 4000 H100 nodes (fill and churn's base at most 1000 pods)",
		"churn_5000nodes":    "30% full (fill and churn's base at most 1000 pods)",
		"noclaims_5000nodes": "pods without claims",
	} {
		if note := get(name, "pods_per_second").Note; !strings.Contains(note, want) {
			t.Errorf("%s note %q does not say %q", name, note, want)
		}
	}

	// The scaling plots come from the cases (results.ScalingSeries).
	for _, s := range f.Series {
		if results.IsScalingMetric(s.Metric) {
			t.Errorf("scaling series %s %s in a run's file", s.Case, s.Metric)
		}
	}
}

// TestSuiteFileWithoutCost: runs without the scheduler's process measured
// report no cost metrics, rather than zeros.
func TestSuiteFileWithoutCost(t *testing.T) {
	f, err := suiteFile([]runResult{sizedRun(upstream, "", 100, 1, 0, 0), sizedRun(drasched, "", 100, 1, 0, 0)}, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range f.Cases {
		if c.Metric == results.MetricCPUPerPod || c.Metric == results.MetricPeakRSS {
			t.Errorf("case %s has %s without a measurement", c.Name, c.Metric)
		}
	}
}

// The queue case reports its Jobs' latencies and the last Job's, and says
// in its note what Kueue's queues were; a run with a Job not all bound has
// no last Job time, and the note says why.
func TestSuiteFileQueue(t *testing.T) {
	queue := func(r runResult, jobLatencies, scheduling []float64, seconds float64, jobsBound int) runResult {
		for i := range r.Cases {
			if c := &r.Cases[i]; c.Name == caseQueue {
				c.Jobs, c.JobsBound, c.JobsByQueue = 3, jobsBound, map[string]int{"team-a": 2, "team-b": 1}
				c.JobLatencies, c.SchedulingLatencies, c.Seconds = jobLatencies, scheduling, seconds
				c.UsedPeak, c.BorrowedPeak = 24, 4
			}
		}
		return r
	}
	runs := []runResult{
		queue(testRun(upstream, 1, 1, 0, 0), []float64{10, 20, 30}, []float64{4, 8}, 40, 3),
		queue(testRun(drasched, 1, 0.5, 0, 0), []float64{5, 6, 8}, []float64{1, 2}, 10, 3),
	}
	f, err := suiteFile(runs, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	byMetric := map[string]results.Case{}
	for _, c := range f.Cases {
		if c.Name == at100(caseQueue) {
			byMetric[c.Metric] = c
		}
	}
	for metric, want := range map[string][2]float64{
		metricJobP50:           {20, 6},
		metricJobP99:           {30, 8},
		metricLastJob:          {40, 10},
		metricPodSchedulingP50: {4, 1},
		metricPodSchedulingP99: {8, 2},
	} {
		c := byMetric[metric]
		if c.Upstream != want[0] || c.Drasched != want[1] || c.Better != results.Lower {
			t.Errorf("%s: %+v, want upstream %v, drasched %v, lower better", metric, c, want[0], want[1])
		}
	}
	note := byMetric[results.MetricPodsPerSecond].Note
	for _, want := range []string{"3 batch/v1 Jobs", "4 pods × 2 H100 GPUs and 8 pods × 1 H100 GPU in turn", "team-a (2 Jobs, 50% of the GPUs) and team-b (1 Jobs, 30% of the GPUs) of 80 H100 nodes",
		"nominal quota of 40%", "team-a borrowing up to 10%, team-b borrowing up to 0%", "upstream 24 (4 borrowed); drasched 24 (4 borrowed)"} {
		if !strings.Contains(note, want) {
			t.Errorf("queue note %q does not say %q", note, want)
		}
	}

	runs[1] = queue(testRun(drasched, 1, 0.5, 0, 0), []float64{5, 6}, []float64{1, 2}, 10, 2)
	f, err = suiteFile(runs, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range f.Cases {
		if c.Name == at100(caseQueue) && c.Metric == metricLastJob && (c.Drasched != 0 || c.Ratio != 0) {
			t.Errorf("last Job of a run with a Job not all bound: %+v, want none", c)
		}
		if c.Name == at100(caseQueue) && c.Note != "" && !strings.Contains(c.Note, "drasched run 1: 1 of 3 Jobs not all bound") {
			t.Errorf("queue note %q does not say that a Job was not bound", c.Note)
		}
	}
}
