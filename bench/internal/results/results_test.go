package results

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNewCase(t *testing.T) {
	tests := map[string]struct {
		better         Better
		upstream, ours []float64
		want           Case
	}{
		"throughput, drasched faster": {
			better: Higher, upstream: []float64{40, 50, 45}, ours: []float64{90, 100},
			want: Case{Upstream: 45, Drasched: 95, Ratio: 95.0 / 45},
		},
		"latency, drasched lower": {
			better: Lower, upstream: []float64{2}, ours: []float64{0.5},
			want: Case{Upstream: 2, Drasched: 0.5, Ratio: 4},
		},
		"latency, drasched higher": {
			better: Lower, upstream: []float64{1}, ours: []float64{2},
			want: Case{Upstream: 1, Drasched: 2, Ratio: 0.5},
		},
		"no drasched runs": {
			better: Higher, upstream: []float64{10},
			want: Case{Upstream: 10},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := NewCase("s", "c", "m", tc.better, tc.upstream, tc.ours)
			want := tc.want
			want.Suite, want.Name, want.Metric, want.Better = "s", "c", "m", tc.better
			want.UpstreamRuns, want.DraschedRuns = tc.upstream, tc.ours
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("NewCase (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMerge(t *testing.T) {
	machine := Machine{Cores: 2, Memory: "23Gi"}
	alloc := File{
		Date: "2026-01-02T10:00:00Z", Machine: machine, Commands: []string{"make bench"},
		Durations: map[string]float64{SuiteAllocator: 60},
		Cases:     []Case{{Suite: SuiteAllocator, Name: "a", Metric: "seconds_per_op", Ratio: 3}},
	}
	perf := File{
		Date: "2026-01-02T11:00:00Z", Machine: machine, Commands: []string{"make bench"},
		Durations: map[string]float64{SuiteSchedulerPerf: 600},
		Cases: []Case{
			{Suite: SuiteSchedulerPerf, Name: "empty", Metric: "pods_per_second", Ratio: 1.5},
			{Suite: SuiteSchedulerPerf, Name: "match", Metric: "pods_per_second", Ratio: 2},
		},
		Series: []Series{{Suite: SuiteSchedulerPerf, Case: "empty", Points: [][2]float64{{1, 2}}}},
	}
	kwokOld := File{Date: "2026-01-01T00:00:00Z", Commit: "abc", Durations: map[string]float64{SuiteKwok: 100},
		Cases: []Case{{Suite: SuiteKwok, Name: "fill", Metric: "p99_seconds", Ratio: 1}}}
	// A later sitting of the same suite: its cases replace those before,
	// its time adds to theirs.
	kwokNew := File{Date: "2026-01-01T00:00:00Z", Durations: map[string]float64{SuiteKwok: 50},
		Cases: []Case{{Suite: SuiteKwok, Name: "fill", Metric: "p99_seconds", Ratio: 1.2}}}

	// kwokOld names no machine: the machine comes from the first file that does.
	got := Merge(kwokOld, alloc, perf, kwokNew)
	want := File{
		Date: "2026-01-02T11:00:00Z", Commit: "abc", Machine: machine, Commands: []string{"make bench"},
		Durations: map[string]float64{SuiteAllocator: 60, SuiteSchedulerPerf: 600, SuiteKwok: 150},
		Cases: []Case{
			{Suite: SuiteSchedulerPerf, Name: "empty", Metric: "pods_per_second", Ratio: 1.5},
			{Suite: SuiteSchedulerPerf, Name: "match", Metric: "pods_per_second", Ratio: 2},
			{Suite: SuiteKwok, Name: "fill", Metric: "p99_seconds", Ratio: 1.2},
			{Suite: SuiteAllocator, Name: "a", Metric: "seconds_per_op", Ratio: 3},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Merge (-want +got):\n%s", diff)
	}
}

func TestWriteRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "latest.json")
	met := true
	f := File{
		Date: "2026-01-02T11:00:00Z", Machine: Machine{Cores: 2, Memory: "23Gi"},
		Cases: []Case{{Suite: SuiteSchedulerPerf, Name: "empty", Metric: "pods_per_second", Upstream: 40, Drasched: 80, Ratio: 2,
			Better: Higher, Target: "≥ 2×", TargetMet: &met}},
	}
	if err := Write(path, f); err != nil {
		t.Fatal(err)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(f, got); diff != "" {
		t.Errorf("Read(Write(f)) (-want +got):\n%s", diff)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The keys of the documented format.
	for _, key := range []string{`"date"`, `"machine"`, `"cores"`, `"memory"`, `"cases"`, `"suite"`, `"name"`, `"metric"`, `"upstream"`, `"drasched"`, `"ratio"`} {
		if !bytes.Contains(data, []byte(key)) {
			t.Errorf("written file lacks %s:\n%s", key, data)
		}
	}
	if err := os.WriteFile(path, []byte(`{"date": "x", "cases": [], "unknown": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(path); err == nil {
		t.Error("Read accepted an unknown field")
	}
}

func TestMarkdown(t *testing.T) {
	met, missed := true, false
	f := File{
		Date: "2026-01-02T11:00:00Z", Machine: Machine{Cores: 2, Memory: "23Gi"},
		Commands:  []string{"make bench"},
		Durations: map[string]float64{SuiteSchedulerPerf: 1500},
		Cases: []Case{
			{Suite: SuiteSchedulerPerf, Name: "empty_500nodes", Metric: "pods_per_second", Upstream: 44.8, Drasched: 120.4, Ratio: 2.6875, Target: "≥ 2×", TargetMet: &met},
			{Suite: SuiteSchedulerPerf, Name: "empty_500nodes", Metric: "pods_per_second_p50", Upstream: 45, Drasched: 121, Ratio: 2.69},
			{Suite: SuiteSchedulerPerf, Name: "match_empty_500nodes", Metric: "pods_per_second", Upstream: 20.1, Drasched: 30, Ratio: 1.49, Target: "≥ 3×", TargetMet: &missed, Note: "1 of 2 upstream runs failed"},
			{Suite: SuiteAllocator, Name: "hard", Metric: "seconds_per_op", Upstream: 2.5, Drasched: 0.0000123, Ratio: 203252},
			{Suite: SuiteKwok, Name: "fill", Metric: "p99_seconds", Upstream: 2, Drasched: 0.5, Ratio: 4},
			{Suite: SuiteKwok, Name: "fill", Metric: "allocation_errors", Upstream: 0, Drasched: 3, Target: "no allocation errors", TargetMet: &missed},
		},
	}
	var buf bytes.Buffer
	if err := Markdown(&buf, f); err != nil {
		t.Fatal(err)
	}
	got := buf.String()
	for _, want := range []string{
		"Measured 2026-01-02T11:00:00Z on 2 cores, 23Gi memory",
		"**scheduler_perf (upstream's DRA workloads, k8s.io/kubernetes v1.37.2)**, ran 25 min",
		"| case | pods/s (average): upstream → drasched | pods/s (p50): upstream → drasched | target |",
		"| empty_500nodes | 44.8 → 120 (2.69×) | 45.0 → 121 (2.69×) | ≥ 2× ✓ |",
		"| match_empty_500nodes | 20.1 → 30.0 (1.49×) | – | ≥ 3× ✗ |",
		"match_empty_500nodes: 1 of 2 upstream runs failed",
		"| hard | 2.50 s → 12.3 µs (203252×) |",
		"| case | p99 latency: upstream → drasched | allocation errors: upstream → drasched | target |",
		"| fill | 2.00 s → 500.00 ms (4.00×) | 0 → 3 (–) | no allocation errors ✗ |",
		"```sh\nmake bench\n```",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, got)
		}
	}
}

// A count that upstream leaves at 0 reads "0 → N" without a ratio; a
// latency with no value (no pod bound) reads "–".
func TestMarkdownCounts(t *testing.T) {
	c := NewCase(SuiteKwok, "preempt", "high_priority_bound", Higher, []float64{0}, []float64{27})
	if c.Upstream != 0 || c.Drasched != 27 || c.Ratio != 0 {
		t.Errorf("case %+v, want upstream 0, drasched 27, no ratio", c)
	}
	f := File{Cases: []Case{
		NewCase(SuiteKwok, "preempt", "p99_seconds", Lower, []float64{0}, []float64{1.5}),
		c,
		NewCase(SuiteKwok, "preempt", "preempted_pods", Lower, []float64{0}, []float64{80}),
	}}
	var buf bytes.Buffer
	if err := Markdown(&buf, f); err != nil {
		t.Fatal(err)
	}
	want := "| preempt | – → 1.50 s (–) | 0 → 27 (–) | 0 → 80 (–) |"
	if !strings.Contains(buf.String(), want) {
		t.Errorf("Markdown lacks %q:\n%s", want, buf.String())
	}
	for metric, want := range map[string]bool{"allocation_errors": true, "high_priority_bound": true, "preempted_pods": true, "wasted_gpus": true, "whole_free_nodes": true, "free_4gpu_numa": true, "large_pods_placed": true, "ideal_whole_free_gpus": true, "p99_seconds": false, "pods_per_second": false} {
		if got := IsCount(metric); got != want {
			t.Errorf("IsCount(%q) = %v, want %v", metric, got, want)
		}
	}
}

func TestMemTotal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meminfo")
	if err := os.WriteFile(path, []byte("MemTotal:       24522284 kB\nMemFree:  1 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := memTotal(path); got != "23Gi" {
		t.Errorf("memTotal = %q, want 23Gi", got)
	}
	if got := memTotal(filepath.Join(t.TempDir(), "missing")); got != "" {
		t.Errorf("memTotal of a missing file = %q, want empty", got)
	}
}

// TestFormatValue: each kind of metric prints in its unit.
func TestFormatValue(t *testing.T) {
	for _, tc := range []struct {
		metric string
		v      float64
		want   string
	}{
		{"p99_seconds", 75.163, "75.16 s"},
		{"p50_seconds", 0.07391, "73.91 ms"},
		{"cpu_seconds_per_pod", 0.01309, "13.09 ms"},
		{"peak_rss_bytes", 1121.2 * (1 << 20), "1.1 GiB"},
		{"peak_rss_bytes", 351.4 * (1 << 20), "351.4 MiB"},
		{"bytes_per_op", 2048, "2.0 KiB"},
		{"allocation_errors", 0, "0"},
		{"pods_per_second", 54.25, "54.2"},
		{"pods_per_second", 0, "–"},
	} {
		if got := FormatValue(tc.metric, tc.v); got != tc.want {
			t.Errorf("FormatValue(%s, %v) = %q, want %q", tc.metric, tc.v, got, tc.want)
		}
	}
}

// TestMergeShare derives scheduler_perf's share of no-claims throughput
// from cases that ran in different files (sittings), and recomputes it,
// once, when a later file replaces one of them.
func TestMergeShare(t *testing.T) {
	perf := func(name string, upstream, drasched float64) File {
		return File{Cases: []Case{NewCase(SuiteSchedulerPerf, name, "pods_per_second", Higher, []float64{upstream}, []float64{drasched})}}
	}
	shares := func(f File) []Case {
		var out []Case
		for _, c := range f.Cases {
			if c.Metric == "share_of_no_claims" {
				out = append(out, c)
			}
		}
		return out
	}
	if got := shares(Merge(perf("empty_500nodes", 30, 40))); len(got) != 0 {
		t.Errorf("a share without its no-claims case: %+v", got)
	}
	first := Merge(perf("empty_500nodes", 30, 40), perf("noclaims_empty_500nodes", 90, 80))
	got := shares(first)
	if len(got) != 1 || got[0].Name != "empty_500nodes" || got[0].Upstream != 30.0/90 || got[0].Drasched != 0.5 ||
		got[0].TargetMet == nil || !*got[0].TargetMet {
		t.Fatalf("share: %+v, want one on empty_500nodes, 33%% → 50%%, target met", got)
	}
	again := shares(Merge(first, perf("empty_500nodes", 30, 20)))
	if len(again) != 1 || again[0].Drasched != 0.25 || *again[0].TargetMet {
		t.Errorf("share after empty_500nodes ran again: %+v, want one, 25%%, target not met", again)
	}
}

// TestScalingSeries: a point per size of each scaling case, scheduler and
// variant, from the cases' medians; a line needs two sizes; other suites,
// other cases and other metrics make none.
func TestScalingSeries(t *testing.T) {
	lower := func(name, metric string, upstream, drasched float64) Case {
		return NewCase(SuiteKwok, name, metric, Lower, []float64{upstream}, []float64{drasched})
	}
	f := File{Cases: []Case{
		lower("fill_5000nodes", "p99_seconds", 8, 0.5),
		lower("fill_500nodes", "p99_seconds", 1, 0.25),
		lower("fill_1000nodes", "p99_seconds", 2, 0.3),
		lower("fill_1000nodes", "pods_per_second", 2, 0.3),
		lower("churn_1000nodes+pqh", "cpu_seconds_per_pod", 0.01, 0.002),
		lower("churn_5000nodes+pqh", "cpu_seconds_per_pod", 0.02, 0),
		lower("noclaims_500nodes", "p50_seconds", 0.1, 0.1),
		lower("preempt_500nodes", "p50_seconds", 1, 1),
		lower("preempt_1000nodes", "p50_seconds", 1, 1),
		{Suite: SuiteSchedulerPerf, Name: "fill_500nodes", Metric: "p50_seconds", Upstream: 1, Drasched: 1},
		{Suite: SuiteSchedulerPerf, Name: "fill_1000nodes", Metric: "p50_seconds", Upstream: 1, Drasched: 1},
	}}
	got := map[string][][2]float64{}
	for _, s := range ScalingSeries(f) {
		got[s.Case+" "+s.Scheduler+" "+s.Metric] = s.Points
	}
	want := map[string][][2]float64{
		"fill upstream " + MetricScalingP99: {{500, 1}, {1000, 2}, {5000, 8}},
		"fill drasched " + MetricScalingP99: {{500, 0.25}, {1000, 0.3}, {5000, 0.5}},
		// drasched+pqh has one size with a value: no line.
		"churn upstream+pqh " + MetricScalingCPU: {{1000, 0.01}, {5000, 0.02}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("scaling series (-want +got):\n%s", diff)
	}
}
