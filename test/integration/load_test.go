package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/test/integration/framework"
)

// loadSetup creates nodes with devicesPerNode devices each, a template for
// one device, and numPods pods using it, not yet created.
func loadSetup(env *framework.Env, nodes, devicesPerNode, numPods int) (pods []*builder.PodWrapper, devices sets.Set[string]) {
	devices = sets.New[string]()
	for _, node := range env.CreateNodes(nodes) {
		env.PublishSlices(env.NodeSlice(node, builder.Devices("gpu", devicesPerNode, nil)...).Obj())
		for i := range devicesPerNode {
			devices.Insert(fmt.Sprintf("%s/%s/gpu-%d", env.Driver, node.Name, i))
		}
	}
	class := env.CreateClass("gpu")
	env.CreateTemplate(builder.MakeTemplate("gpu", builder.MakeClaim("").Request("gpu", class, 1)))
	for i := range numPods {
		pods = append(pods, env.MakePod(fmt.Sprintf("pod-%03d", i)).ClaimFromTemplate("gpu", "gpu"))
	}
	return pods, devices
}

// waitForBound waits until want pods are bound and all others are
// unschedulable.
func waitForBound(env *framework.Env, want int) {
	env.WaitFor(framework.Timeout, fmt.Sprintf("%d pods bound, the rest unschedulable", want), func(ctx context.Context) (bool, string, error) {
		bound, unschedulable, pending, err := env.Pods(ctx)
		return err == nil && len(bound) == want && len(pending) == 0,
			fmt.Sprintf("%d bound, %d unschedulable, %d pending", len(bound), len(unschedulable), len(pending)), err
	})
}

// verifyDevicesUsedOnce checks the invariants of VerifyAllocations (no
// device in two claims among them), that the test's claims hold every
// device, and that exactly as many pods as devices are bound.
func verifyDevicesUsedOnce(t *testing.T, env *framework.Env, devices sets.Set[string]) {
	t.Helper()
	env.VerifyAllocations()
	claims, err := env.Client.ResourceV1().ResourceClaims(env.Namespace).List(env.Ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list claims: %v", err)
	}
	used := sets.New[string]()
	for _, claim := range claims.Items {
		if claim.Status.Allocation == nil {
			continue
		}
		for _, result := range claim.Status.Allocation.Devices.Results {
			used.Insert(result.Driver + "/" + result.Pool + "/" + result.Device)
		}
	}
	if diff := cmp.Diff(sets.List(devices), sets.List(used)); diff != "" {
		t.Errorf("allocated devices (-all devices +allocated):\n%s", diff)
	}
	bound, _, _, err := env.Pods(env.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(bound) != devices.Len() {
		t.Errorf("%d pods bound, want %d, one per device", len(bound), devices.Len())
	}
}

// 200 pods, created at once, compete for 100 devices on 10 nodes: exactly
// 100 are bound, and no device is in two claims.
func TestRace(t *testing.T) {
	env := framework.Setup(t)
	pods, devices := loadSetup(env, 10, 10, 200)
	env.StartScheduler(framework.SchedulerOptions{})

	env.CreatePods(pods)
	waitForBound(env, devices.Len())
	verifyDevicesUsedOnce(t, env, devices)
}

// The scheduler is stopped while it binds pods and a new one takes over:
// whatever the first left half done, no device ends up allocated twice, and
// every bound pod's claims are allocated on its node and reserved for it.
// The first is stopped at a point the test chooses: its claim status
// update number stopAt reaches the apiserver with its answer held, and
// every claim write after it is held, so that it has written exactly
// stopAt allocations and has others in flight, whatever the machine's
// speed.
func TestSchedulerRestart(t *testing.T) {
	env := framework.Setup(t)
	pods, devices := loadSetup(env, 10, 10, 150)
	const stopAt = 5
	held := framework.HoldFrom(stopAt, framework.ClaimStatusUpdates, true, framework.ClaimWrites)
	first := env.StartScheduler(framework.SchedulerOptions{WrapConfig: held.Wrap})

	env.CreatePods(pods)
	select {
	case <-held.Arrived():
	case <-time.After(framework.Timeout):
		t.Fatalf("no claim status update %d within %s", stopAt, framework.Timeout)
	}
	first.Stop()
	bound, _, _, err := env.Pods(env.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := env.Client.ResourceV1().ResourceClaims(env.Namespace).List(env.Ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	allocated := 0
	for _, claim := range claims.Items {
		if claim.Status.Allocation != nil {
			allocated++
		}
	}
	t.Logf("stopped the first scheduler with %d of %d possible pods bound and %d claims allocated", len(bound), devices.Len(), allocated)
	if allocated > stopAt {
		t.Fatalf("%d claims allocated when the first scheduler was stopped: its gate let more than %d status updates through", allocated, stopAt)
	}

	env.StartScheduler(framework.SchedulerOptions{})
	waitForBound(env, devices.Len())
	verifyDevicesUsedOnce(t, env, devices)
}
