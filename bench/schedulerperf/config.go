package schedulerperf

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/component-base/featuregate"
	"sigs.k8s.io/yaml"
)

// UpstreamDir returns test/integration/scheduler_perf of the
// k8s.io/kubernetes module that go.mod requires, in the module cache.
func UpstreamDir() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes").Output()
	if err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			return "", fmt.Errorf("go list -m k8s.io/kubernetes: %w: %s", err, exitErr.Stderr)
		}
		return "", fmt.Errorf("go list -m k8s.io/kubernetes: %w", err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", errors.New("go list -m k8s.io/kubernetes: module not downloaded (run go mod download)")
	}
	return filepath.Join(dir, "test", "integration", "scheduler_perf"), nil
}

// SchedulerConfig turns drasched's shipped configuration
// (config/scheduler-config.yaml) into the one scheduler_perf runs: its
// profile, with StructuredDRA in DynamicResources' place, as the profile of
// default-scheduler (the scheduler name of scheduler_perf's pods, and the
// profile whose metrics it samples), without leader election.
func SchedulerConfig(shipped []byte) ([]byte, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(shipped, &cfg); err != nil {
		return nil, fmt.Errorf("parse scheduler configuration: %w", err)
	}
	profiles, _ := cfg["profiles"].([]any)
	if len(profiles) != 1 {
		return nil, fmt.Errorf("scheduler configuration has %d profiles, want exactly one", len(profiles))
	}
	profile, ok := profiles[0].(map[string]any)
	if !ok {
		return nil, errors.New("scheduler configuration: profile is not an object")
	}
	profile["schedulerName"] = "default-scheduler"
	cfg["leaderElection"] = map[string]any{"leaderElect": false}
	return yaml.Marshal(cfg)
}

// pathKeys are the fields of scheduler_perf configurations that name files,
// relative to the directory the test runs in (the configuration's own
// folder upstream). "filePath" of profiling ops is relative to the output
// directory instead and stays as it is.
var pathKeys = map[string]bool{
	"templatePath":                      true,
	"nodeTemplatePath":                  true,
	"podTemplatePath":                   true,
	"defaultPodTemplatePath":            true,
	"namespaceTemplatePath":             true,
	"persistentVolumeTemplatePath":      true,
	"persistentVolumeClaimTemplatePath": true,
	"schedulerConfigPath":               true,
}

// ConfigOptions say how WorkloadConfig adapts a workload.
type ConfigOptions struct {
	// SchedulerConfigPath is the scheduler configuration of the test case;
	// empty for kube-scheduler's default configuration.
	SchedulerConfigPath string
	// Duration replaces the workload's "duration" parameter if not empty.
	Duration string
	// Plugins and ExtensionPoints, if set, make scheduler_perf collect
	// scheduler_plugin_execution_duration_seconds for these plugins (its
	// default list, PluginNames, is fixed when the package initializes and
	// has only in-tree plugins), along with the extension point and
	// attempt durations it collects by default.
	Plugins, ExtensionPoints []string
}

// metricsCollectorConfig is the test case's metricsCollectorConfig for the
// plugins and extension points of opts.
func metricsCollectorConfig(opts ConfigOptions) map[string]any {
	extensionPoints := map[string]any{"label": "extension_point", "values": opts.ExtensionPoints}
	return map[string]any{"metrics": map[string]any{
		"scheduler_framework_extension_point_duration_seconds": []any{extensionPoints},
		"scheduler_scheduling_attempt_duration_seconds": []any{
			map[string]any{"label": "result", "values": []string{"scheduled", "unschedulable", "error"}},
		},
		"scheduler_pod_scheduling_duration_seconds": nil,
		"scheduler_plugin_execution_duration_seconds": []any{
			map[string]any{"label": "plugin", "values": opts.Plugins},
			extensionPoints,
		},
	}}
}

// WorkloadConfig writes a scheduler_perf configuration that runs just the
// case's workload into dir and returns its path. It reads the upstream
// configuration from upstreamDir (the module cache) and changes, in
// memory:
//   - only c.TestCase with only c.Workload is kept;
//   - relative file names become absolute names in the upstream folder, so
//     that templates resolve from any working directory and nothing is
//     copied;
//   - thresholds and labels are dropped (thresholds are tuned for CI
//     machines and, on 2 cores, fail the case; labels would need a label
//     filter per case);
//   - schedulerConfigPath, the duration and the metrics to collect are set
//     from opts;
//   - c.FeatureGates are added to the test case's featureGates (a gate
//     that the workload sets itself is an error: the workload's would
//     win);
//   - with c.WithoutClaims, the workload loses its ResourceClaims: see
//     Case.WithoutClaims. The pod templates without claims are written
//     next to the configuration.
func WorkloadConfig(upstreamDir, dir string, c Case, opts ConfigOptions) (string, error) {
	src := filepath.Join(upstreamDir, c.Config)
	data, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	var testCases []map[string]any
	if err := yaml.Unmarshal(data, &testCases); err != nil {
		return "", fmt.Errorf("parse %s: %w", src, err)
	}
	var tc map[string]any
	for _, t := range testCases {
		if t["name"] == c.TestCase {
			tc = t
			break
		}
	}
	if tc == nil {
		return "", fmt.Errorf("%s: no test case %s", src, c.TestCase)
	}
	workloads, _ := tc["workloads"].([]any)
	var workload map[string]any
	for _, w := range workloads {
		if w, ok := w.(map[string]any); ok && w["name"] == c.Workload {
			workload = w
			break
		}
	}
	if workload == nil {
		return "", fmt.Errorf("%s: test case %s has no workload %s", src, c.TestCase, c.Workload)
	}
	delete(workload, "threshold")
	delete(workload, "labels")
	delete(tc, "labels")
	tc["workloads"] = []any{workload}
	if opts.Duration != "" {
		params, _ := workload["params"].(map[string]any)
		if _, ok := params["duration"]; ok {
			params["duration"] = opts.Duration
		}
	}
	absPaths(tc, filepath.Dir(src))
	if len(opts.Plugins) > 0 && len(opts.ExtensionPoints) > 0 {
		if _, ok := tc["metricsCollectorConfig"]; ok {
			return "", fmt.Errorf("%s: test case %s has a metricsCollectorConfig of its own", src, c.TestCase)
		}
		tc["metricsCollectorConfig"] = metricsCollectorConfig(opts)
	}
	if err := addFeatureGates(tc, workload, c.FeatureGates); err != nil {
		return "", fmt.Errorf("%s: test case %s: %w", src, c.TestCase, err)
	}
	if opts.SchedulerConfigPath != "" {
		tc["schedulerConfigPath"] = opts.SchedulerConfigPath
	} else {
		delete(tc, "schedulerConfigPath")
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if c.WithoutClaims {
		tc["name"] = c.TestCase + "WithoutClaims"
		if err := withoutClaims(tc, dir); err != nil {
			return "", fmt.Errorf("%s: %s without claims: %w", src, c.TestCase, err)
		}
		// scheduler_perf fails a workload with parameters that no op
		// uses, such as initClaims once the claims are gone.
		used := map[string]bool{}
		paramRefs(tc["workloadTemplate"], used)
		params, _ := workload["params"].(map[string]any)
		for name := range params {
			if !used[name] {
				delete(params, name)
			}
		}
	}
	out, err := yaml.Marshal([]any{tc})
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, c.Name+".yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return "", err
	}
	return path, nil
}

// addFeatureGates adds gates to the featureGates of a decoded test case.
// scheduler_perf lets a workload's featureGates override its test case's,
// so a gate that the workload sets is refused rather than silently lost.
func addFeatureGates(tc, workload map[string]any, gates map[featuregate.Feature]bool) error {
	if len(gates) == 0 {
		return nil
	}
	own, _ := workload["featureGates"].(map[string]any)
	merged, _ := tc["featureGates"].(map[string]any)
	if merged == nil {
		merged = map[string]any{}
	}
	for name, enabled := range gates {
		if _, ok := own[string(name)]; ok {
			return fmt.Errorf("workload %s sets feature gate %s itself", workload["name"], name)
		}
		merged[string(name)] = enabled
	}
	tc["featureGates"] = merged
	return nil
}

// absPaths makes the relative file names in a decoded configuration
// absolute, relative to base.
func absPaths(v any, base string) {
	switch v := v.(type) {
	case map[string]any:
		for key, value := range v {
			if s, ok := value.(string); ok && pathKeys[key] && s != "" && !filepath.IsAbs(s) {
				v[key] = filepath.Join(base, s)
				continue
			}
			absPaths(value, base)
		}
	case []any:
		for _, value := range v {
			absPaths(value, base)
		}
	}
}

// paramRefs collects the names of the workload parameters that the values
// in v refer to: "$name", or "$name|default" in template parameters.
func paramRefs(v any, used map[string]bool) {
	switch v := v.(type) {
	case string:
		if name, ok := strings.CutPrefix(v, "$"); ok {
			name, _, _ = strings.Cut(name, "|")
			used[name] = true
		}
	case map[string]any:
		for _, value := range v {
			paramRefs(value, used)
		}
	case []any:
		for _, value := range v {
			paramRefs(value, used)
		}
	}
}

// withoutClaims removes the ops that create ResourceClaims, claim templates
// or allocate claims from a test case, and points its createPods ops at
// copies of their pod templates without claims, written to dir.
func withoutClaims(tc map[string]any, dir string) error {
	ops, _ := tc["workloadTemplate"].([]any)
	var kept []any
	podOps := 0
	for _, o := range ops {
		op, ok := o.(map[string]any)
		if !ok {
			return errors.New("workloadTemplate entry is not an object")
		}
		opcode, _ := op["opcode"].(string)
		template, _ := op["templatePath"].(string)
		switch {
		case opcode == "allocResourceClaims":
			continue
		case opcode == "createAny" && strings.Contains(filepath.Base(template), "resourceclaim"):
			continue
		case opcode == "createPods":
			src, _ := op["podTemplatePath"].(string)
			if src == "" {
				return errors.New("createPods op without podTemplatePath")
			}
			data, err := os.ReadFile(src)
			if err != nil {
				return err
			}
			pod, err := podWithoutClaims(data)
			if err != nil {
				return fmt.Errorf("%s: %w", src, err)
			}
			dst := filepath.Join(dir, "noclaims-"+filepath.Base(src))
			if err := os.WriteFile(dst, pod, 0o644); err != nil {
				return err
			}
			op["podTemplatePath"] = dst
			podOps++
		}
		kept = append(kept, op)
	}
	if podOps == 0 {
		return errors.New("no createPods op")
	}
	tc["workloadTemplate"] = kept
	return nil
}

// podWithoutClaims removes spec.resourceClaims and the containers' claims
// from a pod template. Templates with Go template actions are refused: they
// cannot be edited as YAML.
func podWithoutClaims(data []byte) ([]byte, error) {
	if bytes.Contains(data, []byte("{{")) {
		return nil, errors.New("pod template uses template actions, cannot remove its claims")
	}
	var pod map[string]any
	if err := yaml.Unmarshal(data, &pod); err != nil {
		return nil, err
	}
	spec, ok := pod["spec"].(map[string]any)
	if !ok {
		return nil, errors.New("pod template has no spec")
	}
	delete(spec, "resourceClaims")
	for _, key := range []string{"initContainers", "containers"} {
		containers, _ := spec[key].([]any)
		for _, c := range containers {
			container, _ := c.(map[string]any)
			resources, _ := container["resources"].(map[string]any)
			if resources == nil {
				continue
			}
			delete(resources, "claims")
			if len(resources) == 0 {
				delete(container, "resources")
			}
		}
	}
	return yaml.Marshal(pod)
}
