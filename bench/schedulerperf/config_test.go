package schedulerperf

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	"k8s.io/kubernetes/pkg/features"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	schedvalidation "k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"sigs.k8s.io/yaml"

	"github.com/drasched/drasched/apis/config"
	_ "github.com/drasched/drasched/apis/config/scheme"
	"github.com/drasched/drasched/bench/internal/results"
	draplugins "github.com/drasched/drasched/pkg/plugins"
	"github.com/drasched/drasched/pkg/plugins/dra"
)

// upstreamDir is scheduler_perf in the module cache; the tests read the
// real upstream configurations, so that a change there shows up here.
func upstreamDir(t *testing.T) string {
	t.Helper()
	dir, err := UpstreamDir()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestSchedulerConfig(t *testing.T) {
	shipped, err := os.ReadFile("../../config/scheduler-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data, err := SchedulerConfig(shipped)
	if err != nil {
		t.Fatal(err)
	}
	// Decode it as scheduler_perf does (loadSchedulerConfig), with the
	// StructuredDRAArgs of our scheme.
	obj, _, err := schedscheme.Codecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		t.Fatalf("decode generated configuration: %v\n%s", err, data)
	}
	cfg, ok := obj.(*schedconfig.KubeSchedulerConfiguration)
	if !ok {
		t.Fatalf("decoded %T", obj)
	}
	if err := schedvalidation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		t.Fatalf("generated configuration is invalid: %v", err)
	}
	if cfg.LeaderElection.LeaderElect {
		t.Error("leader election is enabled")
	}
	if len(cfg.Profiles) != 1 {
		t.Fatalf("%d profiles, want 1", len(cfg.Profiles))
	}
	profile := cfg.Profiles[0]
	if profile.SchedulerName != "default-scheduler" {
		t.Errorf("scheduler name %q, want default-scheduler (the name of scheduler_perf's pods)", profile.SchedulerName)
	}
	names := func(ps []schedconfig.Plugin) []string {
		var n []string
		for _, p := range ps {
			n = append(n, p.Name)
		}
		return n
	}
	if enabled := names(profile.Plugins.MultiPoint.Enabled); !slices.Contains(enabled, "StructuredDRA") {
		t.Errorf("StructuredDRA not enabled: %v", enabled)
	}
	// Every plugin of the profile must be one that scheduler_perf can
	// build: kube-scheduler's or one of plugins.Registry.
	inTree, ours := plugins.NewInTreeRegistry(), draplugins.Registry(dra.ProcessOptions{})
	for _, name := range names(profile.Plugins.MultiPoint.Enabled) {
		if _, ok := inTree[name]; !ok && ours[name] == nil {
			t.Errorf("plugin %s of the shipped profile is neither in-tree nor in drasched's plugins.Registry", name)
		}
	}
	if disabled := names(profile.Plugins.MultiPoint.Disabled); !slices.Contains(disabled, "DynamicResources") {
		t.Errorf("DynamicResources not disabled: %v", disabled)
	}
	var args *config.StructuredDRAArgs
	for _, pc := range profile.PluginConfig {
		if pc.Name == "StructuredDRA" {
			args, _ = pc.Args.(*config.StructuredDRAArgs)
		}
	}
	if args == nil || args.Allocator != config.AllocatorBuiltin {
		t.Errorf("StructuredDRA args %+v, want the builtin allocator", args)
	}
}

// testCaseConfig is the part of a scheduler_perf test case that the tests
// look at.
type testCaseConfig struct {
	Name                   string         `json:"name"`
	Labels                 []string       `json:"labels"`
	SchedulerConfigPath    string         `json:"schedulerConfigPath"`
	FeatureGates           map[string]any `json:"featureGates"`
	MetricsCollectorConfig map[string]any `json:"metricsCollectorConfig"`
	WorkloadTemplate       []struct {
		Opcode          string `json:"opcode"`
		TemplatePath    string `json:"templatePath"`
		PodTemplatePath string `json:"podTemplatePath"`
	} `json:"workloadTemplate"`
	Workloads []struct {
		Name      string         `json:"name"`
		Labels    []string       `json:"labels"`
		Threshold any            `json:"threshold"`
		Params    map[string]any `json:"params"`
	} `json:"workloads"`
}

func readConfig(t *testing.T, path string) testCaseConfig {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tcs []testCaseConfig
	if err := yaml.Unmarshal(data, &tcs); err != nil {
		t.Fatal(err)
	}
	if len(tcs) != 1 {
		t.Fatalf("%s: %d test cases, want 1", path, len(tcs))
	}
	return tcs[0]
}

// filePaths returns the values of all path fields in a configuration.
func filePaths(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	var paths []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for key, value := range v {
				if s, ok := value.(string); ok && pathKeys[key] {
					paths = append(paths, s)
				}
				walk(value)
			}
		case []any:
			for _, value := range v {
				walk(value)
			}
		}
	}
	walk(v)
	return paths
}

func TestWorkloadConfig(t *testing.T) {
	upstream := upstreamDir(t)
	for _, c := range Cases {
		t.Run(c.Name, func(t *testing.T) {
			dir := t.TempDir()
			path, err := WorkloadConfig(upstream, dir, c, ConfigOptions{
				SchedulerConfigPath: "/tmp/sched.yaml",
				Duration:            "3s",
				Plugins:             []string{"DynamicResources", "StructuredDRA"},
				ExtensionPoints:     []string{"Filter"},
			})
			if err != nil {
				t.Fatal(err)
			}
			tc := readConfig(t, path)
			if len(tc.Workloads) != 1 || tc.Workloads[0].Name != c.Workload {
				t.Fatalf("workloads %+v, want only %s", tc.Workloads, c.Workload)
			}
			w := tc.Workloads[0]
			if len(tc.Labels) > 0 || len(w.Labels) > 0 || w.Threshold != nil {
				t.Errorf("labels %v/%v or threshold %v left", tc.Labels, w.Labels, w.Threshold)
			}
			if tc.SchedulerConfigPath != "/tmp/sched.yaml" {
				t.Errorf("schedulerConfigPath %q", tc.SchedulerConfigPath)
			}
			if d, ok := w.Params["duration"]; ok && d != "3s" {
				t.Errorf("duration %v, want 3s", d)
			}
			if tc.MetricsCollectorConfig == nil {
				t.Error("no metricsCollectorConfig")
			}
			for _, p := range filePaths(t, path) {
				if p == "/tmp/sched.yaml" {
					continue
				}
				if !filepath.IsAbs(p) {
					t.Errorf("relative path %s", p)
				}
				if _, err := os.Stat(p); err != nil {
					t.Errorf("path does not resolve: %v", err)
				}
				if !strings.HasPrefix(p, upstream) && !strings.HasPrefix(p, dir) {
					t.Errorf("path %s is neither upstream's nor generated", p)
				}
			}
			if c.WithoutClaims {
				checkWithoutClaims(t, tc)
			}
			// Upstream's gates stay; the case's come on top, in
			// this test case's featureGates, which scheduler_perf
			// sets before it starts the scheduler.
			want := upstreamFeatureGates(t, upstream, c)
			for name, enabled := range c.FeatureGates {
				want[string(name)] = enabled
			}
			if diff := cmp.Diff(want, tc.FeatureGates, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("featureGates (-want +got):\n%s", diff)
			}
		})
	}
}

// upstreamFeatureGates returns the featureGates of c's test case in the
// upstream configuration.
func upstreamFeatureGates(t *testing.T, upstream string, c Case) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(upstream, c.Config))
	if err != nil {
		t.Fatal(err)
	}
	var tcs []testCaseConfig
	if err := yaml.Unmarshal(data, &tcs); err != nil {
		t.Fatal(err)
	}
	for _, tc := range tcs {
		if tc.Name == c.TestCase {
			gates := map[string]any{}
			for name, enabled := range tc.FeatureGates {
				gates[name] = enabled
			}
			return gates
		}
	}
	t.Fatalf("%s: no test case %s", c.Config, c.TestCase)
	return nil
}

func TestCaseFeatureGates(t *testing.T) {
	for i, c := range Cases {
		t.Run(c.Name, func(t *testing.T) {
			// What featuregatetesting.SetFeatureGatesDuringTest does
			// in scheduler_perf: a gate that is unknown, locked or
			// gone after an upgrade of k8s.io/kubernetes fails here
			// rather than after the minutes a run takes to start.
			gates := map[string]bool{}
			for name, enabled := range c.FeatureGates {
				gates[string(name)] = enabled
			}
			if err := utilfeature.DefaultFeatureGate.DeepCopy().SetFromMap(gates); err != nil {
				t.Errorf("feature gates %v: %v", gates, err)
			}
			base, pqh := strings.CutSuffix(c.Name, "+pqh")
			if !pqh {
				if _, ok := c.FeatureGates[features.SchedulerPreQueueingHints]; ok {
					t.Errorf("sets %s without the +pqh suffix", features.SchedulerPreQueueingHints)
				}
				return
			}
			// A +pqh case sits right after its default case and
			// differs from it only in the gate and the target.
			if i == 0 || Cases[i-1].Name != base {
				t.Fatalf("does not follow its default case %s", base)
			}
			want := Cases[i-1]
			want.Name, want.FeatureGates, want.Quick, want.Target = c.Name, map[featuregate.Feature]bool{features.SchedulerPreQueueingHints: true}, c.Quick, 0
			if diff := cmp.Diff(want, c); diff != "" {
				t.Errorf("differs from %s in more than the gate, Quick and Target (-want +got):\n%s", base, diff)
			}
			if !c.DRA {
				t.Error("not a DRA case: drasched could be slower unnoticed")
			}
		})
	}
}

func TestAddFeatureGates(t *testing.T) {
	gates := map[featuregate.Feature]bool{features.SchedulerPreQueueingHints: true}
	for name, tt := range map[string]struct {
		tc, workload map[string]any
		gates        map[featuregate.Feature]bool
		want         map[string]any
		wantErr      bool
	}{
		"no gates": {
			tc:       map[string]any{"featureGates": map[string]any{"DynamicResourceAllocation": true}},
			workload: map[string]any{"name": "w"},
			want:     map[string]any{"featureGates": map[string]any{"DynamicResourceAllocation": true}},
		},
		"added to the test case's": {
			tc:       map[string]any{"featureGates": map[string]any{"DynamicResourceAllocation": true}},
			workload: map[string]any{"name": "w"},
			gates:    gates,
			want:     map[string]any{"featureGates": map[string]any{"DynamicResourceAllocation": true, "SchedulerPreQueueingHints": true}},
		},
		"test case without gates": {
			tc:       map[string]any{},
			workload: map[string]any{"name": "w"},
			gates:    gates,
			want:     map[string]any{"featureGates": map[string]any{"SchedulerPreQueueingHints": true}},
		},
		"replaces the test case's value": {
			tc:       map[string]any{"featureGates": map[string]any{"SchedulerPreQueueingHints": false}},
			workload: map[string]any{"name": "w"},
			gates:    gates,
			want:     map[string]any{"featureGates": map[string]any{"SchedulerPreQueueingHints": true}},
		},
		"workload sets the gate": {
			tc:       map[string]any{},
			workload: map[string]any{"name": "w", "featureGates": map[string]any{"SchedulerPreQueueingHints": false}},
			gates:    gates,
			wantErr:  true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			err := addFeatureGates(tt.tc, tt.workload, tt.gates)
			if tt.wantErr {
				if err == nil {
					t.Errorf("no error, test case %v", tt.tc)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, tt.tc); diff != "" {
				t.Errorf("test case (-want +got):\n%s", diff)
			}
		})
	}
}

func checkWithoutClaims(t *testing.T, tc testCaseConfig) {
	t.Helper()
	pods := 0
	for _, op := range tc.WorkloadTemplate {
		if op.Opcode == "allocResourceClaims" || strings.Contains(op.TemplatePath, "resourceclaim") {
			t.Errorf("op %s %s creates or allocates claims", op.Opcode, op.TemplatePath)
		}
		if op.Opcode != "createPods" {
			continue
		}
		pods++
		data, err := os.ReadFile(op.PodTemplatePath)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(data, []byte("laim")) {
			t.Errorf("pod template %s still mentions claims:\n%s", op.PodTemplatePath, data)
		}
	}
	if pods == 0 {
		t.Error("no createPods op left")
	}
	// scheduler_perf fails workloads with unused parameters.
	w := tc.Workloads[0]
	for _, gone := range []string{"initClaims"} {
		if _, ok := w.Params[gone]; ok {
			t.Errorf("parameter %s is left although nothing uses it", gone)
		}
	}
	for _, kept := range []string{"nodesWithDRA", "measurePods", "duration", "steadyState"} {
		if _, ok := w.Params[kept]; !ok {
			t.Errorf("parameter %s is gone", kept)
		}
	}
}

func TestWorkloadConfigErrors(t *testing.T) {
	upstream := upstreamDir(t)
	for name, c := range map[string]Case{
		"missing test case": {Name: "x", Config: draConfig, TestCase: "NoSuchCase", Workload: "empty_500nodes"},
		"missing workload":  {Name: "x", Config: draConfig, TestCase: claimTemplateTestCase, Workload: "no_such_workload"},
		"missing file":      {Name: "x", Config: "dra/no-such-config.yaml", TestCase: claimTemplateTestCase, Workload: "empty_500nodes"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := WorkloadConfig(upstream, t.TempDir(), c, ConfigOptions{}); err == nil {
				t.Error("no error")
			}
		})
	}
}

func TestPodWithoutClaims(t *testing.T) {
	got, err := podWithoutClaims([]byte(`apiVersion: v1
kind: Pod
metadata:
  generateName: test-dra
spec:
  containers:
  - image: pause
    name: pause
    resources:
      claims:
      - name: resource
  - image: pause
    name: other
    resources:
      claims:
      - name: resource
      requests:
        cpu: 1m
  resourceClaims:
  - name: resource
    resourceClaimTemplateName: test-claim-template
`))
	if err != nil {
		t.Fatal(err)
	}
	want := `apiVersion: v1
kind: Pod
metadata:
  generateName: test-dra
spec:
  containers:
  - image: pause
    name: pause
  - image: pause
    name: other
    resources:
      requests:
        cpu: 1m
`
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("podWithoutClaims (-want +got):\n%s", diff)
	}
	if _, err := podWithoutClaims([]byte("spec: {{.Foo}}")); err == nil {
		t.Error("template actions accepted")
	}
}

func TestSelectAndPlan(t *testing.T) {
	quick := Select(Cases, Options{Quick: true})
	var names []string
	for _, c := range quick {
		names = append(names, c.Name)
	}
	if diff := cmp.Diff([]string{"empty_500nodes", "selector_empty_500nodes", "match_empty_500nodes", "partitionable_empty_500nodes", "noclaims_empty_500nodes"}, names); diff != "" {
		t.Errorf("quick cases (-want +got):\n%s", diff)
	}
	selected := Select(Cases, Options{Cases: regexp.MustCompile("^match")})
	plan := Plan(selected, 2)
	var got []string
	for _, r := range plan {
		got = append(got, r.Name())
	}
	want := []string{
		"case=match_empty_500nodes/scheduler=upstream/run=1",
		"case=match_empty_500nodes/scheduler=drasched/run=1",
		"case=match_empty_500nodes/scheduler=upstream/run=2",
		"case=match_empty_500nodes/scheduler=drasched/run=2",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}

	// The +pqh cases, as hack/bench-scheduler-perf.sh's usage selects
	// them; an anchored name selects only the default case.
	for pattern, want := range map[string][]string{
		`\+pqh`:              {"empty_500nodes+pqh", "5000pods_500nodes+pqh"},
		`^empty_500nodes$`:   {"empty_500nodes"},
		`^5000pods_500nodes`: {"5000pods_500nodes", "5000pods_500nodes+pqh"},
	} {
		var got []string
		for _, c := range Select(Cases, Options{Cases: regexp.MustCompile(pattern)}) {
			got = append(got, c.Name)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("cases matching %s (-want +got):\n%s", pattern, diff)
		}
	}
}

// TestRunNames runs a subtest per run under the run's name: Go's testing
// rewrites some characters of sub-test and sub-benchmark names (spaces,
// unprintable ones), and scheduler_perf names its data items file after
// the sub-benchmark, so a name must come back as it went in. Run folders
// must be one path element each, and distinct.
func TestRunNames(t *testing.T) {
	dirs := map[string]string{}
	for _, r := range Plan(Cases, 2) {
		t.Run(r.Name(), func(t *testing.T) {
			if got, want := t.Name(), "TestRunNames/"+r.Name(); got != want {
				t.Errorf("sub-test name %q, want %q", got, want)
			}
			if got := t.Name(); !strings.Contains(got, "case="+r.Case.Name+"/") {
				t.Errorf("sub-test name %q does not hold the case name %q", got, r.Case.Name)
			}
		})
		dir := r.Dir()
		if filepath.Base(dir) != dir || dir == "." || dir == ".." {
			t.Errorf("run folder %q is not one path element", dir)
		}
		if other, ok := dirs[dir]; ok {
			t.Errorf("runs %s and %s share the folder %s", other, r.Name(), dir)
		}
		dirs[dir] = r.Name()
	}
}

func TestReadMeasurement(t *testing.T) {
	dir := t.TempDir()
	items := `{"version": "v1", "dataItems": [
  {"data": {"Average": 40.5, "Perc50": 41, "Perc90": 50}, "unit": "pods/s", "labels": {"Metric": "SchedulingThroughput", "Name": "x"}},
  {"data": {"Average": 0.5, "Perc99": 2}, "unit": "ms", "labels": {"Metric": "scheduler_plugin_execution_duration_seconds", "plugin": "StructuredDRA", "extension_point": "Filter"}},
  {"data": {"Average": 9}, "unit": "ms", "labels": {"Metric": "scheduler_plugin_execution_duration_seconds", "plugin": "NodeResourcesFit", "extension_point": "Filter"}}
]}`
	if err := os.WriteFile(filepath.Join(dir, "BenchmarkPerfScheduling_x.json"), []byte(items), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "x.dat"), []byte("1.0s 47 47 47 19.013013 0 0 0 0\n2.0s 73 73 73 26.009092 0 0 0 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := ReadMeasurement(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := Measurement{
		Throughput: map[string]float64{"Average": 40.5, "Perc50": 41, "Perc90": 50},
		Progress:   [][2]float64{{1, 19.013013}, {2, 26.009092}},
		Plugins:    map[string]map[string]float64{"Filter": {"Average": 0.5, "Perc99": 2}},
	}
	if diff := cmp.Diff(want, m, cmpopts.EquateErrors()); diff != "" {
		t.Errorf("ReadMeasurement (-want +got):\n%s", diff)
	}
	if _, err := ReadMeasurement(t.TempDir()); err == nil {
		t.Error("no error for a run without data items")
	}
}

func TestSummarize(t *testing.T) {
	byName := map[string]Case{}
	for _, c := range Cases {
		byName[c.Name] = c
	}
	empty, pqh, noClaims := byName["empty_500nodes"], byName["empty_500nodes+pqh"], byName["noclaims_empty_500nodes"]
	plan := Plan([]Case{empty, pqh, noClaims}, 2)
	tp := func(avg float64) Measurement {
		return Measurement{Throughput: map[string]float64{"Average": avg, "Perc50": avg, "Perc90": avg * 1.2}, Progress: [][2]float64{{1, avg}}}
	}
	measured := []Measurement{
		tp(40), tp(100), {Err: os.ErrNotExist}, tp(110), // empty: upstream 40 (one run failed), drasched 105
		tp(90), tp(80), tp(100), tp(90), // empty with PreQueueingHints: upstream 95, drasched 85
		tp(120), tp(150), tp(130), tp(170), // no claims: upstream 125, drasched 160
	}
	f := Summarize(plan, measured)
	share := false
	byKey := map[string]results.Case{}
	for _, c := range f.Cases {
		byKey[c.Name+" "+c.Metric] = c
	}
	avg := byKey["empty_500nodes pods_per_second"]
	if avg.Upstream != 40 || avg.Drasched != 105 || avg.Ratio != 105.0/40 {
		t.Errorf("empty average: %+v", avg)
	}
	if avg.Target != "≥ 2×" || avg.TargetMet == nil || !*avg.TargetMet {
		t.Errorf("empty target: %q %v", avg.Target, avg.TargetMet)
	}
	if avg.Note != "1 of 2 upstream runs failed" {
		t.Errorf("empty note: %q", avg.Note)
	}
	if p90 := byKey["empty_500nodes pods_per_second_p90"]; p90.Upstream != 48 {
		t.Errorf("empty p90: %+v", p90)
	}
	// The DRA rule "never slower" holds with the gate too.
	withHints := byKey["empty_500nodes+pqh pods_per_second"]
	if withHints.Upstream != 95 || withHints.Drasched != 85 || withHints.Target != "≥ 1×" || withHints.TargetMet == nil || *withHints.TargetMet {
		t.Errorf("empty+pqh: %+v, want 95 → 85, target ≥ 1× not met", withHints)
	}
	none := byKey["noclaims_empty_500nodes pods_per_second"]
	if none.Target != "" || none.TargetMet != nil {
		t.Errorf("no-claims case has a target: %+v", none)
	}
	merged := results.Merge(f)
	for _, c := range merged.Cases {
		if c.Metric != "share_of_no_claims" {
			continue
		}
		if c.Upstream != 40.0/125 || c.Drasched != 105.0/160 || c.TargetMet == nil || !*c.TargetMet {
			t.Errorf("share: %+v", c)
		}
		share = true
	}
	if !share {
		t.Error("merged, the suite has no share_of_no_claims")
	}
	if len(f.Series) != 11 {
		t.Errorf("%d series, want one per successful run (11)", len(f.Series))
	}
}

func TestProgress(t *testing.T) {
	var buf bytes.Buffer
	p := NewProgress(&buf, 2)
	now := p.start
	p.now = func() time.Time { return now }
	r := Run{Case: Case{Name: "empty_500nodes"}, Scheduler: Upstream, Index: 1}
	p.Start(r, 1)
	now = now.Add(30 * time.Second)
	p.Done(Measurement{Throughput: map[string]float64{"Average": 44.8, "Perc50": 45, "Perc90": 50}})
	r.Scheduler = Drasched
	p.Start(r, 1)
	now = now.Add(20 * time.Second)
	p.Done(Measurement{Err: os.ErrNotExist})
	p.Finish()
	want := `[....................]  1/2  0:00 elapsed, ~? left  empty_500nodes  upstream run 1/1
    44.8 pods/s average (p50 45.0, p90 50.0) in 30s
[##########..........]  2/2  0:30 elapsed, ~0:30 left  empty_500nodes  drasched run 1/1
    failed after 20s: file does not exist
[####################] 2/2  done in 0:50
`
	if diff := cmp.Diff(want, buf.String()); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
}
