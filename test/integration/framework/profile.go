package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	kubeschedulerscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	draschedconfig "github.com/drasched/drasched/apis/config"
	_ "github.com/drasched/drasched/apis/config/scheme" // StructuredDRAArgs
	draplugins "github.com/drasched/drasched/pkg/plugins"
	"github.com/drasched/drasched/pkg/plugins/dra"
)

// SchedulerName is the name of drasched's profile; pods opt in with
// spec.schedulerName.
const SchedulerName = "drasched"

// DraschedConfiguration is the one place that decides what the suite
// tests: the shipped configuration, config/scheduler-config.yaml, decoded
// as kube-scheduler's --config decodes it (StructuredDRA enabled,
// DynamicResources disabled), with leader election off, and the registry
// of the drasched binary. Callers may change the copy.
func DraschedConfiguration() (*config.KubeSchedulerConfiguration, frameworkruntime.Registry, error) {
	data, err := os.ReadFile(RepoFile("config", "scheduler-config.yaml"))
	if err != nil {
		return nil, nil, fmt.Errorf("read the shipped scheduler configuration: %w", err)
	}
	var cfg config.KubeSchedulerConfiguration
	if _, _, err := kubeschedulerscheme.Codecs.UniversalDecoder().Decode(data, nil, &cfg); err != nil {
		return nil, nil, fmt.Errorf("decode the shipped scheduler configuration: %w", err)
	}
	if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != SchedulerName {
		return nil, nil, fmt.Errorf("the shipped scheduler configuration must have exactly the profile %s", SchedulerName)
	}
	cfg.LeaderElection.LeaderElect = false
	return &cfg, draplugins.Registry(dra.ProcessOptions{}), nil
}

// RepoFile is the path of a file of the repository, such as
// config/scheduler-config.yaml, found from this source file so that it
// works from any test package.
func RepoFile(elem ...string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(append([]string{filepath.Dir(file), "..", "..", ".."}, elem...)...)
}

// UseArgs returns a Configure function that changes StructuredDRA's
// arguments in every profile.
func UseArgs(change func(*draschedconfig.StructuredDRAArgs)) func(*config.KubeSchedulerConfiguration) {
	return func(cfg *config.KubeSchedulerConfiguration) {
		for i := range cfg.Profiles {
			for j := range cfg.Profiles[i].PluginConfig {
				if args, ok := cfg.Profiles[i].PluginConfig[j].Args.(*draschedconfig.StructuredDRAArgs); ok {
					change(args)
				}
			}
		}
	}
}

// UseAllocator returns a Configure function that makes StructuredDRA run
// the named allocator ("builtin" or "upstream").
func UseAllocator(allocator draschedconfig.AllocatorName) func(*config.KubeSchedulerConfiguration) {
	return UseArgs(func(args *draschedconfig.StructuredDRAArgs) { args.Allocator = allocator })
}

// UseAllocation returns a Configure function that sets StructuredDRA's
// allocation policy and, if not nil, its topology attributes.
func UseAllocation(policy draschedconfig.AllocationPolicy, topology []resourceapi.FullyQualifiedName) func(*config.KubeSchedulerConfiguration) {
	return UseArgs(func(args *draschedconfig.StructuredDRAArgs) {
		args.Allocation.Policy = policy
		if topology != nil {
			args.Allocation.TopologyAttributes = topology
		}
	})
}

// UseNominationMargin returns a Configure function that sets how long past
// its victims' grace period a claim nomination lasts.
func UseNominationMargin(margin time.Duration) func(*config.KubeSchedulerConfiguration) {
	return UseArgs(func(args *draschedconfig.StructuredDRAArgs) { args.Preemption.NominationMargin.Duration = margin })
}

// WithoutDefaultSpreading is a Configure function that turns off
// PodTopologySpread's system default constraints (defaultingType: List
// without constraints) in every profile: with them, PodTopologySpread
// refuses to sign any pod, and kube-scheduler's opportunistic batching
// batches none.
func WithoutDefaultSpreading(cfg *config.KubeSchedulerConfiguration) {
	for i := range cfg.Profiles {
		for j := range cfg.Profiles[i].PluginConfig {
			if args, ok := cfg.Profiles[i].PluginConfig[j].Args.(*config.PodTopologySpreadArgs); ok {
				args.DefaultingType = config.ListDefaulting
				args.DefaultConstraints = nil
			}
		}
	}
}
