package results

import (
	"strings"
	"testing"
)

// TestSetKwokTargetsAcrossFiles: the targets that relate cases are set on
// the merged file when the cases come from different suite files (fill
// and noclaims measured in separate entries of a plan), per size and
// variant, and set again when a case is measured again.
func TestSetKwokTargetsAcrossFiles(t *testing.T) {
	kwok := func(name, metric string, better Better, upstream, drasched float64) Case {
		return NewCase(SuiteKwok, name, metric, better, []float64{upstream}, []float64{drasched})
	}
	fill := File{Cases: []Case{
		// 20 ms per DRA pod against noclaims' 4 ms: 5×, missed.
		kwok("fill_5000nodes", MetricCPUPerPod, Lower, 0.150, 0.020),
		// 2.5 ms against 1.5 ms: met.
		kwok("fill_5000nodes+pqh", MetricCPUPerPod, Lower, 0.150, 0.0025),
		// Upstream's best p99 is +pqh's 400 s: drasched's 50 s is 8×,
		// +pqh's 30 s 13×.
		kwok("fill_5000nodes", MetricP99, Lower, 600, 50),
		kwok("fill_5000nodes+pqh", MetricP99, Lower, 400, 30),
		// No noclaims at 1,000 nodes: no CPU target there. Below 5,000
		// nodes fill's p99 is held to upstream's own.
		kwok("fill_1000nodes", MetricCPUPerPod, Lower, 0.2, 0.02),
		kwok("fill_1000nodes", MetricP99, Lower, 30, 31),
	}}
	plain := File{Cases: []Case{
		kwok("noclaims_5000nodes", MetricCPUPerPod, Lower, 0.004, 0.004),
		kwok("noclaims_5000nodes+pqh", MetricCPUPerPod, Lower, 0.003, 0.0015),
		// pods/s 0.96×: met; p99 1.0 → 1.1 s, 0.91×: missed.
		kwok("noclaims_5000nodes", MetricPodsPerSecond, Higher, 100, 96),
		kwok("noclaims_5000nodes", MetricP99, Lower, 1.0, 1.1),
		// A scheduler_perf case of the same name pattern is not kwok's.
		NewCase(SuiteSchedulerPerf, "noclaims_5000nodes", MetricPodsPerSecond, Higher, []float64{100}, []float64{50}),
	}}
	get := func(f File, suite, name, metric string) Case {
		t.Helper()
		for _, c := range f.Cases {
			if c.Suite == suite && c.Name == name && c.Metric == metric {
				return c
			}
		}
		t.Fatalf("no case %s %s %s", suite, name, metric)
		return Case{}
	}
	check := func(f File, name, metric, wantTarget string, wantMet bool) {
		t.Helper()
		c := get(f, SuiteKwok, name, metric)
		if c.TargetMet == nil || *c.TargetMet != wantMet || !strings.Contains(c.Target, wantTarget) {
			t.Errorf("%s %s: target %q met %v, want %q met %v", name, metric, c.Target, c.TargetMet != nil && *c.TargetMet, wantTarget, wantMet)
		}
	}

	if c := get(Merge(fill), SuiteKwok, "fill_5000nodes", MetricCPUPerPod); c.Target != "" {
		t.Errorf("fill's CPU target without noclaims: %q", c.Target)
	}
	merged := Merge(fill, plain)
	check(merged, "fill_5000nodes", MetricCPUPerPod, "≤ 2× its CPU per plain pod (noclaims), 4.00 ms", false)
	check(merged, "fill_5000nodes+pqh", MetricCPUPerPod, "1.50 ms", true)
	check(merged, "fill_5000nodes", MetricP99, "10× lower than upstream's best, 6.7 min", false)
	check(merged, "fill_5000nodes+pqh", MetricP99, "10× lower than upstream's best, 6.7 min", true)
	check(merged, "fill_1000nodes", MetricP99, "p99 ≤ upstream's", false)
	check(merged, "noclaims_5000nodes", MetricPodsPerSecond, "pods/s ratio ≥ 0.95×", true)
	check(merged, "noclaims_5000nodes", MetricP99, "p99 ratio ≥ 0.95×", false)
	for _, c := range []Case{
		get(merged, SuiteKwok, "fill_1000nodes", MetricCPUPerPod),
		get(merged, SuiteKwok, "noclaims_5000nodes", MetricCPUPerPod),
		get(merged, SuiteSchedulerPerf, "noclaims_5000nodes", MetricPodsPerSecond),
	} {
		if c.Target != "" {
			t.Errorf("%s %s %s: target %q, want none", c.Suite, c.Name, c.Metric, c.Target)
		}
	}

	// noclaims measured again, drasched now at 2 ms per plain pod: fill's
	// CPU target follows it (20 ms is 10×).
	again := Merge(merged, File{Cases: []Case{kwok("noclaims_5000nodes", MetricCPUPerPod, Lower, 0.004, 0.002)}})
	check(again, "fill_5000nodes", MetricCPUPerPod, "2.00 ms", false)
	again = Merge(again, File{Cases: []Case{kwok("noclaims_5000nodes", MetricCPUPerPod, Lower, 0.004, 0.012)}})
	check(again, "fill_5000nodes", MetricCPUPerPod, "12.00 ms", true)
}
