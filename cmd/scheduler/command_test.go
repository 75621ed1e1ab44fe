package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"
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
