package main

import (
	"cmp"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"regexp"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/drasched/drasched/bench/internal/results"
)

// plotFile is one drawn plot.
type plotFile struct {
	name string // "suite case"
	path string
}

// colors of the schedulers; runs of one scheduler share its color.
var colors = map[string]color.Color{
	"upstream": color.RGBA{R: 0x4c, G: 0x72, B: 0xb0, A: 0xff},
	"drasched": color.RGBA{R: 0xdd, G: 0x84, B: 0x52, A: 0xff},
}

// metricLabel is a metric's axis label.
func metricLabel(metric string) string {
	if metric == "pods_per_second" {
		return "pods/s"
	}
	return metric
}

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

// drawPlots draws one SVG per suite and case with series: each run of each
// scheduler as a line over time.
func drawPlots(dir string, files []results.File) ([]plotFile, error) {
	type key struct{ suite, name string }
	bySeries := map[key][]results.Series{}
	var keys []key
	for _, f := range files {
		for _, s := range f.Series {
			k := key{s.Suite, s.Case}
			if _, ok := bySeries[k]; !ok {
				keys = append(keys, k)
			}
			bySeries[k] = append(bySeries[k], s)
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var plots []plotFile
	for _, k := range keys {
		series := bySeries[k]
		slices.SortStableFunc(series, func(a, b results.Series) int {
			return cmp.Or(cmp.Compare(a.Scheduler, b.Scheduler), cmp.Compare(a.Run, b.Run))
		})
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s %s: %s over time", k.suite, k.name, metricLabel(series[0].Metric))
		p.X.Label.Text = "seconds since the first sample"
		p.Y.Label.Text = metricLabel(series[0].Metric)
		p.X.Min, p.Y.Min = 0, 0
		p.Legend.Top = true
		p.Legend.Left = true
		maxY := 0.0
		for _, s := range series {
			pts := make(plotter.XYs, len(s.Points))
			for i, pt := range s.Points {
				pts[i].X, pts[i].Y = pt[0], pt[1]
				maxY = max(maxY, pt[1])
			}
			line, err := plotter.NewLine(pts)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", k.suite, k.name, err)
			}
			line.Color = colors[s.Scheduler]
			line.Width = vg.Points(1.5)
			if s.Run > 1 {
				line.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
			}
			p.Add(line)
			p.Legend.Add(fmt.Sprintf("%s run %d", s.Scheduler, s.Run), line)
		}
		// Room above the lines for the legend.
		p.Y.Max = maxY * (1.15 + 0.07*float64(len(series)))
		path := filepath.Join(dir, unsafeName.ReplaceAllString(k.suite+"_"+k.name, "_")+".svg")
		if err := p.Save(6*vg.Inch, 3.5*vg.Inch, path); err != nil {
			return nil, err
		}
		plots = append(plots, plotFile{name: k.name, path: path})
	}
	return plots, nil
}
