package framework

import (
	"fmt"
	"slices"

	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	kubeschedulerscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
)

// SchedulerName is the name of drasched's profile; pods opt in with
// spec.schedulerName.
const SchedulerName = "drasched"

// DraschedConfiguration is the one place that decides which DRA plugin the
// suite tests: it returns a fresh, defaulted scheduler configuration with the
// drasched profile, written the way an operator writes it, and the
// out-of-tree plugins it needs. Callers may change the copy.
//
// Today the drasched profile runs the default plugins, so upstream's in-tree
// DynamicResources plugin handles the claims.
//
// When StructuredDRA lands: enable it and disable DynamicResources, that is
// add to the profile
//
//	plugins:
//	  multiPoint:
//	    enabled: [{name: StructuredDRA, weight: 2}]
//	    disabled: [{name: DynamicResources}]
//
// and return frameworkruntime.Registry{dra.Name: dra.New}. The tests that
// call requiresDrasched (package integration) then run by themselves.
func DraschedConfiguration() (*config.KubeSchedulerConfiguration, frameworkruntime.Registry, error) {
	const configuration = `
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: ` + SchedulerName + `
`
	var cfg config.KubeSchedulerConfiguration
	if _, _, err := kubeschedulerscheme.Codecs.UniversalDecoder().Decode([]byte(configuration), nil, &cfg); err != nil {
		return nil, nil, fmt.Errorf("decode the drasched scheduler configuration: %w", err)
	}
	return &cfg, nil, nil
}

// UpstreamDRA reports whether the drasched profile still runs upstream's
// in-tree DynamicResources plugin instead of StructuredDRA.
func UpstreamDRA() bool {
	cfg, _, err := DraschedConfiguration()
	if err != nil {
		// The same error fails every test that starts a scheduler.
		return true
	}
	return slices.ContainsFunc(cfg.Profiles[0].Plugins.MultiPoint.Enabled, func(p config.Plugin) bool {
		return p.Name == names.DynamicResources
	})
}
