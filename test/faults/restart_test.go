//go:build faults

package faults

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
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
	// restartAfter is how many claim status updates (allocations and
	// reservations) the scheduler has sent when the fault comes.
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

// kube-apiserver stops in the middle of a load, at a point the test
// chooses: the scheduler's transport holds its claim status update number
// restartAfter+1 and every claim write after it, and the apiserver stops
// while it does. Released, the held writes fail without reaching it,
// watches break, and once the scheduler has seen its requests fail the
// apiserver starts again on the same etcd. The scheduler's informers
// start again from a fresh watch cache, which for most of them means
// listing everything again. Exactly as many pods as there are devices end
// up bound, each device in one claim, and the scheduler's tracker agrees
// with the API.
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
	// No faults but the gate, and counting what the scheduler asks for.
	requests := newFaults(0, 0, 0)
	held := framework.HoldFrom(restartAfter+1, framework.ClaimStatusUpdates, false, framework.ClaimWrites)
	sched := env.StartScheduler(framework.SchedulerOptions{WrapConfig: func(config *rest.Config) {
		requests.wrap(config)
		held.Wrap(config)
	}})

	env.CreatePods(pods)
	waitClosed(t, held.Arrived(), fmt.Sprintf("claim status update %d", restartAfter+1))
	bound, _, _, err := env.Pods(env.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	listsBefore := requests.counts.get("list", "resourceclaims") + requests.counts.get("list", "pods")
	stoppedAt := time.Now()
	cp.StopAPIServer()
	t.Logf("kube-apiserver stopped with %d pods bound", len(bound))
	held.Release()
	env.WaitFor(framework.Timeout, "a request of the scheduler to fail", func(context.Context) (bool, string, error) {
		return requests.Failures() > 0, "", nil
	})
	if err := cp.StartAPIServer(); err != nil {
		t.Fatalf("start kube-apiserver again: %v", err)
	}
	t.Logf("kube-apiserver up again %s after it was stopped; %d requests of the scheduler failed meanwhile",
		time.Since(stoppedAt).Round(time.Millisecond), requests.Failures())

	settle(t, env, sched, loadNodes*loadDevicesPerNode, 5*time.Second, settleTimeout)
	t.Logf("the scheduler listed claims and pods %d times after the restart",
		requests.counts.get("list", "resourceclaims")+requests.counts.get("list", "pods")-listsBefore)
}

// The drasched binary, leader of two, is killed (SIGKILL) in the middle of
// a load, at a point the test chooses: its proxy lets the claim status
// update number restartAfter+1 reach the apiserver and holds the answer,
// and holds every claim write after it. Killed then, the process has
// written exactly that many allocations, one of them without knowing it,
// and had others in flight; whatever it was about to write is lost. A new
// replica takes over once the lease has expired. Exactly as many pods as
// there are devices end up bound and each device is in one claim. The
// tracker of a child process cannot be inspected: only the API
// invariants are checked.
func TestSchedulerKilled(t *testing.T) {
	env := framework.Setup(t)
	pods := loadSetup(env)
	lease := testLeaderElection(t, env)
	first := startScheduler(t, env, "first", processOptions{leader: lease})
	firstIdentity := lease.waitForHolder(env, "")

	held := first.proxy.hold(framework.HoldFrom(restartAfter+1, framework.ClaimStatusUpdates, true, framework.ClaimWrites))
	env.CreatePods(pods)
	waitClosed(t, held.Arrived(), fmt.Sprintf("claim status update %d", restartAfter+1))
	first.signal(t, syscall.SIGKILL)
	if !first.waitExit(time.Minute) {
		t.Fatalf("first still runs a minute after SIGKILL")
	}
	bound, _, _, err := env.Pods(env.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	allocated, err := countAllocated(env)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed first with %d pods bound and %d claims allocated", len(bound), allocated)
	if allocated > restartAfter+1 {
		t.Fatalf("%d claims allocated when first was killed: its proxy let more than %d status updates through", allocated, restartAfter+1)
	}

	startScheduler(t, env, "second", processOptions{leader: lease})
	lease.waitForHolder(env, firstIdentity)
	settle(t, env, nil, loadNodes*loadDevicesPerNode, 5*time.Second, settleTimeout)
}

// countAllocated counts the allocated claims of the test's namespace.
func countAllocated(env *framework.Env) (int, error) {
	claims, err := env.Client.ResourceV1().ResourceClaims(env.Namespace).List(env.Ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, claim := range claims.Items {
		if claim.Status.Allocation != nil {
			n++
		}
	}
	return n, nil
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(framework.Timeout):
		t.Fatalf("no %s within %s", what, framework.Timeout)
	}
}
