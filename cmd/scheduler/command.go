package main

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/spf13/cobra"
	"k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/tools/cache"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/cli/globalflag"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/term"
	"k8s.io/component-base/version/verflag"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"

	"github.com/drasched/drasched/pkg/leaderfence"
	"github.com/drasched/drasched/pkg/plugins/dra"
	"github.com/drasched/drasched/pkg/version"
)

// newCommand is kube-scheduler's command with StructuredDRA registered,
// drasched's version in --version, a check of the configuration file
// before the scheduler starts, and the leader lease fenced for claim
// writes.
//
// It is assembled from kube-scheduler's exported parts (options.Options,
// app.Setup, app.Run) instead of app.NewSchedulerCommand, because the
// leader elector's resource lock exists only between Setup and Run, and
// the fence (pkg/leaderfence) must wrap it there.
func newCommand(extra ...app.Option) *cobra.Command {
	opts := options.NewOptions()
	fence := leaderfence.New(leaderfence.DefaultMargin)
	registry := append([]app.Option{app.WithPlugin(dra.Name, dra.Factory(dra.ProcessOptions{Fence: fence}))}, extra...)

	cmd := &cobra.Command{
		Use:   "drasched",
		Short: "drasched: kube-scheduler with structured DRA device allocation for GPUs",
		Long: `drasched is a secondary kube-scheduler. Pods opt in with
spec.schedulerName: drasched. Its StructuredDRA plugin replaces the in-tree
DynamicResources plugin: the same allocations, found faster, with failure
messages that say why per request. It needs --config with a profile that
enables StructuredDRA and disables DynamicResources.`,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			// Feature gates must be set before RunE.
			return opts.ComponentGlobalsRegistry.Set()
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if flag := cmd.Flags().Lookup("version"); flag != nil && flag.Value.String() != "false" {
				// kube-scheduler's verflag prints the Kubernetes version
				// next and exits.
				if _, err := fmt.Fprintln(cmd.OutOrStdout(), version.Get().String()); err != nil {
					return err
				}
				verflag.PrintAndExitIfRequested()
			}
			file := ""
			if flag := cmd.Flags().Lookup("config"); flag != nil {
				file = flag.Value.String()
			}
			if err := checkConfigFile(klog.Background(), file); err != nil {
				return err
			}
			return run(cmd, opts, fence, registry)
		},
		Args: cobra.NoArgs,
	}

	nfs := opts.Flags
	verflag.AddFlags(nfs.FlagSet("global"))
	globalflag.AddGlobalFlags(nfs.FlagSet("global"), cmd.Name(), logs.SkipLoggingConfigurationFlags())
	fs := cmd.Flags()
	for _, f := range nfs.FlagSets {
		fs.AddFlagSet(f)
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cliflag.SetUsageAndHelpFunc(cmd, *nfs, cols)
	if err := cmd.MarkFlagFilename("config", "yaml", "yml", "json"); err != nil {
		klog.Background().Error(err, "Failed to mark flag filename")
	}
	return cmd
}

// run does what kube-scheduler's command does (logging, a context ended by
// SIGTERM, Setup, feature metrics, Run) and fences the leader lease
// between Setup and Run.
func run(cmd *cobra.Command, opts *options.Options, fence *leaderfence.Fence, registry []app.Option) error {
	fg := opts.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)
	if err := logsapi.ValidateAndApply(opts.Logs, fg); err != nil {
		return err
	}
	cliflag.PrintFlags(cmd.Flags())
	if opts.InformerName == nil {
		name, err := cache.NewInformerName("kube-scheduler")
		if err != nil {
			return err
		}
		opts.InformerName = name
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-server.SetupSignalHandler()
		cancel()
	}()

	cc, sched, err := app.Setup(ctx, opts, registry...)
	if err != nil {
		return err
	}
	if mutable, ok := fg.(featuregate.MutableFeatureGate); ok {
		mutable.AddMetrics()
	}
	opts.ComponentGlobalsRegistry.AddMetrics()

	if cc.LeaderElection != nil {
		lock, err := fence.Wrap(cc.LeaderElection.Lock, cc.LeaderElection.LeaseDuration)
		if err != nil {
			return err
		}
		cc.LeaderElection.Lock = lock
	}
	return app.Run(ctx, cc, sched)
}

// errNoConfig: drasched refuses to run kube-scheduler's default profile.
var errNoConfig = errors.New("--config is required: without it kube-scheduler runs the profile default-scheduler, " +
	"which competes with the cluster's scheduler; start from config/scheduler-config.yaml")

// checkConfigFile loads the configuration as kube-scheduler will and
// checks its profiles with checkProfiles.
func checkConfigFile(logger klog.Logger, file string) error {
	if file == "" {
		return errNoConfig
	}
	cfg, err := options.LoadConfigFromFile(logger, file)
	if err != nil {
		return fmt.Errorf("load %s: %w", file, err)
	}
	return checkProfiles(cfg)
}

// checkProfiles rejects configurations in which the in-tree
// DynamicResources plugin would allocate devices next to StructuredDRA (in
// the same profile or in another one of this process: they would both
// allocate from the same devices), in which no profile runs StructuredDRA,
// or in which a profile would take over pods of the default scheduler.
func checkProfiles(cfg *schedconfig.KubeSchedulerConfiguration) error {
	var errs []error
	var ours, inTree []string
	for _, profile := range cfg.Profiles {
		if profile.SchedulerName == "" || profile.SchedulerName == "default-scheduler" {
			errs = append(errs, fmt.Errorf("profile %q: drasched is a secondary scheduler; give the profile its own schedulerName (for example drasched)", profile.SchedulerName))
		}
		if profile.Plugins == nil {
			continue
		}
		if enabled(profile.Plugins, dra.Name) {
			ours = append(ours, profile.SchedulerName)
		}
		if enabled(profile.Plugins, names.DynamicResources) {
			inTree = append(inTree, profile.SchedulerName)
		}
	}
	if len(ours) == 0 {
		errs = append(errs, fmt.Errorf("no profile enables %s; pods with resource claims would be scheduled by the in-tree plugin or not at all", dra.Name))
	}
	for _, name := range inTree {
		if len(ours) == 0 {
			break
		}
		if slices.Contains(ours, name) {
			errs = append(errs, fmt.Errorf("profile %q enables both %s and %s, which would allocate the same claims twice; disable %s",
				name, dra.Name, names.DynamicResources, names.DynamicResources))
			continue
		}
		errs = append(errs, fmt.Errorf("profile %q enables %s next to %s in profile %q: both would give the same devices to different claims; disable %s in every profile",
			name, names.DynamicResources, dra.Name, ours[0], names.DynamicResources))
	}
	return errors.Join(errs...)
}

// enabled reports whether the plugin is enabled at some extension point of
// the profile. Defaulting has merged the default plugins into the profile:
// a plugin disabled in multiPoint is no longer in multiPoint.enabled.
func enabled(plugins *schedconfig.Plugins, name string) bool {
	isName := func(p schedconfig.Plugin) bool { return p.Name == name }
	for _, set := range []schedconfig.PluginSet{
		plugins.MultiPoint, plugins.PreEnqueue, plugins.QueueSort, plugins.PreFilter, plugins.Filter, plugins.PostFilter,
		plugins.PreScore, plugins.Score, plugins.Reserve, plugins.Permit, plugins.PreBind, plugins.Bind, plugins.PostBind,
	} {
		if slices.ContainsFunc(set.Enabled, isName) {
			return true
		}
	}
	return false
}
