package results

import (
	"fmt"
	"strconv"
)

// The kwok targets that hold a case against another case: drasched's goals
// on the largest clusters, and what a pod costs with claims against one
// without.
const (
	// targetNodes is the cluster size from which the fill and churn
	// targets below hold.
	targetNodes = 5000
	// fillP99Factor: drasched's fill p99 at least this many times lower
	// than upstream's best (the lower of its runs with and without
	// SchedulerPreQueueingHints).
	fillP99Factor = 10
	// churnP50Seconds: drasched's churn p50 at most this.
	churnP50Seconds = 0.1
	// cpuPerPodFactor: drasched's CPU per DRA pod (fill) at most this many
	// times its CPU per plain pod (noclaims) on the same size and variant.
	cpuPerPodFactor = 2
	// plainPodShare: for pods without claims (noclaims) drasched's pods/s
	// and p99, medians of its runs, at least this share of upstream's:
	// StructuredDRA should cost a plain pod nothing.
	plainPodShare = 0.95
)

// SetKwokTargets sets the kwok targets that relate cases: fill's p99
// against upstream's (on targetNodes nodes and more: upstream's best of
// all variants, by fillP99Factor), churn's p50 on targetNodes nodes and
// more, fill's CPU per pod against noclaims' of the same size and variant, and noclaims' pods/s and p99 against upstream's. A target
// whose other case is missing is not set.
//
// Merge sets them on the merged file, not only bench/kwok on each suite
// file: the cases they relate are measured in different entries of one
// commit's plan (noclaims in entries of its own, for its medians), so no
// single suite file holds both.
func SetKwokTargets(f *File) {
	type key struct {
		name    string
		nodes   int
		variant string
		metric  string
	}
	index := map[key]int{}
	var keys []key
	// upstream's best fill p99 per size, over the variants.
	bestFill := map[int]float64{}
	for i, c := range f.Cases {
		m := sizedName.FindStringSubmatch(c.Name)
		if c.Suite != SuiteKwok || m == nil {
			continue
		}
		nodes, err := strconv.Atoi(m[2])
		if err != nil {
			continue
		}
		k := key{m[1], nodes, m[3], c.Metric}
		index[k] = i
		keys = append(keys, k)
		if best, ok := bestFill[nodes]; k.name == KwokFill && k.metric == MetricP99 && c.Upstream > 0 && (!ok || c.Upstream < best) {
			bestFill[nodes] = c.Upstream
		}
	}
	for _, k := range keys {
		c := &f.Cases[index[k]]
		switch {
		case k.name == KwokFill && k.metric == MetricP99 && k.nodes < targetNodes:
			setTarget(c, "p99 ≤ upstream's", c.Drasched > 0 && c.Upstream > 0 && c.Drasched <= c.Upstream)
		case k.name == KwokFill && k.metric == MetricP99:
			best := bestFill[k.nodes]
			setTarget(c, fmt.Sprintf("p99 ≥ %d× lower than upstream's best, %s", fillP99Factor, formatDuration(best)),
				c.Drasched > 0 && c.Drasched*fillP99Factor <= best)
		case k.name == KwokChurn && k.metric == MetricP50 && k.nodes >= targetNodes:
			setTarget(c, fmt.Sprintf("drasched p50 ≤ %s", formatDuration(churnP50Seconds)),
				c.Drasched > 0 && c.Drasched <= churnP50Seconds)
		case k.name == KwokFill && k.metric == MetricCPUPerPod:
			if j, ok := index[key{KwokNoClaims, k.nodes, k.variant, k.metric}]; ok && f.Cases[j].Drasched > 0 {
				plain := f.Cases[j]
				setTarget(c, fmt.Sprintf("drasched ≤ %d× its CPU per plain pod (noclaims), %s", cpuPerPodFactor, formatDuration(plain.Drasched)),
					c.Drasched > 0 && c.Drasched <= cpuPerPodFactor*plain.Drasched)
			}
		case k.name == KwokNoClaims && (k.metric == MetricPodsPerSecond || k.metric == MetricP99):
			what := "pods/s"
			if k.metric == MetricP99 {
				what = "p99"
			}
			setTarget(c, fmt.Sprintf("%s ratio ≥ %.2f×", what, plainPodShare), c.Ratio >= plainPodShare)
		}
	}
}

func setTarget(c *Case, target string, met bool) {
	c.Target, c.TargetMet = target, &met
}
