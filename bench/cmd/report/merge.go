package main

import (
	"bytes"
	"cmp"
	"errors"
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
// benchmark section. commit, if set, is the commit the inputs measured
// (a file that names another is an error). With a store folder the inputs
// join the files already there, all of one commit, and everything stored
// is merged; a store that holds another commit's files is emptied first,
// so that latest.json never mixes commits. A store and no inputs merges
// what the store holds again, as it is (make bench-report).
func merge(out, doc, commit, store string, inputs []string) error {
	var files []results.File
	for _, path := range inputs {
		f, err := results.Read(path)
		if err != nil {
			return err
		}
		if commit != "" {
			if f.Commit != "" && f.Commit != commit {
				return fmt.Errorf("%s: measured commit %s, not %s", path, f.Commit, commit)
			}
			f.Commit = commit
		}
		files = append(files, f)
	}
	if store != "" && len(inputs) == 0 {
		// Merged again as it is: the commit is the one stored.
		var err error
		if files, err = readStore(store); err != nil {
			return err
		}
		if commit != "" && slices.ContainsFunc(files, func(f results.File) bool { return f.Commit != commit }) {
			return fmt.Errorf("%s holds the results of commit %s, not %s", store, files[0].Commit, commit)
		}
	} else if store != "" {
		if commit == "" {
			return errors.New("a store needs the commit measured (-commit)")
		}
		var err error
		if files, err = addToStore(store, commit, files); err != nil {
			return err
		}
	}
	if len(files) == 0 {
		return errors.New("nothing to merge: no suite file given or stored")
	}
	for _, f := range files[1:] {
		if f.Commit != files[0].Commit {
			return fmt.Errorf("the files measured different commits: %q and %q", files[0].Commit, f.Commit)
		}
	}
	merged := results.Merge(files...)
	if err := results.Write(filepath.Join(out, "latest.json"), merged); err != nil {
		return err
	}
	var md bytes.Buffer
	if err := results.Markdown(&md, merged); err != nil {
		return err
	}
	// Every plot is drawn again from the files: none of an earlier merge
	// (a case since renamed or dropped) stays behind.
	if err := removePlots(filepath.Join(out, "plots")); err != nil {
		return err
	}
	plots, err := drawPlots(filepath.Join(out, "plots"), plotSeries(files, merged))
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

// plotSeries are the files' series for the plots, their scaling series
// replaced by those of the merged cases: the sizes of one commit may have
// been measured in different files.
func plotSeries(files []results.File, merged results.File) []results.File {
	plotted := make([]results.File, 0, len(files)+1)
	for _, f := range files {
		f.Series = slices.DeleteFunc(slices.Clone(f.Series), func(s results.Series) bool { return results.IsScalingMetric(s.Metric) })
		plotted = append(plotted, f)
	}
	return append(plotted, results.File{Series: results.ScalingSeries(merged)})
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

// addToStore writes files into the store folder as NNN-<suite>.json after
// those there, removing those first if they measured another commit, and
// returns everything the store then holds, oldest first.
func addToStore(store, commit string, files []results.File) ([]results.File, error) {
	paths, err := storePaths(store)
	if err != nil {
		return nil, err
	}
	stored, err := readStore(store)
	if err != nil {
		return nil, err
	}
	if len(stored) > 0 && slices.ContainsFunc(stored, func(f results.File) bool { return f.Commit != commit }) {
		fmt.Fprintf(os.Stderr, "report: %s held the results of commit %s; starting over for commit %s\n", store, stored[0].Commit, commit)
		for _, path := range paths {
			if err := os.Remove(path); err != nil {
				return nil, err
			}
		}
		stored, paths = nil, nil
	}
	next := 1
	if len(paths) > 0 {
		last := filepath.Base(paths[len(paths)-1])
		if _, err := fmt.Sscanf(last, "%03d-", &next); err != nil {
			return nil, fmt.Errorf("%s: not a store file (NNN-<suite>.json)", paths[len(paths)-1])
		}
		next++
	}
	for _, f := range files {
		suite := "results"
		if len(f.Cases) > 0 {
			suite = f.Cases[0].Suite
		}
		if err := results.WriteCompact(filepath.Join(store, fmt.Sprintf("%03d-%s.json", next, suite)), f); err != nil {
			return nil, err
		}
		next++
		stored = append(stored, f)
	}
	return stored, nil
}

// storePaths are the store's files, oldest first.
func storePaths(store string) ([]string, error) {
	paths, err := filepath.Glob(filepath.Join(store, "*.json"))
	slices.Sort(paths)
	return paths, err
}

// readStore reads the store's files, oldest first.
func readStore(store string) ([]results.File, error) {
	paths, err := storePaths(store)
	if err != nil {
		return nil, err
	}
	var stored []results.File
	for _, path := range paths {
		f, err := results.Read(path)
		if err != nil {
			return nil, err
		}
		stored = append(stored, f)
	}
	return stored, nil
}

// doneCases lists the names of the cases of suite in a merged file
// (latest.json) that measured commit: what a resumed `make bench` skips.
// A case counts only if some metric has a value for both schedulers, so
// that one whose runs all failed runs again. A missing file has none.
func doneCases(path, commit, suite string) ([]string, error) {
	f, err := results.Read(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if f.Commit != commit {
		return nil, nil
	}
	var names []string
	for _, c := range f.Cases {
		if c.Suite == suite && c.Upstream > 0 && c.Drasched > 0 && !slices.Contains(names, c.Name) {
			names = append(names, c.Name)
		}
	}
	return names, nil
}

// removePlots removes the SVG files of a plots folder.
func removePlots(dir string) error {
	svgs, err := filepath.Glob(filepath.Join(dir, "*.svg"))
	if err != nil {
		return err
	}
	for _, path := range svgs {
		if err := os.Remove(path); err != nil {
			return err
		}
	}
	return nil
}
