//go:build faults

package faults

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	schedulingapi "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/test/integration/framework"
)

// The drasched binary, leader of two, is killed (SIGKILL) while it binds
// gangs (GenericWorkload): ten PodGroups of 8 pods of one GPU, which fit
// in the 100 GPUs of 10 nodes, and one of 8 pods of 16 GPUs, which fits
// on no node. Its proxy lets claim status update number restartAfter+1
// reach the apiserver and holds the answer and every claim write after
// it; the process is killed then. That is not a multiple of a gang's 8
// pods, so at least one gang has some of its claims written and not all:
// the new leader completes it. The fault suite's invariants hold (no
// device in two claims, no claim reserved for a pod that is gone, no pod
// left waiting), every fitting gang ends fully bound and the other fully
// pending, its claims unallocated.
func TestSchedulerKilledDuringGang(t *testing.T) {
	const (
		gangs    = 10
		gangSize = 8
	)
	env := framework.Setup(t)
	for _, node := range env.CreateNodes(10) {
		env.PublishSlices(env.NodeSlice(node, builder.Devices("gpu", 10, nil)...).Obj())
	}
	class := env.CreateClass("gpu")
	env.CreateTemplate(builder.MakeTemplate("one", builder.MakeClaim("").Request("gpu", class, 1)))
	env.CreateTemplate(builder.MakeTemplate("sixteen", builder.MakeClaim("").Request("gpu", class, 16)))
	var pods []*builder.PodWrapper
	for g := range gangs + 1 {
		name, template := fmt.Sprintf("gang-%02d", g), "one"
		if g == gangs {
			name, template = "too-large", "sixteen"
		}
		group := &schedulingapi.PodGroup{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: env.Namespace},
			Spec: schedulingapi.PodGroupSpec{SchedulingPolicy: schedulingapi.PodGroupSchedulingPolicy{
				Gang: &schedulingapi.GangSchedulingPolicy{MinCount: gangSize},
			}},
		}
		if _, err := env.Client.SchedulingV1beta1().PodGroups(env.Namespace).Create(env.Ctx, group, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for i := range gangSize {
			pods = append(pods, env.MakePod(fmt.Sprintf("%s-%d", name, i)).PodGroup(name).ClaimFromTemplate("gpu", template))
		}
	}

	lease := testLeaderElection(t, env)
	first := startScheduler(t, env, "first", processOptions{leader: lease})
	firstIdentity := lease.waitForHolder(env, "")
	if (restartAfter+1)%gangSize == 0 {
		t.Fatalf("the kill after %d claim status updates could fall between two gangs", restartAfter+1)
	}
	held := first.proxy.hold(framework.HoldFrom(restartAfter+1, framework.ClaimStatusUpdates, true, framework.ClaimWrites))
	env.CreatePods(pods)
	waitClosed(t, held.Arrived(), fmt.Sprintf("claim status update %d", restartAfter+1))
	first.signal(t, syscall.SIGKILL)
	if !first.waitExit(time.Minute) {
		t.Fatalf("first still runs a minute after SIGKILL")
	}
	atKill, err := gangBound(env.Ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	allocated, err := countAllocated(env)
	if err != nil {
		t.Fatal(err)
	}
	partial := 0
	for _, n := range atKill {
		if n > 0 && n < gangSize {
			partial++
		}
	}
	t.Logf("killed first with %d claims allocated, pods bound per gang %v: %d gangs partially bound", allocated, atKill, partial)
	if allocated > restartAfter+1 {
		t.Fatalf("%d claims allocated when first was killed: its proxy let more than %d status updates through", allocated, restartAfter+1)
	}

	startScheduler(t, env, "second", processOptions{leader: lease})
	lease.waitForHolder(env, firstIdentity)
	settle(t, env, nil, gangs*gangSize, 5*time.Second, settleTimeout)

	bound, err := gangBound(env.Ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	for g := range gangs {
		if name := fmt.Sprintf("gang-%02d", g); bound[name] != gangSize {
			t.Errorf("gang %s: %d of %d pods bound, want all", name, bound[name], gangSize)
		}
	}
	if bound["too-large"] != 0 {
		t.Errorf("gang too-large: %d pods bound, want none", bound["too-large"])
	}
	claims, err := env.Client.ResourceV1().ResourceClaims(env.Namespace).List(env.Ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, claim := range claims.Items {
		if claim.Spec.Devices.Requests[0].Exactly.Count == 16 && claim.Status.Allocation != nil {
			t.Errorf("claim %s of gang too-large is allocated", claim.Name)
		}
	}
}

// A gang of 8 pods of 8 GPUs, every pod held in PreBind before
// StructuredDRA writes anything: when the first pod gets there, the
// scheduler's tracker holds all 8 allocations in flight, so no pod outside
// the gang can take a device of it while the gang binds. Released, every
// pod is bound and nothing stays in flight.
func TestGangInFlightBeforeWrite(t *testing.T) {
	const gangSize = 8
	env := framework.Setup(t)
	for _, node := range env.CreateNodes(gangSize) {
		env.PublishSlices(env.NodeSlice(node, builder.Devices("gpu", 8, nil)...).Obj())
	}
	class := env.CreateClass("gpu")
	env.CreateTemplate(builder.MakeTemplate("eight", builder.MakeClaim("").Request("gpu", class, 8)))
	g := newGate()
	sched := env.StartScheduler(schedulerWithGate(g))
	group := &schedulingapi.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "gang", Namespace: env.Namespace},
		Spec: schedulingapi.PodGroupSpec{SchedulingPolicy: schedulingapi.PodGroupSchedulingPolicy{
			Gang: &schedulingapi.GangSchedulingPolicy{MinCount: gangSize},
		}},
	}
	if _, err := env.Client.SchedulingV1beta1().PodGroups(env.Namespace).Create(env.Ctx, group, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods []*builder.PodWrapper
	for i := range gangSize {
		pods = append(pods, env.MakePod(fmt.Sprintf("gang-%d", i)).PodGroup("gang").Label(holdLabel, "PreBind").ClaimFromTemplate("gpu", "eight"))
	}
	env.CreatePods(pods)

	first := g.waitEntered(t)
	inFlight, _, err := sched.TrackerState()
	if err != nil {
		t.Fatal(err)
	}
	claims, err := env.Client.ResourceV1().ResourceClaims(env.Namespace).List(env.Ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, claim := range claims.Items {
		if claim.Status.Allocation != nil {
			t.Errorf("claim %s written while every pod is held before StructuredDRA's PreBind", claim.Name)
		}
	}
	t.Logf("%s entered PreBind first; %d allocations in flight", first, len(inFlight))
	if len(inFlight) != gangSize {
		t.Errorf("%d allocations in flight when the first pod of the gang reached PreBind, want all %d", len(inFlight), gangSize)
	}
	close(g.release)
	settle(t, env, sched, gangSize, 5*time.Second, settleTimeout)
}

// gangBound counts the bound pods of each PodGroup.
func gangBound(ctx context.Context, env *framework.Env) (map[string]int, error) {
	pods, err := env.Client.CoreV1().Pods(env.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	bound := map[string]int{}
	for _, pod := range pods.Items {
		if pod.Spec.SchedulingGroup != nil && pod.Spec.SchedulingGroup.PodGroupName != nil && pod.Spec.NodeName != "" {
			bound[*pod.Spec.SchedulingGroup.PodGroupName]++
		}
	}
	return bound, nil
}
