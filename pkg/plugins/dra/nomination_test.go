package dra

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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/pkg/tracker"
)

// nominationEnv is a plugin whose pod informer and nominator hold the
// given pods, as the scheduler's do.
type nominationEnv struct {
	*pluginEnv
	t         *testing.T
	nominated map[string][]fwk.PodInfo
}

func newNominationEnv(t *testing.T, pod *v1.Pod, objects ...runtime.Object) *nominationEnv {
	t.Helper()
	env := &nominationEnv{pluginEnv: newPluginEnv(t, pod, objects...), t: t, nominated: map[string][]fwk.PodInfo{}}
	env.plugin.nominationMargin = 30 * time.Second
	env.plugin.fh = testHandle{factory: env.plugin.fh.SharedInformerFactory(), nominated: env.nominated}
	if pod != nil {
		env.addPod(pod)
	}
	return env
}

// addPod puts a pod in the scheduler's pod informer.
func (env *nominationEnv) addPod(pod *v1.Pod) {
	env.t.Helper()
	if err := env.plugin.fh.SharedInformerFactory().Core().V1().Pods().Informer().GetStore().Add(pod); err != nil {
		env.t.Fatal(err)
	}
}

// nominate records a nomination of the pod to node-a for the devices,
// waiting for the victims' claims, and tells the nominator.
func (env *nominationEnv) nominate(pod *v1.Pod, devices []string, victims ...*resourceapi.ResourceClaim) *tracker.Nomination {
	env.t.Helper()
	info, err := framework.NewPodInfo(pod)
	if err != nil {
		env.t.Fatal(err)
	}
	env.nominated["node-a"] = append(env.nominated["node-a"], info)
	env.addPod(pod)
	n := &tracker.Nomination{
		Pod: pod.UID, Namespace: pod.Namespace, Name: pod.Name, Node: "node-a",
		Priority:    ptr.Deref(pod.Spec.Priority, 0),
		Allocations: []resourceapi.AllocationResult{*allocated(gpuClaim("x"), devices[0]).Status.Allocation},
		Victims:     victimClaims(victims),
		Expires:     time.Now().Add(time.Minute),
	}
	for _, claim := range victims {
		for _, consumer := range claim.Status.ReservedFor {
			n.VictimPods = append(n.VictimPods, consumer.UID)
		}
	}
	for _, device := range devices[1:] {
		n.Allocations[0].Devices.Results = append(n.Allocations[0].Devices.Results, resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: gpuClass, Pool: gpuPool, Device: device})
	}
	env.tracker.Nominations().Add(n)
	return n
}

// filter runs PreFilter and Filter on node-a for the pod.
func (env *nominationEnv) filter(pod *v1.Pod) (*stateData, *fwk.Status) {
	env.t.Helper()
	cs := framework.NewCycleState()
	if _, status := env.plugin.PreFilter(env.ctx, cs, pod, nil); !status.IsSuccess() {
		env.t.Fatalf("PreFilter: %v", status)
	}
	s, err := getState(cs)
	if err != nil {
		env.t.Fatal(err)
	}
	nodeInfo := framework.NewNodeInfo()
	nodeInfo.SetNode(nodeA)
	return s, env.plugin.Filter(env.ctx, cs, pod, nodeInfo)
}

// prioritized returns a pod with a claim of one GPU and the priority.
func prioritized(name string, priority int32) *v1.Pod {
	pod := builder.MakePod(name).Claim("gpu", name+"-gpu").Obj()
	pod.UID = types.UID(name)
	pod.Spec.Priority = ptr.To(priority)
	return pod
}

// A nomination holds its devices for every pod of its nominee's priority
// or lower, not for a pod of higher priority, and not for the nominee.
func TestNominationHeldForOthers(t *testing.T) {
	nominee := prioritized("nominee", 100)
	for name, tc := range map[string]struct {
		pod      *v1.Pod
		wantFits bool
	}{
		"lower priority":  {pod: prioritized("low", 10)},
		"equal priority":  {pod: prioritized("equal", 100)},
		"higher priority": {pod: prioritized("high", 1000), wantFits: true},
		"the nominee":     {pod: nominee, wantFits: true},
	} {
		t.Run(name, func(t *testing.T) {
			objects := []runtime.Object{builder.MakeClass(gpuClass), gpuSlice(1), gpuClaim(tc.pod.Name + "-gpu").Obj()}
			if tc.pod != nominee {
				objects = append(objects, gpuClaim("nominee-gpu").Obj())
			}
			env := newNominationEnv(t, tc.pod, objects...)
			env.nominate(nominee, []string{"gpu-0"})
			_, status := env.filter(tc.pod)
			if status.IsSuccess() != tc.wantFits {
				t.Errorf("Filter: %v, want fits %v", status, tc.wantFits)
			}
			if !tc.wantFits && !strings.Contains(status.Message(), "in use") {
				t.Errorf("Filter: %q, want the nominated device in use", status.Message())
			}
		})
	}
}

// A nomination that no longer stands ends in the next cycle of any pod:
// its nominee is gone, bound, or no longer nominated to the node.
func TestNominationStands(t *testing.T) {
	for name, tc := range map[string]struct {
		change func(env *nominationEnv, nominee *v1.Pod)
		want   tracker.EndReason
	}{
		"stands": {},
		"nominee deleted": {change: func(env *nominationEnv, nominee *v1.Pod) {
			if err := env.plugin.fh.SharedInformerFactory().Core().V1().Pods().Informer().GetStore().Delete(nominee); err != nil {
				t.Fatal(err)
			}
		}, want: tracker.EndPodGone},
		"nominee bound": {change: func(env *nominationEnv, nominee *v1.Pod) {
			bound := nominee.DeepCopy()
			bound.Spec.NodeName = "node-b"
			env.addPod(bound)
		}, want: tracker.EndBound},
		"nomination cleared": {change: func(env *nominationEnv, _ *v1.Pod) {
			delete(env.nominated, "node-a")
		}, want: tracker.EndLost},
	} {
		t.Run(name, func(t *testing.T) {
			pod := prioritized("low", 10)
			nominee := prioritized("nominee", 100)
			env := newNominationEnv(t, pod, builder.MakeClass(gpuClass), gpuSlice(1), gpuClaim("low-gpu").Obj(), gpuClaim("nominee-gpu").Obj())
			env.nominate(nominee, []string{"gpu-0"})
			if tc.change != nil {
				tc.change(env, nominee)
			}
			_, status := env.filter(pod)
			n := env.tracker.Nominations().Get(nominee.UID)
			if tc.want == "" {
				if n == nil || status.IsSuccess() {
					t.Errorf("nomination %v, Filter %v; want the nomination held", n, status)
				}
				return
			}
			if n != nil {
				t.Errorf("nomination still there after %s", tc.want)
			}
			if !status.IsSuccess() {
				t.Errorf("Filter: %v, want the device free once the nomination ended", status)
			}
		})
	}
}

// A dry run that evicts a pod whose device is nominated for another
// preemptor does not get that device: the nomination is counted after the
// dry run's edits. (Before: two preemptors counted one terminating victim's
// device, and neither could hold its devices.)
func TestDryRunKeepsNominations(t *testing.T) {
	for name, nominated := range map[string]bool{"device nominated for another preemptor": true, "no nomination": false} {
		t.Run(name, func(t *testing.T) {
			preemptor := prioritized("preemptor", 100)
			other := prioritized("other", 100)
			victim := builder.MakePod("pod-victim").Claim("gpu", "victim-gpu").Obj() // named as allocated names it
			victim.UID = "victim"
			claim := allocated(gpuClaim("victim-gpu"), "gpu-0", victim.UID)
			env := newNominationEnv(t, preemptor, builder.MakeClass(gpuClass), gpuSlice(1), gpuClaim("preemptor-gpu").Obj(), claim)
			env.addPod(victim)
			if nominated {
				env.nominate(other, []string{"gpu-0"}, claim)
			}
			cs := framework.NewCycleState()
			if _, status := env.plugin.PreFilter(env.ctx, cs, preemptor, nil); !status.IsSuccess() {
				t.Fatalf("PreFilter: %v", status)
			}
			nodeInfo := framework.NewNodeInfo()
			nodeInfo.SetNode(nodeA)
			victimInfo, err := framework.NewPodInfo(victim)
			if err != nil {
				t.Fatal(err)
			}
			dry := cs.Clone()
			if status := env.plugin.RemovePod(env.ctx, dry, preemptor, victimInfo, nodeInfo); !status.IsSuccess() {
				t.Fatalf("RemovePod: %v", status)
			}
			status := env.plugin.Filter(env.ctx, dry, preemptor, nodeInfo)
			if nominated == status.IsSuccess() {
				t.Errorf("Filter after removing the victim: %v, want fits %v", status, !nominated)
			}
		})
	}
}

// A pod terminating for longer than its grace period and the margin is
// stuck: removing it in a dry run frees nothing, so that preemption finds
// other victims instead of waiting for it again.
func TestDryRunStuckVictim(t *testing.T) {
	for name, tc := range map[string]struct {
		deleted  time.Duration // ago; zero: not deleted
		wantFits bool
	}{
		"running":              {wantFits: true},
		"terminating":          {deleted: 5 * time.Second, wantFits: true},
		"stuck past the bound": {deleted: time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			preemptor := prioritized("preemptor", 100)
			victim := builder.MakePod("pod-victim").Claim("gpu", "victim-gpu").Obj()
			victim.UID = "victim"
			if tc.deleted > 0 {
				victim.DeletionTimestamp = &metav1.Time{Time: time.Now().Add(-tc.deleted)}
			}
			claim := allocated(gpuClaim("victim-gpu"), "gpu-0", victim.UID)
			env := newNominationEnv(t, preemptor, builder.MakeClass(gpuClass), gpuSlice(1), gpuClaim("preemptor-gpu").Obj(), claim)
			cs := framework.NewCycleState()
			if _, status := env.plugin.PreFilter(env.ctx, cs, preemptor, nil); !status.IsSuccess() {
				t.Fatalf("PreFilter: %v", status)
			}
			nodeInfo := framework.NewNodeInfo()
			nodeInfo.SetNode(nodeA)
			victimInfo, err := framework.NewPodInfo(victim)
			if err != nil {
				t.Fatal(err)
			}
			dry := cs.Clone()
			if status := env.plugin.RemovePod(env.ctx, dry, preemptor, victimInfo, nodeInfo); !status.IsSuccess() {
				t.Fatalf("RemovePod: %v", status)
			}
			if status := env.plugin.Filter(env.ctx, dry, preemptor, nodeInfo); status.IsSuccess() != tc.wantFits {
				t.Errorf("Filter after removing the victim: %v, want fits %v", status, tc.wantFits)
			}
		})
	}
}

// The nominee waits for its victims' claims while they are being freed,
// and only then; whatever shows that its nomination can no longer be
// honoured ends it, and it may preempt again.
func TestNominationWait(t *testing.T) {
	for name, tc := range map[string]struct {
		// victimPod: the victim's pod as the informer has it; nil: gone.
		victimPod func(*v1.Pod) *v1.Pod
		// claim changes the victim's claim before the cycle; during,
		// after the cycle took its state.
		claim, during func(*resourceapi.ResourceClaim) *resourceapi.ResourceClaim
		// sharer: a running pod named sharer exists.
		sharer bool
		// taken: gpu-1, nominated, is allocated to another claim.
		taken bool
		// thief: the victim's claim is deleted and gpu-0, its device, is
		// allocated ("allocated") or in flight ("in flight") for another
		// claim.
		thief   string
		expired bool
		want    string // a part of the message; "" for no wait
		wantEnd bool
	}{
		"victim gone, claim still allocated": {want: "waiting for 1 resource claims of preempted pods on node node-a"},
		// Preemption deletes the victims after it nominated the pod: the
		// nominee's next cycle may come before the informer shows the
		// deletion. (Before: the victim looked like a new consumer, the
		// nomination ended and the nominee preempted on another node.)
		"victim's deletion not seen yet": {victimPod: func(p *v1.Pod) *v1.Pod { return p }, want: "waiting for 1"},
		"victim terminating": {victimPod: func(p *v1.Pod) *v1.Pod {
			p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
			return p
		}, want: "waiting for 1"},
		"claim gained a consumer": {claim: func(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
			c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "sharer", UID: "sharer"})
			return c
		}, sharer: true, wantEnd: true},
		"claim deallocated during the cycle": {during: deallocated, want: "waiting for 1"},
		"claim deallocated before the cycle": {claim: deallocated, wantEnd: true},
		"nominated device taken":             {taken: true, wantEnd: true},
		// The cycle's snapshot counts gpu-0 because the other claim holds
		// it, not the victim's. (Before: that looked like the victim's
		// claim still being freed, and the nominee waited until its
		// nomination's bound.)
		"victim's claim gone, its device allocated to another claim": {thief: "allocated", wantEnd: true},
		// In flight, it may still be dropped (a pod group that does not
		// fit); PreBind ends the nomination once it is written.
		"victim's claim gone, its device in flight for another claim": {thief: "in flight", want: "waiting for 1"},
		"expired": {expired: true, wantEnd: true},
	} {
		t.Run(name, func(t *testing.T) {
			nominee := prioritized("nominee", 100)
			nominee.Spec.ResourceClaims[0].ResourceClaimName = ptr.To("nominee-gpus")
			victim := builder.MakePod("pod-victim").Obj()
			victim.UID = "victim"
			claim := allocated(gpuClaim("victim-gpu"), "gpu-0", victim.UID)
			objects := []runtime.Object{builder.MakeClass(gpuClass), gpuSlice(2), builder.MakeClaim("nominee-gpus").Request("gpu", gpuClass, 2).Obj()}
			if tc.claim != nil {
				claim = tc.claim(claim.DeepCopy())
			}
			switch tc.thief {
			case "":
				objects = append(objects, claim)
			case "allocated":
				objects = append(objects, allocated(gpuClaim("thief-gpu"), "gpu-0", "thief"))
			}
			if tc.taken {
				objects = append(objects, allocated(gpuClaim("other-gpu"), "gpu-1", "other"))
			}
			env := newNominationEnv(t, nominee, objects...)
			if tc.victimPod != nil {
				env.addPod(tc.victimPod(victim.DeepCopy()))
			}
			if tc.sharer {
				sharer := builder.MakePod("sharer").Obj()
				sharer.UID = "sharer"
				env.addPod(sharer)
			}
			if tc.thief == "in flight" {
				thief := allocated(gpuClaim("thief-gpu"), "gpu-0")
				env.tracker.Add(gpuClaim("thief-gpu").Obj())
				if err := env.tracker.Reserve(thief); err != nil {
					t.Fatal(err)
				}
			}
			n := env.nominate(nominee, []string{"gpu-0", "gpu-1"}, allocated(gpuClaim("victim-gpu"), "gpu-0", victim.UID))
			if tc.expired {
				expired := *n
				expired.Expires = time.Now().Add(-time.Second)
				env.tracker.Nominations().Add(&expired)
			}
			s, status := env.filter(nominee)
			if tc.want != "" && status.IsSuccess() {
				t.Fatalf("Filter: success, want the nominee not to fit yet")
			}
			if tc.during != nil {
				env.tracker.Add(tc.during(claim.DeepCopy()))
			}

			got, msg := env.plugin.nominationWait(env.ctx, s.base, nominee)
			switch {
			case tc.want != "":
				if got == nil || !strings.Contains(msg, tc.want) || !strings.Contains(msg, "nominated for the pod until") {
					t.Errorf("wait %v %q, want to wait: %q, with its bound", got, msg, tc.want)
				}
			case got != nil:
				t.Errorf("waits: %q; want no wait", msg)
			}
			if ended := env.tracker.Nominations().Get(nominee.UID) == nil; ended != tc.wantEnd {
				t.Errorf("nomination ended %v, want %v", ended, tc.wantEnd)
			}
		})
	}
}

// A pod that writes devices nominated for another pod ends that
// nomination in its PreBind, so that the nominee preempts again at once:
// only a pod of higher priority than the nominee can take them, and it
// does not give them back. A nomination whose devices it did not take
// stands, and the pod's own ends as bound.
func TestPreBindEndsNominationsItTakes(t *testing.T) {
	for name, tc := range map[string]struct {
		nominated []string // the other nominee's devices
		wantEnd   bool
	}{
		"takes a nominated device":  {nominated: []string{"gpu-0"}, wantEnd: true},
		"takes one of two":          {nominated: []string{"gpu-1", "gpu-0"}, wantEnd: true},
		"takes no nominated device": {nominated: []string{"gpu-1"}},
	} {
		t.Run(name, func(t *testing.T) {
			high := prioritized("high", 1000)
			nominee := prioritized("nominee", 100)
			env := newNominationEnv(t, high, builder.MakeClass(gpuClass), gpuSlice(2), gpuClaim("high-gpu").Obj(), gpuClaim("nominee-gpu").Obj())
			env.nominate(nominee, tc.nominated)
			env.nominate(high, []string{"gpu-0"})
			cs := framework.NewCycleState()
			if _, status := env.plugin.PreFilter(env.ctx, cs, high, nil); !status.IsSuccess() {
				t.Fatalf("PreFilter: %v", status)
			}
			nodeInfo := framework.NewNodeInfo()
			nodeInfo.SetNode(nodeA)
			if status := env.plugin.Filter(env.ctx, cs, high, nodeInfo); !status.IsSuccess() {
				t.Fatalf("Filter: %v", status)
			}
			if status := env.plugin.Reserve(env.ctx, cs, high, "node-a"); !status.IsSuccess() {
				t.Fatalf("Reserve: %v", status)
			}
			if env.tracker.Nominations().Get(nominee.UID) == nil {
				t.Fatal("Reserve ended the nomination: a pod group cycle may still unreserve the devices")
			}
			if status := env.plugin.PreBind(env.ctx, cs, high, "node-a"); !status.IsSuccess() {
				t.Fatalf("PreBind: %v", status)
			}
			if env.tracker.Nominations().Get(high.UID) != nil {
				t.Error("the pod's own nomination stands after PreBind")
			}
			if ended := env.tracker.Nominations().Get(nominee.UID) == nil; ended != tc.wantEnd {
				t.Errorf("the other nomination ended %v, want %v", ended, tc.wantEnd)
			}
		})
	}
}

func deallocated(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	c.Status.Allocation, c.Status.ReservedFor = nil, nil
	return c
}

// A pod without claims, nominated to a node where claims are being freed,
// is never held: the preemption plugin runs DefaultPreemption for it.
// (Before: StructuredDRA's PostFilter answered "waiting for 1 resource
// claims of deleted pods" for it, which ended the PostFilter chain.)
func TestClaimlessPodNeverWaits(t *testing.T) {
	pod := builder.MakePod("plain").Obj()
	pod.UID = "plain"
	pod.Status.NominatedNodeName = "node-a"
	victim := builder.MakePod("pod-victim").Obj()
	victim.UID = "victim"
	victim.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	env := newNominationEnv(t, pod, builder.MakeClass(gpuClass), gpuSlice(1), allocated(gpuClaim("victim-gpu"), "gpu-0", victim.UID))
	env.addPod(victim)
	cs := framework.NewCycleState()
	if _, status := env.plugin.PreFilter(env.ctx, cs, pod, nil); !status.IsSuccess() && status.Code() != fwk.Skip {
		t.Fatalf("PreFilter: %v", status)
	}
	result, status := env.plugin.PostFilter(env.ctx, cs, pod, nil)
	if status.Code() != fwk.Unschedulable || result != nil {
		t.Errorf("PostFilter: %v, %v; want Unschedulable without a result, so that preemption runs", result, status)
	}
	if n, msg := env.plugin.nominationWait(env.ctx, nil, pod); n != nil {
		t.Errorf("claimless pod waits: %q", msg)
	}
}

// Cross-node victims: a PodGroup victim spans node-a and node-b, and
// DefaultPreemption dry-runs both nodes in parallel, removing the group's
// pods with each pod's own node. Each dry run keeps its fit under the node
// it evaluates, with the claims of all the group's pods as freed, and no
// map is shared between them (run with -race).
func TestDryRunsOfCrossNodeVictims(t *testing.T) {
	preemptor := prioritized("preemptor", 100)
	victims := []*v1.Pod{}
	var claims []runtime.Object
	for _, node := range []string{"node-a", "node-b"} {
		victim := builder.MakePod("pod-victim-"+node).Claim("gpu", "victim-"+node).Obj()
		victim.UID = types.UID("victim-" + node)
		victim.Spec.NodeName = node
		victims = append(victims, victim)
		claim := allocated(gpuClaim("victim-"+node), "gpu-0", victim.UID)
		if node == "node-b" {
			claim.Status.Allocation.Devices.Results[0].Pool = "node-b"
			claim.Status.Allocation.NodeSelector.NodeSelectorTerms[0].MatchFields[0].Values = []string{"node-b"}
		}
		claims = append(claims, claim)
	}
	objects := append([]runtime.Object{builder.MakeClass(gpuClass), gpuSlice(1),
		builder.MakeSlice("node-b").Node("node-b").Devices(builder.Devices("gpu", 1, nil)...).Obj(),
		gpuClaim("preemptor-gpu").Obj()}, claims...)
	env := newNominationEnv(t, preemptor, objects...)
	cs := framework.NewCycleState()
	if _, status := env.plugin.PreFilter(env.ctx, cs, preemptor, nil); !status.IsSuccess() {
		t.Fatalf("PreFilter: %v", status)
	}
	s, err := getState(cs)
	if err != nil {
		t.Fatal(err)
	}
	nodeInfos := map[string]*framework.NodeInfo{}
	for _, node := range []*v1.Node{nodeA, nodeB} {
		nodeInfos[node.Name] = framework.NewNodeInfo()
		nodeInfos[node.Name].SetNode(node)
	}
	var wg sync.WaitGroup
	for _, node := range []string{"node-a", "node-b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// As SelectVictimsOnNode does: name the node, remove the
			// group's pods with their own nodes, filter the node.
			dry := cs.Clone()
			ds, _ := getState(dry)
			ds.dryRun.node = node
			for _, victim := range victims {
				info, _ := framework.NewPodInfo(victim)
				if status := env.plugin.RemovePod(env.ctx, dry, preemptor, info, nodeInfos[victim.Spec.NodeName]); !status.IsSuccess() {
					t.Errorf("RemovePod: %v", status)
				}
			}
			if status := env.plugin.Filter(env.ctx, dry, preemptor, nodeInfos[node]); !status.IsSuccess() {
				t.Errorf("Filter on %s: %v", node, status)
			}
			s.results.storeFit(node, &preemptionFit{results: ds.dryRun.fit.get(), victims: victims, freed: env.plugin.freedClaims(ds.dryRun)})
		}()
	}
	wg.Wait()
	for _, node := range []string{"node-a", "node-b"} {
		fit := s.results.fit(node)
		if fit == nil || len(fit.results) != 1 {
			t.Fatalf("fit on %s: %+v, want one allocation", node, fit)
		}
		if got := fit.results[0].Devices.Results[0].Pool; got != node {
			t.Errorf("fit on %s allocates in pool %s", node, got)
		}
		var freed []string
		for _, c := range fit.freed {
			freed = append(freed, c.Name)
		}
		slices.Sort(freed)
		if want := []string{"victim-node-a", "victim-node-b"}; !slices.Equal(freed, want) {
			t.Errorf("claims freed by the dry run of %s: %v, want %v", node, freed, want)
		}
	}
	if _, ok := s.results.allocation("node-a"); ok {
		t.Errorf("a dry run's fit was kept for Reserve")
	}
}

// boundedNominationCases: a nominee whose claim has a selector that takes
// minutes to evaluate on node-a's 2,048 devices (builder.SlowSelector)
// gets no claim nomination, one with an ordinary selector gets one.
var boundedNominationCases = map[string]struct {
	selector string
	want     bool
}{
	"slow selector":     {selector: builder.SlowSelector(gpuClass, "index")},
	"ordinary selector": {selector: `device.attributes["gpu.example.com"].index == -1`, want: true},
}

// slowNominationEnv is a nomination environment with the nominee, its
// claim with the selector, 2,048 devices on node-a in the scheduler's
// snapshot, and filterTimeout 100ms.
func slowNominationEnv(t *testing.T, nominee *v1.Pod, selector string) *nominationEnv {
	t.Helper()
	const count = 16
	objects := []runtime.Object{builder.MakeClass(gpuClass), builder.MakeClaim(nominee.Name+"-gpu").Request("gpu", gpuClass, 1, selector).Obj()}
	for i := range count {
		objects = append(objects, builder.MakeSlice(fmt.Sprintf("node-a-%d", i)).Node("node-a").Pool(gpuPool, 1, count).
			Devices(builder.Devices(fmt.Sprintf("gpu-%d", i), resourceapi.ResourceSliceMaxDevices, func(_ int, d *builder.DeviceWrapper) { d.Int("index", -1) })...).Obj())
	}
	env := newNominationEnv(t, nominee, objects...)
	nodeInfo := framework.NewNodeInfo()
	nodeInfo.SetNode(nodeA)
	env.plugin.fh = snapshotHandle{testHandle: env.plugin.fh.(testHandle), nodes: map[string]fwk.NodeInfo{"node-a": nodeInfo}}
	env.plugin.filterTimeout = 100 * time.Millisecond
	return env
}

// returns runs f and fails the test unless it returns within
// wait.ForeverTestTimeout, hundreds of times filterTimeout; then it
// cancels f's context, which the allocator honours, and waits for it.
func (env *nominationEnv) returns(what string, f func(ctx context.Context)) {
	env.t.Helper()
	ctx, cancel := context.WithCancel(env.ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(ctx)
	}()
	select {
	case <-done:
	case <-time.After(wait.ForeverTestTimeout):
		cancel()
		<-done
		env.t.Fatalf("%s still searched after %s, with filterTimeout %s", what, wait.ForeverTestTimeout, env.plugin.filterTimeout)
	}
}

// TestRebuildNominationsBounded: a new leader rebuilds the claim
// nominations of the pods nominated to a node before its first cycle, each
// nominee's search within filterTimeout as Filter's: a nominee whose
// devices are not found in time gets no nomination, and the rebuild
// returns instead of holding the first cycle.
func TestRebuildNominationsBounded(t *testing.T) {
	for name, tc := range boundedNominationCases {
		t.Run(name, func(t *testing.T) {
			pod := prioritized("nominee", 100)
			pod.Spec.SchedulerName = "test"
			pod.Status.NominatedNodeName = "node-a"
			env := slowNominationEnv(t, pod, tc.selector)
			env.returns("rebuildNominations", env.plugin.rebuildNominations)
			if got := env.tracker.Nominations().Get(pod.UID) != nil; got != tc.want {
				t.Errorf("nomination rebuilt: %v, want %v", got, tc.want)
			}
		})
	}
}
