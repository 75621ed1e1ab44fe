package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"

	draconfig "github.com/drasched/drasched/apis/config"
	_ "github.com/drasched/drasched/apis/config/scheme" // StructuredDRAArgs
)

// enabled returns the names of a profile's plugins that are enabled for
// all extension points (multiPoint) and not disabled there; after
// defaulting, the default plugins are listed there too.
func enabled(p config.KubeSchedulerProfile) []string {
	var names []string
	for _, pl := range p.Plugins.MultiPoint.Enabled {
		disabled := slices.ContainsFunc(p.Plugins.MultiPoint.Disabled, func(d config.Plugin) bool { return d.Name == pl.Name })
		if !disabled && !slices.Contains(names, pl.Name) {
			names = append(names, pl.Name)
		}
	}
	return names
}

// TestSchedulerConfigs: both schedulers get the same name, client QPS and
// kubeconfig; upstream runs DynamicResources, drasched StructuredDRA
// instead.
func TestSchedulerConfigs(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	dir := t.TempDir()
	loaded := map[string]*config.KubeSchedulerConfiguration{}
	for _, s := range []string{upstream, drasched} {
		data, err := schedulerConfig(s, repoRoot+"/config/scheduler-config.yaml", "", false, "/k/kubeconfig", "bench", 4000, 3000)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, s+".yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if loaded[s], err = options.LoadConfigFromFile(logger, path); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	for s, cfg := range loaded {
		if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != "bench" {
			t.Errorf("%s: profiles %v, want one named bench", s, cfg.Profiles)
		}
	}
	if diff := cmp.Diff(loaded[upstream].ClientConnection, loaded[drasched].ClientConnection); diff != "" {
		t.Errorf("client connections differ (-upstream +drasched):\n%s", diff)
	}
	if c := loaded[upstream].ClientConnection; c.QPS != 4000 || c.Burst != 3000 || c.Kubeconfig != "/k/kubeconfig" {
		t.Errorf("client connection %+v", c)
	}
	for s, want := range map[string][2]string{upstream: {"DynamicResources", "StructuredDRA"}, drasched: {"StructuredDRA", "DynamicResources"}} {
		names := enabled(loaded[s].Profiles[0])
		if !slices.Contains(names, want[0]) || slices.Contains(names, want[1]) {
			t.Errorf("%s: plugins %v, want %s and not %s", s, names, want[0], want[1])
		}
	}
	if _, err := schedulerConfig("other", "", "", false, "/k", "bench", 1, 1); err == nil {
		t.Error("unknown scheduler: no error")
	}
	if _, err := schedulerConfig(upstream, "", "BestFit", false, "/k", "bench", 1, 1); err == nil {
		t.Error("upstream with an allocation policy: no error")
	}
}

// structuredDRAArgs returns the StructuredDRA args of a loaded profile.
func structuredDRAArgs(t *testing.T, p config.KubeSchedulerProfile) *draconfig.StructuredDRAArgs {
	t.Helper()
	for _, pc := range p.PluginConfig {
		if pc.Name == structuredDRA {
			args, ok := pc.Args.(*draconfig.StructuredDRAArgs)
			if !ok {
				t.Fatalf("StructuredDRA args are a %T", pc.Args)
			}
			return args
		}
	}
	t.Fatal("no StructuredDRA args")
	return nil
}

// TestSchedulerConfigPolicy: --allocation-policy BestFit gives drasched's
// shipped configuration the BestFit policy and changes nothing else of
// StructuredDRA's args; without it the shipped policy (FirstFit) stays.
func TestSchedulerConfigPolicy(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	dir := t.TempDir()
	load := func(in, policy string) *config.KubeSchedulerConfiguration {
		t.Helper()
		data, err := schedulerConfig(drasched, in, policy, false, "/k/kubeconfig", "bench", 4000, 3000)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := options.LoadConfigFromFile(logger, path)
		if err != nil {
			t.Fatalf("%v\n%s", err, data)
		}
		return cfg
	}
	shipped := repoRoot + "/config/scheduler-config.yaml"
	firstFit := structuredDRAArgs(t, load(shipped, "").Profiles[0])
	bestFit := structuredDRAArgs(t, load(shipped, "BestFit").Profiles[0])
	if firstFit.Allocation.Policy != draconfig.AllocationPolicyFirstFit {
		t.Errorf("shipped policy %q, want FirstFit", firstFit.Allocation.Policy)
	}
	if bestFit.Allocation.Policy != draconfig.AllocationPolicyBestFit {
		t.Errorf("policy %q, want BestFit", bestFit.Allocation.Policy)
	}
	want := firstFit.DeepCopy()
	want.Allocation.Policy = draconfig.AllocationPolicyBestFit
	if diff := cmp.Diff(want, bestFit); diff != "" {
		t.Errorf("args besides the policy changed (-want +got):\n%s", diff)
	}

	// A configuration without StructuredDRA args gets them.
	bare := filepath.Join(dir, "bare.yaml")
	if err := os.WriteFile(bare, []byte(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: drasched
  plugins:
    multiPoint:
      enabled:
      - name: StructuredDRA
      disabled:
      - name: DynamicResources
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := structuredDRAArgs(t, load(bare, "BestFit").Profiles[0]).Allocation.Policy; got != draconfig.AllocationPolicyBestFit {
		t.Errorf("bare configuration: policy %q, want BestFit", got)
	}
}

// TestSchedulerConfigWithoutDefaultSpreading: --default-spreading=false
// gives both schedulers PodTopologySpread with defaultingType List and no
// default constraints, and changes nothing else of the profile.
func TestSchedulerConfigWithoutDefaultSpreading(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	dir := t.TempDir()
	load := func(scheduler string, noDefaultSpreading bool) *config.KubeSchedulerConfiguration {
		t.Helper()
		data, err := schedulerConfig(scheduler, repoRoot+"/config/scheduler-config.yaml", "", noDefaultSpreading, "/k/kubeconfig", "bench", 4000, 3000)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, scheduler+".yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := options.LoadConfigFromFile(logger, path)
		if err != nil {
			t.Fatalf("%s: %v\n%s", scheduler, err, data)
		}
		return cfg
	}
	spreadArgs := func(p config.KubeSchedulerProfile) *config.PodTopologySpreadArgs {
		t.Helper()
		for _, pc := range p.PluginConfig {
			if pc.Name == podTopologySpread {
				return pc.Args.(*config.PodTopologySpreadArgs)
			}
		}
		t.Fatal("no PodTopologySpread args")
		return nil
	}
	for _, s := range []string{upstream, drasched} {
		with, without := load(s, false), load(s, true)
		if got := spreadArgs(with.Profiles[0]).DefaultingType; got != config.SystemDefaulting {
			t.Errorf("%s: defaultingType %q, want System", s, got)
		}
		args := spreadArgs(without.Profiles[0])
		if args.DefaultingType != config.ListDefaulting || len(args.DefaultConstraints) != 0 {
			t.Errorf("%s without default spreading: args %+v, want List without constraints", s, args)
		}
		// Everything else as before, in whatever order.
		*spreadArgs(without.Profiles[0]) = *spreadArgs(with.Profiles[0])
		for _, cfg := range []*config.KubeSchedulerConfiguration{with, without} {
			slices.SortFunc(cfg.Profiles[0].PluginConfig, func(a, b config.PluginConfig) int { return strings.Compare(a.Name, b.Name) })
		}
		if diff := cmp.Diff(with, without); diff != "" {
			t.Errorf("%s: more changed than PodTopologySpread's args (-with +without):\n%s", s, diff)
		}
	}
}

func TestCheckVariant(t *testing.T) {
	for variant, ok := range map[string]bool{
		"": true, "pqh": true, "batch": true, "batch+pqh": true, "pqh+batch": true,
		"pqh+pqh": false, "fast": false, "batch+": false,
	} {
		if err := checkVariant(variant); (err == nil) != ok {
			t.Errorf("checkVariant(%q) = %v, want ok %v", variant, err, ok)
		}
	}
}
