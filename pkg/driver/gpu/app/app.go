// Package app builds the gpu-kubelet-plugin command: `run` (the kubelet
// plugin), `discover` (print what would be published, and exit) and
// `healthcheck` (the liveness probe).
package app

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json

	"github.com/drasched/drasched/pkg/version"
)

// helpColumns wraps flag help like kube components do.
const helpColumns = 100

// NewCommand returns the root command.
func NewCommand() *cobra.Command {
	logging := logsapi.NewLoggingConfiguration()
	featureGate := featuregate.NewFeatureGate()
	utilruntime.Must(logsapi.AddFeatureGates(featureGate))
	loggingFlags := pflag.NewFlagSet("logging", pflag.ContinueOnError)
	logsapi.AddFlags(logging, loggingFlags)
	featureGate.AddFlag(loggingFlags)

	cmd := &cobra.Command{
		Use:   "gpu-kubelet-plugin",
		Short: "Node-side GPU DRA driver paired with the drasched scheduler",
		Long: `gpu-kubelet-plugin publishes a node's NVIDIA GPUs (whole GPUs and MIG devices)
as ResourceSlices and prepares them for pods through the kubelet's DRA API.`,
		Version:       version.Get().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return logsapi.ValidateAndApply(logging, featureGate)
		},
	}
	cmd.SetVersionTemplate("{{.Version}}\n")
	cmd.PersistentFlags().AddFlagSet(loggingFlags)
	cmd.AddCommand(newRunCommand(loggingFlags), newDiscoverCommand(loggingFlags), newHealthcheckCommand(loggingFlags))
	return cmd
}

// setHelp shows a subcommand's flags in named sections, like kube
// components, with the logging flags last.
func setHelp(cmd *cobra.Command, fss *cliflag.NamedFlagSets, logging *pflag.FlagSet) {
	for _, name := range fss.Order {
		cmd.Flags().AddFlagSet(fss.FlagSets[name])
	}
	fss.FlagSet("logging").AddFlagSet(logging)
	cliflag.SetUsageAndHelpFunc(cmd, *fss, helpColumns)
}
