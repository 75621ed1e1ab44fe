package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// Down stops everything and puts the host back as the snapshot found it.
// It may be called at any point, also twice.
func (n *Node) Down(ctx context.Context) error {
	n.drain(ctx)
	var stopped []string
	var errs []error
	stop := func(names ...string) {
		for _, name := range names {
			ran, err := n.stop(name)
			if ran {
				stopped = append(stopped, name)
			}
			errs = append(errs, err)
		}
	}
	stop(kubeProxy, kubelet)
	// What the kubelet did not stop: kill the containers, then the shims.
	if n.state.Daemons[containerd].running() {
		out, _ := n.ctr(ctx, "tasks", "ls", "-q")
		for _, task := range lines(out) {
			n.say("killing container %s, which the kubelet left running", task)
			_, _ = n.ctr(ctx, "tasks", "kill", "-s", "SIGKILL", task)
		}
	}
	stop(containerd)
	roots, err := cgroupRoots(n.host.FS)
	errs = append(errs, err)
	var nodeCgroups []string
	for _, r := range roots {
		nodeCgroups = append(nodeCgroups, filepath.Join(r, cgroupName))
	}
	// Everything in the node's cgroups: containers, pause processes.
	killCgroups(nodeCgroups)
	errs = append(errs, n.killLeft())
	stop(kubeScheduler, controllerManager, kubeAPIServer, etcd)
	if len(stopped) > 0 {
		n.say("stopped %s", strings.Join(stopped, " "))
	}
	errs = append(errs, n.killLeft())
	// Netfilter: kube-proxy removes its own chains; the tables that did
	// not exist before go too.
	n.proxyCleanup(ctx)
	errs = append(errs, n.restoreNetfilter(ctx))
	if exists("/sys/class/net/" + bridgeName) {
		if _, err := runOutput(ctx, "ip", "link", "delete", bridgeName); err != nil {
			errs = append(errs, err)
		} else {
			n.say("deleted link %s", bridgeName)
		}
	}
	if count, err := unmount(n.host.FS, n.cfg.Root, n.cfg.Run); err != nil {
		errs = append(errs, err)
	} else if count > 0 {
		n.say("unmounted %d mounts under %s and %s", count, n.cfg.Root, n.cfg.Run)
	}
	if count := removeCgroups(nodeCgroups); count > 0 {
		n.say("removed %d cgroups under /%s", count, cgroupName)
	}
	errs = append(errs, n.removeLeftovers(ctx))
	n.restoreSysctls()
	errs = append(errs, n.restorePaths())
	for _, d := range []string{n.cfg.Root, n.cfg.Run} {
		errs = append(errs, removeTree(n.host.FS, d))
	}
	errs = append(errs, n.save())
	return errors.Join(errs...)
}

// drain deletes every workload and pod, so that the kubelet stops their
// sandboxes the ordinary way (the CNI plugin removes their network), and
// waits until no container runs.
func (n *Node) drain(ctx context.Context) {
	if !n.state.Daemons[kubelet].running() || !n.state.Daemons[containerd].running() {
		return
	}
	client, err := n.client()
	if err != nil || !readyz(ctx, client) {
		return
	}
	namespaces, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	background := metav1.DeletePropagationBackground
	workloads := metav1.DeleteOptions{PropagationPolicy: &background}
	pods := metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(1))}
	all := metav1.ListOptions{}
	for _, ns := range namespaces.Items {
		name := ns.Name
		// Errors are no reason to stop: what is left is killed below.
		_ = client.AppsV1().DaemonSets(name).DeleteCollection(ctx, workloads, all)
		_ = client.AppsV1().Deployments(name).DeleteCollection(ctx, workloads, all)
		_ = client.AppsV1().ReplicaSets(name).DeleteCollection(ctx, workloads, all)
		_ = client.AppsV1().StatefulSets(name).DeleteCollection(ctx, workloads, all)
		_ = client.BatchV1().Jobs(name).DeleteCollection(ctx, workloads, all)
	}
	for _, ns := range namespaces.Items {
		_ = client.CoreV1().Pods(ns.Name).DeleteCollection(ctx, pods, all)
	}
	var left []string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err := n.ctr(ctx, "tasks", "ls", "-q")
		left = lines(out)
		return err == nil && len(left) == 0, nil
	})
	if err != nil {
		n.say("containers still running after 60 s: %s", strings.Join(left, " "))
	}
}

// killLeft sends SIGKILL to what is left in the sessions of the node's
// stopped daemons (containerd's shims) and to shims of the node's binary
// whose session the state does not know (a state lost with a crash), and
// waits until they are gone: a killed shim is there until its parent
// reaps it, and CheckClean counts every shim.
func (n *Node) killLeft() error {
	runningSessions := map[int]bool{}
	for _, d := range n.state.Daemons {
		if d.running() {
			runningSessions[d.PID] = true
		}
	}
	shim := filepath.Join(n.cfg.BinDir, "containerd-shim-runc-v2")
	procs, err := openMatching(func(s procStat) bool {
		if s.State == 'Z' {
			return false
		}
		if slices.Contains(n.state.Sessions, s.Session) && !runningSessions[s.Session] {
			return true
		}
		if s.Name != "containerd-shim" {
			return false
		}
		exe, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(s.PID), "exe"))
		return err == nil && strings.TrimSuffix(exe, " (deleted)") == shim
	})
	if err != nil {
		return err
	}
	defer closeAll(procs)
	for _, p := range procs {
		n.say("killing %s (pid %d), left in session %d", p.Name, p.PID, p.Session)
		if err := p.signal(unix.SIGKILL); err != nil {
			return err
		}
	}
	left, err := waitExit(procs, stopGrace)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		var pids []string
		for _, p := range left {
			pids = append(pids, strconv.Itoa(p.PID))
		}
		return fmt.Errorf("processes still there %s after SIGKILL: %s", stopGrace, strings.Join(pids, " "))
	}
	return nil
}

// proxyCleanup runs kube-proxy --cleanup, which removes kube-proxy's
// chains, when the node has a kube-proxy binary.
func (n *Node) proxyCleanup(ctx context.Context) {
	bin := filepath.Join(n.cfg.BinDir, kubeProxy)
	if fi, err := os.Stat(bin); err != nil || fi.Mode()&0o111 == 0 {
		return
	}
	if err := os.MkdirAll(n.cfg.LogDir, 0o755); err != nil {
		return
	}
	log, err := os.OpenFile(filepath.Join(n.cfg.LogDir, "kube-proxy-cleanup.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer func() { _ = log.Close() }()
	cmd := exec.CommandContext(ctx, bin, "--cleanup")
	cmd.Stdout, cmd.Stderr = log, log
	// It fails when there is nothing to clean up; the host check shows
	// what it left.
	_ = cmd.Run()
}

// removeLeftovers removes what an earlier node left where every node
// writes, whatever its configuration (a node killed before its Down, or a
// kubelet stopped before it removed its dead containers): the kubelet's
// container log links into Root, libcni's cached results for network
// namespaces under Run, and kube-proxy's chains, which route the node's
// Service range.
func (n *Node) removeLeftovers(ctx context.Context) error {
	links, err := removeLogLinks("/var/log/containers", n.cfg.Root)
	if err != nil {
		return err
	}
	if links > 0 {
		n.say("removed %d container log links into %s", links, n.cfg.Root)
	}
	results, err := removeCNIResults("/var/lib/cni/results", n.cfg.Run)
	if err != nil {
		return err
	}
	if results > 0 {
		n.say("removed %d CNI results for network namespaces under %s", results, n.cfg.Run)
	}
	if n.state.Daemons[kubeProxy].running() {
		return nil
	}
	ruleset, err := n.host.Run(ctx, "nft", "list", "ruleset")
	if err == nil && bytes.Contains(ruleset, []byte("daddr "+serviceIP+" ")) {
		n.proxyCleanup(ctx)
		n.say("removed kube-proxy's chains for %s", serviceCIDR)
	}
	return nil
}

// restoreNetfilter deletes the netfilter tables that were not there
// before the node started (iptables-nft creates ip filter, ip nat, ...
// when kube-proxy and the kubelet first write). Chains added to tables
// that were there are kube-proxy's, which its --cleanup removed;
// CheckClean shows anything else.
func (n *Node) restoreNetfilter(ctx context.Context) error {
	if n.state.Before == nil {
		return nil
	}
	out, err := n.host.Run(ctx, "nft", "list", "tables")
	if err != nil {
		return err
	}
	for _, t := range newTables(out, n.state.Before.Netfilter) {
		family, name, _ := strings.Cut(t, " ")
		if _, err := n.host.Run(ctx, "nft", "delete", "table", family, name); err != nil {
			return err
		}
		n.say("deleted netfilter table %s", t)
	}
	return nil
}

// restoreSysctls writes back the sysctls that changed.
func (n *Node) restoreSysctls() {
	if n.state.Before == nil {
		return
	}
	for _, name := range sysctlNames {
		want, ok := n.state.Before.Sysctls[name]
		if !ok {
			continue
		}
		now, _, err := readSysctl(n.host.FS, name)
		if err != nil || now == want {
			continue
		}
		if err := os.WriteFile(sysctlPath(name), []byte(want), 0o644); err != nil {
			n.say("could not restore %s = %s: %v", name, want, err)
			continue
		}
		n.say("restored %s = %s (was %s)", name, want, now)
	}
}

// restorePaths removes the well-known paths that were absent before.
func (n *Node) restorePaths() error {
	if n.state.Before == nil {
		return nil
	}
	var errs []error
	for _, p := range wellKnownPaths {
		if n.state.Before.Paths[p] >= 0 || !exists(p) {
			continue
		}
		if err := removeTree(n.host.FS, p); err != nil {
			errs = append(errs, err)
			continue
		}
		n.say("removed %s", p)
	}
	return errors.Join(errs...)
}
