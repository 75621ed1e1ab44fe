// Command report turns benchmark results into what bench/results/ holds.
//
//	report allocator [-command CMD] [-seconds S] [-print] RAW OUT.json
//	    converts `go test -bench` output of benchmarks named
//	    .../case=NAME/impl=upstream|drasched (pkg/allocator's
//	    BenchmarkAllocate) into a suite file of the results format
//	    (bench/internal/results), suite "allocator"; -print also prints
//	    it as a Markdown table.
//	report merge -out DIR [-doc docs/benchmarks.md] [-commit C [-store STORE]] SUITE.json...
//	    merges suite files (scheduler_perf, kwok, allocator, ...) into
//	    DIR/latest.json and DIR/latest.md, draws the time series of the
//	    suite files into DIR/plots/<suite>_<case>.svg, and with -doc
//	    replaces the part of that Markdown page between the lines
//	    "<!-- bench:begin -->" and "<!-- bench:end -->" with latest.md,
//	    its plot links made relative to the page. -commit records the
//	    commit measured; with -store the suite files join those stored
//	    for that commit (a store of another commit is emptied) and all
//	    of them are merged: how `make bench` resumes.
//	report done -commit C -suite SUITE DIR/latest.json
//	    prints the names of the cases of SUITE in latest.json measured
//	    on commit C, one per line: those a resumed `make bench` skips.
//
// It is a module of its own so that its plotting library
// (gonum.org/v1/plot, pinned in go.mod) stays out of drasched's go.mod.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/drasched/drasched/bench/internal/results"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: report allocator|merge|done [flags] FILES")
	}
	switch args[0] {
	case "allocator":
		fs := flag.NewFlagSet("allocator", flag.ContinueOnError)
		command := fs.String("command", "", "the command that reproduces the figures")
		seconds := fs.Float64("seconds", 0, "how long the benchmark ran")
		printTable := fs.Bool("print", false, "also print the suite as a Markdown table")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if fs.NArg() != 2 {
			return errors.New("usage: report allocator [-command CMD] [-seconds S] [-print] RAW OUT.json")
		}
		if err := allocatorSuite(fs.Arg(0), fs.Arg(1), *command, *seconds); err != nil {
			return err
		}
		if !*printTable {
			return nil
		}
		f, err := results.Read(fs.Arg(1))
		if err != nil {
			return err
		}
		return results.Markdown(os.Stdout, f)
	case "merge":
		fs := flag.NewFlagSet("merge", flag.ContinueOnError)
		out := fs.String("out", "", "directory for latest.json, latest.md and plots/")
		doc := fs.String("doc", "", "Markdown page to update between the bench:begin and bench:end markers (docs/benchmarks.md)")
		commit := fs.String("commit", "", "the commit the suite files measured")
		store := fs.String("store", "", "folder of the suite files of one commit so far; the inputs join them (needs -commit)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		// With a store and no suite file, what the store holds is merged
		// again: after a change to the report, without measuring.
		if *out == "" || (fs.NArg() == 0 && *store == "") {
			return errors.New("usage: report merge -out DIR [-doc docs/benchmarks.md] [-commit C [-store STORE]] SUITE.json [SUITE.json]; report merge -out DIR -store STORE [-doc ...]")
		}
		return merge(*out, *doc, *commit, *store, fs.Args())
	case "done":
		fs := flag.NewFlagSet("done", flag.ContinueOnError)
		commit := fs.String("commit", "", "the commit measured")
		suite := fs.String("suite", "", "the suite")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *commit == "" || *suite == "" || fs.NArg() != 1 {
			return errors.New("usage: report done -commit C -suite SUITE DIR/latest.json")
		}
		names, err := doneCases(fs.Arg(0), *commit, *suite)
		if err != nil {
			return err
		}
		for _, n := range names {
			fmt.Println(n)
		}
		return nil
	}
	return fmt.Errorf("unknown subcommand %q", args[0])
}
