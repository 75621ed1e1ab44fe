package kwokcluster

import (
	"errors"
	"fmt"

	"sigs.k8s.io/yaml"
)

// SchedulerOverrides are what SchedulerConfig changes in a scheduler
// configuration. Zero fields leave the configuration as it is, except
// Kubeconfig, which is required.
type SchedulerOverrides struct {
	// Kubeconfig becomes clientConnection.kubeconfig: kube-scheduler
	// ignores --kubeconfig when --config is given.
	Kubeconfig string
	// SchedulerName replaces the schedulerName of the configuration's only
	// profile.
	SchedulerName string
	// QPS and Burst become clientConnection.qps and .burst.
	QPS   float32
	Burst int32
	// Header is a comment put before the configuration, one "# " line per
	// line of it.
	Header []string
}

// SchedulerConfig returns a KubeSchedulerConfiguration (in, YAML) with the
// overrides applied; everything else, the profile's plugins above all,
// stays as it is. Leader election is left to the command line
// (--leader-elect=false), which kube-scheduler honours with --config.
func SchedulerConfig(in []byte, o SchedulerOverrides) ([]byte, error) {
	if o.Kubeconfig == "" {
		return nil, errors.New("no kubeconfig given")
	}
	var cfg map[string]any
	if err := yaml.UnmarshalStrict(in, &cfg); err != nil {
		return nil, err
	}
	if cfg == nil {
		return nil, errors.New("empty configuration")
	}
	conn := map[string]any{}
	if existing, ok := cfg["clientConnection"]; ok {
		if conn, ok = existing.(map[string]any); !ok {
			return nil, fmt.Errorf("clientConnection is a %T, not a mapping", existing)
		}
	}
	if k, ok := conn["kubeconfig"]; ok && k != "" {
		return nil, fmt.Errorf("clientConnection.kubeconfig is already set (%v)", k)
	}
	conn["kubeconfig"] = o.Kubeconfig
	if o.QPS != 0 {
		conn["qps"] = o.QPS
	}
	if o.Burst != 0 {
		conn["burst"] = o.Burst
	}
	cfg["clientConnection"] = conn
	if o.SchedulerName != "" {
		profiles, ok := cfg["profiles"].([]any)
		if !ok || len(profiles) != 1 {
			return nil, fmt.Errorf("want exactly one profile to name %q, got %v", o.SchedulerName, cfg["profiles"])
		}
		profile, ok := profiles[0].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("profile is a %T, not a mapping", profiles[0])
		}
		profile["schedulerName"] = o.SchedulerName
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	var header []byte
	for _, line := range o.Header {
		header = append(header, "# "+line+"\n"...)
	}
	return append(header, out...), nil
}
