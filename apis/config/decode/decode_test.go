package decode_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"

	"github.com/drasched/drasched/apis/config"
	"github.com/drasched/drasched/apis/config/decode"
	"github.com/drasched/drasched/apis/config/scheme"
)

// schedulerProfiles decodes data as kube-scheduler's --config loader
// does, with kube-scheduler's own scheme, the reference for decode.
func schedulerProfiles(t *testing.T, data []byte) ([]decode.Profile, error) {
	t.Helper()
	obj, _, err := schedscheme.Codecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		return nil, err
	}
	cfg, ok := obj.(*schedconfig.KubeSchedulerConfiguration)
	if !ok {
		// kube-scheduler's loader refuses any other kind.
		return nil, fmt.Errorf("decoded a %T, want *KubeSchedulerConfiguration", obj)
	}
	var profiles []decode.Profile
	for _, p := range cfg.Profiles {
		profile := decode.Profile{SchedulerName: p.SchedulerName}
		for _, pc := range p.PluginConfig {
			if args, ok := pc.Args.(*config.StructuredDRAArgs); ok && pc.Name == config.PluginName {
				profile.Args = args
			}
		}
		if profile.Args == nil {
			// kube-scheduler adds default args only for plugins that a
			// profile enables; the plugin gets the defaults either way.
			if profile.Args, err = decode.DefaultArgs(); err != nil {
				t.Fatal(err)
			}
		}
		profiles = append(profiles, profile)
	}
	return profiles, nil
}

const header = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
`

// TestProfilesAsKubeScheduler: for the shipped configurations and for
// files that exercise every way of writing (or not writing) the
// arguments, decode gives each profile the arguments kube-scheduler gives
// the plugin, and refuses what kube-scheduler refuses.
func TestProfilesAsKubeScheduler(t *testing.T) {
	inputs := map[string]string{
		"no profiles": header,
		"one unnamed profile": header + `profiles:
- plugins:
    multiPoint:
      enabled: [{name: StructuredDRA}]
`,
		"args without apiVersion and kind": header + `profiles:
- schedulerName: drasched
  pluginConfig:
  - name: StructuredDRA
    args:
      filterTimeout: 3s
      scoring: {deviceStrategy: LeastAllocated}
`,
		"pluginConfig without args": header + `profiles:
- schedulerName: drasched
  pluginConfig:
  - name: StructuredDRA
`,
		"two profiles, other plugins' args": header + `profiles:
- schedulerName: a
  pluginConfig:
  - name: NodeResourcesFit
    args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: NodeResourcesFitArgs
  - name: StructuredDRA
    args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: StructuredDRAArgs
      allocator: upstream
      allocation: {policy: BestFit, topologyAttributes: [example.com/rack]}
- schedulerName: b
`,
		"unknown field in the args": header + `profiles:
- schedulerName: drasched
  pluginConfig:
  - name: StructuredDRA
    args:
      filterTimeot: 3s
`,
		"unknown field in the file": header + `profilez: []
`,
		"args of another kind": header + `profiles:
- schedulerName: drasched
  pluginConfig:
  - name: StructuredDRA
    args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: NodeResourcesFitArgs
`,
		"not YAML": "profiles: [",
		"another kind": `apiVersion: kubescheduler.config.k8s.io/v1
kind: StructuredDRAArgs
`,
	}
	for _, path := range []string{
		filepath.Join("..", "..", "..", "config", "scheduler-config.yaml"),
		filepath.Join("..", "..", "..", "config", "default-scheduler-config.yaml"),
		filepath.Join("..", "scheme", "testdata", "bad-args.yaml"),
	} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		inputs[filepath.Base(path)] = string(data)
	}
	for name, data := range inputs {
		t.Run(name, func(t *testing.T) {
			want, wantErr := schedulerProfiles(t, []byte(data))
			got, err := decode.Profiles([]byte(data))
			switch {
			case wantErr != nil && err == nil:
				t.Fatalf("decoded %+v; kube-scheduler refuses it: %v", got, wantErr)
			case wantErr == nil && err != nil:
				t.Fatalf("error %v; kube-scheduler decodes it", err)
			case err != nil:
				t.Logf("refused as kube-scheduler refuses it: %v (kube-scheduler: %v)", err, wantErr)
				return
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("profiles (-kube-scheduler +decode):\n%s", diff)
			}
		})
	}
}

// TestDefaultArgs: the defaults are those of kube-scheduler's scheme.
func TestDefaultArgs(t *testing.T) {
	want, err := scheme.DefaultArgs()
	if err != nil {
		t.Fatal(err)
	}
	got, err := decode.DefaultArgs()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults (-kube-scheduler +decode):\n%s", diff)
	}
}
