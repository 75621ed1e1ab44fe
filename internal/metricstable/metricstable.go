// Package metricstable checks a documentation page's metrics table against
// the metrics a package registers. The tests of the packages that register
// metrics call it: they alone can reach their metric objects.
package metricstable

import (
	"cmp"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/component-base/metrics"
)

// metric is what a metrics table says of a metric, and what a registry
// knows of it.
type metric struct {
	kind   string   // counter, gauge or histogram, as "# TYPE" says
	labels []string // sorted
}

func (m metric) String() string {
	return fmt.Sprintf("%s{%s}", m.kind, strings.Join(m.labels, ","))
}

// Check compares a page's metrics table with the metrics that
// collectors register, and returns every difference: a metric registered
// but not listed, one listed but not registered, and a type or label names
// that differ. A row of the table names a metric of prefix in its first
// cell, as a code span `name{label,label}`, and its type in the second.
//
// The collectors are registered in a fresh registry as the binaries
// register them in the legacy one (metrics.Registerable with Register,
// metrics.StableCollector with CustomRegister, other prometheus.Collectors
// raw); each StableCollector and raw collector must report a sample of
// every metric it describes, which is how their types and labels are
// known. The collector list is the caller's restatement of its
// registration, so sources names the folders whose Go files declare the
// metrics (in metrics.*Opts{Name: ...} and metrics.BuildFQName, each name
// taken as prefix and name: a package's metrics share one namespace and
// subsystem): a metric declared there but missing from the collectors is a
// difference too.
func Check(page, prefix string, sources []string, collectors ...any) ([]string, error) {
	registered, err := registeredMetrics(collectors...)
	if err != nil {
		return nil, err
	}
	documented, problems, err := documentedMetrics(page, prefix)
	if err != nil {
		return nil, err
	}
	if len(documented) == 0 && len(problems) == 0 {
		return nil, fmt.Errorf("%s lists no metric of %s in a table", page, prefix)
	}
	for name, got := range registered {
		if !strings.HasPrefix(name, prefix) {
			problems = append(problems, fmt.Sprintf("%s is registered, but its name lacks the prefix %s", name, prefix))
			continue
		}
		want, ok := documented[name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s (%v) is registered, but %s's metrics table does not list it", name, got, page))
		case want.kind != got.kind:
			problems = append(problems, fmt.Sprintf("%s: %s says %s, the registry %s", name, page, want.kind, got.kind))
		case !slices.Equal(want.labels, got.labels):
			problems = append(problems, fmt.Sprintf("%s: %s gives the labels {%s}, the registry {%s}", name, page,
				strings.Join(want.labels, ","), strings.Join(got.labels, ",")))
		}
	}
	for name := range documented {
		if _, ok := registered[name]; !ok {
			problems = append(problems, fmt.Sprintf("%s lists %s, which is not registered", page, name))
		}
	}
	for _, dir := range sources {
		declared, err := declaredMetrics(dir, prefix)
		if err != nil {
			return nil, err
		}
		for _, name := range declared {
			if _, ok := registered[name]; !ok {
				problems = append(problems, fmt.Sprintf("%s is declared in %s but not among the collectors the test registers", name, dir))
			}
		}
	}
	slices.Sort(problems)
	return problems, nil
}

// documentedMetrics reads the rows of page's tables that name a metric of
// prefix, with problems of the rows themselves.
func documentedMetrics(page, prefix string) (map[string]metric, []string, error) {
	data, err := os.ReadFile(page)
	if err != nil {
		return nil, nil, err
	}
	var problems []string
	documented := map[string]metric{}
	for n, line := range strings.Split(string(data), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || strings.TrimSpace(cells[0]) != "" {
			continue
		}
		first := strings.TrimSpace(cells[1])
		if !strings.HasPrefix(first, "`"+prefix) {
			continue
		}
		where := fmt.Sprintf("%s:%d", page, n+1)
		spec, ok := strings.CutSuffix(strings.TrimPrefix(first, "`"), "`")
		if !ok || strings.Contains(spec, "`") {
			problems = append(problems, fmt.Sprintf("%s: the first cell %s is not one code span", where, first))
			continue
		}
		name, labels, _ := strings.Cut(spec, "{")
		var m metric
		if labels != "" {
			list, ok := strings.CutSuffix(labels, "}")
			if !ok || list == "" {
				problems = append(problems, fmt.Sprintf("%s: labels of %s: want {label,label}", where, spec))
				continue
			}
			for _, l := range strings.Split(list, ",") {
				m.labels = append(m.labels, strings.TrimSpace(l))
			}
			slices.Sort(m.labels)
		}
		m.kind = strings.TrimSpace(cells[2])
		if !slices.Contains([]string{"counter", "gauge", "histogram"}, m.kind) {
			problems = append(problems, fmt.Sprintf("%s: %s: the type column says %q, want counter, gauge or histogram", where, name, m.kind))
			continue
		}
		if _, dup := documented[name]; dup {
			problems = append(problems, fmt.Sprintf("%s: %s is listed twice", where, name))
		}
		documented[name] = m
	}
	return documented, problems, nil
}

// registeredMetrics registers the collectors in a fresh registry and
// describes every metric they register.
func registeredMetrics(collectors ...any) (map[string]metric, error) {
	reg := metrics.NewKubeRegistry()
	registered := map[string]metric{}
	// sampled counts the metrics that collectors without a Go type of
	// their own (StableCollectors, raw collectors) describe: their type is
	// known from a sample only.
	sampled := 0
	for _, c := range collectors {
		switch c := c.(type) {
		case metrics.StableCollector:
			if err := reg.CustomRegister(c); err != nil {
				return nil, err
			}
			sampled += len(describe(c))
		case metrics.Registerable:
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register %s: %w", c.FQName(), err)
			}
			m, err := describeRegisterable(c)
			if err != nil {
				return nil, err
			}
			registered[c.FQName()] = m
		case prometheus.Collector:
			if err := reg.Registerer().Register(c); err != nil {
				return nil, err
			}
			sampled += len(describe(c))
		default:
			return nil, fmt.Errorf("%T is not a collector", c)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	found := 0
	for _, f := range families {
		if _, ok := registered[f.GetName()]; ok {
			continue // a Registerable, described already
		}
		found++
		var labels []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		slices.Sort(labels)
		registered[f.GetName()] = metric{kind: strings.ToLower(f.GetType().String()), labels: labels}
	}
	if found != sampled {
		return nil, fmt.Errorf("the custom and raw collectors describe %d metrics but gave samples of %d: give each collector data so that it reports every metric", sampled, found)
	}
	return registered, nil
}

func describe(c prometheus.Collector) []*prometheus.Desc {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	var descs []*prometheus.Desc
	for d := range ch {
		descs = append(descs, d)
	}
	return descs
}

// describeRegisterable gives the type of a component-base metric by its Go
// type, and its label names from its descriptor: a vector without children
// reports no sample to read them from.
func describeRegisterable(c metrics.Registerable) (metric, error) {
	var m metric
	switch c.(type) {
	case *metrics.Counter, *metrics.CounterVec:
		m.kind = "counter"
	case *metrics.Gauge, *metrics.GaugeVec:
		m.kind = "gauge"
	case *metrics.Histogram, *metrics.HistogramVec, *metrics.TimingHistogram, *metrics.TimingHistogramVec:
		m.kind = "histogram"
	default:
		return m, fmt.Errorf("%s: unknown kind of metric %T", c.FQName(), c)
	}
	descs := describe(c)
	if len(descs) != 1 {
		return m, fmt.Errorf("%s describes %d metrics, want 1", c.FQName(), len(descs))
	}
	labels, err := labelNames(descs[0])
	if err != nil {
		return m, fmt.Errorf("%s: %w", c.FQName(), err)
	}
	m.labels = labels
	return m, nil
}

// labelNames returns the label names of a descriptor, sorted.
// prometheus.Desc does not expose them, but a constant metric made with as
// many label values as it has labels can be written out with their names,
// and one with another number of values is refused.
func labelNames(desc *prometheus.Desc) ([]string, error) {
	var refused error
	for n := range 32 {
		m, err := prometheus.NewConstMetric(desc, prometheus.UntypedValue, 0, make([]string, n)...)
		if err != nil {
			refused = cmp.Or(refused, err)
			continue
		}
		var out dto.Metric
		if err := m.Write(&out); err != nil {
			return nil, err
		}
		var names []string
		for _, l := range out.GetLabel() {
			names = append(names, l.GetName())
		}
		slices.Sort(names)
		return names, nil
	}
	return nil, fmt.Errorf("label names of %v: %w", desc, refused)
}

// declaredMetrics returns the names (prefix and name) of the metrics that
// the Go files of dir, tests left out, declare with component-base: the
// Name of a metrics.*Opts literal and the name passed to
// metrics.BuildFQName.
func declaredMetrics(dir, prefix string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var names []string
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		pkg := ""
		for _, imp := range f.Imports {
			if imp.Path.Value == `"k8s.io/component-base/metrics"` {
				pkg = "metrics"
				if imp.Name != nil {
					pkg = imp.Name.Name
				}
			}
		}
		if pkg == "" {
			continue
		}
		fromPkg := func(e ast.Expr) (string, bool) {
			sel, ok := e.(*ast.SelectorExpr)
			if !ok {
				return "", false
			}
			x, ok := sel.X.(*ast.Ident)
			return sel.Sel.Name, ok && x.Name == pkg
		}
		add := func(e ast.Expr) {
			if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if name, err := strconv.Unquote(lit.Value); err == nil {
					names = append(names, prefix+name)
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				if typ, ok := fromPkg(n.Type); ok && strings.HasSuffix(typ, "Opts") {
					for _, e := range n.Elts {
						if kv, ok := e.(*ast.KeyValueExpr); ok {
							if key, ok := kv.Key.(*ast.Ident); ok && key.Name == "Name" {
								add(kv.Value)
							}
						}
					}
				}
			case *ast.CallExpr:
				if fn, ok := fromPkg(n.Fun); ok && fn == "BuildFQName" && len(n.Args) == 3 {
					add(n.Args[2])
				}
			}
			return true
		})
	}
	return names, nil
}
