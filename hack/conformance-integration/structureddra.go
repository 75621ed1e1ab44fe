//go:build ignore

// This file is not part of drasched's module: the build constraint above
// keeps `go build ./...`, `go vet` and the linters away from it.
// hack/conformance-integration.sh copies it, without that constraint, into
// its temporary copy of upstream's DRA integration suite (package dra of
// k8s.io/kubernetes/test/integration/dra, from the module cache), where it
// changes the suite's one call of util.StartScheduler to
//
//	util.StartScheduler(schedulerCtx, cfg, draschedScheduler(schedulerCtx, testName, cfg))
//
// and the assertions on the in-tree plugin's failure text to use
// draschedMessage and draschedReason. Everything else in the suite is
// upstream's.

package dra

import (
	"flag"
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"github.com/onsi/gomega"
	gtypes "github.com/onsi/gomega/types"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/test/utils/client-go/ktesting"

	draschedconfig "github.com/drasched/drasched/apis/config"
	draschedscheme "github.com/drasched/drasched/apis/config/scheme"
	structureddra "github.com/drasched/drasched/pkg/plugins/dra"
)

var (
	draschedAllocator = flag.String("drasched.allocator", string(draschedconfig.AllocatorBuiltin),
		"StructuredDRA's allocator (builtin or upstream) in every scheduler the suite starts")
	draschedUpstreamAllocatorFor = flag.String("drasched.upstream-allocator-for", "",
		"regular expression: a scheduler started by a test whose full name matches runs allocator: upstream")
)

// draschedScheduler turns the configuration that the suite decoded for a
// test (kube-scheduler's defaults plus the test's YAML, if any) into the one
// drasched runs, in place, and returns the registry with StructuredDRA.
// In every profile:
//   - in every plugin set (multiPoint and each extension point), an enabled
//     DynamicResources becomes StructuredDRA at the same index with the same
//     weight; where DynamicResources is disabled, StructuredDRA is disabled
//     too;
//   - DynamicResources is added to multiPoint's disabled plugins, as in
//     config/scheduler-config.yaml;
//   - the DynamicResourcesArgs become StructuredDRAArgs: filterTimeout and
//     bindingTimeout as given (defaulted by kube-scheduler), the other
//     fields at StructuredDRA's defaults, except the allocator, which the
//     flags above choose.
//
// A profile without DynamicResources (DRA disabled) stays as it is. The
// test fails if anything is left that would make the in-tree plugin run.
func draschedScheduler(tCtx ktesting.TContext, testName string, cfg *config.KubeSchedulerConfiguration) frameworkruntime.Registry {
	tCtx.Helper()
	allocator := draschedconfig.AllocatorName(*draschedAllocator)
	if *draschedUpstreamAllocatorFor != "" && regexp.MustCompile(*draschedUpstreamAllocatorFor).MatchString(testName) {
		allocator = draschedconfig.AllocatorUpstream
	}
	for i := range cfg.Profiles {
		profile := &cfg.Profiles[i]
		substituted, err := substituteStructuredDRA(profile, allocator)
		tCtx.ExpectNoError(err, "profile %s: substitute %s for %s", profile.SchedulerName, structureddra.Name, names.DynamicResources)
		if substituted {
			tCtx.Logf("drasched: test %s, profile %s: %s in place of %s, allocator %s", testName, profile.SchedulerName, structureddra.Name, names.DynamicResources, allocator)
		} else {
			tCtx.Logf("drasched: test %s, profile %s: no %s to substitute", testName, profile.SchedulerName, names.DynamicResources)
		}
	}
	tCtx.ExpectNoError(validation.ValidateKubeSchedulerConfiguration(cfg), "validate the substituted scheduler configuration")
	return frameworkruntime.Registry{structureddra.Name: structureddra.New}
}

// substituteStructuredDRA replaces DynamicResources with StructuredDRA in
// one profile and reports whether the profile had DynamicResources.
func substituteStructuredDRA(profile *config.KubeSchedulerProfile, allocator draschedconfig.AllocatorName) (bool, error) {
	if profile.Plugins == nil {
		return false, nil
	}
	substituted := false
	for _, set := range pluginSets(profile.Plugins) {
		for j := range set.Enabled {
			switch set.Enabled[j].Name {
			case names.DynamicResources:
				set.Enabled[j].Name = structureddra.Name // same index, same weight
				substituted = true
			case structureddra.Name:
				return false, fmt.Errorf("%s is enabled already", structureddra.Name)
			}
		}
		for _, plugin := range set.Disabled {
			if plugin.Name == names.DynamicResources {
				set.Disabled = append(set.Disabled, config.Plugin{Name: structureddra.Name})
				break
			}
		}
	}
	if !substituted {
		return false, nil
	}
	profile.Plugins.MultiPoint.Disabled = append(profile.Plugins.MultiPoint.Disabled, config.Plugin{Name: names.DynamicResources})

	args, err := draschedscheme.DefaultArgs()
	if err != nil {
		return false, err
	}
	args.Allocator = allocator
	found := false
	for j := range profile.PluginConfig {
		pc := &profile.PluginConfig[j]
		switch pc.Name {
		case names.DynamicResources:
			in, ok := pc.Args.(*config.DynamicResourcesArgs)
			if !ok {
				return false, fmt.Errorf("args of %s are %T, want *DynamicResourcesArgs", pc.Name, pc.Args)
			}
			// Fail loudly if upstream adds a field that would need mapping.
			if n := reflect.TypeOf(*in).NumField(); n != 3 {
				return false, fmt.Errorf("DynamicResourcesArgs has %d fields, want TypeMeta, FilterTimeout and BindingTimeout", n)
			}
			if in.FilterTimeout != nil {
				args.FilterTimeout = *in.FilterTimeout
			}
			if in.BindingTimeout != nil {
				args.BindingTimeout = *in.BindingTimeout
			}
			pc.Name, pc.Args = structureddra.Name, args
			found = true
		case structureddra.Name:
			return false, fmt.Errorf("pluginConfig has %s already", structureddra.Name)
		}
	}
	if !found {
		profile.PluginConfig = append(profile.PluginConfig, config.PluginConfig{Name: structureddra.Name, Args: args})
	}

	// Nothing may be left that would run the in-tree plugin next to ours.
	for _, set := range pluginSets(profile.Plugins) {
		for _, plugin := range set.Enabled {
			if plugin.Name == names.DynamicResources {
				return false, fmt.Errorf("%s is still enabled", names.DynamicResources)
			}
		}
	}
	return true, nil
}

// pluginSets returns every PluginSet of plugins (multiPoint and each
// extension point, including ones that later releases add).
func pluginSets(plugins *config.Plugins) []*config.PluginSet {
	var sets []*config.PluginSet
	v := reflect.ValueOf(plugins).Elem()
	for i := range v.NumField() {
		if set, ok := v.Field(i).Addr().Interface().(*config.PluginSet); ok {
			sets = append(sets, set)
		}
	}
	return sets
}

// inTreeFailure is the one reason that the in-tree plugin gives when its
// allocator finds no devices for a pod on a node.
const inTreeFailure = "cannot allocate all claims"

// draschedFailure matches one reason that StructuredDRA gives instead: a
// pkg/allocator Failure.Message, for a request or a claim, or the in-tree
// text, which StructuredDRA falls back to when it cannot explain.
const draschedFailure = `(?:(?:request "[^"]+"|claim [^ :]+): )?` +
	`(?:no device matches the class and selectors` +
	`|no matching device; resource pool \S+ is being updated` +
	`|[0-9]+ of [0-9]+ matching devices free, need [0-9]+(?: \([^)]*\))?` +
	`|constraint .+ unsatisfiable` +
	`|(?:requests|claims) compete for the same devices)` +
	`|` + inTreeFailure

// draschedFailures matches the counted reasons of nodes on which
// StructuredDRA's allocator failed ("7 request "r": no device matches ...,
// 1 request "r": 0 of 2 matching devices free, need 1"), where the in-tree
// plugin's message has "N cannot allocate all claims": a node can give one
// reason per request, and the counts of several reasons need not add up to
// N.
const draschedFailures = `(?:` + draschedFailure + `)(?:, [0-9]+ (?:` + draschedFailure + `))*`

// draschedMessage replaces gomega.Equal(upstream) where upstream is a pod
// condition's whole message that contains the in-tree failure text: the
// message must be upstream's, character for character, except that
// "cannot allocate all claims" may be StructuredDRA's reasons.
func draschedMessage(upstream string) gtypes.GomegaMatcher {
	if !strings.Contains(upstream, inTreeFailure) {
		panic(fmt.Sprintf("draschedMessage(%q): no %q to adapt", upstream, inTreeFailure))
	}
	return gomega.MatchRegexp("^" + strings.ReplaceAll(regexp.QuoteMeta(upstream), inTreeFailure, draschedFailures) + "$")
}

// draschedReason replaces gomega.ContainSubstring(reason) in
// expectPodUnschedulable: for the in-tree failure text, the message must
// list a node count with StructuredDRA's reasons; any other reason is
// matched as upstream matches it.
func draschedReason(reason string) gtypes.GomegaMatcher {
	if reason != inTreeFailure {
		return gomega.ContainSubstring(reason)
	}
	return gomega.MatchRegexp(`(?:: |, )[0-9]+ ` + draschedFailures + `(?:, |\. |$)`)
}
