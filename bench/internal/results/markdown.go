package results

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// SuiteTitles are the headings of suites in Markdown.
var SuiteTitles = map[string]string{
	SuiteSchedulerPerf: "scheduler_perf (upstream's DRA workloads, k8s.io/kubernetes v1.37.2)",
	SuiteKwok:          "kwok end to end",
	SuiteAllocator:     "allocator (pkg/allocator against structured.NewAllocator)",
	SuiteCapacity:      "capacity (kubectl drasched top and fit from a fake clientset: read and count; no upstream counterpart)",
}

// MetricTitles are column headings of metrics in Markdown; unknown metrics
// appear under their own names.
var MetricTitles = map[string]string{
	MetricPodsPerSecond:   "pods/s (average)",
	"pods_per_second_p50": "pods/s (p50)",
	"pods_per_second_p90": "pods/s (p90)",
	"share_of_no_claims":  "share of no-claims pods/s",
	"seconds_per_op":      "time/op",
	"bytes_per_op":        "B/op",
	"allocs_per_op":       "allocs/op",
	"cpu_seconds_per_op":  "CPU/op",
	MetricP50:             "p50 latency",
	MetricP90:             "p90 latency",
	MetricP99:             "p99 latency",
	"allocation_errors":   "allocation errors",
	// The scheduler process's cost (kwok).
	MetricCPUPerPod:       "scheduler CPU per pod",
	MetricPeakRSS:         "scheduler peak RSS",
	"high_priority_bound": "high-priority pods bound",
	"preempted_pods":      "pods preempted",
	"wasted_gpus":         "GPUs evicted for nothing",
	// The kwok gang cases.
	"groups_bound":      "gangs bound",
	"group_p50_seconds": "group p50 latency",
	"group_p99_seconds": "group p99 latency",
	"partial_groups":    "partly bound groups",
	// The kwok queue case (Jobs under Kueue).
	"job_p50_seconds":            "Job p50 latency",
	"job_p99_seconds":            "Job p99 latency",
	"last_job_seconds":           "last Job bound",
	"pod_scheduling_p50_seconds": "pod scheduling p50",
	"pod_scheduling_p99_seconds": "pod scheduling p99",
	// The kwok fragmentation cases.
	"whole_free_nodes":       "whole free H100 nodes",
	"free_4gpu_numa":         "free 4-GPU NUMA nodes",
	"large_pods_placed":      "large pods placed",
	"ideal_whole_free_nodes": "ideal whole free nodes",
	"whole_free_gpus":        "whole free MIG-mode GPUs",
	"ideal_whole_free_gpus":  "ideal whole free MIG-mode GPUs",
}

// CountMetrics are metrics that count something besides errors
// ("*_errors" are counts too): their 0 is a result, not a missing value.
var CountMetrics = map[string]bool{
	"high_priority_bound": true,
	"preempted_pods":      true,
	"wasted_gpus":         true,
	// The kwok gang cases: none partly bound is the result wanted; none
	// bound (upstream's preempt_gang) is a result.
	"groups_bound":   true,
	"partial_groups": true,
	// The kwok fragmentation cases: none left whole is a result.
	"whole_free_nodes":       true,
	"free_4gpu_numa":         true,
	"large_pods_placed":      true,
	"ideal_whole_free_nodes": true,
	"whole_free_gpus":        true,
	"ideal_whole_free_gpus":  true,
}

// IsCount says whether a metric counts something, so that its 0 is shown
// as 0: errors ("*_errors") and CountMetrics.
func IsCount(metric string) bool {
	return strings.HasSuffix(metric, "_errors") || CountMetrics[metric]
}

// Markdown renders a file as one table per suite: a row per case, a column
// per metric with "upstream → drasched (ratio×)", and the targets.
func Markdown(w io.Writer, f File) error {
	bw := &strings.Builder{}
	fmt.Fprintf(bw, "Measured %s", f.Date)
	if f.Commit != "" {
		fmt.Fprintf(bw, " on commit %s", f.Commit)
	}
	fmt.Fprintf(bw, " on %d cores, %s memory; ratios above 1 mean drasched did better "+
		"(drasched/upstream for throughput, upstream/drasched for latency and cost).\n", f.Machine.Cores, f.Machine.Memory)
	var suites []string
	for _, c := range f.Cases {
		if !slices.Contains(suites, c.Suite) {
			suites = append(suites, c.Suite)
		}
	}
	for _, suite := range suites {
		title := SuiteTitles[suite]
		if title == "" {
			title = suite
		}
		fmt.Fprintf(bw, "\n**%s**", title)
		if d, ok := f.Durations[suite]; ok {
			fmt.Fprintf(bw, ", ran %s", formatElapsed(d))
		}
		fmt.Fprint(bw, "\n\n")
		writeSuiteTable(bw, f.Cases, suite)
	}
	if len(f.Commands) > 0 {
		fmt.Fprint(bw, "\nReproduce with:\n\n```sh\n")
		for _, cmd := range f.Commands {
			fmt.Fprintln(bw, cmd)
		}
		fmt.Fprint(bw, "```\n")
	}
	_, err := io.WriteString(w, bw.String())
	return err
}

func writeSuiteTable(w *strings.Builder, all []Case, suite string) {
	var names, metrics []string
	cells := map[[2]string]Case{}
	var targets map[string][]string
	var notes []string
	for _, c := range all {
		if c.Suite != suite {
			continue
		}
		if !slices.Contains(names, c.Name) {
			names = append(names, c.Name)
		}
		if !slices.Contains(metrics, c.Metric) {
			metrics = append(metrics, c.Metric)
		}
		cells[[2]string{c.Name, c.Metric}] = c
		if c.Target != "" {
			if targets == nil {
				targets = map[string][]string{}
			}
			mark := ""
			if c.TargetMet != nil {
				mark = " ✗"
				if *c.TargetMet {
					mark = " ✓"
				}
			}
			targets[c.Name] = append(targets[c.Name], c.Target+mark)
		}
		if c.Note != "" {
			notes = append(notes, fmt.Sprintf("%s: %s", c.Name, c.Note))
		}
	}
	header := []string{"case"}
	align := []string{"---"}
	for _, m := range metrics {
		title := MetricTitles[m]
		if title == "" {
			title = m
		}
		header = append(header, title+": upstream → drasched")
		align = append(align, "---:")
	}
	if targets != nil {
		header = append(header, "target")
		align = append(align, "---")
	}
	fmt.Fprintf(w, "| %s |\n|%s|\n", strings.Join(header, " | "), strings.Join(align, "|"))
	for _, name := range names {
		row := []string{name}
		for _, m := range metrics {
			c, ok := cells[[2]string{name, m}]
			if !ok {
				row = append(row, "–")
				continue
			}
			row = append(row, fmt.Sprintf("%s → %s (%s)", FormatValue(m, c.Upstream), FormatValue(m, c.Drasched), FormatRatio(c.Ratio)))
		}
		if targets != nil {
			row = append(row, strings.Join(targets[name], "; "))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
	for _, n := range notes {
		fmt.Fprintf(w, "\n%s\n", n)
	}
}

// FormatRatio prints a ratio as "2.31×", or "–" when it is undefined.
func FormatRatio(r float64) string {
	switch {
	case r <= 0:
		return "–"
	case r >= 100:
		return fmt.Sprintf("%.0f×", r)
	case r >= 10:
		return fmt.Sprintf("%.1f×", r)
	}
	return fmt.Sprintf("%.2f×", r)
}

// FormatValue prints a value in the unit its metric's name implies.
// Counts (IsCount) are whole numbers, 0 included: no errors, or no pods
// bound, is a result, not a missing value. A count that upstream leaves at
// 0 has no ratio, and its cell reads "0 → N (–)".
func FormatValue(metric string, v float64) string {
	switch {
	case IsCount(metric):
		return fmt.Sprintf("%.0f", v)
	case v == 0:
		return "–"
	case strings.HasSuffix(metric, "_seconds") || metric == "seconds_per_op" || strings.HasPrefix(metric, "cpu_seconds_"):
		return formatDuration(v)
	case metric == "bytes_per_op" || strings.HasSuffix(metric, "_bytes"):
		return formatBytes(v)
	case strings.HasPrefix(metric, "share_"):
		return fmt.Sprintf("%.0f%%", v*100)
	}
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func formatDuration(sec float64) string {
	switch {
	case sec >= 120:
		return fmt.Sprintf("%.1f min", sec/60)
	case sec >= 1:
		return fmt.Sprintf("%.2f s", sec)
	case sec >= 1e-3:
		return fmt.Sprintf("%.2f ms", sec*1e3)
	}
	return fmt.Sprintf("%.1f µs", sec*1e6)
}

// formatElapsed prints how long a suite ran: "45 s", "12 min".
func formatElapsed(sec float64) string {
	if sec < 120 {
		return fmt.Sprintf("%.0f s", sec)
	}
	return fmt.Sprintf("%.0f min", sec/60)
}

func formatBytes(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}
