// Command benchtable turns `go test -bench` output of benchmarks named
// .../case=NAME/impl=upstream and .../case=NAME/impl=drasched into a
// Markdown table: the median of each metric per case and implementation,
// and the ratio upstream/drasched (> 1 means drasched is faster or leaner).
//
//	go test ./pkg/allocator -run '^$' -bench BenchmarkAllocate -benchmem -count 5 | (cd hack/tools && go run ./benchtable)
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"golang.org/x/perf/benchfmt"
)

type key struct{ name, impl string }

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	// values[case/impl][unit] are the measurements of all runs.
	values := map[key]map[string][]float64{}
	var cases []string
	reader := benchfmt.NewReader(in, "stdin")
	for reader.Scan() {
		result, ok := reader.Result().(*benchfmt.Result)
		if !ok {
			continue
		}
		name, impl := "", ""
		for _, part := range strings.Split(string(result.Name), "/") {
			part = strings.Split(part, "-")[0]
			if v, found := strings.CutPrefix(part, "case="); found {
				name = v
			}
			if v, found := strings.CutPrefix(part, "impl="); found {
				impl = v
			}
		}
		if name == "" || impl == "" {
			continue
		}
		k := key{name, impl}
		if values[k] == nil {
			values[k] = map[string][]float64{}
			if !slices.Contains(cases, name) {
				cases = append(cases, name)
			}
		}
		for _, v := range result.Values {
			values[k][v.Unit] = append(values[k][v.Unit], v.Value)
		}
	}
	if err := reader.Err(); err != nil {
		return err
	}
	slices.Sort(cases)

	w := bufio.NewWriter(out)
	defer w.Flush()
	fmt.Fprintln(w, "| case | upstream | drasched | speed-up | B/op upstream | B/op drasched | allocs/op upstream | allocs/op drasched | CEL hit ratio |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, name := range cases {
		up, ours := values[key{name, "upstream"}], values[key{name, "drasched"}]
		if up == nil || ours == nil {
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", name,
			duration(median(up["sec/op"])), duration(median(ours["sec/op"])), ratio(up["sec/op"], ours["sec/op"]),
			bytes(median(up["B/op"])), bytes(median(ours["B/op"])),
			count(median(up["allocs/op"])), count(median(ours["allocs/op"])),
			hitRatio(ours["cel-hit-ratio"]))
	}
	return nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ratio(up, ours []float64) string {
	u, o := median(up), median(ours)
	if u == 0 || o == 0 {
		return "–"
	}
	r := u / o
	switch {
	case r >= 100:
		return fmt.Sprintf("**%.0f×**", r)
	case r >= 10:
		return fmt.Sprintf("**%.1f×**", r)
	}
	return fmt.Sprintf("**%.2f×**", r)
}

func duration(sec float64) string {
	switch {
	case sec >= 1:
		return fmt.Sprintf("%.2f s", sec)
	case sec >= 1e-3:
		return fmt.Sprintf("%.2f ms", sec*1e3)
	}
	return fmt.Sprintf("%.1f µs", sec*1e6)
}

func bytes(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}

func count(n float64) string {
	switch {
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", n/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fk", n/1e3)
	}
	return fmt.Sprintf("%.0f", n)
}

func hitRatio(v []float64) string {
	if len(v) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.3f", median(v))
}
