//go:build faults

package faults

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/test/integration/framework"
)

// The leader is killed (SIGKILL) while it preempts for GPUs, at a point
// the test chooses: its proxy lets evictedAtKill pod deletions take
// effect, the last of them unanswered, and holds every deletion after it.
// Each high-priority pod needs two victims of one GPU, so with an odd
// number deleted at least one preemptor has one victim deleted and the
// other not, and at most one high-priority pod can be bound. Its claim
// nominations die with it; the pods' nominatedNodeName and the victims
// being deleted survive in the API. A new replica takes over, rebuilds the
// nominations, binds every high-priority pod without evicting a pod more
// than their GPUs need, and the fault suite's invariants hold: no device
// in two claims, no claim reserved for a pod that is gone, no pod left
// waiting.
func TestSchedulerKilledDuringPreemption(t *testing.T) {
	const (
		nodes   = 4
		devices = 10 // per node, each held by a one-GPU pod of low priority
		highs   = 8  // of two GPUs each
		// evictedAtKill is how many pod deletions take effect before the
		// kill, the last one unanswered.
		evictedAtKill = 3
	)
	env := framework.Setup(t)
	for _, node := range env.CreateNodes(nodes) {
		env.PublishSlices(env.NodeSlice(node, builder.Devices("gpu", devices, nil)...).Obj())
	}
	class := env.CreateClass("gpu")
	env.CreateTemplate(builder.MakeTemplate("one", builder.MakeClaim("").Request("gpu", class, 1)))
	env.CreateTemplate(builder.MakeTemplate("two", builder.MakeClaim("").Request("gpu", class, 2)))
	low, high := env.CreatePriorityClass("low", 10), env.CreatePriorityClass("high", 1000)

	// A victim whose deletion the killed leader had under way may be left
	// terminating; a kubelet would finish that, and none runs here.
	go finishTerminations(env)

	lease := testLeaderElection(t, env)
	first := startScheduler(t, env, "first", processOptions{leader: lease})
	firstIdentity := lease.waitForHolder(env, "")

	var lows, highPods []*builder.PodWrapper
	for i := range nodes * devices {
		lows = append(lows, env.MakePod(fmt.Sprintf("low-%02d", i)).Priority(low).ClaimFromTemplate("gpu", "one"))
	}
	allLow := env.BoundPods(len(lows))
	env.CreatePods(lows)
	waitClosed(t, allLow, "all low-priority pods bound")
	for i := range highs {
		highPods = append(highPods, env.MakePod(fmt.Sprintf("high-%d", i)).Priority(high).ClaimFromTemplate("gpu", "two"))
	}
	held := first.proxy.hold(framework.HoldFrom(evictedAtKill, framework.PodDeletions, true, framework.PodDeletions))
	env.CreatePods(highPods)
	waitClosed(t, held.Arrived(), fmt.Sprintf("pod deletion %d", evictedAtKill))
	first.signal(t, syscall.SIGKILL)
	if !first.waitExit(time.Minute) {
		t.Fatalf("first still runs a minute after SIGKILL")
	}
	boundHigh, err := countBound(env, "high-")
	if err != nil {
		t.Fatal(err)
	}
	leftAtKill, err := countPods(env.Ctx, env, "low-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed first with %d of %d high-priority pods bound, %d low-priority pods evicted", boundHigh, highs, len(lows)-leftAtKill)
	if evicted := len(lows) - leftAtKill; evicted > evictedAtKill {
		t.Fatalf("%d pods evicted when first was killed: its proxy let more than %d deletions through", evicted, evictedAtKill)
	}
	startScheduler(t, env, "second", processOptions{leader: lease})
	lease.waitForHolder(env, firstIdentity)

	env.WaitFor(settleTimeout, "all high-priority pods bound", func(ctx context.Context) (bool, string, error) {
		n, err := countBound(env, "high-")
		if err != nil || n == highs {
			return err == nil, "", err
		}
		return false, fmt.Sprintf("%d of %d high-priority pods bound; %s", n, highs, describeClaims(ctx, env)), nil
	})
	// Every pod left is bound: the high-priority ones and the
	// low-priority ones that were not evicted.
	left, err := countPods(env.Ctx, env, "low-")
	if err != nil {
		t.Fatal(err)
	}
	evicted := len(lows) - left
	t.Logf("%d of %d low-priority pods evicted for %d GPUs", evicted, len(lows), 2*highs)
	// The new leader rebuilds the dead one's claim nominations from the
	// pods' nominatedNodeName and the claims of the pods being deleted on
	// those nodes (docs/preemption.md, "After a leader change"): every
	// evicted pod frees a device that a high-priority pod gets. A
	// preemptor whose victims were only partly evicted when the leader
	// died holds nothing, but its free device goes to a preemptor too.
	if evicted != 2*highs {
		t.Errorf("%d pods evicted for %d GPUs, want exactly %d", evicted, 2*highs, 2*highs)
	}
	settle(t, env, nil, highs+left, 5*time.Second, settleTimeout)
}

// finishTerminations plays the kubelet's part in pod deletion until the
// test ends: pods left terminating (a deletion timestamp, still there) are
// deleted at once, as a kubelet does once the containers have stopped.
// (The killed leader's DELETE of a victim can end after the API server set
// the timestamp and before it removed the pod.)
func finishTerminations(env *framework.Env) {
	for {
		select {
		case <-env.Ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
		pods, err := env.Client.CoreV1().Pods(env.Namespace).List(env.Ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, pod := range pods.Items {
			if pod.DeletionTimestamp != nil {
				// Errors (already gone, test ending) leave it to the
				// next round.
				_ = env.Client.CoreV1().Pods(env.Namespace).Delete(env.Ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			}
		}
	}
}

// describeClaims says, for a failure's record, which claims are allocated
// and for which pods, and which of those pods exist.
func describeClaims(ctx context.Context, env *framework.Env) string {
	claims, err := env.Client.ResourceV1().ResourceClaims(env.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	pods, err := env.Client.CoreV1().Pods(env.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	exists := map[string]string{}
	for _, pod := range pods.Items {
		state := "node " + pod.Spec.NodeName
		if pod.Spec.NodeName == "" {
			state = "pending, nominated " + pod.Status.NominatedNodeName
		}
		if pod.DeletionTimestamp != nil {
			state += ", deleting"
		}
		exists[pod.Name] = state
	}
	var out []string
	for _, claim := range claims.Items {
		if claim.Status.Allocation == nil && claim.DeletionTimestamp == nil {
			continue
		}
		var users []string
		for _, r := range claim.Status.ReservedFor {
			state, ok := exists[r.Name]
			if !ok {
				state = "gone"
			}
			users = append(users, r.Name+" ("+state+")")
		}
		out = append(out, fmt.Sprintf("%s: devices %v, deleting %v, reserved for %v", claim.Name, claimDevices(&claim), claim.DeletionTimestamp != nil, users))
	}
	return strings.Join(out, "; ")
}

// countBound counts the bound pods whose name has the prefix.
func countBound(env *framework.Env, prefix string) (int, error) {
	bound, _, _, err := env.Pods(env.Ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, pod := range bound {
		if strings.HasPrefix(pod.Name, prefix) {
			n++
		}
	}
	return n, nil
}

// countPods counts the pods whose name has the prefix and that are not
// being deleted.
func countPods(ctx context.Context, env *framework.Env, prefix string) (int, error) {
	list, err := env.Client.CoreV1().Pods(env.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, pod := range list.Items {
		if strings.HasPrefix(pod.Name, prefix) && pod.DeletionTimestamp == nil {
			n++
		}
	}
	return n, nil
}
