package harness

import (
	"encoding/json"
	"net"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	kubeletscheme "k8s.io/kubernetes/pkg/kubelet/apis/config/scheme"
	kubeletvalidation "k8s.io/kubernetes/pkg/kubelet/apis/config/validation"
	proxyconfig "k8s.io/kubernetes/pkg/proxy/apis/config"
	proxyscheme "k8s.io/kubernetes/pkg/proxy/apis/config/scheme"
	proxyvalidation "k8s.io/kubernetes/pkg/proxy/apis/config/validation"
)

func testConfig(t *testing.T) Config {
	t.Helper()
	c, err := ConfigFromEnv("/repo", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestKubeletConfiguration: the kubelet takes the file as it is (strict
// decoding: no field it does not know), with defaults, and it passes the
// kubelet's own validation with what the node needs.
func TestKubeletConfiguration(t *testing.T) {
	c := testConfig(t)
	data, err := marshalYAML(kubeletConfiguration(c))
	if err != nil {
		t.Fatal(err)
	}
	_, codecs, err := kubeletscheme.NewSchemeAndCodecs(serializer.EnableStrict)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := runtime.Decode(codecs.UniversalDecoder(), data)
	if err != nil {
		t.Fatalf("the kubelet does not decode its configuration: %v\n%s", err, data)
	}
	kc, ok := obj.(*kubeletconfig.KubeletConfiguration)
	if !ok {
		t.Fatalf("decoded %T", obj)
	}
	if err := kubeletvalidation.ValidateKubeletConfiguration(kc, utilfeature.DefaultFeatureGate); err != nil {
		t.Errorf("the kubelet refuses its configuration: %v\n%s", err, data)
	}
	for what, ok := range map[string]bool{
		"cgroup v1 allowed":                kc.FailCgroupV1 == false,
		"cgroupfs":                         kc.CgroupDriver == "cgroupfs",
		"pods' cgroups under the node's":   kc.CgroupRoot == "/drasched-node",
		"containerd of the node":           kc.ContainerRuntimeEndpoint == "unix:///run/drasched-node/containerd.sock",
		"no read-only port":                kc.ReadOnlyPort == 0,
		"its port":                         kc.Port == 11250 && kc.HealthzPort == 11248,
		"no anonymous requests":            !kc.Authentication.Anonymous.Enabled && kc.Authentication.Webhook.Enabled,
		"clients of the node's CA":         kc.Authentication.X509.ClientCAFile == "/var/lib/drasched-node/pki/ca.crt",
		"webhook authorization":            kc.Authorization.Mode == kubeletconfig.KubeletAuthorizationModeWebhook,
		"images never garbage-collected":   kc.ImageGCHighThresholdPercent == 100,
		"no eviction on a busy host":       kc.EvictionHard["nodefs.available"] == "1%",
		"a heartbeat every minute":         kc.NodeStatusReportFrequency.Duration.Minutes() == 1,
		"kernel defaults left as they are": !kc.ProtectKernelDefaults,
	} {
		if !ok {
			t.Errorf("%s: not so in\n%s", what, data)
		}
	}
}

// TestKubeProxyConfiguration: kube-proxy takes the file strictly and it
// passes kube-proxy's validation; the host's conntrack sysctls are left.
func TestKubeProxyConfiguration(t *testing.T) {
	c := testConfig(t)
	data, err := marshalYAML(kubeProxyConfiguration(c))
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	proxyscheme.AddToScheme(scheme)
	codecs := serializer.NewCodecFactory(scheme, serializer.EnableStrict)
	obj, err := runtime.Decode(codecs.UniversalDecoder(), data)
	if err != nil {
		t.Fatalf("kube-proxy does not decode its configuration: %v\n%s", err, data)
	}
	pc, ok := obj.(*proxyconfig.KubeProxyConfiguration)
	if !ok {
		t.Fatalf("decoded %T", obj)
	}
	if errs := proxyvalidation.Validate(pc); len(errs) > 0 {
		t.Errorf("kube-proxy refuses its configuration: %v\n%s", errs.ToAggregate(), data)
	}
	for what, ok := range map[string]bool{
		"iptables":                     pc.Mode == proxyconfig.ProxyModeIPTables,
		"its kubeconfig":               pc.ClientConnection.Kubeconfig == "/var/lib/drasched-node/kube-proxy.kubeconfig",
		"the node's name":              pc.HostnameOverride == "drasched-node",
		"conntrack table size left":    *pc.Linux.Conntrack.MaxPerCore == 0 && *pc.Linux.Conntrack.Min == 0,
		"conntrack timeouts left":      pc.Linux.Conntrack.TCPEstablishedTimeout.Duration == 0 && pc.Linux.Conntrack.TCPCloseWaitTimeout.Duration == 0,
		"route_localnet left":          !*pc.IPTables.LocalhostNodePorts,
		"metrics and healthz on local": pc.MetricsBindAddress == "127.0.0.1:11249" && pc.HealthzBindAddress == "127.0.0.1:11256",
	} {
		if !ok {
			t.Errorf("%s: not so in\n%s", what, data)
		}
	}
}

// TestContainerdTOML: every path containerd writes is the node's, the
// sandbox image is the imported one, and strings are quoted.
func TestContainerdTOML(t *testing.T) {
	c := testConfig(t)
	c.Root = `/var/lib/a "quoted" root`
	data, err := containerdTOML(c, "/usr/sbin/runc")
	if err != nil {
		t.Fatal(err)
	}
	toml := string(data)
	for _, want := range []string{
		`root = "/var/lib/a \"quoted\" root/containerd/root"`,
		`state = "/run/drasched-node/containerd"`,
		`address = "/run/drasched-node/containerd.sock"`,
		`address = "/run/drasched-node/containerd.sock.ttrpc"`,
		`socket_dir = "/run/drasched-node/s"`,
		`sandbox = "localhost/drasched-node/pause:test"`,
		`cdi_spec_dirs = ["/var/lib/a \"quoted\" root/cdi"]`,
		`BinaryName = "/usr/sbin/runc"`,
		`Root = "/run/drasched-node/runc"`,
		`conf_dir = "/var/lib/a \"quoted\" root/cni/net.d"`,
		`"io.containerd.nri.v1.nri",`,
		`restrict_oom_score_adj = true`,
	} {
		if !strings.Contains(toml, want) {
			t.Errorf("config.toml has no %s:\n%s", want, toml)
		}
	}
}

func TestCNIConfList(t *testing.T) {
	data, err := cniConfList(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Name    string
		Plugins []struct {
			Type, Bridge string
			IPMasq       bool
			IPAM         struct {
				DataDir string
				Ranges  [][]struct{ Subnet string }
			}
		}
	}
	if err := json.Unmarshal(data, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Plugins) != 1 {
		t.Fatalf("%d plugins, want the bridge:\n%s", len(list.Plugins), data)
	}
	p := list.Plugins[0]
	if p.Type != "bridge" || p.Bridge != "drasched0" || p.IPMasq || p.IPAM.DataDir != "/var/lib/drasched-node/cni/ipam" ||
		len(p.IPAM.Ranges) != 1 || p.IPAM.Ranges[0][0].Subnet != "10.244.0.0/24" {
		t.Errorf("not the node's bridge without masquerading:\n%s", data)
	}
}

func TestKubeletArgs(t *testing.T) {
	c := testConfig(t)
	ip := net.IPv4(192, 0, 2, 2)
	if args := kubeletArgs(c, ip); slices.Contains(args, "--register-with-taints") {
		t.Errorf("taints without NODE_TAINTS: %v", args)
	}
	c.Taints = "drasched.dev/real-node=true:NoSchedule"
	args := kubeletArgs(c, ip)
	i := slices.Index(args, "--register-with-taints")
	if i < 0 || args[i+1] != c.Taints {
		t.Errorf("no --register-with-taints %s: %v", c.Taints, args)
	}
	if args[0] != "/repo/_output/node/bin/kubelet" || !slices.Contains(args, "192.0.2.2") || !slices.Contains(args, "drasched-node") {
		t.Errorf("not the node's kubelet, name and address: %v", args)
	}
}
