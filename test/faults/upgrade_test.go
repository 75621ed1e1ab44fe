//go:build faults

package faults

import (
	"slices"
	"strings"
	"syscall"
	"testing"

	"k8s.io/component-base/featuregate"
	"k8s.io/kubernetes/pkg/features"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/internal/minor"
	"github.com/drasched/drasched/test/integration/framework"
)

// TestUpgradeFromOlderMinor is the live switch of docs/compatibility.md's
// upgrade, on the API server of this build's minor (the API server is
// upgraded first): the build for the minor before schedules, the build of
// this minor starts beside it as a standby, the old leader stops (SIGTERM,
// as a rolling update does), and the new one takes the lease, schedules
// the pod that was pending and the pods that come. Allocated claims stay as
// they are. The invariants hold at every check: no device in two claims,
// every bound pod's claims allocated on its node and reserved for it.
//
// Before that, the old build with this minor's gates refuses to start: it
// would watch the DeviceTaintRule and PodGroup APIs in its own minor's
// versions, which this API server does not serve, and says so instead of
// waiting forever (step 1 of the upgrade).
func TestUpgradeFromOlderMinor(t *testing.T) {
	older, olderMinor := olderMinorBinary(t)
	env := framework.Setup(t)
	for _, node := range env.CreateNodes(2) {
		env.PublishSlices(env.NodeSlice(node, builder.Devices("gpu", 2, nil)...).Obj())
	}
	class := env.CreateClass("gpu")
	env.CreateTemplate(builder.MakeTemplate("one", builder.MakeClaim("").Request("gpu", class, 1)))
	env.CreateTemplate(builder.MakeTemplate("two", builder.MakeClaim("").Request("gpus", class, 2)))
	lease := testLeaderElection(t, env)

	for _, gate := range []featuregate.Feature{features.DRADeviceTaintRules, features.GenericWorkload} {
		refused := startScheduler(t, env, "old-with-"+string(gate), processOptions{binary: older, gates: string(gate) + "=true"})
		if !refused.waitExit(framework.Timeout) {
			t.Fatalf("the %s build with %s on still runs after %s", olderMinor, gate, framework.Timeout)
		}
		if want := "the feature gate " + string(gate) + " is on"; !strings.Contains(refused.logTail(20), want) {
			t.Fatalf("the %s build with %s on exited without saying %q:\n%s", olderMinor, gate, want, refused.logTail(20))
		}
		t.Logf("the %s build with %s on refused to start: %s", olderMinor, gate, lastLine(refused.logTail(1)))
	}

	// The old build, without those gates (docs/compatibility.md, step 1
	// of the upgrade).
	old := startScheduler(t, env, "old-"+olderMinor, processOptions{binary: older, leader: lease,
		gates: gatesWithout(features.DRADeviceTaintRules, features.GenericWorkload, features.DRAWorkloadResourceClaims)})
	oldLeader := lease.waitForHolder(env, "")
	// a fills a node, b half of the other: pending, which needs two GPUs
	// on one node, waits.
	env.CreatePod(env.MakePod("a").ClaimFromTemplate("gpus", "two"))
	env.WaitForPodScheduled("a")
	env.CreatePod(env.MakePod("b").ClaimFromTemplate("gpu", "one"))
	env.WaitForPodScheduled("b")
	env.CreatePod(env.MakePod("pending").ClaimFromTemplate("gpus", "two"))
	env.WaitForPodUnschedulable("pending")
	env.VerifyAllocations()
	t.Logf("the %s build (%s) bound a and b; pending waits", olderMinor, oldLeader)

	// The rolling update: the new build starts as a standby, the old one
	// is stopped and lets go of the lease.
	startScheduler(t, env, "new-"+minor.Minor, processOptions{leader: lease})
	old.signal(t, syscall.SIGTERM)
	if !old.waitExit(framework.Timeout) {
		t.Fatalf("the %s build did not exit within %s of SIGTERM", olderMinor, framework.Timeout)
	}
	newLeader := lease.waitForHolder(env, oldLeader)
	t.Logf("the %s build (%s) leads", minor.Minor, newLeader)
	env.VerifyAllocations()

	// What the old build allocated stays; what was pending is scheduled
	// once there is room, and so are new pods.
	env.DeletePod("b")
	env.WaitForPodScheduled("pending")
	env.CreatePod(env.MakePod("after").ClaimFromTemplate("gpu", "one"))
	env.WaitForPodUnschedulable("after")
	env.DeletePod("a")
	env.WaitForPodScheduled("after")
	env.WaitForConsistentAllocations()
}

// gatesWithout are the control plane's feature gates but those named.
func gatesWithout(names ...featuregate.Feature) string {
	var kept []string
	for _, gate := range strings.Split(featureGates(), ",") {
		name, _, _ := strings.Cut(gate, "=")
		if !slices.ContainsFunc(names, func(n featuregate.Feature) bool { return string(n) == name }) {
			kept = append(kept, gate)
		}
	}
	return strings.Join(kept, ",")
}

// lastLine is the last line of s.
func lastLine(s string) string {
	return s[strings.LastIndex(s, "\n")+1:]
}
