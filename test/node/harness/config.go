package harness

import (
	"fmt"
	"path/filepath"
	"strconv"
)

// Config says where the node keeps its state, which binaries it runs and
// on which ports. ConfigFromEnv fills it from the variables that
// hack/node.sh documents; every path is absolute.
type Config struct {
	// Root (NODE_ROOT) holds the PKI, etcd, the kubelet's root directory,
	// containerd's root, CNI and CDI configuration and whatever the tests
	// put there (device nodes, inventory).
	Root string
	// Run (NODE_RUN) holds sockets, containerd's and runc's state, shim
	// sockets and network namespaces.
	Run string
	// Hostname (NODE_HOSTNAME) is the kubelet's node name; its client
	// certificate says system:node:<Hostname>.
	Hostname string
	// LogDir (NODE_LOG_DIR) gets one <daemon>.log per daemon.
	LogDir string
	// StateDir (NODE_STATE_DIR) holds state.json, which says what the node
	// started and how the host was before, and the host's facts before and
	// after (host-before.txt, host-after.txt, host.diff).
	StateDir string
	// BinDir (NODE_BIN_DIR) is hack/build-node.sh's output: kubelet,
	// kube-proxy, containerd, ctr, the shim and the node's images.
	BinDir string
	// ClusterBinDir (CLUSTER_BIN_DIR) is hack/build-control-plane.sh's:
	// etcd, kube-apiserver, kube-controller-manager, kube-scheduler.
	ClusterBinDir string
	// Proxy (NODE_PROXY, 1 or 0) runs kube-proxy, which routes the
	// kubernetes Service for pods (the chart's); the demo's pods do not
	// talk to the API server.
	Proxy bool
	// Taints (NODE_TAINTS) are the kubelet's --register-with-taints.
	Taints string
	Ports  Ports
}

// Ports are away from the defaults, so that the node does not meet another
// cluster on this machine (kwok clusters take random ports). etcd's peer
// port is Etcd+1.
type Ports struct {
	Etcd              int // NODE_ETCD_PORT
	APIServer         int // NODE_APISERVER_PORT
	ControllerManager int // NODE_KCM_PORT
	Scheduler         int // NODE_SCHEDULER_PORT
	Kubelet           int // NODE_KUBELET_PORT
	KubeletHealthz    int // NODE_KUBELET_HEALTHZ_PORT
	ProxyMetrics      int // NODE_PROXY_METRICS_PORT
	ProxyHealthz      int // NODE_PROXY_HEALTHZ_PORT
}

// The node's names and networks. Each is one no other cluster on the host
// uses, so that teardown can tell what is the node's.
const (
	// cgroupName: pods' cgroups live under /drasched-node in every
	// hierarchy.
	cgroupName = "drasched-node"
	// bridgeName is the pod network's bridge.
	bridgeName  = "drasched0"
	networkName = "drasched-node"
	podCIDR     = "10.244.0.0/24"
	serviceCIDR = "10.97.0.0/24"
	// serviceIP is the kubernetes Service's ClusterIP, the first of
	// serviceCIDR.
	serviceIP = "10.97.0.1"
	// pauseImage is the node's own sandbox image (hack/build-node.sh),
	// imported and never pulled.
	pauseImage = "localhost/drasched-node/pause:test"
)

// ConfigFromEnv returns the node's configuration from the environment
// (getenv is os.Getenv), with relative paths and defaults taken from repo,
// the repository root.
func ConfigFromEnv(repo string, getenv func(string) string) (Config, error) {
	path := func(name, def string) string {
		v := getenv(name)
		if v == "" {
			v = def
		}
		if !filepath.IsAbs(v) {
			v = filepath.Join(repo, v)
		}
		return filepath.Clean(v)
	}
	c := Config{
		Root:          path("NODE_ROOT", "/var/lib/drasched-node"),
		Run:           path("NODE_RUN", "/run/drasched-node"),
		Hostname:      getenv("NODE_HOSTNAME"),
		LogDir:        path("NODE_LOG_DIR", "_output/node/logs"),
		StateDir:      path("NODE_STATE_DIR", "_output/node"),
		BinDir:        path("NODE_BIN_DIR", "_output/node/bin"),
		ClusterBinDir: path("CLUSTER_BIN_DIR", "_output/cluster/bin"),
		Taints:        getenv("NODE_TAINTS"),
	}
	if c.Hostname == "" {
		c.Hostname = "drasched-node"
	}
	switch v := getenv("NODE_PROXY"); v {
	case "", "1":
		c.Proxy = true
	case "0":
	default:
		return Config{}, fmt.Errorf("NODE_PROXY=%q: want 1 or 0", v)
	}
	ports := []struct {
		name string
		def  int
		to   *int
	}{
		{"NODE_ETCD_PORT", 12379, &c.Ports.Etcd},
		{"NODE_APISERVER_PORT", 16443, &c.Ports.APIServer},
		{"NODE_KCM_PORT", 11257, &c.Ports.ControllerManager},
		{"NODE_SCHEDULER_PORT", 11259, &c.Ports.Scheduler},
		{"NODE_KUBELET_PORT", 11250, &c.Ports.Kubelet},
		{"NODE_KUBELET_HEALTHZ_PORT", 11248, &c.Ports.KubeletHealthz},
		{"NODE_PROXY_METRICS_PORT", 11249, &c.Ports.ProxyMetrics},
		{"NODE_PROXY_HEALTHZ_PORT", 11256, &c.Ports.ProxyHealthz},
	}
	for _, p := range ports {
		*p.to = p.def
		v := getenv(p.name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n >= 65535 {
			return Config{}, fmt.Errorf("%s=%q: want a port number", p.name, v)
		}
		*p.to = n
	}
	return c, nil
}

// Env is what `hack/node.sh env` prints, one NAME=value a line: what the
// tests of test/node read (KUBECONFIG, NODE_ROOT, NODE_HOSTNAME,
// NODE_BIN) and the paths of the node.
func (c Config) Env() []string {
	return []string{
		"KUBECONFIG=" + c.adminKubeconfig(),
		"NODE_ROOT=" + c.Root,
		"NODE_RUN=" + c.Run,
		"NODE_HOSTNAME=" + c.Hostname,
		"NODE_LOG_DIR=" + c.LogDir,
		"NODE_BIN=" + c.BinDir,
		"NODE_CDI_DIR=" + c.cdiDir(),
		"NODE_KUBELET_DIR=" + c.kubeletDir(),
	}
}

// listenPorts are every port a daemon of the node listens on.
func (c Config) listenPorts() []int {
	p := c.Ports
	return []int{p.Etcd, p.Etcd + 1, p.APIServer, p.ControllerManager, p.Scheduler,
		p.Kubelet, p.KubeletHealthz, p.ProxyMetrics, p.ProxyHealthz}
}

func (c Config) pkiDir() string         { return filepath.Join(c.Root, "pki") }
func (c Config) pki(name string) string { return filepath.Join(c.Root, "pki", name) }
func (c Config) kubeconfig(name string) string {
	return filepath.Join(c.Root, name+".kubeconfig")
}
func (c Config) adminKubeconfig() string { return c.kubeconfig("admin") }
func (c Config) cdiDir() string          { return filepath.Join(c.Root, "cdi") }
func (c Config) kubeletDir() string      { return filepath.Join(c.Root, "kubelet") }
func (c Config) containerdSocket() string {
	return filepath.Join(c.Run, "containerd.sock")
}
func (c Config) statePath() string { return filepath.Join(c.StateDir, "state.json") }
