//go:build node

package node

import (
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drasched/drasched/pkg/driver/gpu"
)

// TestLifecycle follows claims through the node's life: pods going away,
// the plugin crashing in the middle of a Prepare, the kubelet restarting,
// a GPU falling sick and recovering.
func TestLifecycle(t *testing.T) {
	c := setup(t)

	t.Run("pod deleted: unprepared, deallocated, device reused", func(t *testing.T) {
		ns := c.namespace(t, "reuse")
		uuid := c.devices["gpu-2"].GPU.UUID
		c.createClaim(t, claim(ns, "first").Request("gpu", gpuClass, 1, pinned(uuid)).Obj())
		c.createPod(t, gpuPod(ns, "first").Claim("gpu", "first").Obj())
		c.expectSees(t, c.waitRunning(t, ns, "first"))
		uid := c.claimUID(t, ns, "first")
		if !c.preparedClaims(t)[uid] || !c.cdiSpecs(t)[uid] {
			t.Fatalf("claim of the running pod: prepared %v, CDI spec %v", c.preparedClaims(t)[uid], c.cdiSpecs(t)[uid])
		}

		if err := c.client.CoreV1().Pods(ns).Delete(t.Context(), "first", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// The kubelet unprepares (the plugin drops the claim and its CDI
		// spec) before the pod object goes; the claim controller then
		// deallocates the claim.
		err := poll(t.Context(), 2*time.Minute, func() (bool, error) {
			cl, err := c.client.ResourceV1().ResourceClaims(ns).Get(t.Context(), "first", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			_, podErr := c.client.CoreV1().Pods(ns).Get(t.Context(), "first", metav1.GetOptions{})
			return apierrors.IsNotFound(podErr) && cl.Status.Allocation == nil && len(cl.Status.ReservedFor) == 0, nil
		})
		if err != nil {
			t.Fatalf("pod gone and claim deallocated: %v", err)
		}
		if c.preparedClaims(t)[uid] || c.cdiSpecs(t)[uid] {
			t.Errorf("deleted pod's claim: prepared %v, CDI spec %v; want neither", c.preparedClaims(t)[uid], c.cdiSpecs(t)[uid])
		}

		// The next pod gets the same GPU.
		c.createClaim(t, claim(ns, "next").Request("gpu", gpuClass, 1, pinned(uuid)).Obj())
		c.createPod(t, gpuPod(ns, "next").Claim("gpu", "next").Obj())
		if got := c.expectSees(t, c.waitRunning(t, ns, "next")); !slices.Equal(got, []string{"gpu-2"}) {
			t.Errorf("next pod's devices %v, want gpu-2", got)
		}
		c.expectNoLeaks(t)
	})

	t.Run("plugin killed during NodePrepareResources", func(t *testing.T) {
		ns := c.namespace(t, "plugin-crash")
		before := c.pluginPod(t)
		pids := pluginPIDs(t)
		if len(pids) != 1 {
			t.Fatalf("gpu-kubelet-plugin processes %v, want one", pids)
		}
		lock := c.holdPrepareLock(t)
		c.createTemplate(t, template(ns, "gpu", claim(ns, "gpu").Request("gpu", gpuClass, 1)))
		c.createPod(t, gpuPod(ns, "crash").ClaimFromTemplate("gpu", "gpu").Obj())
		// The kubelet has called NodePrepareResources, which waits for the
		// lock.
		if err := poll(t.Context(), time.Minute, func() (bool, error) { return waitingForLock(pids[0]), nil }); err != nil {
			t.Fatalf("the plugin never waited in Prepare: %v", err)
		}
		if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// The container restarts; its recovery waits for the lock too.
		err := poll(t.Context(), 2*time.Minute, func() (bool, error) {
			now := pluginPIDs(t)
			return len(now) == 1 && now[0] != pids[0] && waitingForLock(now[0]), nil
		})
		if err != nil {
			t.Fatalf("the plugin did not restart: %v", err)
		}
		lock.release()

		pod := c.waitRunning(t, ns, "crash")
		c.expectSees(t, pod)
		// The same pod's container restarted once.
		var after *corev1.Pod
		err = poll(t.Context(), time.Minute, func() (bool, error) {
			after = c.pluginPod(t)
			s := after.Status.ContainerStatuses
			return len(s) == 1 && s[0].RestartCount == before.Status.ContainerStatuses[0].RestartCount+1 && s[0].Ready, nil
		})
		if err != nil || after.UID != before.UID {
			t.Errorf("plugin pod %s (was %s): %+v, want its container restarted once and ready: %v", after.UID, before.UID, after.Status.ContainerStatuses, err)
		}
		// Prepared once, by the restarted plugin; nothing left over.
		claimName := podClaims(pod)[0]
		prepared := 0
		for _, line := range strings.Split(c.pluginLogs(t, true)+c.pluginLogs(t, false), "\n") {
			if strings.Contains(line, `"Prepared claim"`) && strings.Contains(line, ` claim="`+ns+"/"+claimName+`"`) {
				prepared++
			}
		}
		if prepared != 1 {
			t.Errorf("claim %s/%s prepared %d times, want once", ns, claimName, prepared)
		}
		c.expectNoLeaks(t)
	})

	t.Run("kubelet restarted with pods running", func(t *testing.T) {
		ns := c.namespace(t, "kubelet-restart")
		c.createTemplate(t, template(ns, "gpu", claim(ns, "gpu").Request("gpu", gpuClass, 1)))
		c.createPod(t, gpuPod(ns, "running").ClaimFromTemplate("gpu", "gpu").Obj())
		running := c.waitRunning(t, ns, "running")
		plugin := c.pluginPod(t)
		specs := c.specModTimes(t)
		prepared := c.preparedClaims(t)
		heartbeat := c.nodeHeartbeat(t)

		restart := exec.CommandContext(t.Context(), filepath.Join(c.repo, "hack", "node.sh"), "restart-kubelet")
		if out, err := restart.CombinedOutput(); err != nil {
			t.Fatalf("restart the kubelet: %v\n%s", err, out)
		}
		// The restarted kubelet has synced its pods: it reports them
		// again (a new Ready transition is not needed, the status update
		// is). Wait for its heartbeat, then look.
		c.waitNodeHeartbeat(t, heartbeat)
		c.expectUnchanged(t, running)
		c.expectUnchanged(t, plugin)
		if diff := c.specModTimes(t); !maps.Equal(diff, specs) {
			t.Errorf("CDI specs changed over the kubelet restart: %v, were %v", diff, specs)
		}
		if now := c.preparedClaims(t); !maps.Equal(now, prepared) {
			t.Errorf("prepared claims changed over the kubelet restart: %v, were %v", now, prepared)
		}
		// The plugin registered again: a new pod's claim is prepared.
		c.createPod(t, gpuPod(ns, "after").ClaimFromTemplate("gpu", "gpu").Obj())
		c.expectSees(t, c.waitRunning(t, ns, "after"))
		c.report(t, ns, "running") // its logs are still served
		c.expectNoLeaks(t)
	})

	t.Run("unhealthy GPU tainted, avoided, untainted", func(t *testing.T) {
		ns := c.namespace(t, "health")
		uuid := c.devices["gpu-3"].GPU.UUID
		taintKey := driverName + gpu.UnhealthyTaintSuffix
		c.editInventory(t, unhealthy(uuid, "UncorrectableECC"))
		t.Cleanup(func() { c.restoreInventory(t) })
		err := poll(t.Context(), time.Minute, func() (bool, error) {
			devices, err := c.publishedDevices(t.Context())
			return slices.ContainsFunc(devices["gpu-3"], func(taint resourceapi.DeviceTaint) bool { return taint.Key == taintKey }), err
		})
		if err != nil {
			t.Fatalf("gpu-3 not tainted %s: %v", taintKey, err)
		}

		// A pod that can only use gpu-3 waits; drasched says why.
		c.createClaim(t, claim(ns, "sick").Request("gpu", gpuClass, 1, pinned(uuid)).Obj())
		c.createPod(t, gpuPod(ns, "sick").Claim("gpu", "sick").Obj())
		msg := c.waitEvent(t, ns, "Pod", "sick", "FailedScheduling")
		t.Logf("pod on the tainted GPU: %s", msg)
		// Pods that take every other GPU do not get it either.
		c.createTemplate(t, template(ns, "gpus", claim(ns, "gpus").Request("gpus", gpuClass, 3)))
		c.createPod(t, gpuPod(ns, "others").ClaimFromTemplate("gpus", "gpus").Obj())
		if got := c.expectSees(t, c.waitRunning(t, ns, "others")); slices.Contains(got, "gpu-3") {
			t.Errorf("a new pod got the tainted gpu-3: %v", got)
		}

		// Recovery: the taint goes, the waiting pod runs on gpu-3.
		c.restoreInventory(t)
		err = poll(t.Context(), time.Minute, func() (bool, error) {
			devices, err := c.publishedDevices(t.Context())
			taints, ok := devices["gpu-3"]
			return ok && len(taints) == 0, err
		})
		if err != nil {
			t.Fatalf("gpu-3 still tainted after recovery: %v", err)
		}
		if got := c.expectSees(t, c.waitRunning(t, ns, "sick")); !slices.Equal(got, []string{"gpu-3"}) {
			t.Errorf("devices %v, want gpu-3", got)
		}
	})
}

// nodeHeartbeat is the last heartbeat of the node's kubelet: the time of
// its Ready condition's last status report.
func (c *cluster) nodeHeartbeat(t *testing.T) time.Time {
	t.Helper()
	node, err := c.client.CoreV1().Nodes().Get(t.Context(), c.nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node: %v", err)
	}
	ready := readyCondition(node)
	if ready == nil {
		t.Fatalf("node %s has no Ready condition", c.nodeName)
	}
	return ready.LastHeartbeatTime.Time
}

// readyCondition is the node's Ready condition, or nil.
func readyCondition(node *corev1.Node) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

// waitNodeHeartbeat waits for a Ready heartbeat of the node's kubelet
// later than before, a heartbeat that nodeHeartbeat took.
//
// It compares with the kubelet's own earlier report, not with the clock:
// a restarted kubelet reports its status once soon after it starts, which
// may be before hack/node.sh restart-kubelet returns, and after that only
// on a change or every nodeStatusReportFrequency (test/node/harness); and
// the API keeps the time in whole seconds.
func (c *cluster) waitNodeHeartbeat(t *testing.T, before time.Time) {
	t.Helper()
	err := poll(t.Context(), 2*time.Minute, func() (bool, error) {
		node, err := c.client.CoreV1().Nodes().Get(t.Context(), c.nodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ready := readyCondition(node)
		return ready != nil && ready.Status == corev1.ConditionTrue && ready.LastHeartbeatTime.After(before), nil
	})
	if err != nil {
		t.Fatalf("no heartbeat of the restarted kubelet after %s: %v", before.Format(time.RFC3339), err)
	}
}
