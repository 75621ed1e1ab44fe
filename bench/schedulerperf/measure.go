package schedulerperf

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/drasched/drasched/bench/internal/results"
)

// Measurement is what one run measured.
type Measurement struct {
	// Throughput is scheduler_perf's SchedulingThroughput in pods/s:
	// "Average", "Perc50", "Perc90", "Perc95", "Perc99".
	Throughput map[string]float64
	// Progress is the scheduling rate over time: (seconds since the first
	// sample, pods/s observed in the interval before).
	Progress [][2]float64
	// Plugins holds scheduler_plugin_execution_duration_seconds of the DRA
	// plugin (DynamicResources or StructuredDRA) per extension point, in
	// milliseconds: "Filter" -> {"Average": ..., "Perc99": ...}.
	Plugins map[string]map[string]float64
	// Wall is how long the run took, setup and teardown included.
	Wall time.Duration
	// Err is why the run has no result.
	Err error
}

// dataItems is the JSON that scheduler_perf writes into -data-items-dir
// (the format of perf-dash, DataItems in scheduler_perf's util.go).
type dataItems struct {
	DataItems []struct {
		Data   map[string]float64 `json:"data"`
		Unit   string             `json:"unit"`
		Labels map[string]string  `json:"labels"`
	} `json:"dataItems"`
}

// ReadMeasurement reads what scheduler_perf wrote into the -data-items-dir
// of one run: the data items JSON (one file per RunBenchmarkPerfScheduling
// call) and the progress file "*.dat".
func ReadMeasurement(dir string) (Measurement, error) {
	var m Measurement
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return m, err
	}
	if len(files) != 1 {
		return m, fmt.Errorf("%s: %d data item files, want 1", dir, len(files))
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		return m, err
	}
	var items dataItems
	if err := json.Unmarshal(data, &items); err != nil {
		return m, fmt.Errorf("%s: %w", files[0], err)
	}
	for _, item := range items.DataItems {
		switch item.Labels["Metric"] {
		case "SchedulingThroughput":
			m.Throughput = item.Data
		case "scheduler_plugin_execution_duration_seconds":
			plugin := item.Labels["plugin"]
			if plugin != "DynamicResources" && plugin != "StructuredDRA" {
				continue
			}
			if m.Plugins == nil {
				m.Plugins = map[string]map[string]float64{}
			}
			m.Plugins[item.Labels["extension_point"]] = item.Data
		}
	}
	if m.Throughput == nil {
		return m, fmt.Errorf("%s: no SchedulingThroughput (too few pods scheduled to sample)", files[0])
	}
	dats, err := filepath.Glob(filepath.Join(dir, "*.dat"))
	if err != nil {
		return m, err
	}
	if len(dats) == 1 {
		data, err := os.ReadFile(dats[0])
		if err != nil {
			return m, err
		}
		if m.Progress, err = readProgress(bytes.NewReader(data)); err != nil {
			return m, fmt.Errorf("%s: %w", dats[0], err)
		}
	}
	return m, nil
}

// readProgress parses scheduler_perf's progress file: one line per sample,
// "<seconds>s <completed> <attempts> <observedTotal> <observedRate> ...".
func readProgress(r io.Reader) ([][2]float64, error) {
	var points [][2]float64
	scanner := bufio.NewScanner(r)
	for line := 1; scanner.Scan(); line++ {
		fields := strings.Fields(scanner.Text())
		if len(fields) == 0 {
			continue
		}
		if len(fields) < 5 {
			return nil, fmt.Errorf("line %d: %d fields, want at least 5", line, len(fields))
		}
		ts, err := strconv.ParseFloat(strings.TrimSuffix(fields[0], "s"), 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		rate, err := strconv.ParseFloat(fields[4], 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		points = append(points, [2]float64{ts, rate})
	}
	return points, scanner.Err()
}

// throughputMetrics map scheduler_perf's buckets to result metrics.
var throughputMetrics = []struct{ bucket, metric string }{
	{"Average", results.MetricPodsPerSecond},
	{"Perc50", "pods_per_second_p50"},
	{"Perc90", "pods_per_second_p90"},
}

// Summarize turns the measurements of a suite run into result cases: per
// case, the medians of average, p50 and p90 throughput of each scheduler
// with their ratio, the target where the case has one, and the series for
// plots. The share of DRA throughput in no-claims throughput is derived
// when files are merged (results.Merge), since `make bench` runs each case
// on its own.
func Summarize(plan []Run, measured []Measurement) results.File {
	f := results.File{Date: results.Now(), Machine: results.CurrentMachine()}
	type key struct {
		name string
		s    Scheduler
	}
	runs := map[key][]Measurement{}
	var cases []Case
	for i, r := range plan {
		if i >= len(measured) {
			break
		}
		k := key{r.Case.Name, r.Scheduler}
		if len(runs[key{r.Case.Name, Upstream}])+len(runs[key{r.Case.Name, Drasched}]) == 0 {
			cases = append(cases, r.Case)
		}
		m := measured[i]
		if m.Err != nil || m.Throughput == nil {
			runs[k] = append(runs[k], Measurement{})
			continue
		}
		runs[k] = append(runs[k], m)
		if len(m.Progress) > 0 {
			f.Series = append(f.Series, results.Series{
				Suite: results.SuiteSchedulerPerf, Case: r.Case.Name, Scheduler: string(r.Scheduler),
				Run: r.Index, Metric: results.MetricPodsPerSecond, Points: m.Progress,
			})
		}
	}
	values := func(name string, s Scheduler, bucket string) []float64 {
		var v []float64
		for _, m := range runs[key{name, s}] {
			if x, ok := m.Throughput[bucket]; ok {
				v = append(v, x)
			}
		}
		return v
	}
	for _, c := range cases {
		for i, tm := range throughputMetrics {
			rc := results.NewCase(results.SuiteSchedulerPerf, c.Name, tm.metric, results.Higher,
				values(c.Name, Upstream, tm.bucket), values(c.Name, Drasched, tm.bucket))
			if i == 0 {
				setTarget(&rc, c)
				if failed := failures(runs[key{c.Name, Upstream}], runs[key{c.Name, Drasched}]); failed != "" {
					rc.Note = failed
				}
			}
			f.Cases = append(f.Cases, rc)
		}
	}
	return f
}

// setTarget records the case's throughput goal and whether the median
// ratio reaches it.
func setTarget(rc *results.Case, c Case) {
	goal := c.Target
	if goal == 0 && c.DRA {
		goal = 1
	}
	if goal == 0 || rc.Ratio == 0 {
		if goal != 0 {
			rc.Target = fmt.Sprintf("≥ %g×", goal)
		}
		return
	}
	met := rc.Ratio >= goal
	rc.Target = fmt.Sprintf("≥ %g×", goal)
	rc.TargetMet = &met
}

// failures says how many runs of each scheduler had no result.
func failures(up, ours []Measurement) string {
	count := func(ms []Measurement) int {
		n := 0
		for _, m := range ms {
			if m.Throughput == nil {
				n++
			}
		}
		return n
	}
	var parts []string
	if n := count(up); n > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d upstream runs failed", n, len(up)))
	}
	if n := count(ours); n > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d drasched runs failed", n, len(ours)))
	}
	return strings.Join(parts, ", ")
}
