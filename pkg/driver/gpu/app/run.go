package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/metrics/legacyregistry"
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
	plugin.addFlags(fss.FlagSet("kubelet plugin"), fss.FlagSet("kubernetes api"), fss.FlagSet("metrics"))
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
	// The endpoint serves from the start, while New discovers the devices
	// and recovers the checkpoint, so that the liveness probe does not
	// kill a slow start; the checks begin once the driver exists.
	var running atomic.Pointer[gpu.Driver]
	if opts.metricsBindAddress != "" {
		stopMetrics, err := serveMetrics(ctx, opts.metricsBindAddress, healthChecks(func() pluginHealth {
			if d := running.Load(); d != nil {
				return d
			}
			return nil
		}))
		if err != nil {
			return err
		}
		defer stopMetrics()
	}

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

// pluginHealth is what /healthz asks the running plugin.
type pluginHealth interface {
	CheckRegistration() error
	CheckPublishing() error
}

// healthChecks are the checks of /healthz: it fails, naming the check,
// when one returns an error, and /healthz/<check> shows the error.
// plugin returns nil while the plugin starts.
func healthChecks(plugin func() pluginHealth) []healthz.HealthChecker {
	check := func(f func(pluginHealth) error) func(*http.Request) error {
		return func(*http.Request) error {
			if p := plugin(); p != nil {
				return f(p)
			}
			return nil
		}
	}
	return []healthz.HealthChecker{
		healthz.NamedCheck("kubelet-registration", check(pluginHealth.CheckRegistration)),
		healthz.NamedCheck("resourceslice-publishing", check(pluginHealth.CheckPublishing)),
	}
}

// newMux serves /metrics and /healthz.
func newMux(checks []healthz.HealthChecker) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", legacyregistry.Handler())
	healthz.InstallHandler(mux, checks...)
	return mux
}

// serveMetrics serves /metrics and /healthz until ctx is done or the
// returned function is called.
func serveMetrics(ctx context.Context, addr string, checks []healthz.HealthChecker) (func(), error) {
	logger := klog.FromContext(ctx)
	mux := newMux(checks)
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for metrics on %s: %w", addr, err)
	}
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := server.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "Metrics server failed")
		}
	}()
	logger.Info("Serving metrics", "address", listener.Addr().String())
	return func() {
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdownCtx)
	}, nil
}
