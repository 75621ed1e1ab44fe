package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Node is the real node on this host: Up starts it, Down stops it and puts
// the host back, CheckClean compares the host with how Up found it. Its
// methods are for one goroutine.
type Node struct {
	cfg   Config
	out   io.Writer
	host  Host
	state *State

	// watched are the daemons this process started: a wait for something
	// notices that one ended instead of running into its timeout.
	mu      sync.Mutex
	watched map[string]*watched
}

type watched struct {
	done chan struct{}
	err  error // Wait's, once done is closed
}

// New returns the node of cfg with the state of cfg.StateDir; out gets
// what it does, a line per step.
func New(cfg Config, out io.Writer) (*Node, error) {
	state, err := loadState(cfg.statePath())
	if err != nil {
		return nil, err
	}
	return &Node{cfg: cfg, out: out, host: LocalHost(), state: state, watched: map[string]*watched{}}, nil
}

func (n *Node) say(format string, args ...any) {
	_, _ = fmt.Fprintf(n.out, "    "+format+"\n", args...)
}

func (n *Node) save() error { return n.state.save(n.cfg.statePath()) }

// Running are the daemons of the node that run.
func (n *Node) Running() []string { return n.state.running() }

// Up starts the control plane and the node, imports images (tarballs of
// `make images`) into containerd, and waits until the node is Ready and,
// with kube-proxy, the kubernetes Service answers through it. A failed Up
// leaves things running: Down stops them.
func (n *Node) Up(ctx context.Context, images []string) error {
	ip, err := n.prepare(ctx)
	if err != nil {
		return err
	}
	server := "https://" + net.JoinHostPort(ip.String(), strconv.Itoa(n.cfg.Ports.APIServer))
	if err := writePKI(n.cfg.pkiDir(), n.cfg.Root, server, n.cfg.Hostname, ip); err != nil {
		return fmt.Errorf("PKI: %w", err)
	}
	if err := n.controlPlaneUp(ctx, ip); err != nil {
		return err
	}
	if err := n.nodeUp(ctx, ip, images); err != nil {
		return err
	}
	n.say("Ready: export KUBECONFIG=%s", n.cfg.adminKubeconfig())
	return nil
}

// Join starts the node against another cluster's control plane (the
// demo's kwok cluster): the kubelet trusts ca, the CA of that API server
// and of its clients, and it and the harness use kubeconfig, which must
// be allowed to do what a node does.
func (n *Node) Join(ctx context.Context, kubeconfig, ca string, images []string) error {
	ip, err := n.prepare(ctx)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(n.cfg.pkiDir(), 0o700); err != nil {
		return err
	}
	for _, f := range []struct{ from, to string }{
		{ca, n.cfg.pki("ca.crt")},
		{kubeconfig, n.cfg.adminKubeconfig()},
		{kubeconfig, n.cfg.kubeconfig("kubelet")},
	} {
		b, err := os.ReadFile(f.from)
		if err != nil {
			return err
		}
		if err := os.WriteFile(f.to, b, 0o600); err != nil {
			return err
		}
	}
	return n.nodeUp(ctx, ip, images)
}

// prepare checks that the node can start, removes what an earlier one
// left, records the host and makes the node's directories. It returns the
// node's address.
func (n *Node) prepare(ctx context.Context) (net.IP, error) {
	if running := n.Running(); len(running) > 0 {
		return nil, fmt.Errorf("a node runs already (%s, %s): hack/node.sh down", strings.Join(running, ", "), n.cfg.statePath())
	}
	if err := n.require(); err != nil {
		return nil, err
	}
	if exists(n.cfg.Root) || exists(n.cfg.Run) {
		n.say("removing what an earlier run left")
		if err := n.Down(ctx); err != nil {
			return nil, err
		}
		if err := n.CheckClean(ctx); err != nil {
			return nil, err
		}
	}
	if err := n.checkPorts(); err != nil {
		return nil, err
	}
	ip, err := nodeIP()
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(n.cfg.LogDir); err != nil {
		return nil, err
	}
	if err := n.snapshot(ctx); err != nil {
		return nil, err
	}
	for _, d := range []string{n.cfg.Root, n.cfg.Run, n.cfg.LogDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	return ip, nil
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// require: root, no other kubelet, the binaries.
func (n *Node) require() error {
	if os.Geteuid() != 0 {
		return errors.New("a real node needs root (mounts, cgroups, device nodes, netfilter)")
	}
	// The kubelet's device plugin socket is /var/lib/kubelet/device-plugins
	// whatever its root directory: two kubelets would take it from each
	// other.
	procs, err := listProcs(n.host.FS)
	if err != nil {
		return err
	}
	var kubelets []string
	for _, p := range procs {
		if p.Name == kubelet {
			kubelets = append(kubelets, strconv.Itoa(p.PID))
		}
	}
	if len(kubelets) > 0 {
		return fmt.Errorf("a kubelet runs on this host already (pid %s)", strings.Join(kubelets, " "))
	}
	var bins []string
	for _, b := range []string{kubelet, kubeProxy, containerd, "ctr", "containerd-shim-runc-v2", "pause.tar", "gpu-check.tar"} {
		bins = append(bins, filepath.Join(n.cfg.BinDir, b))
	}
	for _, b := range []string{etcd, kubeAPIServer, controllerManager, kubeScheduler} {
		bins = append(bins, filepath.Join(n.cfg.ClusterBinDir, b))
	}
	for _, b := range bins {
		if !exists(b) {
			return fmt.Errorf("%s is missing: run hack/build-node.sh and hack/build-control-plane.sh (make test-node does)", b)
		}
	}
	return nil
}

func (n *Node) checkPorts() error {
	open, err := listening(n.host.FS)
	if err != nil {
		return err
	}
	for _, p := range n.cfg.listenPorts() {
		if open[p] {
			return fmt.Errorf("port %d is in use; set the NODE_*_PORT variables (hack/node.sh)", p)
		}
	}
	return nil
}

// nodeIP is the address of the interface of the default route. Connecting
// a UDP socket sends nothing; it picks the route.
func nodeIP() (net.IP, error) {
	conn, err := net.Dial("udp4", "1.1.1.1:53")
	if err != nil {
		return nil, fmt.Errorf("the node's address (the default route's): %w", err)
	}
	defer func() { _ = conn.Close() }()
	return conn.LocalAddr().(*net.UDPAddr).IP, nil
}

// snapshot records the host before the node starts. What an earlier node
// left where every node writes is not the host's own: it goes first, or
// Down, which removes it, would leave the host different.
func (n *Node) snapshot(ctx context.Context) error {
	if err := n.removeLeftovers(ctx); err != nil {
		return err
	}
	before, err := Take(ctx, n.host, nil, []string{n.cfg.Root, n.cfg.Run})
	if err != nil {
		return fmt.Errorf("host snapshot: %w", err)
	}
	n.state = &State{Before: before}
	if err := n.save(); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(n.cfg.StateDir, "host-before.txt"), []byte(before.Text()), 0o644)
}

// CheckClean compares the host with how the node found it and fails,
// listing the differences, when the node left something behind. Without
// a record (no Up since the state was removed) there is nothing to
// compare.
func (n *Node) CheckClean(ctx context.Context) error {
	if n.state.Before == nil {
		return nil
	}
	after, err := Take(ctx, n.host, n.state.Sessions, []string{n.cfg.Root, n.cfg.Run})
	if err != nil {
		return fmt.Errorf("host snapshot: %w", err)
	}
	afterPath := filepath.Join(n.cfg.StateDir, "host-after.txt")
	diffPath := filepath.Join(n.cfg.StateDir, "host.diff")
	if err := os.WriteFile(afterPath, []byte(after.Text()), 0o644); err != nil {
		return err
	}
	if changes := n.state.Before.Diff(after); len(changes) > 0 {
		var b strings.Builder
		for _, c := range changes {
			b.WriteString(c.String() + "\n")
		}
		if err := os.WriteFile(diffPath, []byte(b.String()), 0o644); err != nil {
			return err
		}
		return fmt.Errorf("the host is not as it was before the node started (%s vs %s):\n%s",
			filepath.Join(n.cfg.StateDir, "host-before.txt"), afterPath, strings.TrimSuffix(b.String(), "\n"))
	}
	if err := os.Remove(diffPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	n.say("host as before: %d facts compared (%s)", len(after.Facts()), afterPath)
	return nil
}

// start runs a daemon and records it and its session.
func (n *Node) start(name string, args []string, env ...string) error {
	d := &Daemon{Name: name, Args: args, Env: env, Log: filepath.Join(n.cfg.LogDir, name+".log")}
	cmd, err := startDaemon(d)
	if err != nil {
		return err
	}
	n.state.started(d)
	w := &watched{done: make(chan struct{})}
	n.mu.Lock()
	n.watched[name] = w
	n.mu.Unlock()
	go func() {
		err := cmd.Wait()
		n.mu.Lock()
		w.err = err
		n.mu.Unlock()
		close(w.done)
	}()
	return n.save()
}

// stop stops a daemon and forgets it; it reports whether it ran.
func (n *Node) stop(name string) (bool, error) {
	n.mu.Lock()
	delete(n.watched, name)
	n.mu.Unlock()
	d := n.state.Daemons[name]
	ran := d.running()
	if d != nil {
		if err := d.stop(); err != nil {
			return ran, err
		}
	}
	delete(n.state.Daemons, name)
	return ran, n.save()
}

// ended is an error when a daemon this process started has ended.
func (n *Node) ended() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for name, w := range n.watched {
		select {
		case <-w.done:
			d := n.state.Daemons[name]
			status := "exit status 0"
			if w.err != nil {
				status = w.err.Error()
			}
			return fmt.Errorf("%s ended (%s); the end of %s:\n%s", name, status, d.Log, tail(d.Log, 20))
		default:
		}
	}
	return nil
}

// tail is the last lines of a file.
func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	l := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

// waitFor polls cond every half second until it holds, for at most
// timeout; a daemon that ends meanwhile ends the wait.
func (n *Node) waitFor(ctx context.Context, what string, timeout time.Duration, cond func(context.Context) bool) error {
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := n.ended(); err != nil {
			return false, err
		}
		return cond(ctx), nil
	})
	if err != nil && wait.Interrupted(err) && ctx.Err() == nil {
		return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
	}
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}

// client is a clientset of the admin kubeconfig. Each request has a
// timeout: teardown must not hang on an API server that does not answer.
func (n *Node) client() (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", n.cfg.adminKubeconfig())
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 10 * time.Second
	cfg.QPS, cfg.Burst = 50, 100
	return kubernetes.NewForConfig(cfg)
}

func readyz(ctx context.Context, client kubernetes.Interface) bool {
	_, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	return err == nil
}
