package harness

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// controlPlaneUp starts etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler, which schedules the DaemonSet's and Deployment's pods
// (the chart's routing policy sends pods with claims to drasched).
func (n *Node) controlPlaneUp(ctx context.Context, ip net.IP) error {
	n.say("etcd, kube-apiserver, kube-controller-manager, kube-scheduler (%s)", n.cfg.ClusterBinDir)
	if err := n.start(etcd, etcdArgs(n.cfg)); err != nil {
		return err
	}
	if err := n.start(kubeAPIServer, apiserverArgs(n.cfg, ip)); err != nil {
		return err
	}
	client, err := n.client()
	if err != nil {
		return err
	}
	if err := n.waitFor(ctx, "kube-apiserver /readyz", 2*time.Minute, func(ctx context.Context) bool {
		return readyz(ctx, client)
	}); err != nil {
		return err
	}
	if err := n.start(controllerManager, controllerManagerArgs(n.cfg)); err != nil {
		return err
	}
	if err := n.start(kubeScheduler, schedulerArgs(n.cfg)); err != nil {
		return err
	}
	// Pods' volumes wait for the root CA ConfigMap and their service
	// account.
	if err := n.waitFor(ctx, "the kube-root-ca.crt ConfigMap", 2*time.Minute, func(ctx context.Context) bool {
		_, err := client.CoreV1().ConfigMaps(metav1.NamespaceDefault).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err == nil
	}); err != nil {
		return err
	}
	return n.waitFor(ctx, "the default service account", 2*time.Minute, func(ctx context.Context) bool {
		_, err := client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})
}

// ctr runs the node's ctr against its containerd, in the CRI's namespace;
// its warnings (cgroup v1 is deprecated) go to ctr.log.
func (n *Node) ctr(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(n.cfg.BinDir, "ctr"),
		append([]string{"--address", n.cfg.containerdSocket(), "--namespace", "k8s.io"}, args...)...)
	log, err := os.OpenFile(filepath.Join(n.cfg.LogDir, "ctr.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer func() { _ = log.Close() }()
	cmd.Stderr = log
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %w (%s)", strings.Join(args, " "), err, log.Name())
	}
	return out, nil
}

// version is a field of what a binary prints for --version.
func version(bin string, field int) string {
	out, err := exec.Command(bin, "--version").Output()
	if f := strings.Fields(string(out)); err == nil && len(f) > field {
		return f[field]
	}
	return "(unknown version)"
}

// containerdUp writes containerd's and the CNI's configuration, starts
// containerd and imports the node's images and images.
func (n *Node) containerdUp(ctx context.Context, images []string) error {
	for _, d := range []string{filepath.Dir(n.cfg.containerdConfigPath()), filepath.Dir(n.cfg.cniConfListPath()), n.cfg.cdiDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return fmt.Errorf("runc: %w (hack/node.sh installs it)", err)
	}
	toml, err := containerdTOML(n.cfg, runc)
	if err != nil {
		return err
	}
	if err := os.WriteFile(n.cfg.containerdConfigPath(), toml, 0o644); err != nil {
		return err
	}
	cni, err := cniConfList(n.cfg)
	if err != nil {
		return err
	}
	if err := os.WriteFile(n.cfg.cniConfListPath(), cni, 0o644); err != nil {
		return err
	}
	n.say("containerd %s (%s)", version(filepath.Join(n.cfg.BinDir, containerd), 2), n.cfg.BinDir)
	// containerd finds the shim on PATH.
	if err := n.start(containerd, containerdArgs(n.cfg), "PATH="+n.cfg.BinDir+":"+os.Getenv("PATH")); err != nil {
		return err
	}
	if err := n.waitFor(ctx, "containerd", time.Minute, func(ctx context.Context) bool {
		_, err := n.ctr(ctx, "version")
		return err == nil
	}); err != nil {
		return err
	}
	tars := append([]string{filepath.Join(n.cfg.BinDir, "pause.tar"), filepath.Join(n.cfg.BinDir, "gpu-check.tar")}, images...)
	for _, tar := range tars {
		if _, err := n.ctr(ctx, "images", "import", "--local", tar); err != nil {
			return fmt.Errorf("import %s: %w", tar, err)
		}
	}
	out, err := n.ctr(ctx, "images", "ls", "-q")
	if err != nil {
		return err
	}
	var names []string
	for _, l := range lines(out) {
		if !strings.HasPrefix(l, "sha256:") {
			names = append(names, l)
		}
	}
	n.say("images: %s", strings.Join(names, " "))
	return nil
}

// nodeUp starts containerd, the kubelet and (Config.Proxy) kube-proxy and
// waits until the node is Ready and the kubernetes Service answers
// through kube-proxy.
func (n *Node) nodeUp(ctx context.Context, ip net.IP, images []string) error {
	if err := n.containerdUp(ctx, images); err != nil {
		return err
	}
	roots, err := cgroupRoots(n.host.FS)
	if err != nil {
		return err
	}
	for _, r := range nodeCgroupParents(roots) {
		if err := os.MkdirAll(filepath.Join(r, cgroupName), 0o755); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(n.cfg.kubeletDir(), 0o755); err != nil {
		return err
	}
	if err := writeYAML(n.cfg.kubeletConfigPath(), kubeletConfiguration(n.cfg)); err != nil {
		return err
	}
	what := "kubelet"
	if n.cfg.Proxy {
		what += ", kube-proxy"
	}
	n.say("%s %s (node %s, %s)", what, version(filepath.Join(n.cfg.BinDir, kubelet), 1), n.cfg.Hostname, ip)
	if err := n.start(kubelet, kubeletArgs(n.cfg, ip)); err != nil {
		return err
	}
	if n.cfg.Proxy {
		if err := writeYAML(n.cfg.kubeProxyConfigPath(), kubeProxyConfiguration(n.cfg)); err != nil {
			return err
		}
		if err := n.start(kubeProxy, kubeProxyArgs(n.cfg)); err != nil {
			return err
		}
	}
	client, err := n.client()
	if err != nil {
		return err
	}
	if err := n.waitFor(ctx, "node "+n.cfg.Hostname+" Ready", 2*time.Minute, func(ctx context.Context) bool {
		node, err := client.CoreV1().Nodes().Get(ctx, n.cfg.Hostname, metav1.GetOptions{})
		return err == nil && nodeReady(node)
	}); err != nil {
		return err
	}
	if !n.cfg.Proxy {
		return nil
	}
	// kube-proxy has written the rules of the kubernetes Service when its
	// ClusterIP answers (with anything: the answer may be 401).
	https := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		// A connection through the Service's rules is all this asks for.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	return n.waitFor(ctx, "the kubernetes Service through kube-proxy", time.Minute, func(ctx context.Context) bool {
		return get(ctx, https, "https://"+net.JoinHostPort(serviceIP, "443")+"/readyz") == nil
	})
}

func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// get requests url and reads the answer, whatever its status.
func get(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

func writeYAML(path string, obj any) error {
	b, err := marshalYAML(obj)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// RestartKubelet stops the kubelet and starts it again with the command
// line it had; the pods keep running.
func (n *Node) RestartKubelet(ctx context.Context) error {
	d := n.state.Daemons[kubelet]
	if !d.running() {
		return fmt.Errorf("no kubelet of the node runs (%s): hack/node.sh up", n.cfg.statePath())
	}
	args, env := d.Args, d.Env
	if _, err := n.stop(kubelet); err != nil {
		return err
	}
	if err := n.start(kubelet, args, env...); err != nil {
		return err
	}
	healthz := fmt.Sprintf("http://127.0.0.1:%d/healthz", n.cfg.Ports.KubeletHealthz)
	client := &http.Client{Timeout: 2 * time.Second}
	return n.waitFor(ctx, "kubelet /healthz", time.Minute, func(ctx context.Context) bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, healthz, nil)
		if err != nil {
			return false
		}
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}
