package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/bench/internal/results"
)

// Schedulers, as results name them. draschedBestFit is drasched with the
// BestFit allocation policy, which runs the fragmentation cases only: their
// drasched column is its, and drasched's (the shipped configuration,
// FirstFit) is a line of the note.
const (
	upstream        = "upstream"
	drasched        = "drasched"
	draschedBestFit = "drasched-bestfit"
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
	// only are the cases the metric is of; if none, every case that
	// measures scheduling speed (not the fragmentation cases).
	only []string
}

// of says whether the case has the metric.
func (m metric) of(name string) bool {
	if len(m.only) == 0 {
		return !fragmentationCase(name)
	}
	return slices.Contains(m.only, name)
}

// Metrics of the preempt and preempt_gang cases only.
const (
	metricHighPriorityBound = "high_priority_bound"
	metricPreemptedPods     = "preempted_pods"
	metricWastedGPUs        = "wasted_gpus"
)

// preemptCases are the cases of high-priority pods on GPUs full of
// low-priority ones.
var preemptCases = []string{casePreempt, casePreemptGang}

// Metrics of the fragmentation cases. The series of the plot is
// metricWholeFreeNodes (metricWholeFreeGPUs) after each step of the churn.
const (
	metricWholeFreeNodes      = "whole_free_nodes"
	metricFree4GPUNUMA        = "free_4gpu_numa"
	metricLargePodsPlaced     = "large_pods_placed"
	metricIdealWholeFreeNodes = "ideal_whole_free_nodes"
	metricWholeFreeGPUs       = "whole_free_gpus"
	metricIdealWholeFreeGPUs  = "ideal_whole_free_gpus"
)

// Metrics of the gang cases: creation of a PodGroup → bind of its last
// pod, and the groups left with some but not all pods bound; of
// preempt_gang also the groups with all pods bound, as gang binds all.
const (
	metricGroupP50      = "group_p50_seconds"
	metricGroupP99      = "group_p99_seconds"
	metricPartialGroups = "partial_groups"
	metricGroupsBound   = "groups_bound"
)

// Metrics of the queue case: per Job, from its creation to the bind of its
// last pod; from the first Job's creation to the last Job's pods all bound;
// per pod, from its first watch event (the Job controller created it) to
// its bind.
const (
	metricJobP50           = "job_p50_seconds"
	metricJobP99           = "job_p99_seconds"
	metricLastJob          = "last_job_seconds"
	metricPodSchedulingP50 = "pod_scheduling_p50_seconds"
	metricPodSchedulingP99 = "pod_scheduling_p99_seconds"
)

// lastJobSeconds is from the first Job's creation to the last Job's pods
// all bound, 0 (no value) where a Job was not.
func lastJobSeconds(c caseResult) float64 {
	if c.Jobs == 0 || c.JobsBound < c.Jobs {
		return 0
	}
	return c.Seconds
}

// wholeFreeMetric is the metric of a fragmentation case's WholeFree.
func wholeFreeMetric(name string) string {
	if name == caseFragmentationMIG {
		return metricWholeFreeGPUs
	}
	return metricWholeFreeNodes
}

var metrics = []metric{
	{results.MetricPodsPerSecond, results.Higher, func(c caseResult) float64 {
		return sample{latencies: c.Latencies, seconds: c.Seconds}.podsPerSecond()
	}, nil},
	{results.MetricP50, results.Lower, func(c caseResult) float64 { return percentile(c.Latencies, 0.5) }, nil},
	{results.MetricP90, results.Lower, func(c caseResult) float64 { return percentile(c.Latencies, 0.9) }, nil},
	{results.MetricP99, results.Lower, func(c caseResult) float64 { return percentile(c.Latencies, 0.99) }, nil},
	{metricAllocationErrors, results.Lower, func(c caseResult) float64 { return float64(c.AllocationErrors) }, caseNames},
	// The high-priority pods bound, and at what cost: fewer evictions for
	// the same pods bound is better.
	{metricHighPriorityBound, results.Higher, func(c caseResult) float64 { return float64(c.HighPriorityBound) }, preemptCases},
	{metricPreemptedPods, results.Lower, func(c caseResult) float64 { return float64(c.Preempted) }, preemptCases},
	{metricWastedGPUs, results.Lower, func(c caseResult) float64 { return float64(c.WastedGPUs) }, preemptCases},
	// A gang is bound when its last pod is; a partly bound one holds
	// devices it cannot use.
	{metricGroupsBound, results.Higher, func(c caseResult) float64 { return float64(c.GroupsBound) }, []string{casePreemptGang}},
	{metricGroupP50, results.Lower, func(c caseResult) float64 { return percentile(c.GroupLatencies, 0.5) }, workloadCases},
	{metricGroupP99, results.Lower, func(c caseResult) float64 { return percentile(c.GroupLatencies, 0.99) }, workloadCases},
	{metricPartialGroups, results.Lower, func(c caseResult) float64 { return float64(c.PartialGroups) }, workloadCases},
	// A Job runs once its last pod is bound; Kueue's admission is part of
	// that time, the pod's scheduling the part after its creation.
	{metricJobP50, results.Lower, func(c caseResult) float64 { return percentile(c.JobLatencies, 0.5) }, []string{caseQueue}},
	{metricJobP99, results.Lower, func(c caseResult) float64 { return percentile(c.JobLatencies, 0.99) }, []string{caseQueue}},
	{metricLastJob, results.Lower, lastJobSeconds, []string{caseQueue}},
	{metricPodSchedulingP50, results.Lower, func(c caseResult) float64 { return percentile(c.SchedulingLatencies, 0.5) }, []string{caseQueue}},
	{metricPodSchedulingP99, results.Lower, func(c caseResult) float64 { return percentile(c.SchedulingLatencies, 0.99) }, []string{caseQueue}},
	// What the churns leave whole, and what a perfect packing of the same
	// pods would: both schedulers' ideals are alike where all their pods
	// were bound.
	{metricWholeFreeNodes, results.Higher, func(c caseResult) float64 { return float64(c.WholeFree) }, []string{caseFragmentation}},
	{metricFree4GPUNUMA, results.Higher, func(c caseResult) float64 { return float64(c.Free4GPUNUMA) }, []string{caseFragmentation}},
	{metricWholeFreeGPUs, results.Higher, func(c caseResult) float64 { return float64(c.WholeFree) }, []string{caseFragmentationMIG}},
	{metricLargePodsPlaced, results.Higher, func(c caseResult) float64 { return float64(c.LargePodsPlaced) }, []string{caseFragmentation, caseFragmentationMIG}},
	{metricIdealWholeFreeNodes, results.Higher, func(c caseResult) float64 { return float64(c.IdealWholeFree) }, []string{caseFragmentation}},
	{metricIdealWholeFreeGPUs, results.Higher, func(c caseResult) float64 { return float64(c.IdealWholeFree) }, []string{caseFragmentationMIG}},
}

// costMetrics are the scheduler's cost (cost cases; runs with
// --scheduler-pid): CPU seconds of its process per pod bound, and its peak
// RSS.
var costMetrics = []metric{
	{results.MetricCPUPerPod, results.Lower, func(c caseResult) float64 {
		if len(c.Latencies) == 0 {
			return 0
		}
		return c.CPUSeconds / float64(len(c.Latencies))
	}, costCases},
	{results.MetricPeakRSS, results.Lower, func(c caseResult) float64 { return float64(c.PeakRSSBytes) }, costCases},
}

// runGroup is the runs of one cluster size and one variant of the
// schedulers (variantPQH or none): its cases are reported as
// <case>_<nodes>nodes, +<variant> for a variant, so that sizes and
// variants stand in one file.
type runGroup struct {
	nodes   int
	variant string
}

func (g runGroup) caseName(name string) string {
	return results.KwokCaseName(name, g.nodes, g.variant)
}

// suiteFile turns the runs of the schedulers into the suite's file of the
// results format: per cluster size, variant, case and metric the median of
// each scheduler's runs, the targets drasched is held to (peak RSS ≤
// upstream's; preempt: every high-priority pod bound;
// preempt_gang: every gang bound, no GPU evicted for nothing;
// fragmentation: BestFit at least twice upstream's whole free nodes and
// within 10% of the ideal; gang and preempt_gang: no partly bound group;
// no allocation errors; and those that relate cases, results.SetKwokTargets),
// notes on what each workload is and on pods that were not bound,
// and the series for plots (throughput over time, latency CDF, whole free
// capacity over the churn; bench/cmd/report derives the scaling plots from
// the cases, results.ScalingSeries). The drasched column of the fragmentation cases is
// drasched-bestfit's where it ran them.
func suiteFile(runs []runResult, command string, seconds float64) (results.File, error) {
	byGroup := map[runGroup][]runResult{}
	for _, r := range runs {
		g := runGroup{nodes: r.Nodes, variant: r.Variant}
		byGroup[g] = append(byGroup[g], r)
	}
	groups := slices.Collect(maps.Keys(byGroup))
	slices.SortFunc(groups, func(a, b runGroup) int {
		return cmp.Or(cmp.Compare(a.nodes, b.nodes), cmp.Compare(a.variant, b.variant))
	})
	f := results.File{
		Date:      results.Now(),
		Machine:   results.CurrentMachine(),
		Durations: map[string]float64{results.SuiteKwok: seconds},
		Cases:     []results.Case{},
	}
	if command != "" {
		f.Commands = []string{command}
	}
	var missing []string
	for _, g := range groups {
		if err := groupCases(&f, g, byGroup[g]); err != nil {
			missing = append(missing, err.Error())
		}
	}
	if len(f.Cases) == 0 {
		if len(missing) > 0 {
			return f, errors.New(strings.Join(missing, "; "))
		}
		return f, fmt.Errorf("no case measured for both schedulers")
	}
	results.SetKwokTargets(&f)
	return f, nil
}

// groupCases adds the cases and series of one group's runs to the file.
func groupCases(f *results.File, g runGroup, runs []runResult) error {
	byScheduler := map[string][]runResult{}
	for _, r := range runs {
		byScheduler[r.Scheduler] = append(byScheduler[r.Scheduler], r)
	}
	for _, s := range []string{upstream, drasched} {
		if len(byScheduler[s]) == 0 {
			return fmt.Errorf("no run of %s on %d nodes%s", s, g.nodes, map[bool]string{true: " with " + g.variant}[g.variant != ""])
		}
	}
	for s := range byScheduler {
		slices.SortFunc(byScheduler[s], func(a, b runResult) int { return a.Run - b.Run })
	}
	for _, name := range caseNames {
		reported := g.caseName(name)
		// The runs behind each column.
		columns := map[string]string{upstream: upstream, drasched: drasched}
		if fragmentationCase(name) && hasCase(byScheduler[draschedBestFit], name) {
			columns[drasched] = draschedBestFit
		}
		cases := map[string][]caseResult{}
		for column, s := range columns {
			for _, r := range byScheduler[s] {
				if c, ok := findCase(r, name); ok {
					cases[column] = append(cases[column], c)
				}
			}
		}
		if len(cases[upstream]) == 0 || len(cases[drasched]) == 0 {
			continue
		}
		// The settings of the case are those of the first upstream run
		// that has it: a case may run on a cluster of its own (gang).
		first := byScheduler[upstream][0]
		for _, r := range byScheduler[upstream] {
			if _, ok := findCase(r, name); ok {
				first = r
				break
			}
		}
		var notes []string
		notes = append(notes, caseNote(name, first, cases, columns[drasched]))
		if columns[drasched] == draschedBestFit {
			var firstFit []caseResult
			for _, r := range byScheduler[drasched] {
				if c, ok := findCase(r, name); ok {
					firstFit = append(firstFit, c)
				}
			}
			if line := firstFitLine(name, firstFit); line != "" {
				notes = append(notes, line)
			}
		}
		for _, m := range slices.Concat(metrics, costMetrics) {
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
			// Runs without the scheduler's process measured have no cost.
			if (m.name == results.MetricCPUPerPod || m.name == results.MetricPeakRSS) && (slices.Contains(up, 0) || slices.Contains(dr, 0)) {
				continue
			}
			c := results.NewCase(results.SuiteKwok, reported, m.name, m.better, up, dr)
			switch {
			case m.name == results.MetricPeakRSS:
				c.Target = "≤ upstream's"
				c.TargetMet = ptr.To(c.Drasched <= c.Upstream)
			case m.name == metricHighPriorityBound && name == casePreempt:
				// All of them fit once low-priority pods are evicted.
				c.Target = "drasched binds every high-priority pod that fits after eviction"
				met := true
				for _, d := range cases[drasched] {
					met = met && d.Pods > 0 && d.HighPriorityBound == d.Pods
				}
				c.TargetMet = ptr.To(met)
			case m.name == metricGroupsBound:
				// Every group fits once low-priority pods are evicted.
				c.Target = "drasched binds every gang that fits after eviction"
				met := true
				for _, d := range cases[drasched] {
					met = met && d.Groups > 0 && d.GroupsBound == d.Groups
				}
				c.TargetMet = ptr.To(met)
			case m.name == metricWastedGPUs && name == casePreemptGang:
				// Pod-group preemption evicts for a whole group: a GPU
				// evicted for a group that is then not bound is wasted.
				c.Target = "drasched evicts no GPU for nothing"
				c.TargetMet = ptr.To(slices.Max(dr) == 0)
			case m.name == metricWholeFreeNodes && columns[drasched] == draschedBestFit:
				var ideal []float64
				for _, d := range cases[drasched] {
					ideal = append(ideal, float64(d.IdealWholeFree))
				}
				c.Target = "BestFit ≥ 2× upstream's and ≥ 90% of the ideal"
				c.TargetMet = ptr.To(c.Drasched > 0 && c.Drasched >= 2*c.Upstream && c.Drasched >= 0.9*results.Median(ideal))
			case m.name == metricPartialGroups:
				c.Target = "no partly bound group"
				c.TargetMet = ptr.To(slices.Max(dr) == 0)
			case m.name == metricAllocationErrors:
				c.Target = "no allocation errors"
				c.TargetMet = ptr.To(slices.Max(dr) == 0)
			}
			// The notes go with the first metrics, one each: Markdown
			// prints each as a line below the table.
			if len(notes) > 0 {
				c.Note, notes = notes[0], notes[1:]
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
					results.Series{Suite: results.SuiteKwok, Case: reported, Scheduler: s, Run: r.Run, Metric: results.MetricPodsPerSecond, Points: throughputSeries(c.BoundAt)},
					results.Series{Suite: results.SuiteKwok, Case: reported, Scheduler: s, Run: r.Run, Metric: metricLatencyCDF, Points: cdfSeries(c.Latencies, cdfPoints)})
			}
		}
		// Every scheduler's line on the plot of a fragmentation case, the
		// shipped configuration's too.
		for _, s := range []string{upstream, drasched, draschedBestFit} {
			for _, r := range byScheduler[s] {
				c, _ := findCase(r, name)
				if len(c.WholeFreeSeries) == 0 {
					continue
				}
				f.Series = append(f.Series, results.Series{Suite: results.SuiteKwok, Case: reported, Scheduler: s, Run: r.Run, Metric: wholeFreeMetric(name), Points: c.WholeFreeSeries})
			}
		}
	}
	return nil
}

func hasCase(runs []runResult, name string) bool {
	for _, r := range runs {
		if _, ok := findCase(r, name); ok {
			return true
		}
	}
	return false
}

// firstFitLine is the line of the report with the figures of drasched's
// shipped configuration (FirstFit) in a fragmentation case whose drasched
// column is BestFit: medians of its runs, "" if it has none.
func firstFitLine(name string, runs []caseResult) string {
	if len(runs) == 0 {
		return ""
	}
	median := func(value func(caseResult) int) float64 {
		var v []float64
		for _, c := range runs {
			v = append(v, float64(value(c)))
		}
		return results.Median(v)
	}
	wholeFree := median(func(c caseResult) int { return c.WholeFree })
	ideal := median(func(c caseResult) int { return c.IdealWholeFree })
	placed := median(func(c caseResult) int { return c.LargePodsPlaced })
	large := median(func(c caseResult) int { return c.LargePods })
	line := "drasched with its shipped configuration (FirstFit + MostAllocated): "
	switch name {
	case caseFragmentation:
		line += fmt.Sprintf("%s whole free H100 nodes (ideal %s), %s free 4-GPU NUMA nodes, %s of %s %d-GPU pods placed",
			count(wholeFree), count(ideal), count(median(func(c caseResult) int { return c.Free4GPUNUMA })), count(placed), count(large), largeGPUs)
	case caseFragmentationMIG:
		line += fmt.Sprintf("%s whole free GPUs in MIG mode (ideal %s), %s of %s whole-GPU pods placed",
			count(wholeFree), count(ideal), count(placed), count(large))
	}
	var problems []string
	for i, c := range runs {
		if c.Unbound > 0 {
			problems = append(problems, fmt.Sprintf("run %d: %d of %d pods never bound", i+1, c.Unbound, c.Pods))
		}
		if c.AllocationErrors > 0 {
			problems = append(problems, fmt.Sprintf("run %d: %d allocation errors", i+1, c.AllocationErrors))
		}
	}
	if len(problems) > 0 {
		line += "; " + strings.Join(problems, "; ")
	}
	return line + "."
}

// queueNote says what the queue case's workload was, from the teams and
// shapes of queue.go and the first upstream run's Jobs, and what Kueue's
// quota in use and borrowed came to at most in each scheduler's runs.
func queueNote(r runResult, cases map[string][]caseResult) string {
	c := cases[upstream][0]
	var teams []string
	for _, t := range queueTeams {
		teams = append(teams, fmt.Sprintf("%s (%d Jobs, %d%% of the GPUs)", t.name, c.JobsByQueue[t.name], t.demandPercent))
	}
	var limits []string
	for _, t := range queueTeams {
		limits = append(limits, fmt.Sprintf("%s borrowing up to %d%%", t.name, t.borrowPercent))
	}
	var shapes []string
	for _, s := range queueShapes {
		shapes = append(shapes, fmt.Sprintf("%d pods × %d H100 GPU%s", s.pods, s.gpus, map[bool]string{true: "s"}[s.gpus != 1]))
	}
	var peaks []string
	for _, s := range []string{upstream, drasched} {
		var used, borrowed []string
		for _, c := range cases[s] {
			used = append(used, strconv.Itoa(c.UsedPeak))
			borrowed = append(borrowed, strconv.Itoa(c.BorrowedPeak))
		}
		peaks = append(peaks, fmt.Sprintf("%s %s (%s borrowed)", s, strings.Join(used, ", "), strings.Join(borrowed, ", ")))
	}
	return fmt.Sprintf("%d batch/v1 Jobs, %d pods, of %s in turn, from LocalQueues %s of %d H100 nodes, created at once in that order; "+
		"their ClusterQueues in one cohort with a nominal quota of %d%% of the GPUs each (%s, ResourceFlavor %s with the H100 nodes' label), %s: every Job fits at once. "+
		"Kueue v0.17 (hack/kueue/values.yaml) admits them, the Job controller creates the pods, kwok ends each as soon as it runs. "+
		"Latencies are from a pod's Job's creation to its bind, job latency to the bind of the Job's last pod, pod scheduling from the pod's first watch event to its bind. "+
		"GPUs of quota in use at most: %s.",
		c.Jobs, c.Pods, strings.Join(shapes, " and "), strings.Join(teams, " and "), r.NodeMix[kindH100],
		queueNominalPercent, queueResource, queueFlavor, strings.Join(limits, ", "), strings.Join(peaks, "; "))
}

// count prints a median of counts: whole, or with .5 between two.
func count(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func findCase(r runResult, name string) (caseResult, bool) {
	for _, c := range r.Cases {
		if c.Name == name {
			return c, true
		}
	}
	return caseResult{}, false
}

// share is the fraction of the H100 GPUs that upstream's first run of a
// case filled (below fraction where FillPods bounded the pods), fraction if
// it did not say.
func share(cases map[string][]caseResult, fraction float64) float64 {
	if s := cases[upstream][0].Share; s > 0 {
		return s
	}
	return fraction
}

// boundNote says that the run bounded fill's pods, if it did.
func boundNote(r runResult) string {
	if r.FillPods == 0 {
		return ""
	}
	return fmt.Sprintf(" (fill and churn's base at most %d pods)", r.FillPods)
}

// caseNote says what the workload was, and which runs left pods unbound
// or had errors; dr is the scheduler of the drasched column.
func caseNote(name string, r runResult, cases map[string][]caseResult, dr string) string {
	pods := cases[upstream][0].Pods
	var what string
	switch name {
	case caseFill:
		what = fmt.Sprintf("%d pods of 8, 4, 2 and 1 H100 GPUs, largest first, created at once: %.0f%% of the GPUs of %d H100 nodes%s.",
			pods, share(cases, r.Fraction)*100, r.NodeMix[kindH100], boundNote(r))
	case caseNoClaims:
		what = fmt.Sprintf("%d pods without claims, fill's pods otherwise, created at once on the same cluster: the scheduler's CPU per plain pod, beside fill's per DRA pod.", pods)
	case caseChurn:
		what = fmt.Sprintf("%d pods of 1, 2 and 4 H100 GPUs at %.0f pods/s on %d H100 nodes %.0f%% full%s, each deleted %s after it was bound.",
			pods, r.ChurnRate, r.NodeMix[kindH100], share(cases, r.ChurnBase)*100, boundNote(r), time.Duration(r.ChurnLifetimeSeconds*float64(time.Second)))
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
	case casePreemptGang:
		c := cases[upstream][0]
		what = fmt.Sprintf("preempt with gangs: the %d H100 nodes 100%% full of low-priority pods of 2 and 1 GPUs, then %d high-priority PodGroups with gang policy "+
			"(minCount = size, the PodGroup and its pods of the high PriorityClass) of %d pods × %d GPUs, %d pods (%.0f%% of the GPUs), created at once, waited for at most %s; "+
			"latencies and pods/s are of the gangs' pods bound, group latency from the PodGroup's creation to the bind of its last pod, "+
			"preempted pods are the low-priority pods evicted. GenericWorkload on (scheduling.k8s.io/v1beta1), on the cluster of the gang cases.",
			r.NodeMix[kindH100], c.Groups, preemptGangShape.pods, preemptGangShape.gpus, pods, r.PreemptShare*100, time.Duration(r.PreemptWaitSeconds*float64(time.Second)))
	case caseGang:
		c := cases[upstream][0]
		what = fmt.Sprintf("%d PodGroups with gang policy (minCount = size) of %d pods × %d H100 GPUs and of %d pods × %d GPUs, %d pods, "+
			"the larger pods' groups first, created at once (each PodGroup just before its pods): %.0f%% of the GPUs of %d H100 nodes. "+
			"Group latency is from the PodGroup's creation to the bind of its last pod; partly bound groups are counted from the API once binds have settled. "+
			"GenericWorkload on (scheduling.k8s.io/v1beta1), on a cluster of its own.",
			c.Groups, gangShapes[0].pods, gangShapes[0].gpus, gangShapes[1].pods, gangShapes[1].gpus, pods, r.GangFraction*100, r.NodeMix[kindH100])
	case caseQueue:
		what = queueNote(r, cases)
	case caseFragmentation:
		what = fmt.Sprintf("A churn of %d pods of 1, 2 or 4 H100 GPUs (sizes and lifetimes drawn from seed %d, the same for every scheduler) on %d H100 nodes, "+
			"%.0f%% of the GPUs requested throughout: %d steps after the initial fill, each deleting the pods whose lifetime (1 to %d steps) ended and creating pods up to %.0f%% again. "+
			"Then, from the API: H100 nodes with all 8 GPUs free, NUMA nodes with 4 free GPUs (the H100 inventory has 2 GPUs per PCIe root, so no 4-GPU request fits on one), "+
			"and %d-GPU pods, as many as the ideal (free GPUs / 8), placed within %s. The ideal is the same pods packed perfectly.",
			pods, r.FragSeed, r.NodeMix[kindH100], r.FragUse*100, r.FragSteps, 2*r.FragLifetimeSteps-1, r.FragUse*100,
			largeGPUs, time.Duration(r.FragLargeWaitSeconds*float64(time.Second)))
	case caseFragmentationMIG:
		what = fmt.Sprintf("The fragmentation churn (same steps, run at the same time) of %d pods of one MIG device of 1g.5gb, 2g.10gb or 3g.20gb "+
			"(drawn as often as the cluster has devices of them) on %d A100 nodes, %.0f%% of their memory slices requested throughout. "+
			"Then GPUs in MIG mode with no device in use, and pods of one whole GPU in MIG mode, as many as the ideal, placed: the inventory configures fixed MIG devices, "+
			"so a 7g.40gb exists on one GPU per node only, and the whole GPU is what the churn breaks. The ideal is the MIG devices in use moved to as few GPUs as their configured devices allow.",
			pods, r.NodeMix[kindA100], r.FragUse*100)
	}
	if dr == draschedBestFit {
		what += " drasched is BestFit + MostAllocated."
	} else if fragmentationCase(name) {
		what += " drasched is its shipped configuration (FirstFit + MostAllocated): no BestFit run."
	}
	var problems []string
	for _, s := range []string{upstream, drasched} {
		label := s
		if s == drasched {
			label = dr
		}
		for i, c := range cases[s] {
			if c.Unbound > 0 {
				what := "pods not bound"
				switch {
				case slices.Contains(preemptCases, name):
					what = "high-priority pods not bound"
				case fragmentationCase(name):
					what = "churn pods never bound"
				}
				problems = append(problems, fmt.Sprintf("%s run %d: %d of %d %s", label, i+1, c.Unbound, c.Pods, what))
			}
			if c.PartialGroups > 0 {
				problems = append(problems, fmt.Sprintf("%s run %d: %d of %d groups partly bound", label, i+1, c.PartialGroups, c.Groups))
			}
			if c.JobsBound < c.Jobs {
				problems = append(problems, fmt.Sprintf("%s run %d: %d of %d Jobs not all bound", label, i+1, c.Jobs-c.JobsBound, c.Jobs))
			}
			if c.WorkloadsEvicted > 0 {
				problems = append(problems, fmt.Sprintf("%s run %d: Kueue evicted %d workloads", label, i+1, c.WorkloadsEvicted))
			}
			if n := len(c.Errors); n > 0 && c.Unbound == 0 && c.AllocationErrors == 0 {
				problems = append(problems, fmt.Sprintf("%s run %d: %s", label, i+1, c.Errors[0]))
			}
		}
	}
	if len(problems) > 0 {
		what += " " + strings.Join(problems, "; ") + "."
	}
	return what
}
