//go:build faults

package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-base/metrics/testutil"
	fwk "k8s.io/kube-scheduler/framework"
	schedframework "k8s.io/kubernetes/pkg/scheduler/framework"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/test/integration/framework"
)

// handledEvents returns how often the in-process scheduler's event
// handlers have handled events of the label (kube-scheduler's
// ClusterEvent.Label, such as "ResourceClaimUpdate"): each handler
// observes scheduler_event_handling_duration_seconds once it has handed
// the event to the scheduling queue.
func handledEvents(t *testing.T, label string) uint64 {
	t.Helper()
	n, err := testutil.GetHistogramMetricCount(schedmetrics.EventHandlingLatency.WithLabelValues(label))
	if err != nil {
		t.Fatalf("read the event handling metric of %s: %v", label, err)
	}
	return n
}

// afterHandled runs step and waits until the scheduler's queue has the
// event it causes, of the label: a scenario whose events come on
// different watches gets them to the queue in its order.
func afterHandled(t *testing.T, env *framework.Env, label, what string, step func(ctx context.Context) error) {
	t.Helper()
	before := handledEvents(t, label)
	if err := step(env.Ctx); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	env.WaitFor(framework.Timeout, fmt.Sprintf("the scheduler to handle the %s event of %q", label, what), func(context.Context) (bool, string, error) {
		n := handledEvents(t, label)
		return n > before, fmt.Sprintf("%d %s events handled", n, label), nil
	})
	t.Logf("%s", what)
}

// Events that arrive while a pod is in flight are replayed through the
// queueing hints of the plugins that rejected it when the attempt ends,
// up to the first that queues the pod; the rest are never replayed. A hint
// that applies its event to the tracker can thus apply an old version
// after the tracker has seen the claim's deletion, and nothing applies the
// deletion again: devices stay taken with no claim holding them.
//
// Here pod w is rejected because claim x of pod blocker holds the only
// device, and held in PostFilter while, each once the scheduler's queue
// has the event of the one before, the blocker is deleted, claim x is
// updated (still allocated), a node label changes and claim x is deleted. The replay runs StructuredDRA's claim hint for the
// update (x is not w's claim: skip) and stops at the node event (queue);
// claim x's deletion is not replayed. Pod w must be bound when it is tried
// again, well before kube-scheduler's five-minute flush of unschedulable
// pods, and the tracker must count no device.
//
// No claim controller runs: it would deallocate claim x together with
// removing the blocker from reservedFor, and that deallocation would queue
// the pod before the node event. The test plays the part of a controller
// that leaves the allocation and deletes the claim.
func TestDeletionNotReplayed(t *testing.T) {
	env := framework.SetupWith(t, framework.SetupOptions{NoClaimController: true})
	node := env.CreateNode("node")
	env.PublishSlices(env.NodeSlice(node, builder.MakeDevice("gpu-0")).Obj())
	class := env.CreateClass("gpu")
	x := env.CreateClaim(builder.MakeClaim("x").Request("gpu", class, 1))
	env.CreateClaim(builder.MakeClaim("w").Request("gpu", class, 1))
	g := newGate()
	sched := env.StartScheduler(schedulerWithGate(g))

	env.CreatePod(env.MakePod("blocker").Claim("gpu", x.Name))
	env.WaitForPodScheduled("blocker")
	env.CreatePod(env.MakePod("w").Claim("gpu", "w").Label(holdLabel, "PostFilter"))
	g.waitEntered(t)

	claims := env.Client.ResourceV1().ResourceClaims(env.Namespace)
	steps := []struct {
		what  string
		event fwk.ClusterEvent
		do    func(ctx context.Context) error
	}{
		{"delete pod blocker", schedframework.EventAssignedPodDelete, func(ctx context.Context) error {
			env.DeletePod("blocker")
			return nil
		}},
		{"remove the blocker from claim x's reservedFor, leaving it allocated", fwk.ClusterEvent{Resource: fwk.ResourceClaim, ActionType: fwk.Update}, func(ctx context.Context) error {
			claim, err := claims.Get(ctx, x.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			claim.Status.ReservedFor = nil
			_, err = claims.UpdateStatus(ctx, claim, metav1.UpdateOptions{})
			return err
		}},
		{"label the node", fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.UpdateNodeLabel}, func(ctx context.Context) error {
			patch := fmt.Sprintf(`{"metadata":{"labels":{"faults.drasched.dev/touched":%q}}}`, time.Now().Format("150405"))
			_, err := env.Client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			return err
		}},
		{"delete claim x, still allocated", fwk.ClusterEvent{Resource: fwk.ResourceClaim, ActionType: fwk.Delete}, func(ctx context.Context) error {
			if err := claims.Delete(ctx, x.Name, metav1.DeleteOptions{}); err != nil {
				return err
			}
			claim, err := claims.Get(ctx, x.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
			// What stops the deletion is the finalizer PreBind added.
			claim.Finalizers = nil
			_, err = claims.Update(ctx, claim, metav1.UpdateOptions{})
			return err
		}},
	}
	for _, step := range steps {
		afterHandled(t, env, step.event.Label(), step.what, step.do)
	}
	if claim, err := claims.Get(env.Ctx, x.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("claim x still exists (%v): %+v", err, claim)
	}
	close(g.release)

	settle(t, env, sched, 1, 3*time.Second, 30*time.Second)
	if claim, err := claims.Get(env.Ctx, "w", metav1.GetOptions{}); err == nil && claim.Status.Allocation == nil {
		t.Errorf("claim w is not allocated; the only device is free since claim x is gone")
	}
}
