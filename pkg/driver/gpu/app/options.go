package app

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/drasched/drasched/pkg/driver/gpu"
	"github.com/drasched/drasched/pkg/driver/gpu/cdi"
	"github.com/drasched/drasched/pkg/driver/gpu/checkpoint"
	"github.com/drasched/drasched/pkg/driver/gpu/discovery"
)

// discoveryOptions select and configure the discovery backend. Both
// subcommands have them, so that `discover` shows exactly what `run` would
// publish.
type discoveryOptions struct {
	driverName        string
	nodeName          string
	backend           string
	nvidiaSMI         string
	nvidiaSMIOutput   string
	nvidiaSMITimeout  time.Duration
	sysfsRoot         string
	nvidiaProcDir     string
	inventory         string
	recordedNvidiaSMI *discovery.Recorder // set by discover --record-nvidia-smi
}

func newDiscoveryOptions() *discoveryOptions {
	return &discoveryOptions{
		driverName:       gpu.DefaultDriverName,
		nodeName:         os.Getenv("NODE_NAME"),
		backend:          discovery.BackendNvidiaSMI,
		nvidiaSMITimeout: discovery.DefaultNvidiaSMITimeout,
		sysfsRoot:        discovery.DefaultSysfsRoot,
		nvidiaProcDir:    discovery.DefaultNvidiaProcDir,
	}
}

func (o *discoveryOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.driverName, "driver-name", o.driverName, "Name of the DRA driver, used in ResourceSlices, DeviceClasses, CDI device IDs and the unhealthy taint key.")
	fs.StringVar(&o.nodeName, "node-name", o.nodeName, "Name of the node; also the name of its device pool. Defaults to $NODE_NAME.")
	fs.StringVar(&o.backend, "backend", o.backend, "Device discovery backend: "+strings.Join(discovery.Backends, ", ")+".")
	fs.StringVar(&o.nvidiaSMI, "nvidia-smi", o.nvidiaSMI, "nvidia-smi binary for --backend=nvidia-smi; empty looks it up on PATH.")
	fs.StringVar(&o.nvidiaSMIOutput, "nvidia-smi-output", o.nvidiaSMIOutput, "Replay a recorded nvidia-smi transcript (see discover --record-nvidia-smi) instead of running nvidia-smi: a dry run anywhere.")
	fs.DurationVar(&o.nvidiaSMITimeout, "nvidia-smi-timeout", o.nvidiaSMITimeout, "Time limit for one nvidia-smi run.")
	fs.StringVar(&o.sysfsRoot, "sysfs-root", o.sysfsRoot, "sysfs mount, for --backend=sysfs and for the PCIe root and NUMA node of nvidia-smi devices.")
	fs.StringVar(&o.nvidiaProcDir, "nvidia-proc-dir", o.nvidiaProcDir, "The NVIDIA driver's /proc directory (GPU UUIDs and minor numbers).")
	fs.StringVar(&o.inventory, "inventory", o.inventory, "Inventory YAML file for --backend=inventory.")
}

func (o *discoveryOptions) validate() error {
	var errs []error
	if o.nodeName == "" {
		errs = append(errs, errors.New("--node-name (or $NODE_NAME) is required"))
	}
	if !slices.Contains(discovery.Backends, o.backend) {
		errs = append(errs, fmt.Errorf("--backend=%q: want one of %s", o.backend, strings.Join(discovery.Backends, ", ")))
	}
	if o.backend == discovery.BackendInventory && o.inventory == "" {
		errs = append(errs, errors.New("--backend=inventory needs --inventory"))
	}
	if o.inventory != "" && o.backend != discovery.BackendInventory {
		errs = append(errs, fmt.Errorf("--inventory is only used with --backend=inventory, not %s", o.backend))
	}
	if o.nvidiaSMIOutput != "" && o.backend != discovery.BackendNvidiaSMI {
		errs = append(errs, fmt.Errorf("--nvidia-smi-output is only used with --backend=nvidia-smi, not %s", o.backend))
	}
	if o.nvidiaSMITimeout <= 0 {
		errs = append(errs, errors.New("--nvidia-smi-timeout must be positive"))
	}
	return errors.Join(errs...)
}

// discoverer builds the selected backend.
func (o *discoveryOptions) discoverer() (discovery.Discoverer, error) {
	switch o.backend {
	case discovery.BackendInventory:
		return &discovery.Inventory{Path: o.inventory}, nil
	case discovery.BackendSysfs:
		return &discovery.Sysfs{Root: o.sysfsRoot, NvidiaProcDir: o.nvidiaProcDir}, nil
	default:
		var runner discovery.Runner = discovery.ExecRunner{Path: o.nvidiaSMI, Timeout: o.nvidiaSMITimeout}
		var files discovery.ProcFiles = discovery.ProcDir(o.nvidiaProcDir)
		if o.nvidiaSMIOutput != "" {
			rec, err := discovery.LoadRecording(o.nvidiaSMIOutput)
			if err != nil {
				return nil, err
			}
			// A replay reads the recorded /proc files, not this host's.
			runner, files = rec, rec
		}
		if o.recordedNvidiaSMI != nil {
			o.recordedNvidiaSMI.Runner = runner
			o.recordedNvidiaSMI.ProcFiles = files
			runner = o.recordedNvidiaSMI
		}
		return &discovery.NvidiaSMI{Runner: runner, SysfsRoot: o.sysfsRoot, NvidiaProcDir: o.nvidiaProcDir}, nil
	}
}

// pluginOptions configure `run`.
type pluginOptions struct {
	kubeconfig          string
	kubeAPIQPS          float32
	kubeAPIBurst        int
	pluginDataDir       string
	registrarDir        string
	stateDir            string
	cdiDir              string
	devRoot             string
	containerDevRoot    string
	driverRoot          string
	containerDriverRoot string
	bootIDFile          string
	rescanInterval      time.Duration
	healthCheckTimeout  time.Duration
	gracePeriod         time.Duration
	podUID              string

	metricsBindAddress     string
	tlsCertFile            string
	tlsKeyFile             string
	healthProbeBindAddress string
}

func newPluginOptions() *pluginOptions {
	return &pluginOptions{
		kubeAPIQPS:             5,
		kubeAPIBurst:           10,
		registrarDir:           kubeletplugin.KubeletRegistryDir,
		cdiDir:                 cdi.DefaultDir,
		devRoot:                "/",
		driverRoot:             "/",
		bootIDFile:             checkpoint.DefaultBootIDPath,
		rescanInterval:         gpu.DefaultRescanInterval,
		healthCheckTimeout:     gpu.DefaultHealthCheckTimeout,
		gracePeriod:            gpu.DefaultDiscoveryGracePeriod,
		podUID:                 os.Getenv("POD_UID"),
		metricsBindAddress:     ":8443",
		healthProbeBindAddress: defaultHealthAddress,
	}
}

func (o *pluginOptions) addFlags(plugin, kube, endpoints *pflag.FlagSet) {
	kube.StringVar(&o.kubeconfig, "kubeconfig", o.kubeconfig, "Kubeconfig file; empty uses the in-cluster configuration.")
	kube.Float32Var(&o.kubeAPIQPS, "kube-api-qps", o.kubeAPIQPS, "QPS towards the apiserver.")
	kube.IntVar(&o.kubeAPIBurst, "kube-api-burst", o.kubeAPIBurst, "Burst towards the apiserver.")
	plugin.StringVar(&o.pluginDataDir, "plugin-data-dir", o.pluginDataDir, "Directory of the DRA socket; default "+kubeletplugin.KubeletPluginsDir+"/<driver name>. Must be the same path on the host.")
	plugin.StringVar(&o.registrarDir, "registrar-dir", o.registrarDir, "The kubelet's plugin registration directory.")
	plugin.StringVar(&o.stateDir, "state-dir", o.stateDir, "Directory of the checkpoint and lock file; default the plugin data directory. Must survive pod restarts.")
	plugin.StringVar(&o.cdiDir, "cdi-dir", o.cdiDir, "Directory for the claims' CDI specs, read by the container runtime.")
	plugin.StringVar(&o.devRoot, "dev-root", o.devRoot, "Host directory whose dev/ holds the GPUs' device nodes: / with the NVIDIA driver on the host, the driver container's root with NVIDIA's GPU operator (/run/nvidia/driver). CDI specs give containers <dev-root>/dev/nvidia0 as /dev/nvidia0.")
	plugin.StringVar(&o.containerDevRoot, "container-dev-root", o.containerDevRoot, "Where this process sees --dev-root, to check that the device nodes a CDI spec names exist; default --dev-root. The DaemonSet mounts the host's <dev-root>/dev read-only at /host-dev-root/dev.")
	plugin.StringVar(&o.driverRoot, "driver-root", o.driverRoot, "Host directory under which the NVIDIA driver's user-space files are installed: / with the driver on the host, the driver container's root with NVIDIA's GPU operator (/run/nvidia/driver). CDI specs bind-mount its libraries (of the GPUs' driver version), binaries and firmware into the claims' containers, read-only.")
	plugin.StringVar(&o.containerDriverRoot, "container-driver-root", o.containerDriverRoot, "Where this process sees --driver-root, to find the driver's files; default --driver-root. The DaemonSet mounts the host's <driver-root>/usr read-only at /host-driver-root/usr.")
	plugin.StringVar(&o.bootIDFile, "boot-id-file", o.bootIDFile, "File with the ID of the current boot; prepared claims do not survive a reboot.")
	plugin.DurationVar(&o.rescanInterval, "rescan-interval", o.rescanInterval, "How often devices are discovered again (file changes trigger a rescan at once).")
	plugin.DurationVar(&o.healthCheckTimeout, "health-check-timeout", o.healthCheckTimeout, "How long the kubelet trusts a device health report; reports are resent three times per timeout.")
	plugin.DurationVar(&o.gracePeriod, "discovery-grace-period", o.gracePeriod, "How long devices stay published as they were while discovery fails or no longer lists them (nvidia-smi errors or hangs, a GPU fell off the bus); after that they are tainted <driver>/unhealthy until discovery sees them again.")
	plugin.StringVar(&o.podUID, "pod-uid", o.podUID, "UID of the plugin's pod (defaults to $POD_UID); enables seamless rolling updates, which need kubelet 1.33 or newer.")
	endpoints.StringVar(&o.metricsBindAddress, "metrics-bind-address", o.metricsBindAddress, "Address of /metrics, served over HTTPS to callers that authenticate with a bearer token and may get the non-resource URL /metrics (TokenReview, SubjectAccessReview); empty disables it.")
	endpoints.StringVar(&o.tlsCertFile, "tls-cert-file", o.tlsCertFile, "Certificate of the metrics endpoint (PEM); empty: a self-signed one, made at the start.")
	endpoints.StringVar(&o.tlsKeyFile, "tls-private-key-file", o.tlsKeyFile, "Private key of --tls-cert-file (PEM).")
	endpoints.StringVar(&o.healthProbeBindAddress, "health-probe-bind-address", o.healthProbeBindAddress, "Address of /healthz, plain HTTP, for the liveness probe (`gpu-kubelet-plugin healthcheck`); loopback keeps other pods away from it. Empty disables it.")
}

func (o *pluginOptions) validate() error {
	var errs []error
	if o.rescanInterval < time.Second {
		errs = append(errs, errors.New("--rescan-interval must be at least 1s"))
	}
	if o.healthCheckTimeout < 3*time.Second {
		errs = append(errs, errors.New("--health-check-timeout must be at least 3s"))
	}
	if !filepath.IsAbs(o.devRoot) {
		errs = append(errs, fmt.Errorf("--dev-root=%q: want an absolute path", o.devRoot))
	}
	if o.containerDevRoot != "" && !filepath.IsAbs(o.containerDevRoot) {
		errs = append(errs, fmt.Errorf("--container-dev-root=%q: want an absolute path", o.containerDevRoot))
	}
	if !filepath.IsAbs(o.driverRoot) {
		errs = append(errs, fmt.Errorf("--driver-root=%q: want an absolute path", o.driverRoot))
	}
	if o.containerDriverRoot != "" && !filepath.IsAbs(o.containerDriverRoot) {
		errs = append(errs, fmt.Errorf("--container-driver-root=%q: want an absolute path", o.containerDriverRoot))
	}
	if o.gracePeriod <= 0 {
		errs = append(errs, errors.New("--discovery-grace-period must be positive"))
	}
	if (o.tlsCertFile == "") != (o.tlsKeyFile == "") {
		errs = append(errs, errors.New("--tls-cert-file and --tls-private-key-file go together"))
	}
	return errors.Join(errs...)
}
