package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler"

	"github.com/drasched/drasched/internal/minor/schedminor"
	draplugins "github.com/drasched/drasched/pkg/plugins"
	"github.com/drasched/drasched/pkg/plugins/dra"
)

func writeConfig(t *testing.T, profiles string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "config.yaml")
	config := "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nleaderElection:\n  leaderElect: false\nprofiles:\n" + profiles
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

func TestCheckConfigFile(t *testing.T) {
	for name, tc := range map[string]struct {
		profiles string
		wantErr  []string // substrings; none means valid
	}{
		"multiPoint swap": {
			profiles: `- schedulerName: drasched
  plugins:
    multiPoint:
      enabled: [{name: StructuredDRA}]
      disabled: [{name: DynamicResources}]
`,
		},
		"both enabled": {
			profiles: `- schedulerName: drasched
  plugins:
    multiPoint:
      enabled: [{name: StructuredDRA}]
`,
			wantErr: []string{`profile "drasched" enables both StructuredDRA and DynamicResources`},
		},
		"in-tree enabled at one point only": {
			profiles: `- schedulerName: drasched
  plugins:
    multiPoint:
      enabled: [{name: StructuredDRA}]
      disabled: [{name: DynamicResources}]
    reserve:
      enabled: [{name: DynamicResources}]
`,
			wantErr: []string{"enables both"},
		},
		"preemption swap": {
			profiles: `- schedulerName: drasched
  plugins:
    multiPoint:
      enabled: [{name: StructuredDRA}, {name: StructuredDRAPreemption}]
      disabled: [{name: DynamicResources}, {name: DefaultPreemption}]
  pluginConfig:
  - name: StructuredDRAPreemption
    args: {apiVersion: kubescheduler.config.k8s.io/v1, kind: DefaultPreemptionArgs, minCandidateNodesAbsolute: 10}
`,
		},
		"both preemptions enabled": {
			profiles: `- schedulerName: drasched
  plugins:
    multiPoint:
      enabled: [{name: StructuredDRA}, {name: StructuredDRAPreemption}]
      disabled: [{name: DynamicResources}]
`,
			wantErr: []string{`profile "drasched" enables both StructuredDRAPreemption and DefaultPreemption, which would preempt twice`},
		},
		"plugin missing": {
			profiles: `- schedulerName: drasched
`,
			wantErr: []string{"no profile enables StructuredDRA"},
		},
		"default scheduler name": {
			profiles: `- plugins:
    multiPoint:
      enabled: [{name: StructuredDRA}]
      disabled: [{name: DynamicResources}]
`,
			wantErr: []string{`profile "default-scheduler": drasched is a secondary scheduler`},
		},
		"in-tree plugin in another profile": {
			profiles: `- schedulerName: drasched
  plugins:
    multiPoint:
      enabled: [{name: StructuredDRA}]
      disabled: [{name: DynamicResources}]
- schedulerName: drasched-in-tree
`,
			wantErr: []string{`profile "drasched-in-tree" enables DynamicResources next to StructuredDRA in profile "drasched"`},
		},
		"in-tree plugin in another profile, at one point only": {
			profiles: `- schedulerName: drasched
  plugins:
    multiPoint:
      enabled: [{name: StructuredDRA}]
      disabled: [{name: DynamicResources}]
- schedulerName: other
  plugins:
    multiPoint:
      disabled: [{name: DynamicResources}]
    filter:
      enabled: [{name: DynamicResources}]
`,
			wantErr: []string{`profile "other" enables DynamicResources next to StructuredDRA`},
		},
		"two profiles, one with the plugin": {
			profiles: `- schedulerName: drasched
  plugins:
    multiPoint:
      enabled: [{name: StructuredDRA}]
      disabled: [{name: DynamicResources}]
- schedulerName: drasched-spread
  plugins:
    multiPoint:
      disabled: [{name: DynamicResources}]
`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			logger, _ := ktesting.NewTestContext(t)
			err := checkConfigFile(logger, writeConfig(t, tc.profiles))
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("expected an error containing %q", tc.wantErr)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestCheckConfigFileErrors(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	if err := checkConfigFile(logger, ""); !errors.Is(err, errNoConfig) {
		t.Errorf("no file: got %v, want errNoConfig", err)
	}
	if err := checkConfigFile(logger, filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: got %v", err)
	}
	broken := writeConfig(t, `- schedulerName: drasched
  pluginConfig:
  - name: StructuredDRA
    args: {allocater: builtin}
`)
	if err := checkConfigFile(logger, broken); err == nil || !strings.Contains(err.Error(), "allocater") {
		t.Errorf("misspelled StructuredDRAArgs field: got %v", err)
	}
}

// The shipped configuration is valid and passes the checks.
func TestShippedConfig(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	if err := checkConfigFile(logger, "../../config/scheduler-config.yaml"); err != nil {
		t.Fatal(err)
	}
}

// TestUnboundedFilterWarning: a profile whose StructuredDRA runs Filter
// without a time limit (filterTimeout 0, or the feature gate
// DRASchedulerFilterTimeout off) is valid, as upstream's is, and the
// scheduler says at start what that leaves open and how to bound it; with
// a limit it says nothing of the kind.
func TestUnboundedFilterWarning(t *testing.T) {
	const warning = "Warning: StructuredDRA's Filter has no time limit"
	for name, tc := range map[string]struct {
		args    string
		gateOff bool
		want    string // the reason the warning gives; "" for no warning
	}{
		"default":          {},
		"filterTimeout 1s": {args: "filterTimeout: 1s"},
		"filterTimeout 0s": {args: "filterTimeout: 0s", want: `reason="filterTimeout is 0"`},
		"filterTimeout 0":  {args: `filterTimeout: "0"`, want: `reason="filterTimeout is 0"`},
		"gate off":         {gateOff: true, want: `reason="feature gate DRASchedulerFilterTimeout is off"`},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.gateOff {
				featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.DRASchedulerFilterTimeout, false)
			}
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
			cfg, err := options.LoadConfigFromFile(logger, writeConfig(t, `- schedulerName: drasched
  plugins:
    multiPoint:
      enabled: [{name: StructuredDRA}]
      disabled: [{name: DynamicResources}]
  pluginConfig:
  - name: StructuredDRA
    args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: StructuredDRAArgs
      `+tc.args+`
`))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
			defer cancel()
			client := fake.NewClientset()
			if _, err := scheduler.New(ctx, client, schedminor.InformerFactory(client), nil,
				schedminor.RecorderFactory(func(string) events.EventRecorderLogger { return events.NewFakeRecorder(100) }),
				scheduler.WithProfiles(cfg.Profiles...),
				scheduler.WithFrameworkOutOfTreeRegistry(draplugins.Registry(dra.ProcessOptions{})),
			); err != nil {
				t.Fatal(err)
			}
			logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
			var warned []string
			for line := range strings.Lines(logs) {
				if strings.Contains(line, warning) {
					warned = append(warned, line)
				}
			}
			switch {
			case tc.want == "" && len(warned) > 0:
				t.Errorf("warned with a time limit:\n%s", strings.Join(warned, ""))
			case tc.want != "" && len(warned) != 1:
				t.Errorf("%d warnings, want 1 for the one profile; log:\n%s", len(warned), logs)
			case tc.want != "":
				for _, want := range []string{tc.want, `profile="drasched"`, "set a filterTimeout"} {
					if !strings.Contains(warned[0], want) {
						t.Errorf("warning lacks %s:\n%s", want, warned[0])
					}
				}
			}
		})
	}
}
