package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/drasched/drasched/bench/internal/results"
)

const benchOutput = `goos: linux
goarch: amd64
pkg: github.com/drasched/drasched/pkg/allocator
BenchmarkAllocate/case=empty_500nodes/impl=upstream-2         	     100	   2000000 ns/op	  100000 B/op	    1000 allocs/op
BenchmarkAllocate/case=empty_500nodes/impl=drasched-2         	    1000	    500000 ns/op	   10000 B/op	     100 allocs/op	         0.990 cel-hit-ratio
BenchmarkAllocate/case=empty_500nodes/impl=upstream-2         	     100	   4000000 ns/op	  100000 B/op	    1000 allocs/op
BenchmarkAllocate/case=empty_500nodes/impl=drasched-2         	    1000	    500000 ns/op	   10000 B/op	     100 allocs/op	         0.990 cel-hit-ratio
BenchmarkAllocate/case=lonely/impl=upstream-2                 	     100	   2000000 ns/op
PASS
pkg: github.com/drasched/drasched/pkg/capacity
BenchmarkTop/case=top_nodes_5000nodes_8gpus/impl=drasched-2   	       3	 576079332 ns/op	187989160 B/op	  853278 allocs/op
PASS
`

func TestAllocatorSuite(t *testing.T) {
	dir := t.TempDir()
	raw := filepath.Join(dir, "raw.txt")
	if err := os.WriteFile(raw, []byte(benchOutput), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "allocator.json")
	if err := run([]string{"allocator", "-command", "make bench-allocator", "-seconds", "12", raw, out}); err != nil {
		t.Fatal(err)
	}
	f, err := results.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Cases) != 6 {
		t.Fatalf("%d cases, want 6 (one per metric of empty_500nodes and of top_nodes; lonely has no drasched run): %+v", len(f.Cases), f.Cases)
	}
	top := f.Cases[3]
	if top.Suite != results.SuiteCapacity || top.Metric != "seconds_per_op" || top.Drasched != 0.576079332 || top.Ratio != 0 ||
		top.Target != "time/op ≤ 2 s" || top.TargetMet == nil || !*top.TargetMet {
		t.Errorf("capacity case: %+v", top)
	}
	c := f.Cases[0]
	if c.Suite != results.SuiteAllocator || c.Metric != "seconds_per_op" || c.Upstream != 0.003 || c.Drasched != 0.0005 || c.Ratio != 6 || c.Better != results.Lower {
		t.Errorf("time case: %+v", c)
	}
	if f.Durations[results.SuiteAllocator] != 12 || len(f.Commands) != 1 {
		t.Errorf("durations %v, commands %v", f.Durations, f.Commands)
	}
	if err := os.WriteFile(raw, []byte("PASS\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"allocator", raw, out}); err == nil {
		t.Error("no error for output without benchmarks")
	}
}

func TestMerge(t *testing.T) {
	dir := t.TempDir()
	perf := results.File{
		Date: "2026-01-02T11:00:00Z", Machine: results.Machine{Cores: 2, Memory: "23Gi"},
		Cases: []results.Case{{Suite: results.SuiteSchedulerPerf, Name: "empty_500nodes", Metric: "pods_per_second", Upstream: 40, Drasched: 80, Ratio: 2}},
		Series: []results.Series{
			{Suite: results.SuiteSchedulerPerf, Case: "empty_500nodes", Scheduler: "upstream", Run: 1, Metric: "pods_per_second", Points: [][2]float64{{1, 39}, {2, 41}}},
			{Suite: results.SuiteSchedulerPerf, Case: "empty_500nodes", Scheduler: "drasched", Run: 1, Metric: "pods_per_second", Points: [][2]float64{{1, 79}, {2, 81}}},
		},
	}
	kwok := results.File{
		Date:  "2026-01-02T10:30:00Z",
		Cases: []results.Case{{Suite: results.SuiteKwok, Name: "fill", Metric: "p99_seconds", Upstream: 2, Drasched: 1, Ratio: 2}},
		Series: []results.Series{
			{Suite: results.SuiteKwok, Case: "fill", Scheduler: "upstream", Run: 1, Metric: metricThroughput, Points: [][2]float64{{1, 10}, {2, 12}}},
			{Suite: results.SuiteKwok, Case: "fill", Scheduler: "upstream", Run: 1, Metric: metricLatencyCDF, Points: [][2]float64{{0.5, 0}, {0.5, 0.5}, {2, 1}}},
			{Suite: results.SuiteKwok, Case: "fill", Scheduler: "drasched", Run: 1, Metric: metricLatencyCDF, Points: [][2]float64{{0.2, 0}, {0.2, 0.5}, {1, 1}}},
		},
	}
	alloc := results.File{
		Date:  "2026-01-02T10:00:00Z",
		Cases: []results.Case{{Suite: results.SuiteAllocator, Name: "hard", Metric: "seconds_per_op", Upstream: 2, Drasched: 0.001, Ratio: 2000}},
	}
	// The allocator's file, without a machine, comes first: the report
	// must not depend on the order of its inputs.
	var inputs []string
	for _, in := range []struct {
		name string
		file results.File
	}{{"alloc.json", alloc}, {"kwok.json", kwok}, {"perf.json", perf}} {
		path := filepath.Join(dir, in.name)
		if err := results.Write(path, in.file); err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, path)
	}
	doc := filepath.Join(dir, "docs", "benchmarks.md")
	if err := os.MkdirAll(filepath.Dir(doc), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(doc, []byte("# x\n\n<!-- bench:begin -->\nold table\n<!-- bench:end -->\n\nmore\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "bench", "results")
	if err := run(append([]string{"merge", "-out", out, "-doc", doc}, inputs...)); err != nil {
		t.Fatal(err)
	}
	merged, err := results.Read(filepath.Join(out, "latest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(merged.Cases) != 3 || merged.Cases[0].Suite != results.SuiteSchedulerPerf || merged.Cases[1].Suite != results.SuiteKwok || len(merged.Series) != 0 {
		t.Errorf("merged: %+v", merged)
	}
	svg, err := os.ReadFile(filepath.Join(out, "plots", "scheduler_perf_empty_500nodes.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(svg), "<svg") || !strings.Contains(string(svg), "drasched run 1") {
		t.Errorf("plot is not an SVG with a legend:\n%.300s", svg)
	}
	md, err := os.ReadFile(filepath.Join(out, "latest.md"))
	if err != nil {
		t.Fatal(err)
	}
	reversed := filepath.Join(dir, "reversed")
	backward := slices.Clone(inputs)
	slices.Reverse(backward)
	if err := run(append([]string{"merge", "-out", reversed}, backward...)); err != nil {
		t.Fatal(err)
	}
	if md2, err := os.ReadFile(filepath.Join(reversed, "latest.md")); err != nil {
		t.Fatal(err)
	} else if string(md2) != string(md) {
		t.Errorf("latest.md depends on the order of the inputs; in order:\n%s\nreversed:\n%s", md, md2)
	}
	for _, want := range []string{
		"Measured 2026-01-02T11:00:00Z on 2 cores, 23Gi memory;",
		"\nThroughput over time, per case: [empty_500nodes](plots/scheduler_perf_empty_500nodes.svg) [fill](plots/kwok_fill.svg)\n",
		"\nCreation → bound latency (CDF), per case: [fill](plots/kwok_fill_latency_cdf.svg)\n",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("latest.md lacks %q:\n%s", want, md)
		}
	}
	cdf, err := os.ReadFile(filepath.Join(out, "plots", "kwok_fill_latency_cdf.svg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fraction of pods bound", "latency (s)", "upstream run 1", "drasched run 1"} {
		if !strings.Contains(string(cdf), want) {
			t.Errorf("latency CDF plot lacks %q", want)
		}
	}
	throughput, err := os.ReadFile(filepath.Join(out, "plots", "kwok_fill.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(throughput), "drasched run 1") || !strings.Contains(string(throughput), "pods/s") {
		t.Error("the kwok throughput plot should have upstream's series only, with a pods/s axis")
	}
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	if strings.Contains(text, "old table") || !strings.HasPrefix(text, "# x\n\n<!-- bench:begin -->\nMeasured ") || !strings.HasSuffix(text, "<!-- bench:end -->\n\nmore\n") {
		t.Errorf("docs/benchmarks.md section not replaced:\n%s", text)
	}
	if !strings.Contains(text, "(../bench/results/plots/scheduler_perf_empty_500nodes.svg)") {
		t.Errorf("plot link not relative to docs/:\n%s", text)
	}
}

// TestMergeStore resumes as `make bench` does: each merge adds its suite
// file to the store of its commit, latest.json holds everything stored,
// `done` lists what is measured, and another commit starts over.
func TestMergeStore(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "results")
	store := filepath.Join(out, "store")
	write := func(name string, f results.File) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := results.Write(path, f); err != nil {
			t.Fatal(err)
		}
		return path
	}
	kwokCase := func(name string) results.File {
		return results.File{
			Date: "2026-01-02T10:00:00Z", Machine: results.Machine{Cores: 2, Memory: "23Gi"},
			Durations: map[string]float64{results.SuiteKwok: 60},
			Cases:     []results.Case{{Suite: results.SuiteKwok, Name: name, Metric: "pods_per_second", Upstream: 1, Drasched: 2, Ratio: 2}},
			Series: []results.Series{{Suite: results.SuiteKwok, Case: name, Scheduler: "upstream", Run: 1, Metric: metricThroughput,
				Points: [][2]float64{{1, 1}, {2, 1}}}},
		}
	}
	merge := func(commit string, inputs ...string) error {
		return run(append([]string{"merge", "-out", out, "-commit", commit, "-store", store}, inputs...))
	}
	done := func(commit string) []string {
		t.Helper()
		names, err := doneCases(filepath.Join(out, "latest.json"), commit, results.SuiteKwok)
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	if got := done("c1"); len(got) != 0 {
		t.Errorf("done before any merge: %v", got)
	}
	if err := merge("c1", write("a.json", kwokCase("fill_1000nodes"))); err != nil {
		t.Fatal(err)
	}
	if err := merge("c1", write("b.json", kwokCase("fill_5000nodes"))); err != nil {
		t.Fatal(err)
	}
	merged, err := results.Read(filepath.Join(out, "latest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if merged.Commit != "c1" || len(merged.Cases) != 2 || merged.Durations[results.SuiteKwok] != 120 {
		t.Errorf("after two sittings of c1: commit %q, %d cases, kwok ran %v s; want c1, 2, 120", merged.Commit, len(merged.Cases), merged.Durations[results.SuiteKwok])
	}
	for _, plot := range []string{"kwok_fill_1000nodes.svg", "kwok_fill_5000nodes.svg"} {
		if _, err := os.Stat(filepath.Join(out, "plots", plot)); err != nil {
			t.Errorf("the plots of every sitting are drawn: %v", err)
		}
	}
	if got, want := done("c1"), []string{"fill_1000nodes", "fill_5000nodes"}; !slices.Equal(got, want) {
		t.Errorf("done on c1: %v, want %v", got, want)
	}
	if got := done("c2"); len(got) != 0 {
		t.Errorf("done on c2, which measured nothing: %v", got)
	}
	// A case whose drasched runs all failed has no value for it: not
	// done, so that the next sitting runs it again.
	failed := kwokCase("churn_1000nodes")
	failed.Cases[0].Drasched, failed.Cases[0].Ratio = 0, 0
	if err := merge("c1", write("failed.json", failed)); err != nil {
		t.Fatal(err)
	}
	if got, want := done("c1"), []string{"fill_1000nodes", "fill_5000nodes"}; !slices.Equal(got, want) {
		t.Errorf("done on c1 with a failed churn: %v, want %v", got, want)
	}

	// A file that says it measured another commit is refused, and the
	// store keeps what it had.
	other := kwokCase("match_1000nodes")
	other.Commit = "c0"
	if err := merge("c1", write("c.json", other)); err == nil || !strings.Contains(err.Error(), "c0") {
		t.Errorf("merging a file of commit c0 as c1: %v, want an error naming c0", err)
	}
	if stored, _ := filepath.Glob(filepath.Join(store, "*.json")); len(stored) != 3 {
		t.Errorf("store after the refused merge: %v, want the 3 files of c1", stored)
	}

	// The next commit starts over: nothing of c1 stays in latest.json or
	// among the plots.
	if err := merge("c2", write("d.json", kwokCase("match_1000nodes"))); err != nil {
		t.Fatal(err)
	}
	merged, err = results.Read(filepath.Join(out, "latest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if merged.Commit != "c2" || len(merged.Cases) != 1 || merged.Cases[0].Name != "match_1000nodes" {
		t.Errorf("after c2: commit %q, cases %+v; want c2's match_1000nodes only", merged.Commit, merged.Cases)
	}
	if _, err := os.Stat(filepath.Join(out, "plots", "kwok_fill_1000nodes.svg")); !os.IsNotExist(err) {
		t.Errorf("c1's plot is still there after c2 started over (stat: %v)", err)
	}
	md, err := os.ReadFile(filepath.Join(out, "latest.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "Measured 2026-01-02T10:00:00Z on commit c2 on 2 cores") {
		t.Errorf("latest.md does not name the commit:\n%s", md)
	}
	if err := run([]string{"merge", "-out", out, "-store", store, write("e.json", kwokCase("x"))}); err == nil {
		t.Error("a store without -commit: no error")
	}

	// Merged again from the store alone (after a change to the report):
	// the same cases of the same commit, the store as it was.
	before, _ := filepath.Glob(filepath.Join(store, "*.json"))
	if err := os.Remove(filepath.Join(out, "latest.json")); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"merge", "-out", out, "-store", store}); err != nil {
		t.Fatal(err)
	}
	again, err := results.Read(filepath.Join(out, "latest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if again.Commit != "c2" || len(again.Cases) != 1 || again.Cases[0].Name != "match_1000nodes" {
		t.Errorf("merged again from the store: commit %q, cases %+v; want c2's match_1000nodes only", again.Commit, again.Cases)
	}
	if after, _ := filepath.Glob(filepath.Join(store, "*.json")); !slices.Equal(before, after) {
		t.Errorf("store after merging it again: %v, want it unchanged, %v", after, before)
	}
	if err := run([]string{"merge", "-out", out, "-commit", "c1", "-store", store}); err == nil || !strings.Contains(err.Error(), "c2") {
		t.Errorf("the store of c2 merged again as c1: %v, want an error naming c2", err)
	}
	if err := run([]string{"merge", "-out", out, "-store", t.TempDir()}); err == nil || !strings.Contains(err.Error(), "nothing to merge") {
		t.Errorf("an empty store merged again: %v, want nothing to merge", err)
	}
	if err := run([]string{"merge", "-out", out}); err == nil || !strings.Contains(err.Error(), "usage") {
		t.Errorf("merge without a file or a store: %v, want usage", err)
	}
}

func TestPlotPath(t *testing.T) {
	for _, tc := range []struct{ suite, name, metric, want string }{
		{"scheduler_perf", "empty_500nodes", metricThroughput, "p/scheduler_perf_empty_500nodes.svg"},
		{"kwok", "fill", metricLatencyCDF, "p/kwok_fill_latency_cdf.svg"},
		{"kwok", "a b/c", "other", "p/kwok_a_b_c_other.svg"},
		{"kwok", "fragmentation", metricWholeFreeNodes, "p/kwok_fragmentation.svg"},
		{"kwok", "fragmentation_mig", metricWholeFreeGPUs, "p/kwok_fragmentation_mig.svg"},
	} {
		if got := plotPath("p", tc.suite, tc.name, tc.metric); got != tc.want {
			t.Errorf("plotPath(%q, %q, %q) = %q, want %q", tc.suite, tc.name, tc.metric, got, tc.want)
		}
	}
	if _, _, y, fraction := axes(metricLatencyCDF); !fraction || y != "fraction of pods bound" {
		t.Errorf("latency CDF axes: y %q, fraction %v", y, fraction)
	}
	if _, _, y, fraction := axes(metricThroughput); fraction || y != "pods/s" {
		t.Errorf("throughput axes: y %q, fraction %v", y, fraction)
	}
}

// TestFragmentationPlot: the whole-free series of a kwok fragmentation
// case make its own plot, kwok_<case>.svg, a line per scheduler, drasched
// named by its allocation policy beside drasched-bestfit.
func TestFragmentationPlot(t *testing.T) {
	dir := t.TempDir()
	points := func(v ...float64) [][2]float64 {
		var out [][2]float64
		for i, y := range v {
			out = append(out, [2]float64{float64(i), y})
		}
		return out
	}
	kwok := results.File{
		Date: "2026-01-02T10:30:00Z",
		Cases: []results.Case{
			{Suite: results.SuiteKwok, Name: "fragmentation", Metric: "whole_free_nodes", Upstream: 2, Drasched: 20, Ratio: 10, Better: results.Higher,
				Note: "the churn"},
			{Suite: results.SuiteKwok, Name: "fragmentation", Metric: "free_4gpu_numa", Upstream: 0, Drasched: 41, Better: results.Higher,
				Note: "drasched with its shipped configuration (FirstFit + MostAllocated): 12 whole free H100 nodes (ideal 24)."},
		},
		Series: []results.Series{
			{Suite: results.SuiteKwok, Case: "fragmentation", Scheduler: "upstream", Run: 1, Metric: metricWholeFreeNodes, Points: points(20, 8, 3, 2)},
			{Suite: results.SuiteKwok, Case: "fragmentation", Scheduler: "drasched", Run: 1, Metric: metricWholeFreeNodes, Points: points(24, 15, 13, 12)},
			{Suite: results.SuiteKwok, Case: "fragmentation", Scheduler: draschedBestFit, Run: 1, Metric: metricWholeFreeNodes, Points: points(24, 22, 20, 20)},
			{Suite: results.SuiteKwok, Case: "fragmentation_mig", Scheduler: "upstream", Run: 1, Metric: metricWholeFreeGPUs, Points: points(30, 14)},
		},
	}
	out := mergeKwok(t, dir, kwok)
	svg, err := os.ReadFile(filepath.Join(out, "plots", "kwok_fragmentation.svg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"upstream run 1", "drasched FirstFit run 1", "drasched BestFit run 1", "whole free nodes", "churn step"} {
		if !strings.Contains(string(svg), want) {
			t.Errorf("fragmentation plot lacks %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "plots", "kwok_fragmentation_mig.svg")); err != nil {
		t.Errorf("no MIG plot: %v", err)
	}
	md, err := os.ReadFile(filepath.Join(out, "latest.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| fragmentation | 2 → 20 (10.0×) | 0 → 41 (–) |",
		"\nfragmentation: drasched with its shipped configuration (FirstFit + MostAllocated): 12 whole free H100 nodes (ideal 24).\n",
		"\nH100 nodes with all GPUs free over the churn, per case: [fragmentation](plots/kwok_fragmentation.svg)\n",
		"\nGPUs in MIG mode with no device in use over the churn, per case: [fragmentation_mig](plots/kwok_fragmentation_mig.svg)\n",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("latest.md lacks %q:\n%s", want, md)
		}
	}
	if got := legend("drasched", false); got != "drasched" {
		t.Errorf("drasched alone is %q", got)
	}
}

// TestScalingPlot: the scaling series (p50, p99, CPU per pod against the
// cluster size) come from the merged cases, so sizes measured in different
// sittings of one commit (one store file each) make one plot of three
// panels, kwok_<case>_scaling.svg, a line per scheduler and variant, linked
// from latest.md; a file's own scaling series are not drawn.
func TestScalingPlot(t *testing.T) {
	dir := t.TempDir()
	out, store := filepath.Join(dir, "results"), filepath.Join(dir, "store")
	for i, nodes := range []int{500, 1000} {
		f := results.File{Date: "2026-01-02T10:30:00Z"}
		for _, name := range []string{"fill", "fill", "preempt"} {
			name = fmt.Sprintf("%s_%dnodes", name, nodes)
			if len(f.Cases) == 3 {
				name += "+pqh"
			}
			for _, metric := range []string{"p50_seconds", "p99_seconds", "cpu_seconds_per_pod"} {
				f.Cases = append(f.Cases, results.NewCase(results.SuiteKwok, name, metric, results.Lower, []float64{float64(nodes) / 1000}, []float64{0.1}))
			}
		}
		// A run's own scaling series, of one size: stale once merged.
		f.Series = []results.Series{{Suite: results.SuiteKwok, Case: "churn", Scheduler: "upstream", Run: 1, Metric: results.MetricScalingP99, Points: [][2]float64{{500, 1}, {1000, 2}}}}
		in := filepath.Join(dir, fmt.Sprintf("kwok-%d.json", i))
		if err := results.Write(in, f); err != nil {
			t.Fatal(err)
		}
		if err := run([]string{"merge", "-out", out, "-commit", "abc", "-store", store, in}); err != nil {
			t.Fatal(err)
		}
	}
	svg, err := os.ReadFile(filepath.Join(out, "plots", "kwok_fill_scaling.svg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"against the cluster size", "p50 latency (s)", "p99 latency (s)", "CPU s per pod", "nodes", "upstream+pqh", "drasched+pqh"} {
		if !strings.Contains(string(svg), want) {
			t.Errorf("scaling plot lacks %q", want)
		}
	}
	entries, err := os.ReadDir(filepath.Join(out, "plots"))
	if err != nil || len(entries) != 1 {
		t.Errorf("plots %v (%v), want the one scaling plot (fill's; preempt is no scaling case, churn's series was a file's own)", entries, err)
	}
	md, err := os.ReadFile(filepath.Join(out, "latest.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "against the cluster size, per case: [fill](plots/kwok_fill_scaling.svg)\n"; !strings.Contains(string(md), want) {
		t.Errorf("latest.md lacks %q:\n%s", want, md)
	}
}

// mergeKwok writes a kwok suite file into dir and merges it alone into
// dir/results, which it returns.
func mergeKwok(t *testing.T, dir string, kwok results.File) string {
	t.Helper()
	in := filepath.Join(dir, "kwok.json")
	if err := results.Write(in, kwok); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "results")
	if err := run([]string{"merge", "-out", out, in}); err != nil {
		t.Fatal(err)
	}
	return out
}
