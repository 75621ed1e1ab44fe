//go:build faults

package faults

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/test/integration/controlplane"
	"github.com/drasched/drasched/test/integration/framework"
)

// The load of both restart scenarios: 150 pods, each with a claim from a
// template, compete for 100 devices on 10 nodes.
const (
	loadNodes          = 10
	loadDevicesPerNode = 10
	loadPods           = 150
	// restartAfter is how many pods are bound when the restart comes.
	restartAfter = 20
)

// loadSetup creates the nodes, slices and template of the load scenarios
// and returns the pods, not yet created.
func loadSetup(env *framework.Env) []*builder.PodWrapper {
	for _, node := range env.CreateNodes(loadNodes) {
		env.PublishSlices(env.NodeSlice(node, builder.Devices("gpu", loadDevicesPerNode, nil)...).Obj())
	}
	class := env.CreateClass("gpu")
	env.CreateTemplate(builder.MakeTemplate("gpu", builder.MakeClaim("").Request("gpu", class, 1)))
	pods := make([]*builder.PodWrapper, loadPods)
	for i := range pods {
		pods[i] = env.MakePod(fmt.Sprintf("pod-%03d", i)).ClaimFromTemplate("gpu", "gpu")
	}
	return pods
}

// kube-apiserver stops in the middle of a load and starts again on the
// same etcd two seconds later. Requests under way fail without an answer,
// watches break, and the scheduler's informers start again from a fresh
// watch cache, which for most of them means listing everything again.
// Exactly as many pods as there are devices end up bound, each device in
// one claim, and the scheduler's tracker agrees with the API.
func TestAPIServerRestart(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	cp, err := controlplane.StartRestartable(ctx)
	if err != nil {
		t.Fatalf("start control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
	})
	env := framework.SetupWith(t, framework.SetupOptions{ControlPlane: cp.ControlPlane})
	pods := loadSetup(env)
	// No faults, only counting what the scheduler asks for.
	requests := newFaults(0, 0, 0)
	sched := env.StartScheduler(framework.SchedulerOptions{WrapConfig: requests.wrap})

	someBound := env.BoundPods(restartAfter)
	env.CreatePods(pods)
	waitClosed(t, someBound, fmt.Sprintf("%d pods bound", restartAfter))
	bound, _, _, err := env.Pods(env.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	listsBefore := requests.counts.get("list", "resourceclaims") + requests.counts.get("list", "pods")
	stoppedAt := time.Now()
	cp.StopAPIServer()
	t.Logf("kube-apiserver stopped with %d pods bound", len(bound))
	time.Sleep(2 * time.Second)
	if err := cp.StartAPIServer(); err != nil {
		t.Fatalf("start kube-apiserver again: %v", err)
	}
	t.Logf("kube-apiserver up again %s after it was stopped", time.Since(stoppedAt).Round(time.Millisecond))

	settle(t, env, sched, loadNodes*loadDevicesPerNode, 5*time.Second, settleTimeout)
	t.Logf("the scheduler listed claims and pods %d times after the restart",
		requests.counts.get("list", "resourceclaims")+requests.counts.get("list", "pods")-listsBefore)
}

// The drasched binary, leader of two, is killed (SIGKILL) in the middle of
// a load, whatever it had in flight; a new replica takes over once the
// lease has expired. Exactly as many pods as there are devices end up
// bound and each device is in one claim. The tracker of a child process
// cannot be inspected: only the API invariants are checked.
func TestSchedulerKilled(t *testing.T) {
	env := framework.Setup(t)
	pods := loadSetup(env)
	lease := testLeaderElection(t, env)
	first := startScheduler(t, env, "first", processOptions{leader: lease})
	firstIdentity := lease.waitForHolder(env, "")

	someBound := env.BoundPods(restartAfter)
	env.CreatePods(pods)
	waitClosed(t, someBound, fmt.Sprintf("%d pods bound", restartAfter))
	killedAt := first.signal(t, syscall.SIGKILL)
	if !first.waitExit(time.Minute) {
		t.Fatalf("first still runs a minute after SIGKILL")
	}
	bound, _, _, err := env.Pods(env.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	recent := first.proxy.requests(killedAt.Add(-time.Second), claimWrites)
	t.Logf("killed first with %d pods bound; it had sent %d claim writes in its last second", len(bound), len(recent))
	if len(bound) >= loadNodes*loadDevicesPerNode {
		t.Fatalf("first had finished (%d pods bound) before it was killed; the test needs more pods", len(bound))
	}

	startScheduler(t, env, "second", processOptions{leader: lease})
	lease.waitForHolder(env, firstIdentity)
	settle(t, env, nil, loadNodes*loadDevicesPerNode, 5*time.Second, settleTimeout)
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(framework.Timeout):
		t.Fatalf("no %s within %s", what, framework.Timeout)
	}
}
