package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/drasched/drasched/bench/internal/results"
)

const (
	readmeBegin = "<!-- bench:begin -->"
	readmeEnd   = "<!-- bench:end -->"
)

// merge writes latest.json, latest.md and the plots of the suite files
// into out, and the Markdown into the readme's benchmark section.
func merge(out, readme string, inputs []string) error {
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
	if len(plots) > 0 {
		fmt.Fprint(&md, "\nThroughput over time, per case:")
		for _, p := range plots {
			rel, err := filepath.Rel(out, p.path)
			if err != nil {
				return err
			}
			fmt.Fprintf(&md, " [%s](%s)", p.name, filepath.ToSlash(rel))
		}
		fmt.Fprintln(&md)
	}
	if err := os.WriteFile(filepath.Join(out, "latest.md"), md.Bytes(), 0o644); err != nil {
		return err
	}
	if readme == "" {
		return nil
	}
	// Links in the README are relative to the repository root.
	section, err := readmeSection(md.String(), out, readme)
	if err != nil {
		return err
	}
	return replaceSection(readme, section)
}

// readmeSection rewrites the plot links of latest.md, relative to out,
// to be relative to the README's folder.
func readmeSection(md, out, readme string) (string, error) {
	rel, err := filepath.Rel(filepath.Dir(readme), out)
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
	begin := strings.Index(text, readmeBegin+"\n")
	end := strings.Index(text, readmeEnd)
	if begin < 0 || end < begin {
		return fmt.Errorf("%s: no %s ... %s section", path, readmeBegin, readmeEnd)
	}
	begin += len(readmeBegin) + 1
	text = text[:begin] + section + text[end:]
	return os.WriteFile(path, []byte(text), 0o644)
}
