package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/perf/benchfmt"

	"github.com/drasched/drasched/bench/internal/results"
)

// allocatorMetrics map units of `go test -bench` to result metrics.
var allocatorMetrics = []struct {
	unit, metric string
}{
	{"sec/op", "seconds_per_op"},
	{"B/op", "bytes_per_op"},
	{"allocs/op", "allocs_per_op"},
	{"cpu-s/op", "cpu_seconds_per_op"},
}

// capacityTargets are the time targets (seconds per op) of pkg/capacity's
// benchmarks, by case: they run only drasched's code (upstream has no top
// or fit), so they are measured against these instead of a ratio.
var capacityTargets = map[string]float64{
	"top_nodes_5000nodes_8gpus":     2,
	"top_pools_5000nodes_8gpus":     2,
	"top_classes_5000nodes_8gpus":   2,
	"fit_5000nodes_8gpus_count1000": 5,
}

// allocatorSuite converts benchmark output into the allocator suite file,
// with pkg/capacity's cases in the capacity suite.
func allocatorSuite(raw, out, command string, seconds float64) error {
	in, err := os.Open(raw)
	if err != nil {
		return err
	}
	cases, err := readGoBench(in, raw)
	closeErr := in.Close()
	if err != nil {
		return err
	}
	if closeErr != nil {
		return closeErr
	}
	if len(cases) == 0 {
		return fmt.Errorf("%s: no benchmark results named .../case=NAME/impl=upstream|drasched", raw)
	}
	f := results.File{Date: results.Now(), Machine: results.CurrentMachine(), Cases: cases}
	if command != "" {
		f.Commands = []string{command}
	}
	if seconds > 0 {
		f.Durations = map[string]float64{results.SuiteAllocator: seconds}
	}
	return results.Write(out, f)
}

// readGoBench reads benchmarks named .../case=NAME/impl=IMPL (with
// -count runs) and returns, per case and metric, both implementations'
// medians and ratio.
func readGoBench(in *os.File, name string) ([]results.Case, error) {
	type key struct{ name, impl, unit string }
	values := map[key][]float64{}
	var names []string
	reader := benchfmt.NewReader(in, name)
	for reader.Scan() {
		result, ok := reader.Result().(*benchfmt.Result)
		if !ok {
			continue
		}
		caseName, impl := "", ""
		for _, part := range strings.Split(string(result.Name), "/") {
			part, _, _ = strings.Cut(part, "-") // GOMAXPROCS suffix
			if v, found := strings.CutPrefix(part, "case="); found {
				caseName = v
			}
			if v, found := strings.CutPrefix(part, "impl="); found {
				impl = v
			}
		}
		if caseName == "" || (impl != "upstream" && impl != "drasched") {
			continue
		}
		if !slices.Contains(names, caseName) {
			names = append(names, caseName)
		}
		for _, v := range result.Values {
			values[key{caseName, impl, v.Unit}] = append(values[key{caseName, impl, v.Unit}], v.Value)
		}
	}
	if err := reader.Err(); err != nil {
		return nil, err
	}
	slices.Sort(names)
	var cases []results.Case
	for _, n := range names {
		for _, m := range allocatorMetrics {
			up, ours := values[key{n, "upstream", m.unit}], values[key{n, "drasched", m.unit}]
			target, isCapacity := capacityTargets[n]
			switch {
			case isCapacity && len(ours) > 0:
				c := results.NewCase(results.SuiteCapacity, n, m.metric, results.Lower, nil, ours)
				if m.metric == "seconds_per_op" {
					c.Target = fmt.Sprintf("time/op ≤ %g s", target)
					c.TargetMet = ptrTo(c.Drasched <= target)
				}
				cases = append(cases, c)
			case len(up) > 0 && len(ours) > 0:
				cases = append(cases, results.NewCase(results.SuiteAllocator, n, m.metric, results.Lower, up, ours))
			}
		}
	}
	return cases, nil
}

func ptrTo[T any](v T) *T { return &v }
