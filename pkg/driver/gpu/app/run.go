package app

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"

	"github.com/drasched/drasched/pkg/driver/gpu"
	"github.com/drasched/drasched/pkg/version"
)

func newRunCommand(logging *pflag.FlagSet) *cobra.Command {
	disc := newDiscoveryOptions()
	plugin := newPluginOptions()
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the kubelet plugin",
		Long: `run registers the driver with the kubelet, publishes the node's GPUs as
ResourceSlices, keeps them up to date, and prepares and unprepares claims.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := errors.Join(disc.validate(), plugin.validate()); err != nil {
				return err
			}
			return run(cmd.Context(), disc, plugin)
		},
	}
	fss := &cliflag.NamedFlagSets{}
	disc.addFlags(fss.FlagSet("discovery"))
	plugin.addFlags(fss.FlagSet("kubelet plugin"), fss.FlagSet("kubernetes api"), fss.FlagSet("metrics and health"))
	setHelp(cmd, fss, logging)
	return cmd
}

func run(ctx context.Context, disc *discoveryOptions, opts *pluginOptions) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := klog.LoggerWithName(klog.FromContext(ctx), "gpu-kubelet-plugin")
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Starting", "version", version.Get().String(), "driver", disc.driverName, "node", disc.nodeName, "backend", disc.backend)

	restConfig, err := clientcmd.BuildConfigFromFlags("", opts.kubeconfig)
	if err != nil {
		return fmt.Errorf("kubernetes client configuration: %w", err)
	}
	restConfig.QPS, restConfig.Burst = opts.kubeAPIQPS, opts.kubeAPIBurst
	restConfig.UserAgent = "gpu-kubelet-plugin/" + version.Get().Version
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	discoverer, err := disc.discoverer()
	if err != nil {
		return err
	}

	gpu.RegisterMetrics()
	// The endpoints serve from the start, while New discovers the devices
	// and recovers the checkpoint, so that the liveness probe does not
	// kill a slow start; the checks begin once the driver exists.
	var running atomic.Pointer[gpu.Driver]
	endpointCfg := endpointConfig{
		metricsAddress: opts.metricsBindAddress,
		healthAddress:  opts.healthProbeBindAddress,
		tlsCertFile:    opts.tlsCertFile,
		tlsKeyFile:     opts.tlsKeyFile,
		checks: newHealthChecks(func() pluginHealth {
			if d := running.Load(); d != nil {
				return d
			}
			return nil
		}),
	}
	if opts.metricsBindAddress != "" {
		// A client of its own, with its own rate limiter: reviews of
		// made-up tokens must not take the budget of the slice
		// publishing.
		reviewConfig := rest.CopyConfig(restConfig)
		reviewConfig.QPS, reviewConfig.Burst = reviewQPS, reviewBurst
		reviews, err := kubernetes.NewForConfig(reviewConfig)
		if err != nil {
			return fmt.Errorf("kubernetes client for metrics authentication: %w", err)
		}
		if endpointCfg.auth, err = newMetricsAuth(reviews); err != nil {
			return err
		}
	}
	served, err := startEndpoints(ctx, endpointCfg)
	if err != nil {
		return err
	}
	defer served.stop(ctx)

	driver, err := gpu.New(ctx, gpu.Config{
		DriverName:           disc.driverName,
		NodeName:             disc.nodeName,
		KubeClient:           client,
		Discoverer:           discoverer,
		PluginDataDir:        opts.pluginDataDir,
		RegistrarDir:         opts.registrarDir,
		StateDir:             opts.stateDir,
		CDIDir:               opts.cdiDir,
		DevRoot:              opts.devRoot,
		ContainerDevRoot:     opts.containerDevRoot,
		DriverRoot:           opts.driverRoot,
		ContainerDriverRoot:  opts.containerDriverRoot,
		BootIDPath:           opts.bootIDFile,
		RescanInterval:       opts.rescanInterval,
		HealthCheckTimeout:   opts.healthCheckTimeout,
		DiscoveryGracePeriod: opts.gracePeriod,
		RollingUpdateUID:     types.UID(opts.podUID),
	})
	if err != nil {
		return err
	}
	running.Store(driver)
	if err := driver.Run(ctx); err != nil {
		return err
	}
	logger.Info("Stopped")
	return nil
}
