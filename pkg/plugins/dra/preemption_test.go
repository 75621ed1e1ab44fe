package dra

import (
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/drasched/drasched/internal/builder"
)

// TestPreemptionsRecord: the claims a preemptor's victims on a node free
// are those of its last attempt's dry run there, after the dry run
// reprieved pods, as they were when the victims were removed; a claim
// shared with a pod that stays frees nothing. A new attempt replaces the
// old one and drops the attempts of pods that are no longer pending;
// forget drops the pod's.
func TestPreemptionsRecord(t *testing.T) {
	pod := func(name string) *v1.Pod {
		p := builder.MakePod(name).Obj()
		p.UID = types.UID(name)
		return p
	}
	// claim is allocated and reserved for the pods.
	claim := func(name string, pods ...*v1.Pod) *resourceapi.ResourceClaim {
		c := builder.MakeClaim(name).Obj()
		c.UID = types.UID(name)
		c.Status.Allocation = &resourceapi.AllocationResult{}
		for _, p := range pods {
			c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
		}
		return c
	}
	preemptor, other := pod("preemptor"), pod("other")
	a, b, c := pod("a"), pod("b"), pod("c")
	claims := map[types.UID][]*resourceapi.ResourceClaim{}
	shared := claim("ab", a, b)
	for _, p := range []*v1.Pod{a, b, c} {
		claims[p.UID] = []*resourceapi.ResourceClaim{claim(p.Name, p)}
	}
	claims[a.UID] = append(claims[a.UID], shared)
	claims[b.UID] = append(claims[b.UID], shared)
	remove := func(d *dryRun, p *v1.Pod) {
		d.removed[p.UID] = p
		d.claims[p.UID] = claims[p.UID]
	}
	pending := sets.New[types.UID](preemptor.UID, other.UID)
	isPending := func(_, _ string, uid types.UID) bool { return pending.Has(uid) }
	names := func(claims []*resourceapi.ResourceClaim) []string {
		var names []string
		for _, c := range claims {
			names = append(names, c.Name)
		}
		slices.Sort(names)
		return names
	}
	var p preemptions

	// The first attempt: DefaultPreemption removes a, b and c on node-1,
	// then reprieves b; on node-2 it removes a and b.
	first := &filterResults{}
	d1 := (*dryRun)(nil).clone()
	for _, victim := range []*v1.Pod{a, b, c} {
		remove(d1, victim)
		p.record(preemptor, first, "node-1", d1, isPending)
	}
	delete(d1.removed, b.UID)
	delete(d1.claims, b.UID)
	d2 := (*dryRun)(nil).clone()
	remove(d2, a)
	remove(d2, b)
	p.record(preemptor, first, "node-2", d2, isPending)
	p.record(other, &filterResults{}, "node-1", (*dryRun)(nil).clone(), isPending)

	if got, want := names(p.victimClaims(preemptor.UID, "node-1")), []string{"a", "c"}; !slices.Equal(got, want) {
		t.Errorf("claims freed on node-1: %v, want %v (b reprieved, so ab is still used)", got, want)
	}
	if got, want := names(p.victimClaims(preemptor.UID, "node-2")), []string{"a", "ab", "b"}; !slices.Equal(got, want) {
		t.Errorf("claims freed on node-2: %v, want %v", got, want)
	}
	if got := p.victimClaims(preemptor.UID, "node-3"); got != nil {
		t.Errorf("claims freed on a node without a dry run: %v, want none", names(got))
	}

	// A second attempt of the preemptor replaces the first; the other pod
	// was bound in between and is dropped.
	pending.Delete(other.UID)
	d3 := (*dryRun)(nil).clone()
	remove(d3, c)
	p.record(preemptor, &filterResults{}, "node-2", d3, isPending)
	if got := p.victimClaims(preemptor.UID, "node-1"); got != nil {
		t.Errorf("claims freed by the first attempt on node-1 after the second: %v, want none", names(got))
	}
	if got, want := names(p.victimClaims(preemptor.UID, "node-2")), []string{"c"}; !slices.Equal(got, want) {
		t.Errorf("claims freed on node-2 after the second attempt: %v, want %v", got, want)
	}
	if _, ok := p.byPod[other.UID]; ok {
		t.Errorf("the attempt of a pod that is no longer pending was kept")
	}

	p.forget(preemptor.UID)
	if got := p.victimClaims(preemptor.UID, "node-2"); got != nil {
		t.Errorf("claims freed after forget: %v, want none", names(got))
	}
}

// TestNominatedPodHoldsItsVictimsDevices: two preemptors are nominated to
// node-a, each for the two GPUs of its own victims. The victims of the one
// being scheduled (gpu-0, gpu-1) have been deallocated already; those of
// the other (gpu-2, gpu-3) are still being deallocated. When the framework
// adds the other nominated pod before filtering the first, it must hold
// its own victims' GPUs, not the first free ones: first fit gave it gpu-0
// and gpu-1, the pod being scheduled found nothing free, and preempted
// again.
func TestNominatedPodHoldsItsVictimsDevices(t *testing.T) {
	for name, deallocatedSince := range map[string]bool{
		"victims' claims still allocated": false,
		// The cycle's state, taken when it started, still counts them.
		"victims' claims deallocated since the cycle started": true,
	} {
		t.Run(name, func(t *testing.T) { testNominatedPodHolds(t, deallocatedSince) })
	}
}

func testNominatedPodHolds(t *testing.T, deallocatedSince bool) {
	pod := func(name string, claim string) *v1.Pod {
		p := builder.MakePod(name).Claim("gpus", claim).Obj()
		p.UID = types.UID(name)
		return p
	}
	two := func(name string) *resourceapi.ResourceClaim {
		return builder.MakeClaim(name).Request("gpu", gpuClass, 2).Obj()
	}
	preemptor, other := pod("preemptor", "preemptor-gpus"), pod("other", "other-gpus")
	// The victims are gone; the other's victims' claims still allocated.
	victim := func(name, device string) (*v1.Pod, *resourceapi.ResourceClaim) {
		p := builder.MakePod(name).Obj()
		p.UID = types.UID(name)
		return p, allocated(gpuClaim(name), device, p.UID)
	}
	p0, c0 := victim("v0", "gpu-0")
	p1, c1 := victim("v1", "gpu-1")
	p2, c2 := victim("v2", "gpu-2")
	p3, c3 := victim("v3", "gpu-3")
	env := newPluginEnv(t, preemptor, builder.MakeClass(gpuClass), gpuSlice(4),
		two("preemptor-gpus"), two("other-gpus"), c2, c3)
	pl, ctx := env.plugin, env.ctx

	// The dry runs that chose the victims: v0 and v1 for the preemptor
	// (their claims since deleted), v2 and v3 for the other.
	pending := func(_, _ string, uid types.UID) bool { return uid == preemptor.UID || uid == other.UID }
	record := func(p *v1.Pod, victims map[*v1.Pod]*resourceapi.ResourceClaim) {
		d := (*dryRun)(nil).clone()
		for v, c := range victims {
			d.removed[v.UID] = v
			d.claims[v.UID] = []*resourceapi.ResourceClaim{c}
		}
		pl.preemptions.record(p, &filterResults{}, "node-a", d, pending)
	}
	record(preemptor, map[*v1.Pod]*resourceapi.ResourceClaim{p0: c0, p1: c1})
	record(other, map[*v1.Pod]*resourceapi.ResourceClaim{p2: c2, p3: c3})
	var nominated []fwk.PodInfo
	for _, p := range []*v1.Pod{preemptor, other} {
		info, err := framework.NewPodInfo(p)
		if err != nil {
			t.Fatal(err)
		}
		nominated = append(nominated, info)
	}
	pl.fh = testHandle{factory: pl.fh.SharedInformerFactory(), nominated: map[string][]fwk.PodInfo{"node-a": nominated}}

	cs := framework.NewCycleState()
	if _, status := pl.PreFilter(ctx, cs, preemptor, nil); !status.IsSuccess() {
		t.Fatalf("PreFilter: %v", status)
	}
	if deallocatedSince {
		for _, c := range []*resourceapi.ResourceClaim{c2, c3} {
			c = c.DeepCopy()
			c.Status.Allocation, c.Status.ReservedFor = nil, nil
			env.tracker.Add(c)
		}
	}
	nodeInfo := framework.NewNodeInfo()
	nodeInfo.SetNode(nodeA)
	// As the framework filters with nominated pods: the other pod is
	// added to a clone of the state first.
	withNominated := cs.Clone()
	if status := pl.AddPod(ctx, withNominated, preemptor, nominated[1], nodeInfo); !status.IsSuccess() {
		t.Fatalf("AddPod of the other nominated pod: %v", status)
	}
	s, err := getState(withNominated)
	if err != nil {
		t.Fatal(err)
	}
	var held []string
	for _, result := range s.dryRun.nominated[other.UID] {
		for _, device := range result.Devices.Results {
			held = append(held, device.Device)
		}
	}
	slices.Sort(held)
	if want := []string{"gpu-2", "gpu-3"}; !slices.Equal(held, want) {
		t.Errorf("the other nominated pod holds %v, want its victims' %v", held, want)
	}
	if status := pl.Filter(ctx, withNominated, preemptor, nodeInfo); !status.IsSuccess() {
		t.Errorf("Filter of the preemptor with the other pod nominated: %v, want success (its victims' GPUs are free)", status)
	}
}

// A preemptor whose victim's claim is still allocated waits for it while
// the API shows the victim gone or being deleted, also when the
// scheduler's informer still shows it running; not when the API shows it
// running (its deletion failed): then preemption may run again. It also
// waits when the claim was deallocated after the cycle took its state:
// the next cycle sees the device free.
func TestAwaitedDeallocationsOwnVictims(t *testing.T) {
	for name, tc := range map[string]struct {
		inAPI    bool
		deleting bool
		// deallocated: the claim was deallocated before the cycle
		// started, or after it took its state (since).
		deallocated, since bool
		want               int
	}{
		"victim gone, informer behind":       {want: 1},
		"victim being deleted":               {inAPI: true, deleting: true, want: 1},
		"victim running":                     {inAPI: true, want: 0},
		"claim deallocated during the cycle": {deallocated: true, since: true, want: 1},
		"claim deallocated before the cycle": {deallocated: true, want: 0},
	} {
		t.Run(name, func(t *testing.T) {
			preemptor := podWithClaims("preemptor-gpu")
			preemptor.Status.NominatedNodeName = "node-a"
			victim := builder.MakePod("pod-victim").Obj() // as allocated names it
			victim.UID = "victim"
			claim := allocated(gpuClaim("victim-gpu"), "gpu-0", victim.UID)
			env := newPluginEnv(t, preemptor, builder.MakeClass(gpuClass), gpuSlice(1), gpuClaim("preemptor-gpu").Obj(), claim)
			pl := env.plugin
			// The informer shows the victim running.
			if err := pl.fh.SharedInformerFactory().Core().V1().Pods().Informer().GetStore().Add(victim); err != nil {
				t.Fatal(err)
			}
			if tc.inAPI {
				v := victim.DeepCopy()
				if tc.deleting {
					v.DeletionTimestamp = &metav1.Time{Time: time.Now()}
				}
				if _, err := env.client.CoreV1().Pods(v.Namespace).Create(env.ctx, v, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			d := (*dryRun)(nil).clone()
			d.removed[victim.UID] = victim
			d.claims[victim.UID] = []*resourceapi.ResourceClaim{claim}
			pl.preemptions.record(preemptor, &filterResults{}, "node-a", d, func(_, _ string, _ types.UID) bool { return true })
			deallocate := func() {
				c := claim.DeepCopy()
				c.Status.Allocation, c.Status.ReservedFor = nil, nil
				env.tracker.Add(c)
			}
			if tc.deallocated && !tc.since {
				deallocate()
			}
			cs := framework.NewCycleState()
			if _, status := pl.PreFilter(env.ctx, cs, preemptor, nil); !status.IsSuccess() {
				t.Fatalf("PreFilter: %v", status)
			}
			if tc.since {
				deallocate()
			}
			s, err := getState(cs)
			if err != nil {
				t.Fatal(err)
			}

			node, awaited, err := pl.awaitedDeallocations(env.ctx, s, preemptor)
			if err != nil {
				t.Fatal(err)
			}
			if node != "node-a" || awaited != tc.want {
				t.Errorf("awaited %d claims on %q, want %d on node-a", awaited, node, tc.want)
			}

			// PostFilter waits, and keeps the nomination: the scheduler
			// would otherwise nominate the pod anew from a copy that may
			// not show it yet.
			result, status := pl.PostFilter(env.ctx, cs, preemptor, nil)
			if tc.want == 0 {
				if status.Code() != fwk.Unschedulable || result != nil {
					t.Errorf("PostFilter: %v, %v; want Unschedulable without a result, so that preemption runs", result, status)
				}
				return
			}
			if status.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(status.Message(), "waiting for 1 resource claims") {
				t.Errorf("PostFilter: %v, want UnschedulableAndUnresolvable, waiting for 1 claim", status)
			}
			if result == nil || result.NominatingInfo == nil || result.NominatedNodeName != "node-a" || result.Mode() != fwk.ModeOverride {
				t.Errorf("PostFilter result %+v, want the nomination to node-a kept", result)
			}
		})
	}
}

// In a preemptor's dry run, removing a pod that another preemptor
// nominated to the node has evicted frees nothing: its device is the other
// preemptor's. (DefaultPreemption chose such a pod again while the
// scheduler had not seen it deleted, and both preemptors lost the device.)
func TestDryRunSkipsPromisedVictims(t *testing.T) {
	for name, nominated := range map[string]bool{"other preemptor nominated": true, "no other preemptor": false} {
		t.Run(name, func(t *testing.T) {
			preemptor := podWithClaims("preemptor-gpu")
			other := builder.MakePod("other").Obj()
			other.UID = "other"
			victim := builder.MakePod("pod-victim").Claim("gpu", "victim-gpu").Obj() // named as allocated names it
			victim.UID = "victim"
			claim := allocated(gpuClaim("victim-gpu"), "gpu-0", victim.UID)
			env := newPluginEnv(t, preemptor, builder.MakeClass(gpuClass), gpuSlice(1), gpuClaim("preemptor-gpu").Obj(), claim)
			pl := env.plugin
			store := pl.fh.SharedInformerFactory().Core().V1().Pods().Informer().GetStore()
			for _, p := range []*v1.Pod{preemptor, other, victim} {
				if err := store.Add(p); err != nil {
					t.Fatal(err)
				}
			}
			// The other preemptor's dry run chose the victim.
			d := (*dryRun)(nil).clone()
			d.removed[victim.UID] = victim
			d.claims[victim.UID] = []*resourceapi.ResourceClaim{claim}
			pl.preemptions.record(other, &filterResults{}, "node-a", d, pl.pendingPod)
			if nominated {
				info, err := framework.NewPodInfo(other)
				if err != nil {
					t.Fatal(err)
				}
				pl.fh = testHandle{factory: pl.fh.SharedInformerFactory(), nominated: map[string][]fwk.PodInfo{"node-a": {info}}}
			}

			cs := framework.NewCycleState()
			if _, status := pl.PreFilter(env.ctx, cs, preemptor, nil); !status.IsSuccess() {
				t.Fatalf("PreFilter: %v", status)
			}
			nodeInfo := framework.NewNodeInfo()
			nodeInfo.SetNode(nodeA)
			victimInfo, err := framework.NewPodInfo(victim)
			if err != nil {
				t.Fatal(err)
			}
			dry := cs.Clone()
			if status := pl.RemovePod(env.ctx, dry, preemptor, victimInfo, nodeInfo); !status.IsSuccess() {
				t.Fatalf("RemovePod: %v", status)
			}
			status := pl.Filter(env.ctx, dry, preemptor, nodeInfo)
			if nominated && status.IsSuccess() {
				t.Errorf("Filter after removing another preemptor's victim: success, want unschedulable")
			}
			if !nominated && !status.IsSuccess() {
				t.Errorf("Filter after removing the pod: %v, want success", status)
			}
		})
	}
}
