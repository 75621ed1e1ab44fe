package main

import (
	"errors"
	"fmt"
	"slices"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"

	"github.com/drasched/drasched/pkg/plugins/dra"
	"github.com/drasched/drasched/pkg/version"
)

// newCommand is kube-scheduler's command with StructuredDRA registered,
// drasched's version in --version and a check of the configuration file
// before the scheduler starts.
func newCommand() *cobra.Command {
	cmd := app.NewSchedulerCommand(app.WithPlugin(dra.Name, dra.New))
	cmd.Use = "drasched"
	cmd.Short = "drasched: kube-scheduler with structured DRA device allocation for GPUs"
	cmd.Long = `drasched is a secondary kube-scheduler. Pods opt in with
spec.schedulerName: drasched. Its StructuredDRA plugin replaces the in-tree
DynamicResources plugin: the same allocations, found faster, with failure
messages that say why per request. It needs --config with a profile that
enables StructuredDRA and disables DynamicResources.`
	run := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if flag := cmd.Flags().Lookup("version"); flag != nil && flag.Value.String() != "false" {
			// kube-scheduler prints the Kubernetes version and exits.
			if _, err := fmt.Fprintln(cmd.OutOrStdout(), version.Get().String()); err != nil {
				return err
			}
			return run(cmd, args)
		}
		file := ""
		if flag := cmd.Flags().Lookup("config"); flag != nil {
			file = flag.Value.String()
		}
		if err := checkConfigFile(klog.Background(), file); err != nil {
			return err
		}
		return run(cmd, args)
	}
	return cmd
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

// checkProfiles rejects profiles that would allocate devices twice (both
// StructuredDRA and DynamicResources enabled) and configurations in which
// no profile runs StructuredDRA or a profile would take over pods of the
// default scheduler.
func checkProfiles(cfg *schedconfig.KubeSchedulerConfiguration) error {
	var errs []error
	withPlugin := 0
	for _, profile := range cfg.Profiles {
		if profile.SchedulerName == "" || profile.SchedulerName == "default-scheduler" {
			errs = append(errs, fmt.Errorf("profile %q: drasched is a secondary scheduler; give the profile its own schedulerName (for example drasched)", profile.SchedulerName))
		}
		if profile.Plugins == nil {
			continue
		}
		ours, inTree := enabled(profile.Plugins, dra.Name), enabled(profile.Plugins, names.DynamicResources)
		if ours {
			withPlugin++
		}
		if ours && inTree {
			errs = append(errs, fmt.Errorf("profile %q enables both %s and %s, which would allocate the same claims twice; disable %s",
				profile.SchedulerName, dra.Name, names.DynamicResources, names.DynamicResources))
		}
	}
	if withPlugin == 0 {
		errs = append(errs, fmt.Errorf("no profile enables %s; pods with resource claims would be scheduled by the in-tree plugin or not at all", dra.Name))
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
