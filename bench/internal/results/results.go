// Package results is the format of drasched's benchmark results, shared by
// the runners that write one file per suite (scheduler_perf, kwok, the
// allocator) and by bench/cmd/report, which merges those files into
// bench/results/latest.json and renders it as Markdown and plots.
//
// A file holds one entry per case and metric, each with upstream's and
// drasched's value measured in the same run and their ratio, oriented so
// that a ratio above 1 means drasched did better:
//
//	{"date": "2026-01-02T15:04:05Z", "machine": {"cores": 2, "memory": "23Gi"},
//	 "cases": [{"suite": "scheduler_perf", "name": "empty_500nodes",
//	            "metric": "pods_per_second", "upstream": 44.8, "drasched": 120.1,
//	            "ratio": 2.68, "better": "higher"}]}
//
// Runners may add time series (Series) for plots; the merged latest.json
// leaves them out.
package results

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Suites, in the order in which reports list them.
const (
	SuiteSchedulerPerf = "scheduler_perf"
	SuiteKwok          = "kwok"
	SuiteAllocator     = "allocator"
	// SuiteCapacity is kubectl drasched top and fit (pkg/capacity) on
	// objects in memory; they have no upstream counterpart, only targets.
	SuiteCapacity = "capacity"
)

// Metrics that more than one package names: the suites that measure them
// (bench/kwok, bench/schedulerperf), the scaling series and the report's
// plots. Their values are the JSON's metric names.
const (
	// MetricPodsPerSecond is a case's average throughput, and the metric
	// of its throughput-over-time series.
	MetricPodsPerSecond = "pods_per_second"
	// MetricP50, MetricP90 and MetricP99 are percentiles of the pods'
	// scheduling latency (kwok: creation to binding).
	MetricP50 = "p50_seconds"
	MetricP90 = "p90_seconds"
	MetricP99 = "p99_seconds"
	// MetricCPUPerPod and MetricPeakRSS are the scheduler process's cost
	// (kwok): CPU seconds per pod bound, and its peak resident memory.
	MetricCPUPerPod = "cpu_seconds_per_pod"
	MetricPeakRSS   = "peak_rss_bytes"
)

// Better says which direction of a metric is an improvement.
type Better string

const (
	// Higher: throughput-like metrics (pods_per_second).
	Higher Better = "higher"
	// Lower: latency- and cost-like metrics (p99_seconds, seconds_per_op).
	Lower Better = "lower"
)

// File is a per-suite result file or the merged latest.json.
type File struct {
	// Date is when the measurements finished, RFC 3339 in UTC.
	Date string `json:"date"`
	// Commit is the commit whose code was measured: the last one that
	// changed more than bench/results/, docs/ and Markdown pages (see
	// hack/bench.sh). Every case of a file is from this commit.
	Commit  string  `json:"commit,omitempty"`
	Machine Machine `json:"machine"`
	// Commands reproduce the figures, one per suite that was run.
	Commands []string `json:"commands,omitempty"`
	// Durations is how long each suite ran, in seconds: in a merged file,
	// the sum over the files merged (a resumed `make bench` merges one
	// file per sitting).
	Durations map[string]float64 `json:"duration_seconds,omitempty"`
	Cases     []Case             `json:"cases"`
	// Series are time series for plots; only in per-suite files.
	Series []Series `json:"series,omitempty"`
}

// Machine describes where the benchmarks ran.
type Machine struct {
	Cores int `json:"cores"`
	// Memory is the total memory, as a Kubernetes quantity ("23Gi").
	Memory string `json:"memory"`
}

// Case is one metric of one benchmark case, for both schedulers.
type Case struct {
	Suite  string `json:"suite"`
	Name   string `json:"name"`
	Metric string `json:"metric"`
	// Upstream and Drasched are the medians of the runs.
	Upstream float64 `json:"upstream"`
	Drasched float64 `json:"drasched"`
	// Ratio is drasched/upstream for Higher metrics and upstream/drasched
	// for Lower ones: above 1, drasched did better. 0 when undefined.
	Ratio  float64 `json:"ratio"`
	Better Better  `json:"better"`
	// UpstreamRuns and DraschedRuns are the individual measurements.
	UpstreamRuns []float64 `json:"upstream_runs,omitempty"`
	DraschedRuns []float64 `json:"drasched_runs,omitempty"`
	// Target is the goal for this case in words ("ratio ≥ 2"), and
	// TargetMet whether the measurement reaches it.
	Target    string `json:"target,omitempty"`
	TargetMet *bool  `json:"target_met,omitempty"`
	// Note explains something unusual about the case.
	Note string `json:"note,omitempty"`
}

// Series is one time series of one run of one scheduler.
type Series struct {
	Suite     string `json:"suite"`
	Case      string `json:"case"`
	Scheduler string `json:"scheduler"` // "upstream" or "drasched"
	Run       int    `json:"run"`
	Metric    string `json:"metric"`
	// Points are (seconds since the start of the measurement, value).
	Points [][2]float64 `json:"points"`
}

// NewCase summarizes the runs of one metric: the median of each
// scheduler's runs and their ratio.
func NewCase(suite, name, metric string, better Better, upstreamRuns, draschedRuns []float64) Case {
	c := Case{
		Suite:        suite,
		Name:         name,
		Metric:       metric,
		Better:       better,
		Upstream:     Median(upstreamRuns),
		Drasched:     Median(draschedRuns),
		UpstreamRuns: upstreamRuns,
		DraschedRuns: draschedRuns,
	}
	c.Ratio = Ratio(better, c.Upstream, c.Drasched)
	return c
}

// Ratio orients drasched's value against upstream's so that above 1 means
// drasched did better; it is 0 if either value is not positive.
func Ratio(better Better, upstream, drasched float64) float64 {
	if upstream <= 0 || drasched <= 0 {
		return 0
	}
	if better == Lower {
		return upstream / drasched
	}
	return drasched / upstream
}

// Median returns the median of values, 0 for none.
func Median(values []float64) float64 {
	if len(values) == 0 {
		return 0
	}
	s := slices.Clone(values)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Now returns the current time in the format of File.Date.
func Now() string { return time.Now().UTC().Format(time.RFC3339) }

// CurrentMachine describes this machine: the CPUs this process may use and
// the total memory from /proc/meminfo (empty where there is none).
func CurrentMachine() Machine {
	return Machine{Cores: runtime.NumCPU(), Memory: memTotal("/proc/meminfo")}
}

// memTotal reads MemTotal from a meminfo file and formats it in whole GiB
// (or MiB below 1 GiB).
func memTotal(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(data)) {
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[0] != "MemTotal:" {
			continue
		}
		kib, err := strconv.ParseFloat(fields[1], 64)
		if err != nil {
			return ""
		}
		return FormatMemory(kib * 1024)
	}
	return ""
}

// FormatMemory formats a number of bytes as a Kubernetes quantity, rounded
// to whole GiB (MiB below 1 GiB).
func FormatMemory(bytes float64) string {
	if gib := bytes / (1 << 30); gib >= 1 {
		return fmt.Sprintf("%.0fGi", math.Round(gib))
	}
	return fmt.Sprintf("%.0fMi", math.Round(bytes/(1<<20)))
}

// Read loads a result file.
func Read(path string) (File, error) {
	var f File
	data, err := os.ReadFile(path)
	if err != nil {
		return f, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return f, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Write stores a result file as indented JSON, replacing it atomically so
// that an interrupted run never leaves half a file behind.
func Write(path string, f File) error {
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(path, data)
}

// WriteCompact is Write without the indentation, for the files of a
// results store, whose series have thousands of points.
func WriteCompact(path string, f File) error {
	data, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return writeAtomic(path, data)
}

func writeAtomic(path string, data []byte) error {
	data = append(data, '\n')
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Merge combines per-suite files into one, as latest.json holds them: the
// newest date, the commit and the machine of the first file that names
// one, the commands of all, each suite's durations summed, and all cases,
// suites in the order of CompareSuites. A case (suite, name, metric) in a
// later file replaces the same case of an earlier one. The derived
// shares are added and the kwok targets that relate cases set again
// (SetKwokTargets): their cases may come from different files. Series are
// dropped. Callers check that the files are of one commit (report merge
// does).
func Merge(files ...File) File {
	var out File
	index := map[[3]string]int{}
	for _, f := range files {
		if out.Machine == (Machine{}) {
			out.Machine = f.Machine
		}
		if out.Commit == "" {
			out.Commit = f.Commit
		}
		if f.Date > out.Date {
			out.Date = f.Date
		}
		for _, cmd := range f.Commands {
			if !slices.Contains(out.Commands, cmd) {
				out.Commands = append(out.Commands, cmd)
			}
		}
		for suite, d := range f.Durations {
			if out.Durations == nil {
				out.Durations = map[string]float64{}
			}
			out.Durations[suite] += d
		}
		for _, c := range f.Cases {
			key := [3]string{c.Suite, c.Name, c.Metric}
			if j, ok := index[key]; ok {
				out.Cases[j] = c
				continue
			}
			index[key] = len(out.Cases)
			out.Cases = append(out.Cases, c)
		}
	}
	for _, s := range shares {
		addShare(&out, s)
	}
	SetKwokTargets(&out)
	slices.SortStableFunc(out.Cases, func(a, b Case) int {
		return CompareSuites(a.Suite, b.Suite)
	})
	if out.Cases == nil {
		out.Cases = []Case{}
	}
	return out
}

// share is a metric derived from two cases, which may have run in
// different sittings: each scheduler's Metric of Of as a fraction of its
// Metric of Base.
type share struct {
	Suite, Of, Base, Metric, Name string
	// AtLeast is drasched's target share.
	AtLeast float64
}

// shares are the derived metrics Merge adds: scheduler_perf's DRA
// throughput (empty_500nodes) as a share of the no-claims one on the same
// cluster (noclaims_empty_500nodes), which upstream's blog puts at about a
// third for the in-tree plugin.
var shares = []share{{
	Suite: SuiteSchedulerPerf, Of: "empty_500nodes", Base: "noclaims_empty_500nodes",
	Metric: MetricPodsPerSecond, Name: "share_of_no_claims", AtLeast: 0.5,
}}

// addShare adds or replaces the share's case in f if both its cases are
// there with both schedulers' values.
func addShare(f *File, s share) {
	var of, base *Case
	at := -1
	for i := range f.Cases {
		c := &f.Cases[i]
		if c.Suite != s.Suite {
			continue
		}
		switch {
		case c.Name == s.Of && c.Metric == s.Metric:
			of = c
		case c.Name == s.Base && c.Metric == s.Metric:
			base = c
		case c.Name == s.Of && c.Metric == s.Name:
			at = i
		}
	}
	if of == nil || base == nil || of.Upstream <= 0 || of.Drasched <= 0 || base.Upstream <= 0 || base.Drasched <= 0 {
		return
	}
	up, ours := of.Upstream/base.Upstream, of.Drasched/base.Drasched
	met := ours >= s.AtLeast
	c := Case{
		Suite: s.Suite, Name: s.Of, Metric: s.Name,
		Upstream: up, Drasched: ours, Ratio: Ratio(Higher, up, ours), Better: Higher,
		Target: fmt.Sprintf("drasched ≥ %.0f%%", s.AtLeast*100), TargetMet: &met,
	}
	if at >= 0 {
		f.Cases[at] = c
		return
	}
	f.Cases = append(f.Cases, c)
}

// CompareSuites orders suites as reports list them: scheduler_perf, kwok,
// allocator, then any other by name. Reports sort by it so that their
// order does not depend on the order of the files merged.
func CompareSuites(a, b string) int {
	if ra, rb := suiteRank(a), suiteRank(b); ra != rb {
		return ra - rb
	}
	return strings.Compare(a, b)
}

func suiteRank(suite string) int {
	switch suite {
	case SuiteSchedulerPerf:
		return 0
	case SuiteKwok:
		return 1
	case SuiteAllocator:
		return 2
	}
	return 3
}
