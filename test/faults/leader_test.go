//go:build faults

package faults

import (
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/test/integration/framework"
)

// Two drasched replicas with leader election. The leader is stopped
// (SIGSTOP) inside PreBind of pod a, exactly when it sends the first write
// of claim a (the finalizer, which precedes the status update with the
// allocation): the proxy in front of it holds that request. Past the
// lease, the standby takes over with no in-flight state, and pod b, of
// higher priority so that the new leader takes it first, gets the only
// device. Then the held request goes on and the old leader resumes
// (SIGCONT). It exits once it notices that it lost the lease; what it
// writes before that must not give the device to claim a as well.
//
// The test logs the timeline: when the old leader was stopped and resumed,
// what it wrote after resuming and when it exited. The tracker of a child
// process cannot be inspected: only the API invariants are checked.
func TestLeaderHandover(t *testing.T) {
	env := framework.Setup(t)
	node := env.CreateNode("node")
	env.PublishSlices(env.NodeSlice(node, builder.MakeDevice("gpu-0")).Obj())
	class := env.CreateClass("gpu")
	env.CreateClaim(builder.MakeClaim("a").Request("gpu", class, 1))
	env.CreateClaim(builder.MakeClaim("b").Request("gpu", class, 1))
	high := env.CreatePriorityClass("high", 1000)
	lease := testLeaderElection(t, env)

	first := startScheduler(t, env, "first", processOptions{leader: lease})
	firstIdentity := lease.waitForHolder(env, "")
	t.Logf("first is the leader: %s", firstIdentity)
	second := startScheduler(t, env, "second", processOptions{leader: lease})

	held := first.proxy.hold(framework.HoldNext(func(call framework.APICall) bool {
		return call.Verb == "update" && call.Resource == "resourceclaims" && call.Name == "a" && call.Subresource == ""
	}))
	env.CreatePod(env.MakePod("a").Claim("gpu", "a"))
	select {
	case <-held.Arrived():
	case <-time.After(framework.Timeout):
		t.Fatalf("the leader did not write claim a within %s", framework.Timeout)
	}
	stoppedAt := first.signal(t, syscall.SIGSTOP)
	t.Logf("first stopped in PreBind of pod a, holding its finalizer update of claim a")

	podB := env.MakePod("b").Claim("gpu", "b")
	podB.Spec.PriorityClassName = high
	env.CreatePod(podB)
	secondIdentity := lease.waitForHolder(env, firstIdentity)
	tookOver := time.Now()
	t.Logf("second is the leader %s after first was stopped: %s", tookOver.Sub(stoppedAt).Round(time.Millisecond), secondIdentity)
	env.WaitForPodScheduled("b")
	env.WaitForPodUnschedulable("a")
	t.Logf("second bound pod b and found pod a unschedulable")

	releasedAt := time.Now()
	held.Release()
	resumedAt := first.signal(t, syscall.SIGCONT)
	exited := first.waitExit(30 * time.Second)

	// The timeline, for the record.
	t.Logf("timeline (first stopped at %s):", stoppedAt.Format("15:04:05.000"))
	t.Logf("  %s second holds the lease", tookOver.Format("15:04:05.000"))
	t.Logf("  %s first's finalizer update of claim a released", releasedAt.Format("15:04:05.000"))
	t.Logf("  %s first resumed (SIGCONT)", resumedAt.Format("15:04:05.000"))
	for _, r := range first.proxy.requests(releasedAt, framework.Writes) {
		t.Logf("  %s first wrote: %s %s -> %d", r.start.Format("15:04:05.000"), r.method, r.path, r.status)
	}
	if exited {
		t.Logf("  %s first exited with status %d", first.exitedAt.Format("15:04:05.000"), first.exitCode())
		for _, line := range first.logLines(func(line string) bool {
			return strings.Contains(line, "eaderelection lost") || strings.Contains(line, "failed to renew lease")
		}) {
			t.Logf("  first logged: %s", line)
		}
	} else {
		t.Errorf("first still runs 30s after it resumed without the lease")
	}
	// The held finalizer update went out before the stop; anything after
	// it is what the old leader did on its own after resuming.
	if status := first.proxy.requests(releasedAt, framework.ClaimStatusUpdates); len(status) > 0 {
		t.Logf("first wrote claim status %d times after resuming:\n%s", len(status), describeRequests(status))
	} else {
		t.Logf("first wrote no claim status after resuming")
	}

	// The old leader is fenced for every write, not only claims: a pod
	// condition or binding from its stale view would overwrite what the
	// new leader decided, and releasing the lease would hand the new
	// leader's lease to whoever comes next. Events are not fenced.
	for _, r := range first.proxy.requests(releasedAt, framework.Writes) {
		held := r.call.Resource == "resourceclaims" && r.call.Name == "a" && r.call.Subresource == "" && r.call.Verb == "update"
		if held || r.call.Resource == "events" || r.status == 0 || r.status >= 300 {
			continue
		}
		t.Errorf("first changed %s %s/%s after it resumed without the lease: %s", r.call.Resource, r.call.Name, r.call.Subresource, r)
	}
	if holder := lease.holder(env.Ctx, env); holder != secondIdentity {
		t.Errorf("after first exited, the lease is held by %q, want second (%s)", holder, secondIdentity)
	}

	settle(t, env, nil, 1, 5*time.Second, time.Minute)
	for _, name := range []string{"a", "b"} {
		if claim, err := env.Client.ResourceV1().ResourceClaims(env.Namespace).Get(env.Ctx, name, metav1.GetOptions{}); err == nil {
			t.Logf("claim %s at the end: devices %v, reserved for %v", name, claimDevices(claim), claim.Status.ReservedFor)
		}
	}
	if !second.running() {
		t.Errorf("second exited (status %d) while it held the lease", second.exitCode())
	}
}
