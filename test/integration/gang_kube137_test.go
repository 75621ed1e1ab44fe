//go:build !kube1.35 && !kube1.36

package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingapi "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/test/integration/framework"
)

// Gang scheduling (GenericWorkload, DRAWorkloadResourceClaims; both on for
// this package, controlplane.Features): pods of a PodGroup with a gang
// policy are scheduled all together or not at all, with their claims.

// createGang creates a PodGroup with a gang policy of minCount and, if
// given, PodGroup claims (each by the name of an existing ResourceClaim).
func createGang(t *testing.T, env *framework.Env, name string, minCount int32, claims ...string) *schedulingapi.PodGroup {
	t.Helper()
	return createGangWith(t, env, name, minCount, nil, claims...)
}

// createGangWith is createGang with a change to the PodGroup before it is
// created: a priority class, a disruption mode.
func createGangWith(t *testing.T, env *framework.Env, name string, minCount int32, change func(*schedulingapi.PodGroup), claims ...string) *schedulingapi.PodGroup {
	t.Helper()
	group := &schedulingapi.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: env.Namespace},
		Spec: schedulingapi.PodGroupSpec{SchedulingPolicy: schedulingapi.PodGroupSchedulingPolicy{
			Gang: &schedulingapi.GangSchedulingPolicy{MinCount: minCount},
		}},
	}
	for _, claim := range claims {
		group.Spec.ResourceClaims = append(group.Spec.ResourceClaims, schedulingapi.PodGroupResourceClaim{Name: claim, ResourceClaimName: ptr.To(claim)})
	}
	if change != nil {
		change(group)
	}
	group, err := env.Client.SchedulingV1beta1().PodGroups(env.Namespace).Create(env.Ctx, group, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create PodGroup %s: %v", name, err)
	}
	return group
}

// gangPods returns n pods of the group named <group>-<i>, each with a
// claim from the template.
func gangPods(env *framework.Env, group string, n int, template string) []*builder.PodWrapper {
	pods := make([]*builder.PodWrapper, n)
	for i := range pods {
		pods[i] = env.MakePod(fmt.Sprintf("%s-%d", group, i)).PodGroup(group).ClaimFromTemplate("gpu", template)
	}
	return pods
}

// waitClosedWithin waits for a channel of framework.Env.BoundPods.
func waitClosedWithin(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(framework.Timeout):
		t.Fatalf("no %s within %s", what, framework.Timeout)
	}
}

// waitForGangUnschedulable waits until the n pods of the group are all
// unschedulable and each of wants is in the condition message of one of
// them, and checks that none falls back to upstream's bare text.
func waitForGangUnschedulable(t *testing.T, env *framework.Env, group string, n int, wants ...string) {
	t.Helper()
	var messages []string
	env.WaitFor(framework.Timeout, fmt.Sprintf("gang %s unschedulable saying %q", group, wants), func(ctx context.Context) (bool, string, error) {
		messages = messages[:0]
		for i := range n {
			pod, err := env.Client.CoreV1().Pods(env.Namespace).Get(ctx, fmt.Sprintf("%s-%d", group, i), metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			c := framework.PodScheduledCondition(pod)
			if pod.Spec.NodeName != "" || c == nil || c.Reason != v1.PodReasonUnschedulable {
				return false, fmt.Sprintf("pod %s not unschedulable", pod.Name), nil
			}
			messages = append(messages, c.Message)
		}
		all := strings.Join(messages, "\n")
		for _, want := range wants {
			if !strings.Contains(all, want) {
				return false, all, nil
			}
		}
		return true, "", nil
	})
	for _, message := range messages {
		if strings.Contains(message, msgCannotAllocate) {
			t.Errorf("message %q does not say why the devices do not fit", message)
		}
	}
}

// groupCounts counts the bound pods of each group (by the PodGroup name in
// the pods' spec) and the allocated claims their pods own.
func groupCounts(ctx context.Context, env *framework.Env) (bound map[string]int, allocated map[string]int, err error) {
	pods, err := env.Client.CoreV1().Pods(env.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	claims, err := env.Client.ResourceV1().ResourceClaims(env.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	groupOf := map[string]string{} // pod UID → group
	bound, allocated = map[string]int{}, map[string]int{}
	for _, pod := range pods.Items {
		if pod.Spec.SchedulingGroup == nil || pod.Spec.SchedulingGroup.PodGroupName == nil {
			continue
		}
		group := *pod.Spec.SchedulingGroup.PodGroupName
		groupOf[string(pod.UID)] = group
		if pod.Spec.NodeName != "" {
			bound[group]++
		}
	}
	for _, claim := range claims.Items {
		if owner := metav1.GetControllerOf(&claim); owner != nil && claim.Status.Allocation != nil {
			if group, ok := groupOf[string(owner.UID)]; ok {
				allocated[group]++
			}
		}
	}
	return bound, allocated, nil
}

// TestGangAllOrNothing: on 10 nodes of 8 GPUs, a gang of 8 pods of 8 GPUs
// gets 8 whole nodes. A second such gang cannot fit in the 2 nodes left:
// none of its pods is bound, none of its claims allocated, nothing stays
// in flight, and every pod is told why. Once 6 pods of the first gang are
// gone, the second is scheduled, all 8 pods together.
func TestGangAllOrNothing(t *testing.T) {
	env := framework.Setup(t)
	for _, node := range env.CreateNodes(10) {
		env.PublishSlices(env.NodeSlice(node, builder.Devices("gpu", 8, nil)...).Obj())
	}
	class := env.CreateClass("gpu")
	env.CreateTemplate(builder.MakeTemplate("eight", builder.MakeClaim("").Request("gpu", class, 8)))
	sched := env.StartScheduler(framework.SchedulerOptions{})

	createGang(t, env, "a", 8)
	allA := env.BoundPods(8)
	env.CreatePods(gangPods(env, "a", 8, "eight"))
	waitClosedWithin(t, allA, "gang a bound")
	nodes := map[string]bool{}
	for i := range 8 {
		nodes[env.WaitForPodScheduled(fmt.Sprintf("a-%d", i)).Spec.NodeName] = true
	}
	if len(nodes) != 8 {
		t.Errorf("gang a on %d nodes, want 8 whole nodes", len(nodes))
	}

	createGang(t, env, "b", 8)
	env.CreatePods(gangPods(env, "b", 8, "eight"))
	// The pod that Filter rejected says why; the others that the gang
	// cannot be completed.
	waitForGangUnschedulable(t, env, "b", 8, "matching devices free", "minCount (8) cannot be satisfied")
	env.WaitFor(framework.Timeout, "gang b's claims generated", func(ctx context.Context) (bool, string, error) {
		claims, err := env.Client.ResourceV1().ResourceClaims(env.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		return len(claims.Items) == 16, fmt.Sprintf("%d claims", len(claims.Items)), nil
	})
	bound, allocated, err := groupCounts(env.Ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	if bound["b"] != 0 || allocated["b"] != 0 {
		t.Errorf("gang b that does not fit: %d pods bound, %d claims allocated, want none", bound["b"], allocated["b"])
	}
	if inFlight, _, err := sched.TrackerState(); err != nil || len(inFlight) != 0 {
		t.Errorf("claims in flight after gang b failed: %v (%v)", inFlight, err)
	}
	allB := env.BoundPods(16 - 6)
	for i := range 6 {
		env.DeletePod(fmt.Sprintf("a-%d", i))
	}
	waitClosedWithin(t, allB, "gang b bound after gang a shrank")
	env.VerifyAllocations()
}

// TestGangSharedGroupClaim: 300 pods of one gang share the PodGroup's claim
// of a network-attached device. It is allocated once, for the group: its
// reservedFor names the PodGroup alone, not 300 pods (the limit of 256
// consumers does not apply), and every pod is bound.
func TestGangSharedGroupClaim(t *testing.T) {
	const pods = 300
	env := framework.Setup(t)
	env.CreateNodes(3)
	env.PublishSlices(env.MakeSlice("fabric").AllNodes().Devices(builder.Devices("nic", 1, nil)...).Obj())
	class := env.CreateClass("nic")
	env.CreateClaim(builder.MakeClaim("fabric").Request("nic", class, 1))
	env.StartScheduler(framework.SchedulerOptions{})

	group := createGang(t, env, "train", pods, "fabric")
	var wrappers []*builder.PodWrapper
	for i := range pods {
		wrappers = append(wrappers, env.MakePod(fmt.Sprintf("train-%03d", i)).PodGroup("train").Claim("fabric", "fabric"))
	}
	all := env.BoundPods(pods)
	env.CreatePods(wrappers)
	waitClosedWithin(t, all, "all pods of the gang bound")

	claim := env.WaitForClaim("fabric", "reserved for the PodGroup", func(c *resourceapi.ResourceClaim) bool {
		return c.Status.Allocation != nil && len(c.Status.ReservedFor) > 0
	})
	if got := claim.Status.ReservedFor; len(got) != 1 || got[0].UID != group.UID || got[0].Resource != "podgroups" {
		t.Errorf("reservedFor %v, want only PodGroup %s", got, group.UID)
	}
	env.VerifyAllocations()
}

// TestGangRacesSinglePods: three gangs of 4 pods of 2 GPUs and 16 single
// pods of one GPU, created at once, compete for 32 GPUs on 4 nodes. No
// device goes to two claims, every gang is bound whole or not at all, and
// every pod ends bound or unschedulable.
func TestGangRacesSinglePods(t *testing.T) {
	env := framework.Setup(t)
	for _, node := range env.CreateNodes(4) {
		env.PublishSlices(env.NodeSlice(node, builder.Devices("gpu", 8, nil)...).Obj())
	}
	class := env.CreateClass("gpu")
	env.CreateTemplate(builder.MakeTemplate("one", builder.MakeClaim("").Request("gpu", class, 1)))
	env.CreateTemplate(builder.MakeTemplate("two", builder.MakeClaim("").Request("gpu", class, 2)))
	env.StartScheduler(framework.SchedulerOptions{})

	var singles []*builder.PodWrapper
	for i := range 16 {
		singles = append(singles, env.MakePod(fmt.Sprintf("single-%02d", i)).ClaimFromTemplate("gpu", "one"))
	}
	groups := []string{"g0", "g1", "g2"}
	for _, name := range groups {
		createGang(t, env, name, 4)
	}
	var wg sync.WaitGroup
	wg.Go(func() { env.CreatePods(singles) })
	for _, name := range groups {
		wg.Go(func() { env.CreatePods(gangPods(env, name, 4, "two")) })
	}
	wg.Wait()

	env.WaitFor(framework.Timeout, "every pod bound or unschedulable", func(ctx context.Context) (bool, string, error) {
		bound, unschedulable, pending, err := env.Pods(ctx)
		if err != nil {
			return false, "", err
		}
		return len(pending) == 0, fmt.Sprintf("%d bound, %d unschedulable, %d pending", len(bound), len(unschedulable), len(pending)), nil
	})
	env.WaitForConsistentAllocations()
	bound, allocated, err := groupCounts(env.Ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	gpus := 0
	for _, name := range groups {
		if bound[name] != 0 && bound[name] != 4 || allocated[name] != bound[name] {
			t.Errorf("gang %s: %d of 4 pods bound, %d claims allocated; want all or none, with their claims", name, bound[name], allocated[name])
		}
		gpus += 2 * bound[name]
	}
	all, _, _, err := env.Pods(env.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	gpus += len(all) - bound["g0"] - bound["g1"] - bound["g2"]
	t.Logf("%d pods bound, %d GPUs in use; gangs bound: %v", len(all), gpus, bound)
	if gpus > 32 {
		t.Errorf("%d GPUs in use, there are 32", gpus)
	}
	if bound["g0"]+bound["g1"]+bound["g2"] == 0 {
		t.Errorf("no gang bound: 16 single GPUs leave room for two gangs")
	}
}

// TestGangBadInput: a gang whose pods name a DeviceClass that does not
// exist, and a gang larger than the cluster. Their pods are unschedulable
// with a condition that says why, and nothing is allocated or left in
// flight.
func TestGangBadInput(t *testing.T) {
	env := framework.Setup(t)
	for _, node := range env.CreateNodes(2) {
		env.PublishSlices(env.NodeSlice(node, builder.Devices("gpu", 8, nil)...).Obj())
	}
	class := env.CreateClass("gpu")
	env.CreateTemplate(builder.MakeTemplate("missing", builder.MakeClaim("").Request("gpu", env.Name("no-such-class"), 1)))
	env.CreateTemplate(builder.MakeTemplate("eight", builder.MakeClaim("").Request("gpu", class, 8)))
	sched := env.StartScheduler(framework.SchedulerOptions{})

	// The pod group cycle stops at the first pod that cannot be placed
	// once minCount is out of reach: that pod says why, the others that
	// the gang cannot be completed.
	createGang(t, env, "missing", 2)
	env.CreatePods(gangPods(env, "missing", 2, "missing"))
	waitForGangUnschedulable(t, env, "missing", 2, "does not exist", "minCount (2) cannot be satisfied")

	createGang(t, env, "large", 3)
	env.CreatePods(gangPods(env, "large", 3, "eight"))
	waitForGangUnschedulable(t, env, "large", 3, "0 of 8 matching devices free", "minCount (3) cannot be satisfied")

	bound, allocated, err := groupCounts(env.Ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"missing", "large"} {
		if bound[name] != 0 || allocated[name] != 0 {
			t.Errorf("gang %s: %d pods bound, %d claims allocated, want none", name, bound[name], allocated[name])
		}
	}
	if inFlight, _, err := sched.TrackerState(); err != nil || len(inFlight) != 0 {
		t.Errorf("claims in flight: %v (%v)", inFlight, err)
	}
	var pods []v1.Pod
	if _, pods, _, err = env.Pods(env.Ctx); err != nil || len(pods) != 5 {
		t.Errorf("%d unschedulable pods, want 5 (%v)", len(pods), err)
	}
}

// A PodGroup victim that may only be disrupted as a whole spans two
// nodes: preempting it for a pod on one node evicts both its pods, and
// the devices they free on both nodes go to the preemptors, each to one.
// (Before: the dry run took its node from the first pod it removed, which
// could be the other node's, and recorded the victims there.)
func TestNominationVictimGroupAcrossNodes(t *testing.T) {
	p := setupPreemption(t)
	class := p.CreateClass("gpu")
	p.CreateTemplate(builder.MakeTemplate("one", builder.MakeClaim("").Request("gpu", class, 1)))
	nodes := p.CreateNodes(2)
	for _, node := range nodes {
		p.PublishSlices(p.NodeSlice(node, builder.MakeDevice("gpu-0")).Obj())
	}
	p.StartScheduler(framework.SchedulerOptions{})

	createGangWith(t, p.Env, "victims", 2, func(group *schedulingapi.PodGroup) {
		group.Spec.PriorityClassName = p.low
		group.Spec.DisruptionMode = &schedulingapi.DisruptionMode{All: &schedulingapi.AllDisruptionMode{}}
	})
	lows := gangPods(p.Env, "victims", 2, "one")
	for _, pod := range lows {
		pod.Priority(p.low)
	}
	bound := p.BoundPods(2)
	p.CreatePods(lows)
	waitClosedWithin(t, bound, "both pods of the victim group bound")

	p.CreatePod(p.MakePod("high-0").Priority(p.high).ClaimFromTemplate("gpu", "one"))
	p.waitBound("high-0")
	p.CreatePod(p.MakePod("high-1").Priority(p.high).ClaimFromTemplate("gpu", "one"))
	p.waitBound("high-1")
	if gone := p.gone([]string{"victims-0", "victims-1"}); len(gone) != 2 {
		t.Errorf("evicted %v, want both pods of the group", gone)
	}
	p.WaitForConsistentAllocations()
}

// createHighGang creates a gang of n pods of the high priority class, each
// with a claim from template, and its PodGroup of that class.
func (p *preemption) createHighGang(name string, n int, template string) {
	p.t.Helper()
	createGangWith(p.t, p.Env, name, int32(n), func(group *schedulingapi.PodGroup) { group.Spec.PriorityClassName = p.high })
	pods := gangPods(p.Env, name, n, template)
	for _, pod := range pods {
		pod.Priority(p.high)
	}
	p.CreatePods(pods)
}

// A gang of two high-priority one-GPU pods preempts two low-priority
// GPU pods and is bound, all of it. (Before: pod-group preemption's
// simulation ran PreFilter, which counted the victims' GPUs as taken, so
// nothing was evicted and the gang stayed pending: "minCount (2) cannot
// be satisfied".)
func TestGangPreemptsForDevices(t *testing.T) {
	p := setupPreemption(t)
	class := p.CreateClass("gpu")
	p.CreateTemplate(builder.MakeTemplate("one", builder.MakeClaim("").Request("gpu", class, 1)))
	node := p.CreateNode("node")
	p.PublishSlices(p.NodeSlice(node, builder.Devices("gpu", 2, nil)...).Obj())
	lowest := p.CreatePriorityClass("lowest", -100)
	p.StartScheduler(framework.SchedulerOptions{})

	lows := p.fill("low", lowest, "one", 2)
	p.createHighGang("train", 2, "one")
	p.waitBound("train-0")
	p.waitBound("train-1")
	if gone := p.gone(lows); len(gone) != 2 {
		t.Errorf("evicted %v, want both low-priority pods", gone)
	}
	p.WaitForConsistentAllocations()
}

// A pod preempts one pod of a PodGroup: with disruptionMode Single only
// that pod goes; with All the whole group goes, on both nodes.
func TestPreemptGangMember(t *testing.T) {
	for name, tc := range map[string]struct {
		mode    schedulingapi.DisruptionMode
		evicted int
	}{
		"Single": {mode: schedulingapi.DisruptionMode{Single: &schedulingapi.SingleDisruptionMode{}}, evicted: 1},
		"All":    {mode: schedulingapi.DisruptionMode{All: &schedulingapi.AllDisruptionMode{}}, evicted: 2},
	} {
		t.Run(name, func(t *testing.T) {
			p := setupPreemption(t)
			class := p.CreateClass("gpu")
			p.CreateTemplate(builder.MakeTemplate("one", builder.MakeClaim("").Request("gpu", class, 1)))
			for _, node := range p.CreateNodes(2) {
				p.PublishSlices(p.NodeSlice(node, builder.MakeDevice("gpu-0")).Obj())
			}
			p.StartScheduler(framework.SchedulerOptions{})

			createGangWith(t, p.Env, "victims", 2, func(group *schedulingapi.PodGroup) {
				group.Spec.PriorityClassName = p.low
				group.Spec.DisruptionMode = &tc.mode
			})
			lows := gangPods(p.Env, "victims", 2, "one")
			for _, pod := range lows {
				pod.Priority(p.low)
			}
			p.CreatePods(lows)
			p.WaitForPodScheduled("victims-0")
			p.WaitForPodScheduled("victims-1")

			p.CreatePod(p.MakePod("high").Priority(p.high).ClaimFromTemplate("gpu", "one"))
			p.waitBound("high")
			// Once the preemptor is bound, every victim its preemption
			// chose is deleted (upstream's PreEnqueue keeps it out of the
			// queue until then), and no other pod preempts.
			if gone := p.gone([]string{"victims-0", "victims-1"}); len(gone) != tc.evicted {
				t.Errorf("evicted %v, want %d pods of the group", gone, tc.evicted)
			}
			p.WaitForConsistentAllocations()
		})
	}
}

// A gang whose preemption chose a victim that gets stuck terminating holds
// its nominations only until their bound, then preempts again around the
// stuck pod and is bound.
func TestGangNominationStuckVictimBounded(t *testing.T) {
	const margin = 3 * time.Second
	p := setupPreemption(t)
	class := p.CreateClass("gpu")
	p.CreateTemplate(builder.MakeTemplate("one", builder.MakeClaim("").Request("gpu", class, 1)))
	nodes := p.CreateNodes(3)
	for _, node := range nodes {
		p.PublishSlices(p.NodeSlice(node, builder.MakeDevice("gpu-0")).Obj())
	}
	// The gang may use nodes 0 and 1 only, until node 2 is labelled too:
	// its first preemption must evict the pods there.
	label := func(node *v1.Node) {
		patch := `{"metadata":{"labels":{"train":"yes"}}}`
		if _, err := p.Client.CoreV1().Nodes().Patch(p.Ctx, node.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	label(nodes[0])
	label(nodes[1])
	p20, p30 := p.CreatePriorityClass("p20", 20), p.CreatePriorityClass("p30", 30)
	p.StartScheduler(framework.SchedulerOptions{Configure: framework.UseNominationMargin(margin)})

	on := func(pod *builder.PodWrapper, node int) *builder.PodWrapper {
		return pod.ClaimFromTemplate("gpu", "one").NodeSelector("kubernetes.io/hostname", nodes[node].Name)
	}
	p.CreatePod(on(p.holdingPod("stuck").Priority(p.low), 0))
	p.CreatePod(on(p.MakePod("v20").Priority(p20), 1))
	p.CreatePod(on(p.MakePod("v30").Priority(p30), 2))
	for _, name := range []string{"stuck", "v20", "v30"} {
		p.WaitForPodScheduled(name)
	}

	createGangWith(t, p.Env, "train", 2, func(group *schedulingapi.PodGroup) { group.Spec.PriorityClassName = p.high })
	highs := gangPods(p.Env, "train", 2, "one")
	for _, pod := range highs {
		pod.Priority(p.high).NodeSelector("train", "yes")
	}
	start := time.Now()
	p.CreatePods(highs)
	p.waitTerminating("stuck")
	label(nodes[2])
	p.waitBound("train-0")
	p.waitBound("train-1")
	if took := time.Since(start); took < margin {
		t.Errorf("gang bound after %s, before its nominations' bound of %s", took, margin)
	}
	if gone := p.gone([]string{"v20", "v30"}); len(gone) != 2 {
		t.Errorf("evicted %v besides the stuck pod, want v20 and v30", gone)
	}
	p.WaitForConsistentAllocations()
}

// A gang preempts the pods of the nodes it takes and no others, as
// upstream's evaluator does on the whole cluster: on six full nodes of two
// GPUs, a gang of two two-GPU pods evicts the four one-GPU pods of the two
// nodes it is bound to. The plugin runs upstream's evaluator on those nodes
// only, unless a pod elsewhere can keep the gang from fitting (a pod with
// required anti-affinity runs in the cluster): then on the whole cluster,
// with the same outcome.
func TestGangPreemptsOnItsNodes(t *testing.T) {
	for name, antiAffinity := range map[string]bool{"narrowed": false, "whole cluster": true} {
		t.Run(name, func(t *testing.T) {
			p := setupPreemption(t)
			class := p.CreateClass("gpu")
			p.CreateTemplate(builder.MakeTemplate("one", builder.MakeClaim("").Request("gpu", class, 1)))
			p.CreateTemplate(builder.MakeTemplate("two", builder.MakeClaim("").Request("gpu", class, 2)))
			for _, node := range p.CreateNodes(6) {
				p.PublishSlices(p.NodeSlice(node, builder.Devices("gpu", 2, nil)...).Obj())
			}
			p.StartScheduler(framework.SchedulerOptions{})
			if antiAffinity {
				aa := p.MakePod("apart").Priority(p.high).Label("app", "apart")
				aa.Obj().Spec.Affinity = &v1.Affinity{PodAntiAffinity: &v1.PodAntiAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{{
						LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "apart"}},
						TopologyKey:   "kubernetes.io/hostname",
					}},
				}}
				p.CreatePod(aa)
				p.waitBound("apart")
			}
			lows := p.fill("low", p.low, "one", 12)
			nodeOf := map[string]string{}
			for _, name := range lows {
				nodeOf[name] = p.waitBound(name).Spec.NodeName
			}

			p.createHighGang("train", 2, "two")
			taken := map[string]bool{}
			for _, name := range []string{"train-0", "train-1"} {
				taken[p.waitBound(name).Spec.NodeName] = true
			}
			if len(taken) != 2 {
				t.Fatalf("gang bound to %v, want two nodes", taken)
			}
			var want []string
			for _, name := range lows {
				if taken[nodeOf[name]] {
					want = append(want, name)
				}
			}
			if gone := p.gone(lows); !slices.Equal(gone, want) {
				t.Errorf("evicted %v, want the pods of the gang's nodes %v", gone, want)
			}
			p.WaitForConsistentAllocations()
		})
	}
}

// Pod-group preemption first tries to place the gang on the 100 nodes
// whose lower-priority pods matter least, and on all nodes if it does not
// fit there. Here the 100 nodes of the lowest-priority pods have one GPU
// each, too few for the gang's two-GPU pods: the gang preempts the pods
// of the two two-GPU nodes, of a higher priority, and no other.
func TestGangPlacementSample(t *testing.T) {
	p := setupPreemption(t)
	class := p.CreateClass("gpu")
	p.CreateTemplate(builder.MakeTemplate("one", builder.MakeClaim("").Request("gpu", class, 1)))
	p.CreateTemplate(builder.MakeTemplate("two", builder.MakeClaim("").Request("gpu", class, 2)))
	lowest := p.CreatePriorityClass("lowest", -100)
	nodes := p.CreateNodes(102)
	var pods []*builder.PodWrapper
	var small, big []string
	for i, node := range nodes {
		on := func(name, priority string) {
			pods = append(pods, p.MakePod(name).Priority(priority).ClaimFromTemplate("gpu", "one").NodeSelector("kubernetes.io/hostname", node.Name))
		}
		if i < 100 {
			p.PublishSlices(p.NodeSlice(node, builder.MakeDevice("gpu-0")).Obj())
			small = append(small, fmt.Sprintf("lowest-%d", i))
			on(small[len(small)-1], lowest)
			continue
		}
		p.PublishSlices(p.NodeSlice(node, builder.Devices("gpu", 2, nil)...).Obj())
		for j := range 2 {
			big = append(big, fmt.Sprintf("low-%d-%d", i, j))
			on(big[len(big)-1], p.low)
		}
	}
	p.StartScheduler(framework.SchedulerOptions{})
	p.CreatePods(pods)
	for _, name := range append(slices.Clone(small), big...) {
		p.WaitForPodScheduled(name)
	}

	p.createHighGang("train", 2, "two")
	p.waitBound("train-0")
	p.waitBound("train-1")
	if gone := p.gone(small); len(gone) > 0 {
		t.Errorf("evicted %v from the one-GPU nodes, where the gang does not fit", gone)
	}
	if gone := p.gone(big); !slices.Equal(gone, big) {
		t.Errorf("evicted %v, want the pods of the two-GPU nodes %v", gone, big)
	}
	p.WaitForConsistentAllocations()
}
