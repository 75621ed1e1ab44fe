package main

import (
	"cmp"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/drasched/drasched/bench/internal/results"
)

// plotFile is one drawn plot.
type plotFile struct {
	name   string // the case
	metric string // the series' metric
	path   string
}

// colors of the schedulers; runs of one scheduler share its color.
// drasched-bestfit is drasched with the BestFit allocation policy, which
// only the kwok fragmentation cases run.
var colors = map[string]color.Color{
	"upstream":         color.RGBA{R: 0x4c, G: 0x72, B: 0xb0, A: 0xff},
	"drasched":         color.RGBA{R: 0xdd, G: 0x84, B: 0x52, A: 0xff},
	"drasched-bestfit": color.RGBA{R: 0x55, G: 0xa8, B: 0x68, A: 0xff},
}

// variantSuffix is the suffix of a scheduler with a feature gate on in the
// scaling series: drawn in its scheduler's color, dashed.
const variantSuffix = "+pqh"

// Series metrics with plots of their own kind.
const (
	// metricThroughput series are (seconds, pods/s) over time.
	metricThroughput = results.MetricPodsPerSecond
	// metricLatencyCDF series are (latency in seconds, fraction of pods
	// bound within it): a distribution, not a time series.
	metricLatencyCDF = "latency_cdf"
	// metricWholeFreeNodes and metricWholeFreeGPUs series are (step of
	// the churn, H100 nodes with all GPUs free or GPUs in MIG mode with no
	// device in use) of the kwok fragmentation cases.
	metricWholeFreeNodes = "whole_free_nodes"
	metricWholeFreeGPUs  = "whole_free_gpus"
)

// metricScaling is the plotFile metric of the scaling plots: a case's
// three scaling series (results.ScalingSeries) are drawn as one plot of
// three panels, <suite>_<case>_scaling.svg.
const metricScaling = "scaling"

var scalingPanels = []struct{ metric, y string }{
	{results.MetricScalingP50, "p50 latency (s)"},
	{results.MetricScalingP99, "p99 latency (s)"},
	{results.MetricScalingCPU, "CPU s per pod"},
}

// mainMetrics are the series metrics whose plot is a case's own,
// <suite>_<case>.svg: throughput, or for the cases that measure placement
// instead (which have no throughput series) what the churn leaves whole.
var mainMetrics = []string{metricThroughput, metricWholeFreeNodes, metricWholeFreeGPUs}

// axes says how a series metric is drawn: title (after "suite case: "),
// axis labels, and whether the values are fractions (y from 0 to 1, the
// legend below the curves instead of above them).
func axes(metric string) (title, x, y string, fraction bool) {
	switch metric {
	case metricThroughput:
		return "pods/s over time", "seconds since the first sample", "pods/s", false
	case metricLatencyCDF:
		return "creation → bound latency (CDF)", "latency (s)", "fraction of pods bound", true
	case metricWholeFreeNodes:
		return "H100 nodes with all GPUs free", "churn step", "whole free nodes", false
	case metricWholeFreeGPUs:
		return "GPUs in MIG mode with no device in use", "churn step", "whole free GPUs", false
	}
	return metric + " over time", "seconds since the first sample", metric, false
}

// plotPath names a plot's file: <suite>_<case>.svg for the main metrics
// (throughput, as before there were other kinds), and
// <suite>_<case>_<metric>.svg for others.
func plotPath(dir, suite, name, metric string) string {
	base := suite + "_" + name
	if !slices.Contains(mainMetrics, metric) {
		base += "_" + metric
	}
	return filepath.Join(dir, unsafeName.ReplaceAllString(base, "_")+".svg")
}

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

const draschedBestFit = "drasched-bestfit"

// legend names a scheduler in a legend: beside drasched-bestfit, drasched
// is its shipped configuration, FirstFit.
func legend(scheduler string, bestFit bool) string {
	switch {
	case scheduler == draschedBestFit:
		return "drasched BestFit"
	case scheduler == "drasched" && bestFit:
		return "drasched FirstFit"
	}
	return scheduler
}

// drawPlots draws one SVG per suite, case and series metric: each run of
// each scheduler as a line.
func drawPlots(dir string, files []results.File) ([]plotFile, error) {
	type key struct{ suite, name, metric string }
	bySeries := map[key][]results.Series{}
	var keys []key
	type scalingKey struct{ suite, name string }
	scaling := map[scalingKey][]results.Series{}
	var scalingKeys []scalingKey
	for _, f := range files {
		for _, s := range f.Series {
			if results.IsScalingMetric(s.Metric) {
				k := scalingKey{s.Suite, s.Case}
				if _, ok := scaling[k]; !ok {
					scalingKeys = append(scalingKeys, k)
				}
				scaling[k] = append(scaling[k], s)
				continue
			}
			k := key{s.Suite, s.Case, s.Metric}
			if _, ok := bySeries[k]; !ok {
				keys = append(keys, k)
			}
			bySeries[k] = append(bySeries[k], s)
		}
	}
	if len(keys) == 0 && len(scalingKeys) == 0 {
		return nil, nil
	}
	// Suites in the order of the tables, whatever the order of the files.
	slices.SortStableFunc(keys, func(a, b key) int { return results.CompareSuites(a.suite, b.suite) })
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var plots []plotFile
	for _, k := range keys {
		series := bySeries[k]
		slices.SortStableFunc(series, func(a, b results.Series) int {
			return cmp.Or(cmp.Compare(a.Scheduler, b.Scheduler), cmp.Compare(a.Run, b.Run))
		})
		title, xLabel, yLabel, fraction := axes(k.metric)
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s %s: %s", k.suite, k.name, title)
		p.X.Label.Text = xLabel
		p.Y.Label.Text = yLabel
		p.X.Min, p.Y.Min = 0, 0
		p.Legend.Top = !fraction
		p.Legend.Left = !fraction
		maxY := 0.0
		bestFit := slices.ContainsFunc(series, func(s results.Series) bool { return s.Scheduler == draschedBestFit })
		for _, s := range series {
			pts := make(plotter.XYs, len(s.Points))
			for i, pt := range s.Points {
				pts[i].X, pts[i].Y = pt[0], pt[1]
				maxY = max(maxY, pt[1])
			}
			line, err := plotter.NewLine(pts)
			if err != nil {
				return nil, fmt.Errorf("%s %s %s: %w", k.suite, k.name, k.metric, err)
			}
			line.Color = colors[s.Scheduler]
			line.Width = vg.Points(1.5)
			if s.Run > 1 {
				line.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
			}
			p.Add(line)
			p.Legend.Add(fmt.Sprintf("%s run %d", legend(s.Scheduler, bestFit), s.Run), line)
		}
		if fraction {
			// A CDF rises to the top left; the legend sits bottom right.
			p.Y.Max = 1
		} else {
			// Room above the lines for the legend.
			p.Y.Max = maxY * (1.15 + 0.07*float64(len(series)))
		}
		path := plotPath(dir, k.suite, k.name, k.metric)
		if err := p.Save(6*vg.Inch, 3.5*vg.Inch, path); err != nil {
			return nil, err
		}
		plots = append(plots, plotFile{name: k.name, metric: k.metric, path: path})
	}
	for _, k := range scalingKeys {
		path := plotPath(dir, k.suite, k.name, metricScaling)
		if err := drawScaling(path, k.suite, k.name, scaling[k]); err != nil {
			return nil, err
		}
		plots = append(plots, plotFile{name: k.name, metric: metricScaling, path: path})
	}
	return plots, nil
}

// drawScaling draws a case's scaling series as one SVG of three panels
// (p50, p99, CPU per pod) over the number of nodes, a line per scheduler.
func drawScaling(path, suite, name string, series []results.Series) error {
	slices.SortStableFunc(series, func(a, b results.Series) int { return cmp.Compare(a.Scheduler, b.Scheduler) })
	rows := make([][]*plot.Plot, len(scalingPanels))
	for i, panel := range scalingPanels {
		p := plot.New()
		if i == 0 {
			p.Title.Text = fmt.Sprintf("%s %s: against the cluster size", suite, name)
		}
		if i == len(scalingPanels)-1 {
			p.X.Label.Text = "nodes"
		}
		p.Y.Label.Text = panel.y
		p.X.Min, p.Y.Min = 0, 0
		p.Legend.Top, p.Legend.Left = true, true
		maxY, lines := 0.0, 0
		for _, s := range series {
			if s.Metric != panel.metric {
				continue
			}
			pts := make(plotter.XYs, len(s.Points))
			for j, pt := range s.Points {
				pts[j].X, pts[j].Y = pt[0], pt[1]
				maxY = max(maxY, pt[1])
			}
			line, points, err := plotter.NewLinePoints(pts)
			if err != nil {
				return fmt.Errorf("%s %s %s: %w", suite, name, s.Metric, err)
			}
			base, variant := strings.CutSuffix(s.Scheduler, variantSuffix)
			line.Color, points.Color = colors[base], colors[base]
			line.Width = vg.Points(1.5)
			if variant {
				line.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
			}
			p.Add(line, points)
			p.Legend.Add(s.Scheduler, line, points)
			lines++
		}
		p.Y.Max = maxY * (1.15 + 0.07*float64(lines))
		rows[i] = []*plot.Plot{p}
	}
	img := vgsvg.New(6*vg.Inch, 9*vg.Inch)
	canvases := plot.Align(rows, draw.Tiles{Rows: len(rows), Cols: 1, PadY: vg.Millimeter * 3, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2}, draw.New(img))
	for i := range rows {
		rows[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := img.WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
