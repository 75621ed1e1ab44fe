package main

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/spf13/cobra"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/server"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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
	schedappconfig "k8s.io/kubernetes/cmd/kube-scheduler/app/config"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/drasched/drasched/internal/minor/schedminor"
	"github.com/drasched/drasched/pkg/leaderfence"
	draplugins "github.com/drasched/drasched/pkg/plugins"
	"github.com/drasched/drasched/pkg/plugins/dra"
	"github.com/drasched/drasched/pkg/plugins/drapreemption"
	"github.com/drasched/drasched/pkg/version"
)

// newCommand is kube-scheduler's command with StructuredDRA registered,
// drasched's version in --version, a check of the configuration file
// before the scheduler starts, and the leader lease fenced for claim
// writes.
//
// It is assembled from kube-scheduler's exported parts (options.Options,
// app.Setup, app.Run) instead of app.NewSchedulerCommand, because the
// leader elector's resource lock and the scheduler's client must be fenced
// (pkg/leaderfence) while they are built: see setup.
func newCommand(extra ...app.Option) *cobra.Command {
	opts := options.NewOptions()
	fence := leaderfence.New(leaderfence.DefaultMargin)
	var registry []app.Option
	for name, factory := range draplugins.Registry(dra.ProcessOptions{Fence: fence}) {
		registry = append(registry, app.WithPlugin(name, factory))
	}
	registry = append(registry, extra...)

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
// SIGTERM, Setup, feature metrics, Run), with setup in place of Setup.
func run(cmd *cobra.Command, opts *options.Options, fence *leaderfence.Fence, registry []app.Option) error {
	fg := opts.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)
	if err := logsapi.ValidateAndApply(opts.Logs, fg); err != nil {
		return err
	}
	cliflag.PrintFlags(cmd.Flags())
	if err := schedminor.NameInformers(opts); err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-server.SetupSignalHandler()
		cancel()
	}()

	cc, sched, err := setup(ctx, opts, fence, registry)
	if err != nil {
		return err
	}
	if mutable, ok := fg.(featuregate.MutableFeatureGate); ok {
		mutable.AddMetrics()
	}
	opts.ComponentGlobalsRegistry.AddMetrics()
	return app.Run(ctx, cc, sched)
}

// setup is kube-scheduler's app.Setup (v1.37.2) with the leader lease
// fenced: the fence wraps the elector's resource lock and the transport of
// the client the scheduler writes with. app.Setup hands the scheduler the
// client that Options.Config built, so the client must be replaced between
// the two, and Setup has no hook there. Fencing every write, not only the
// plugin's claim writes, matters: an old leader that resumes after a pause
// would otherwise still patch pod conditions (overwriting what the new
// leader wrote), bind pods and delete preemption victims from its stale
// view until its elector notices the lost lease and exits.
//
// The informers keep the unfenced client: they only read. Events keep
// theirs too: an old leader's event is stale information, not state.
func setup(ctx context.Context, opts *options.Options, fence *leaderfence.Fence, registry []app.Option) (*schedappconfig.CompletedConfig, *scheduler.Scheduler, error) {
	cfg, err := latest.Default()
	if err != nil {
		return nil, nil, err
	}
	opts.ComponentConfig = cfg
	if errs := opts.Validate(); len(errs) > 0 {
		return nil, nil, utilerrors.NewAggregate(errs)
	}
	c, err := opts.Config(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := checkServedAPIs(c.Client.Discovery(), utilfeature.DefaultFeatureGate); err != nil {
		return nil, nil, err
	}
	if c.LeaderElection != nil {
		lock, err := fence.Wrap(c.LeaderElection.Lock, c.LeaderElection.LeaseDuration)
		if err != nil {
			return nil, nil, err
		}
		c.LeaderElection.Lock = lock
		config := rest.AddUserAgent(c.KubeConfig, "scheduler")
		config.Wrap(fence.WrapTransport)
		if c.Client, err = kubernetes.NewForConfig(config); err != nil {
			return nil, nil, err
		}
	}
	cc := c.Complete()

	outOfTree := make(frameworkruntime.Registry)
	for _, option := range registry {
		if err := option(outOfTree); err != nil {
			return nil, nil, err
		}
	}
	var profiles []schedconfig.KubeSchedulerProfile
	sched, err := scheduler.New(ctx,
		cc.Client,
		cc.InformerFactory,
		cc.DynInformerFactory,
		schedminor.RecorderFactory(cc.EventBroadcaster.NewRecorder),
		scheduler.WithComponentConfigVersion(cc.ComponentConfig.APIVersion),
		scheduler.WithKubeConfig(cc.KubeConfig),
		scheduler.WithProfiles(cc.ComponentConfig.Profiles...),
		scheduler.WithPercentageOfNodesToScore(cc.ComponentConfig.PercentageOfNodesToScore),
		scheduler.WithFrameworkOutOfTreeRegistry(outOfTree),
		scheduler.WithPodMaxBackoffSeconds(cc.ComponentConfig.PodMaxBackoffSeconds),
		scheduler.WithPodInitialBackoffSeconds(cc.ComponentConfig.PodInitialBackoffSeconds),
		scheduler.WithPodMaxInUnschedulablePodsDuration(cc.PodMaxInUnschedulablePodsDuration),
		scheduler.WithExtenders(cc.ComponentConfig.Extenders...),
		scheduler.WithParallelism(cc.ComponentConfig.Parallelism),
		scheduler.WithBuildFrameworkCapturer(func(profile schedconfig.KubeSchedulerProfile) {
			profiles = append(profiles, profile)
		}),
	)
	if err != nil {
		return nil, nil, err
	}
	if err := options.LogOrWriteConfig(klog.FromContext(ctx), opts.WriteConfigTo, &cc.ComponentConfig, profiles); err != nil {
		return nil, nil, err
	}
	return &cc, sched, nil
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
// in which a profile would take over pods of the default scheduler, or in
// which a profile runs both StructuredDRAPreemption and DefaultPreemption.
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
	for _, profile := range cfg.Profiles {
		if profile.Plugins != nil && enabled(profile.Plugins, drapreemption.Name) && enabled(profile.Plugins, names.DefaultPreemption) {
			errs = append(errs, fmt.Errorf("profile %q enables both %s and %s, which would preempt twice; disable %s",
				profile.SchedulerName, drapreemption.Name, names.DefaultPreemption, names.DefaultPreemption))
		}
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
