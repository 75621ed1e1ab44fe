package dra

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/pkg/core"
	"github.com/drasched/drasched/pkg/tracker/trackertest"
)

// gatherCounter counts the tracker's gathers of the allocated state, and
// fails them, as the tracker does, once the caller gave up.
type gatherCounter struct {
	*trackertest.Fake
	gathers atomic.Int32
}

func (g *gatherCounter) AllocatedState(ctx context.Context) (*structured.AllocatedState, error) {
	g.gathers.Add(1)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return g.Fake.AllocatedState(ctx)
}

// victimPod is a pod on node-a whose claim <name>-gpu holds device.
func victimPod(name, device string) (*v1.Pod, *resourceapi.ResourceClaim) {
	pod := builder.MakePod("pod-"+name).Claim("gpu", name+"-gpu").Obj()
	pod.UID = types.UID(name)
	pod.Spec.NodeName = "node-a"
	return pod, allocated(gpuClaim(name+"-gpu"), device, pod.UID)
}

func podInfo(t *testing.T, pod *v1.Pod) fwk.PodInfo {
	t.Helper()
	info, err := framework.NewPodInfo(pod)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// In a pod-group preemption simulation (a state the preemption plugin
// edits without cloning it), Filter gathers the allocated state once, not
// once per node and pod: it sees allocations put in flight since on top of
// it, and gathers again only once an allocation that was in flight at the
// gather is no longer. Victims added back take their devices again.
// (Before: every Filter gathered, which made pod-group preemption
// quadratic in the cluster's size.)
func TestSimulationGathersOnce(t *testing.T) {
	first, firstClaim := victimPod("first", "gpu-0")
	second, secondClaim := victimPod("second", "gpu-1")
	preemptor := builder.MakePod("preemptor").Claim("gpu", "preemptor-gpu").Obj()
	preemptor.UID = "preemptor"
	env := newNominationEnv(t, preemptor, builder.MakeClass(gpuClass), gpuSlice(4), firstClaim, secondClaim,
		builder.MakeClaim("preemptor-gpu").Request("gpu", gpuClass, 3).Obj())
	counter := &gatherCounter{Fake: env.tracker}
	env.plugin.tracker = counter
	// gpu-2 is in flight for another pod when preemption starts: gpu-3 is
	// the only free GPU, the preemptor needs three.
	other := allocated(builder.MakeClaim("other").Request("gpu", gpuClass, 1), "gpu-2")
	other.UID = "other"
	if err := env.tracker.Reserve(other); err != nil {
		t.Fatal(err)
	}

	cs := framework.NewCycleState()
	if _, status := env.plugin.PreFilter(env.ctx, cs, preemptor, nil); !status.IsSuccess() {
		t.Fatalf("PreFilter: %v", status)
	}
	nodeInfo := framework.NewNodeInfo()
	nodeInfo.SetNode(nodeA)
	edit := func(pod *v1.Pod, remove bool) {
		t.Helper()
		editDryRun(t, env, cs, preemptor, pod, remove)
	}
	// filter runs Filter on 20 goroutines at once, as the framework runs
	// it for 20 nodes.
	filter := func(want bool, wantGathers int32, what string) {
		t.Helper()
		before := counter.gathers.Load()
		var wg sync.WaitGroup
		statuses := make([]*fwk.Status, 20)
		for i := range statuses {
			wg.Go(func() { statuses[i] = env.plugin.Filter(env.ctx, cs, preemptor, nodeInfo) })
		}
		wg.Wait()
		for _, status := range statuses {
			if status.IsSuccess() != want {
				t.Fatalf("%s: Filter %v, want fits %v", what, status, want)
			}
		}
		if got := counter.gathers.Load() - before; got != wantGathers {
			t.Errorf("%s: 20 Filter calls gathered the allocated state %d times, want %d", what, got, wantGathers)
		}
	}

	edit(first, true)
	edit(second, true)
	filter(true, 1, "both victims removed: gpu-0, gpu-1 and gpu-3 free")

	late := allocated(builder.MakeClaim("late").Request("gpu", gpuClass, 1), "gpu-3")
	late.UID = "late"
	if err := env.tracker.Reserve(late); err != nil {
		t.Fatal(err)
	}
	filter(false, 0, "gpu-3 put in flight after the gather")

	if !env.tracker.Unreserve(other.UID) {
		t.Fatal("other's allocation did not leave flight")
	}
	filter(true, 1, "gpu-2, in flight at the gather, left flight")

	edit(first, false)
	filter(false, 0, "first victim added back: gpu-1 and gpu-2 free")
	edit(first, true)
	filter(true, 0, "first victim removed again")
}

// A Filter call that the framework stopped (it found enough nodes) is not
// an error in a simulation either: an error would fail the whole
// preemption. (Before: the gather's "context canceled" was one.)
func TestSimulationFilterStopped(t *testing.T) {
	victim, victimClaim := victimPod("victim", "gpu-0")
	preemptor := prioritized("preemptor", 100)
	env := newNominationEnv(t, preemptor, builder.MakeClass(gpuClass), gpuSlice(1), victimClaim, gpuClaim("preemptor-gpu").Obj())
	env.plugin.tracker = &gatherCounter{Fake: env.tracker}
	cs := framework.NewCycleState()
	if _, status := env.plugin.PreFilter(env.ctx, cs, preemptor, nil); !status.IsSuccess() {
		t.Fatalf("PreFilter: %v", status)
	}
	nodeInfo := framework.NewNodeInfo()
	nodeInfo.SetNode(nodeA)
	if status := env.plugin.RemovePod(env.ctx, cs, preemptor, podInfo(t, victim), nodeInfo); !status.IsSuccess() {
		t.Fatalf("RemovePod: %v", status)
	}
	ctx, cancel := context.WithCancel(env.ctx)
	cancel()
	if status := env.plugin.Filter(ctx, cs, preemptor, nodeInfo); status.Code() != fwk.UnschedulableAndUnresolvable {
		t.Errorf("Filter with its context canceled: %v (%s), want the node unschedulable", status, status.Code())
	}
	if status := env.plugin.Filter(env.ctx, cs, preemptor, nodeInfo); !status.IsSuccess() {
		t.Errorf("Filter afterwards: %v, want the pod to fit on the victim's GPU", status)
	}
}

// What the removed pods free, kept as pods are removed and added back one
// at a time, is what counting them from scratch gives: a claim shared by
// two pods is freed only once both are removed, a claim of a pod stuck
// terminating only with another holder that is not, and a pod added back
// takes its devices again.
func TestDryRunFreedIncremental(t *testing.T) {
	var objects []runtime.Object
	var pods []*v1.Pod
	var claims []*resourceapi.ResourceClaim
	for i, device := range []string{"gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-4"} {
		pod, claim := victimPod(string(rune('a'+i)), device)
		pods = append(pods, pod)
		claims = append(claims, claim)
	}
	// Pod e is stuck terminating; claim d-gpu is shared by d and e, and
	// claim a-gpu by a and b, whose own claim b-gpu it also holds.
	pods[4].DeletionTimestamp = &metav1.Time{Time: time.Now().Add(-time.Hour)}
	claims[3].Status.ReservedFor = append(claims[3].Status.ReservedFor, claims[4].Status.ReservedFor...)
	pods[4].Spec.ResourceClaims = append(pods[4].Spec.ResourceClaims, pods[3].Spec.ResourceClaims...)
	pods[4].Spec.ResourceClaims[1].Name = "shared"
	claims[0].Status.ReservedFor = append(claims[0].Status.ReservedFor, claims[1].Status.ReservedFor...)
	pods[1].Spec.ResourceClaims = append(pods[1].Spec.ResourceClaims, pods[0].Spec.ResourceClaims...)
	pods[1].Spec.ResourceClaims[1].Name = "shared"
	for _, claim := range claims {
		objects = append(objects, claim)
	}
	preemptor := prioritized("preemptor", 100)
	env := newNominationEnv(t, preemptor, append(objects, builder.MakeClass(gpuClass), gpuSlice(5), gpuClaim("preemptor-gpu").Obj())...)
	cs := framework.NewCycleState()
	if _, status := env.plugin.PreFilter(env.ctx, cs, preemptor, nil); !status.IsSuccess() {
		t.Fatalf("PreFilter: %v", status)
	}
	nodeInfo := framework.NewNodeInfo()
	nodeInfo.SetNode(nodeA)

	// fromScratch counts the devices of the claims that the removed pods
	// free, claim by claim.
	fromScratch := func(d *dryRun) []string {
		state := core.NewAllocatedState()
		for _, claim := range claims {
			if d.victims.Frees(claim, time.Now()) {
				core.AddAllocation(&state, claim.Status.Allocation, true)
			}
		}
		return devices(state)
	}
	check := func(step string, want []string) {
		t.Helper()
		s, err := getState(cs)
		if err != nil {
			t.Fatal(err)
		}
		got := devices(s.dryRun.victims.FreedState())
		if diff := cmp.Diff(fromScratch(s.dryRun), got); diff != "" {
			t.Fatalf("%s: freed devices differ from counting them from scratch (-scratch +kept):\n%s", step, diff)
		}
		if want != nil {
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("%s: freed devices (-want +got):\n%s", step, diff)
			}
		}
	}
	edit := func(pod *v1.Pod, remove bool) {
		t.Helper()
		editDryRun(t, env, cs, preemptor, pod, remove)
	}

	edit(pods[0], true)
	check("a removed: a-gpu still held by b", []string{})
	edit(pods[1], true)
	check("a and b removed", []string{"gpu-0", "gpu-1"})
	edit(pods[4], true)
	check("e removed, stuck", []string{"gpu-0", "gpu-1"})
	edit(pods[3], true)
	check("d removed too", []string{"gpu-0", "gpu-1", "gpu-3"})
	edit(pods[0], false)
	check("a added back", []string{"gpu-1", "gpu-3"})

	// A clone shares the edits until one of them is edited.
	clone := cs.Clone()
	if status := env.plugin.AddPod(env.ctx, clone, preemptor, podInfo(t, pods[3]), nodeInfo); !status.IsSuccess() {
		t.Fatalf("AddPod on the clone: %v", status)
	}
	cloned, err := getState(clone)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"gpu-1"}, devices(cloned.dryRun.victims.FreedState())); diff != "" {
		t.Errorf("clone after d added back (-want +got):\n%s", diff)
	}
	check("clone edited", []string{"gpu-1", "gpu-3"})

	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		pod := pods[rng.IntN(len(pods))]
		edit(pod, rng.IntN(2) == 0)
		check(fmt.Sprintf("random step %d", i), nil)
	}
}

// editDryRun removes the pod from the preemptor's state on its node
// (node-a or node-b), as preemption's dry run does, or adds it back.
func editDryRun(t *testing.T, env *nominationEnv, cs fwk.CycleState, preemptor, pod *v1.Pod, remove bool) {
	t.Helper()
	nodeInfo := framework.NewNodeInfo()
	nodeInfo.SetNode(nodeA)
	if pod.Spec.NodeName == nodeB.Name {
		nodeInfo.SetNode(nodeB)
	}
	var status *fwk.Status
	if remove {
		status = env.plugin.RemovePod(env.ctx, cs, preemptor, podInfo(t, pod), nodeInfo)
	} else {
		status = env.plugin.AddPod(env.ctx, cs, preemptor, podInfo(t, pod), nodeInfo)
	}
	if !status.IsSuccess() {
		t.Fatalf("edit %s: %v", pod.Name, status)
	}
}

// devices lists the dedicated devices of a state, sorted.
func devices(state structured.AllocatedState) []string {
	out := []string{}
	for id := range state.AllocatedDevices {
		out = append(out, id.Device.String())
	}
	slices.Sort(out)
	return out
}
