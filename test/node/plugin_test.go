//go:build node

package node

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drasched/drasched/pkg/driver/gpu/checkpoint"
)

// prepareLock is the plugin's node-wide lock (pkg/driver/gpu/flock), held
// by the test so that the plugin's Prepare and Unprepare wait.
type prepareLock struct {
	file     *os.File
	released bool
}

// holdPrepareLock takes the lock that serialises the plugin's Prepare and
// Unprepare calls; the plugin waits for it in every such call, and at
// start. It is released when the test ends if the test did not.
func (c *cluster) holdPrepareLock(t *testing.T) *prepareLock {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(c.stateDir, "prepare.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	l := &prepareLock{file: f}
	t.Cleanup(l.release)
	return l
}

func (l *prepareLock) release() {
	if !l.released {
		l.released = true
		_ = l.file.Close()
	}
}

// pluginPIDs returns the PIDs of gpu-kubelet-plugin processes (in their
// containers) on this host.
func pluginPIDs(t *testing.T) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 1 && args[0] == "/usr/local/bin/gpu-kubelet-plugin" && args[1] == "run" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitingForLock reports whether the process has the prepare lock file
// open: while the test holds the lock, that is a plugin inside Prepare or
// Unprepare (or starting), waiting.
func waitingForLock(pid int) bool {
	fds, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	if err != nil {
		return false
	}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "fd", fd.Name()))
		if err == nil && strings.HasSuffix(target, "/prepare.lock") {
			return true
		}
	}
	return false
}

// preparedClaims returns the UIDs of the claims in the plugin's checkpoint
// that are completely prepared, failing on any other state: nothing may be
// left half done.
func (c *cluster) preparedClaims(t *testing.T) map[string]bool {
	t.Helper()
	cp, err := checkpoint.File{Path: filepath.Join(c.stateDir, "checkpoint.json")}.Load()
	if err != nil {
		t.Fatalf("plugin checkpoint: %v", err)
	}
	out := map[string]bool{}
	for uid, cl := range cp.Claims {
		if cl.State != checkpoint.PrepareCompleted {
			t.Errorf("claim %s/%s (%s) is %s in the checkpoint", cl.Namespace, cl.Name, uid, cl.State)
		}
		out[uid] = true
	}
	return out
}

// cdiSpecs returns the claim UIDs of the CDI specs in the node's CDI
// directory, with the time each was written.
func (c *cluster) cdiSpecs(t *testing.T) map[string]bool {
	t.Helper()
	entries, err := os.ReadDir(c.cdiDir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range entries {
		// gpu.drasched.dev-gpu_<claim UID>.json (pkg/driver/gpu/cdi).
		uid, ok := strings.CutPrefix(strings.TrimSuffix(e.Name(), ".json"), driverName+"-gpu_")
		if !ok {
			t.Errorf("unexpected file %s in the CDI directory", e.Name())
			continue
		}
		out[uid] = true
	}
	return out
}

// specModTimes returns when each CDI spec was written.
func (c *cluster) specModTimes(t *testing.T) map[string]time.Time {
	t.Helper()
	out := map[string]time.Time{}
	for uid := range c.cdiSpecs(t) {
		fi, err := os.Stat(filepath.Join(c.cdiDir, driverName+"-gpu_"+uid+".json"))
		if err != nil {
			t.Fatal(err)
		}
		out[uid] = fi.ModTime()
	}
	return out
}

// claimUID returns a claim's UID.
func (c *cluster) claimUID(t *testing.T, ns, name string) string {
	t.Helper()
	cl, err := c.client.ResourceV1().ResourceClaims(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(cl.UID)
}

// expectUnchanged checks that a pod still runs the same containers, never
// restarted.
func (c *cluster) expectUnchanged(t *testing.T, before *corev1.Pod) {
	t.Helper()
	now, err := c.client.CoreV1().Pods(before.Namespace).Get(t.Context(), before.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if now.Status.Phase != corev1.PodRunning {
		t.Errorf("pod %s/%s is %s, want Running", now.Namespace, now.Name, now.Status.Phase)
	}
	for i, s := range now.Status.ContainerStatuses {
		old := before.Status.ContainerStatuses[i]
		if s.ContainerID != old.ContainerID || s.RestartCount != old.RestartCount || s.State.Running == nil {
			t.Errorf("pod %s/%s container %s: %s (restarts %d, running %v), was %s (restarts %d)",
				now.Namespace, now.Name, s.Name, s.ContainerID, s.RestartCount, s.State.Running != nil, old.ContainerID, old.RestartCount)
		}
	}
}

// pluginPod returns the gpu-kubelet-plugin pod of the node.
func (c *cluster) pluginPod(t *testing.T) *corev1.Pod {
	t.Helper()
	pods, err := c.client.CoreV1().Pods(releaseNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=gpu-kubelet-plugin"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Fatalf("%d plugin pods, want one", len(pods.Items))
	}
	return &pods.Items[0]
}

// pluginLogs returns the plugin container's output, of the running
// container and (previous) of the one before it.
func (c *cluster) pluginLogs(t *testing.T, previous bool) string {
	t.Helper()
	pod := c.pluginPod(t)
	logs, err := c.client.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "plugin", Previous: previous}).DoRaw(t.Context())
	if err != nil {
		t.Fatalf("plugin logs (previous %v): %v", previous, err)
	}
	return string(logs)
}

// expectNoLeaks checks the plugin's node state against the API: the
// prepared claims in its checkpoint, its CDI specs and the claims of the
// pods that run on the node are the same set.
func (c *cluster) expectNoLeaks(t *testing.T) {
	t.Helper()
	pods, err := c.client.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + c.nodeName})
	if err != nil {
		t.Fatal(err)
	}
	inUse := map[string]bool{}
	for _, p := range pods.Items {
		for _, name := range podClaims(&p) {
			inUse[c.claimUID(t, p.Namespace, name)] = true
		}
	}
	prepared, specs := c.preparedClaims(t), c.cdiSpecs(t)
	for uid := range inUse {
		if !prepared[uid] || !specs[uid] {
			t.Errorf("claim %s of a running pod: prepared %v, CDI spec %v", uid, prepared[uid], specs[uid])
		}
	}
	for uid := range prepared {
		if !inUse[uid] {
			t.Errorf("claim %s is prepared but no pod on the node uses it", uid)
		}
	}
	for uid := range specs {
		if !prepared[uid] {
			t.Errorf("CDI spec of claim %s, which is not prepared", uid)
		}
	}
}
