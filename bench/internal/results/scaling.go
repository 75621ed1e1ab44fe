package results

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
)

// Series metrics of the scaling plots: points (nodes, median of the runs),
// one series per scheduler and variant ("upstream+pqh").
const (
	MetricScalingP50 = "scaling_p50_seconds"
	MetricScalingP99 = "scaling_p99_seconds"
	MetricScalingCPU = "scaling_cpu_seconds_per_pod"
)

// The kwok cases that results knows by name, for the scaling plots and
// the targets that relate cases (bench/kwok names its cases with them).
const (
	// KwokFill is DRA pods created all at once.
	KwokFill = "fill"
	// KwokNoClaims is fill's pods without their claims.
	KwokNoClaims = "noclaims"
	// KwokChurn is a steady stream of DRA pods on a partly full cluster.
	KwokChurn = "churn"
)

// scalingCases are the kwok cases drawn against the cluster size.
var scalingCases = []string{KwokFill, KwokNoClaims, KwokChurn}

// KwokCaseName is a kwok case's name in the results:
// <case>_<nodes>nodes, +<variant> for a variant of the schedulers, so that
// sizes and variants stand in one file. sizedName parses it.
func KwokCaseName(name string, nodes int, variant string) string {
	n := fmt.Sprintf("%s_%dnodes", name, nodes)
	if variant != "" {
		n += "+" + variant
	}
	return n
}

// scalingMetrics maps a kwok case's metric to its scaling series' metric.
var scalingMetrics = map[string]string{
	MetricP50:       MetricScalingP50,
	MetricP99:       MetricScalingP99,
	MetricCPUPerPod: MetricScalingCPU,
}

// sizedName parses a kwok case's name (KwokCaseName).
var sizedName = regexp.MustCompile(`^(.+)_([0-9]+)nodes(?:\+(.+))?$`)

// ScalingSeries derives the scaling series of the scaling cases from a
// file's kwok cases, where a case has two sizes or more. They come from the
// cases rather than from one run's series because the sizes of one commit
// may have been measured in different sittings (hack/bench.sh), each file
// holding one size.
func ScalingSeries(f File) []Series {
	type line struct{ name, scheduler, metric string }
	points := map[line][][2]float64{}
	for _, c := range f.Cases {
		m := sizedName.FindStringSubmatch(c.Name)
		metric, ok := scalingMetrics[c.Metric]
		if c.Suite != SuiteKwok || m == nil || !ok || !slices.Contains(scalingCases, m[1]) {
			continue
		}
		nodes, err := strconv.Atoi(m[2])
		if err != nil {
			continue
		}
		for scheduler, value := range map[string]float64{"upstream": c.Upstream, "drasched": c.Drasched} {
			if value <= 0 {
				continue
			}
			if m[3] != "" {
				scheduler += "+" + m[3]
			}
			l := line{m[1], scheduler, metric}
			points[l] = append(points[l], [2]float64{float64(nodes), value})
		}
	}
	var series []Series
	for l, pts := range points {
		if len(pts) < 2 {
			continue
		}
		slices.SortFunc(pts, func(a, b [2]float64) int { return cmp.Compare(a[0], b[0]) })
		series = append(series, Series{Suite: SuiteKwok, Case: l.name, Scheduler: l.scheduler, Run: 1, Metric: l.metric, Points: pts})
	}
	slices.SortFunc(series, func(a, b Series) int {
		return cmp.Or(cmp.Compare(a.Case, b.Case), cmp.Compare(a.Metric, b.Metric), cmp.Compare(a.Scheduler, b.Scheduler))
	})
	return series
}

// IsScalingMetric says whether a series metric is one of the scaling plots'.
func IsScalingMetric(metric string) bool {
	for _, m := range scalingMetrics {
		if m == metric {
			return true
		}
	}
	return false
}
