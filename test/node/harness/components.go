package harness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"text/template"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeproxyv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// The daemons, in start order; teardown stops them in the order of
// Down.
const (
	etcd              = "etcd"
	kubeAPIServer     = "kube-apiserver"
	controllerManager = "kube-controller-manager"
	kubeScheduler     = "kube-scheduler"
	containerd        = "containerd"
	kubelet           = "kubelet"
	kubeProxy         = "kube-proxy"
)

// daemons are every daemon the node may run.
var daemons = []string{etcd, kubeAPIServer, controllerManager, kubeScheduler, containerd, kubelet, kubeProxy}

// kubeletConfiguration is the kubelet's configuration file.
func kubeletConfiguration(c Config) *kubeletv1beta1.KubeletConfiguration {
	return &kubeletv1beta1.KubeletConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: kubeletv1beta1.SchemeGroupVersion.String(), Kind: "KubeletConfiguration"},
		// These hosts run cgroup v1, which kubelet 1.35+ refuses unless
		// told.
		FailCgroupV1: ptr.To(false),
		CgroupDriver: "cgroupfs",
		// Pods' cgroups under /drasched-node in every hierarchy, removed
		// at teardown.
		CgroupRoot:               "/" + cgroupName,
		ContainerRuntimeEndpoint: "unix://" + c.containerdSocket(),
		PodLogsDir:               filepath.Join(c.Root, "pod-logs"),
		Port:                     int32(c.Ports.Kubelet),
		HealthzBindAddress:       "127.0.0.1",
		HealthzPort:              ptr.To(int32(c.Ports.KubeletHealthz)),
		// ReadOnlyPort 0: none.
		Authentication: kubeletv1beta1.KubeletAuthentication{
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(true)},
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: c.pki("ca.crt")},
		},
		Authorization: kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},
		// No cluster DNS: pods use the host's resolver.
		ResolverConfig: ptr.To("/etc/resolv.conf"),
		FailSwapOn:     ptr.To(false),
		// Never garbage-collect the imported images (there is no registry
		// to pull them back from) and never evict on a host shared with
		// other work.
		ImageGCHighThresholdPercent: ptr.To(int32(100)),
		EvictionHard: map[string]string{
			"memory.available":  "100Mi",
			"nodefs.available":  "1%",
			"imagefs.available": "1%",
			"nodefs.inodesFree": "1%",
		},
		SyncFrequency:      metav1.Duration{Duration: 10 * time.Second},
		FileCheckFrequency: metav1.Duration{Duration: 10 * time.Second},
		// A heartbeat in the Node's status every minute, ±30 s (default
		// 5m), so that a test waiting for one after a kubelet restart has
		// one within two minutes even when it missed the report the
		// kubelet sends as it starts.
		NodeStatusReportFrequency: metav1.Duration{Duration: time.Minute},
	}
}

// kubeProxyConfiguration is kube-proxy's configuration file.
func kubeProxyConfiguration(c Config) *kubeproxyv1alpha1.KubeProxyConfiguration {
	cfg := &kubeproxyv1alpha1.KubeProxyConfiguration{
		TypeMeta:           metav1.TypeMeta{APIVersion: kubeproxyv1alpha1.SchemeGroupVersion.String(), Kind: "KubeProxyConfiguration"},
		HostnameOverride:   c.Hostname,
		Mode:               kubeproxyv1alpha1.ProxyMode("iptables"),
		ClusterCIDR:        podCIDR,
		MetricsBindAddress: net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Ports.ProxyMetrics)),
		HealthzBindAddress: net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Ports.ProxyHealthz)),
		// Leave the host's conntrack sysctls and route_localnet alone.
		Conntrack: kubeproxyv1alpha1.KubeProxyConntrackConfiguration{
			MaxPerCore:            ptr.To(int32(0)),
			Min:                   ptr.To(int32(0)),
			TCPEstablishedTimeout: &metav1.Duration{},
			TCPCloseWaitTimeout:   &metav1.Duration{},
		},
		IPTables: kubeproxyv1alpha1.KubeProxyIPTablesConfiguration{LocalhostNodePorts: ptr.To(false)},
	}
	cfg.ClientConnection.Kubeconfig = c.kubeconfig("kube-proxy")
	return cfg
}

// marshalYAML is a component's configuration file.
func marshalYAML(obj any) ([]byte, error) {
	return yaml.Marshal(obj)
}

// containerdConfig is containerd's config.toml: every path under Root and
// Run, CDI specs from Root/cdi, the sandbox image built here, and no plugin
// that writes outside them.
var containerdConfig = template.Must(template.New("config.toml").Funcs(template.FuncMap{
	// A JSON string is a TOML basic string.
	"q": func(s string) (string, error) {
		b, err := json.Marshal(s)
		return string(b), err
	},
}).Parse(`version = 3
root = {{q .Root}}
state = {{q .State}}
# NRI would listen on /var/run/nri, opt installs into /opt/containerd, and
# the image verifier reads /opt/containerd too.
disabled_plugins = [
  "io.containerd.nri.v1.nri",
  "io.containerd.internal.v1.opt",
  "io.containerd.image-verifier.v1.bindir",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = {{q .Socket}}

[ttrpc]
  address = {{q (print .Socket ".ttrpc")}}

[debug]
  address = {{q .DebugSocket}}

[plugins.'io.containerd.shim.v1.manager']
  socket_dir = {{q .ShimSocketDir}}

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    # Built by hack/build-node.sh and imported, never pulled.
    sandbox = {{q .SandboxImage}}

[plugins.'io.containerd.cri.v1.runtime']
  cdi_spec_dirs = [{{q .CDIDir}}]
  # root here lacks CAP_SYS_RESOURCE: without this every sandbox fails
  # with "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = {{q .Runc}}
        Root = {{q .RuncRoot}}
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [{{q .CNIBinDir}}]
    conf_dir = {{q .CNIConfDir}}

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
`))

// containerdValues are what containerdConfig says.
type containerdValues struct {
	Root, State, Socket, DebugSocket, ShimSocketDir string
	SandboxImage, CDIDir, Runc, RuncRoot            string
	CNIBinDir, CNIConfDir                           string
}

// cniBinDir is where Debian's containernetworking-plugins installs the
// plugins.
const cniBinDir = "/usr/lib/cni"

func containerdTOML(c Config, runc string) ([]byte, error) {
	var b bytes.Buffer
	err := containerdConfig.Execute(&b, containerdValues{
		Root:          filepath.Join(c.Root, "containerd", "root"),
		State:         filepath.Join(c.Run, "containerd"),
		Socket:        c.containerdSocket(),
		DebugSocket:   filepath.Join(c.Run, "containerd-debug.sock"),
		ShimSocketDir: filepath.Join(c.Run, "s"),
		SandboxImage:  pauseImage,
		CDIDir:        c.cdiDir(),
		Runc:          runc,
		RuncRoot:      filepath.Join(c.Run, "runc"),
		CNIBinDir:     cniBinDir,
		CNIConfDir:    filepath.Join(c.Root, "cni", "net.d"),
	})
	return b.Bytes(), err
}

// cniConfList is the pod network: a bridge with host-local addresses; no
// masquerading and no port maps, so the plugins write no netfilter rules
// (kube-proxy writes those).
func cniConfList(c Config) ([]byte, error) {
	type ipam struct {
		Type    string                `json:"type"`
		DataDir string                `json:"dataDir"`
		Ranges  [][]map[string]string `json:"ranges"`
		Routes  []map[string]string   `json:"routes"`
	}
	type bridge struct {
		Type        string `json:"type"`
		Bridge      string `json:"bridge"`
		IsGateway   bool   `json:"isGateway"`
		IPMasq      bool   `json:"ipMasq"`
		HairpinMode bool   `json:"hairpinMode"`
		IPAM        ipam   `json:"ipam"`
	}
	list := struct {
		CNIVersion string   `json:"cniVersion"`
		Name       string   `json:"name"`
		Plugins    []bridge `json:"plugins"`
	}{
		CNIVersion: "1.0.0",
		Name:       networkName,
		Plugins: []bridge{{
			Type: "bridge", Bridge: bridgeName, IsGateway: true, HairpinMode: true,
			IPAM: ipam{
				Type:    "host-local",
				DataDir: filepath.Join(c.Root, "cni", "ipam"),
				Ranges:  [][]map[string]string{{{"subnet": podCIDR}}},
				Routes:  []map[string]string{{"dst": "0.0.0.0/0"}},
			},
		}},
	}
	return json.MarshalIndent(list, "", "  ")
}

func (c Config) cniConfListPath() string {
	return filepath.Join(c.Root, "cni", "net.d", "10-"+networkName+".conflist")
}

// The daemons' command lines. argv[0] is the binary.

func etcdArgs(c Config) []string {
	client := fmt.Sprintf("http://127.0.0.1:%d", c.Ports.Etcd)
	peer := fmt.Sprintf("http://127.0.0.1:%d", c.Ports.Etcd+1)
	return []string{filepath.Join(c.ClusterBinDir, etcd), "--name", "node", "--data-dir", filepath.Join(c.Root, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "node=" + peer, "--unsafe-no-fsync", "--log-level", "warn"}
}

func apiserverArgs(c Config, nodeIP net.IP) []string {
	return []string{filepath.Join(c.ClusterBinDir, kubeAPIServer),
		"--etcd-servers", fmt.Sprintf("http://127.0.0.1:%d", c.Ports.Etcd),
		"--bind-address", "0.0.0.0", "--advertise-address", nodeIP.String(), "--secure-port", strconv.Itoa(c.Ports.APIServer),
		"--cert-dir", filepath.Join(c.Root, "apiserver"),
		"--tls-cert-file", c.pki("apiserver.crt"), "--tls-private-key-file", c.pki("apiserver.key"),
		"--client-ca-file", c.pki("ca.crt"),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", c.pki("sa.pub"), "--service-account-signing-key-file", c.pki("sa.key"),
		"--service-cluster-ip-range", serviceCIDR,
		"--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
		"--kubelet-client-certificate", c.pki("apiserver-kubelet-client.crt"), "--kubelet-client-key", c.pki("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types", "InternalIP,Hostname",
		"--profiling=false", "--v=1"}
}

func controllerManagerArgs(c Config) []string {
	kc := c.kubeconfig("controller-manager")
	return []string{filepath.Join(c.ClusterBinDir, controllerManager),
		"--kubeconfig", kc, "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(c.Ports.ControllerManager),
		"--cert-dir", filepath.Join(c.Root, "controller-manager"),
		"--root-ca-file", c.pki("ca.crt"), "--service-account-private-key-file", c.pki("sa.key"),
		"--use-service-account-credentials", "--leader-elect=false", "--profiling=false", "--v=1"}
}

func schedulerArgs(c Config) []string {
	kc := c.kubeconfig("scheduler")
	return []string{filepath.Join(c.ClusterBinDir, kubeScheduler),
		"--kubeconfig", kc, "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(c.Ports.Scheduler),
		"--cert-dir", filepath.Join(c.Root, "scheduler"),
		"--leader-elect=false", "--profiling=false", "--v=1"}
}

func (c Config) containerdConfigPath() string {
	return filepath.Join(c.Root, "containerd", "config.toml")
}
func (c Config) kubeletConfigPath() string { return filepath.Join(c.Root, "kubelet-config.yaml") }
func (c Config) kubeProxyConfigPath() string {
	return filepath.Join(c.Root, "kube-proxy-config.yaml")
}

func containerdArgs(c Config) []string {
	return []string{filepath.Join(c.BinDir, containerd), "--config", c.containerdConfigPath()}
}

func kubeletArgs(c Config, nodeIP net.IP) []string {
	args := []string{filepath.Join(c.BinDir, kubelet), "--config", c.kubeletConfigPath(),
		"--kubeconfig", c.kubeconfig("kubelet"), "--root-dir", c.kubeletDir(),
		"--cert-dir", filepath.Join(c.kubeletDir(), "pki"),
		"--hostname-override", c.Hostname, "--node-ip", nodeIP.String(),
		"--node-labels", "nvidia.com/gpu.present=true"}
	if c.Taints != "" {
		args = append(args, "--register-with-taints", c.Taints)
	}
	return append(args, "--v=2")
}

func kubeProxyArgs(c Config) []string {
	return []string{filepath.Join(c.BinDir, kubeProxy), "--config", c.kubeProxyConfigPath(), "--v=1"}
}
