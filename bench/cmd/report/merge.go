package main

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/drasched/drasched/bench/internal/results"
)

const (
	sectionBegin = "<!-- bench:begin -->"
	sectionEnd   = "<!-- bench:end -->"
)

// merge writes latest.json, latest.md and the plots of the suite files
// into out, and, if doc names a Markdown page, the Markdown into its
// benchmark section.
func merge(out, doc string, inputs []string) error {
	var files []results.File
	for _, path := range inputs {
		f, err := results.Read(path)
		if err != nil {
			return err
		}
		files = append(files, f)
	}
	merged := results.Merge(files...)
	if err := results.Write(filepath.Join(out, "latest.json"), merged); err != nil {
		return err
	}
	var md bytes.Buffer
	if err := results.Markdown(&md, merged); err != nil {
		return err
	}
	plots, err := drawPlots(filepath.Join(out, "plots"), files)
	if err != nil {
		return err
	}
	if err := writePlotLinks(&md, out, plots); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "latest.md"), md.Bytes(), 0o644); err != nil {
		return err
	}
	if doc == "" {
		return nil
	}
	section, err := docSection(md.String(), out, doc)
	if err != nil {
		return err
	}
	return replaceSection(doc, section)
}

// writePlotLinks lists the plots, one line per kind: "Throughput over
// time, per case: [name](plots/...)...", then the latency distributions.
func writePlotLinks(md *bytes.Buffer, out string, plots []plotFile) error {
	var metrics []string
	for _, p := range plots {
		if !slices.Contains(metrics, p.metric) {
			metrics = append(metrics, p.metric)
		}
	}
	// Throughput first, as before there were other kinds.
	slices.SortStableFunc(metrics, func(a, b string) int {
		return cmp.Compare(boolRank(a != metricThroughput), boolRank(b != metricThroughput))
	})
	for _, m := range metrics {
		switch m {
		case metricThroughput:
			fmt.Fprint(md, "\nThroughput over time, per case:")
		case metricLatencyCDF:
			fmt.Fprint(md, "\nCreation → bound latency (CDF), per case:")
		case metricWholeFreeNodes:
			fmt.Fprint(md, "\nH100 nodes with all GPUs free over the churn, per case:")
		case metricWholeFreeGPUs:
			fmt.Fprint(md, "\nGPUs in MIG mode with no device in use over the churn, per case:")
		case metricScaling:
			fmt.Fprint(md, "\np50 and p99 creation → bound latency and CPU seconds per pod against the cluster size, per case:")
		default:
			fmt.Fprintf(md, "\n%s, per case:", m)
		}
		for _, p := range plots {
			if p.metric != m {
				continue
			}
			rel, err := filepath.Rel(out, p.path)
			if err != nil {
				return err
			}
			fmt.Fprintf(md, " [%s](%s)", p.name, filepath.ToSlash(rel))
		}
		fmt.Fprintln(md)
	}
	return nil
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// docSection rewrites the plot links of latest.md, relative to out, to be
// relative to the page's folder (docs/ for docs/benchmarks.md).
func docSection(md, out, doc string) (string, error) {
	rel, err := filepath.Rel(filepath.Dir(doc), out)
	if err != nil {
		return "", err
	}
	return strings.ReplaceAll(md, "](plots/", "]("+filepath.ToSlash(filepath.Join(rel, "plots"))+"/"), nil
}

// replaceSection replaces the lines between the markers in a file.
func replaceSection(path, section string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	text := string(data)
	begin := strings.Index(text, sectionBegin+"\n")
	end := strings.Index(text, sectionEnd)
	if begin < 0 || end < begin {
		return fmt.Errorf("%s: no %s ... %s section", path, sectionBegin, sectionEnd)
	}
	begin += len(sectionBegin) + 1
	text = text[:begin] + section + text[end:]
	return os.WriteFile(path, []byte(text), 0o644)
}
