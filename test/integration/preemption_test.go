package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	draschedconfig "github.com/drasched/drasched/apis/config"
	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/test/integration/framework"
)

// preemption is a test's cluster for DRA-aware preemption: priority
// classes low and high, and pods whose claims come from templates, as the
// claims of pods that preemption evicts usually do.
type preemption struct {
	*framework.Env
	t         *testing.T
	low, high string
}

func setupPreemption(t *testing.T) *preemption {
	env := framework.Setup(t)
	return &preemption{Env: env, t: t, low: env.CreatePriorityClass("low", 10), high: env.CreatePriorityClass("high", 1000)}
}

// fill creates and binds pods of priority class with a claim from template
// each, one after the other so that their devices are predictable.
func (p *preemption) fill(prefix, priority, template string, n int) []string {
	p.t.Helper()
	var names []string
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		p.CreatePod(p.MakePod(name).Priority(priority).ClaimFromTemplate("gpu", template))
		p.WaitForPodScheduled(name)
		names = append(names, name)
	}
	return names
}

// preemptor creates the high-priority pod "high" with a claim from
// template and waits until it is bound.
func (p *preemption) preemptor(template string) *v1.Pod {
	p.t.Helper()
	p.CreatePod(p.MakePod("high").Priority(p.high).ClaimFromTemplate("gpu", template))
	return p.WaitForPodScheduled("high")
}

// devices returns the devices of the pod's claim "gpu".
func (p *preemption) devices(pod *v1.Pod) []string {
	p.t.Helper()
	claim := p.PodClaim(pod, "gpu")
	if claim.Status.Allocation == nil {
		p.t.Fatalf("claim %s of pod %s is not allocated", claim.Name, pod.Name)
	}
	var devices []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		devices = append(devices, r.Device)
	}
	return devices
}

// devicesOf returns the devices of each named pod, by pod name.
func (p *preemption) devicesOf(names []string) map[string][]string {
	p.t.Helper()
	out := map[string][]string{}
	for _, name := range names {
		pod, err := p.Client.CoreV1().Pods(p.Namespace).Get(p.Ctx, name, metav1.GetOptions{})
		if err != nil {
			p.t.Fatalf("get pod %s: %v", name, err)
		}
		out[name] = p.devices(pod)
	}
	return out
}

// gone returns which of the named pods no longer exist.
func (p *preemption) gone(names []string) []string {
	p.t.Helper()
	var out []string
	for _, name := range names {
		_, err := p.Client.CoreV1().Pods(p.Namespace).Get(p.Ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			out = append(out, name)
		case err != nil:
			p.t.Fatalf("get pod %s: %v", name, err)
		}
	}
	return out
}

// preempted checks the message of the preemptor's FailedScheduling event
// in which preemption chose its victims: upstream's DefaultPreemption
// message, with what the victims free for the pod (StructuredDRAPreemption).
func (p *preemption) preempted(preemptor, want string) {
	p.t.Helper()
	events, err := p.Client.EventsV1().Events(p.Namespace).List(p.Ctx, metav1.ListOptions{})
	if err != nil {
		p.t.Fatal(err)
	}
	var messages []string
	for _, e := range events.Items {
		if e.Regarding.Name == preemptor && e.Reason == "FailedScheduling" {
			if _, after, ok := strings.Cut(e.Note, "preemption: found a potential placement"); ok {
				if strings.HasSuffix(after, want) {
					return
				}
			}
			messages = append(messages, e.Note)
		}
	}
	p.t.Errorf("no FailedScheduling event of %s says it preempts and ends in %q; its events: %q", preemptor, want, messages)
}

// logPreemptions logs, for a failure's record, which preemptor evicted
// which pod on which node (the victims' Preempted events) and where each
// preemptor was bound.
func (p *preemption) logPreemptions(preemptors []string) {
	p.t.Helper()
	byUID := map[string]string{}
	for _, name := range preemptors {
		pod, err := p.Client.CoreV1().Pods(p.Namespace).Get(p.Ctx, name, metav1.GetOptions{})
		if err != nil {
			p.t.Fatal(err)
		}
		byUID[string(pod.UID)] = name
		p.t.Logf("%s bound to %s", name, pod.Spec.NodeName)
	}
	events, err := p.Client.EventsV1().Events(p.Namespace).List(p.Ctx, metav1.ListOptions{})
	if err != nil {
		p.t.Fatal(err)
	}
	slices.SortFunc(events.Items, func(a, b eventsv1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	for _, e := range events.Items {
		if e.Reason != "Preempted" {
			continue
		}
		note := e.Note
		for uid, name := range byUID {
			note = strings.ReplaceAll(note, uid, name)
		}
		p.t.Logf("%s %s: %s", e.EventTime.Format("15:04:05.000"), e.Regarding.Name, note)
	}
}

// stays checks that preemption, tried for the preemptor, chose no victims
// and none of the named pods is evicted: the preemptor is unschedulable
// with the message of a failed attempt, which says what DefaultPreemption
// found, and in the same version of the pod it is not nominated to a node.
// Preemption evicts only the victims of the candidate it nominates, so an
// attempt that nominated nothing evicted nothing, then or later; and
// nothing in these tests tries the preemptor again.
func (p *preemption) stays(preemptor string, names []string) {
	p.t.Helper()
	pod := p.WaitForPod(preemptor, "unschedulable after preemption was tried", func(pod *v1.Pod) bool {
		c := framework.PodScheduledCondition(pod)
		return pod.Spec.NodeName == "" && c != nil && c.Status == v1.ConditionFalse &&
			c.Reason == v1.PodReasonUnschedulable && strings.Contains(c.Message, "preemption:")
	})
	if msg := framework.PodScheduledCondition(pod).Message; strings.Contains(msg, "preempting") {
		p.t.Errorf("pod %s: %q, want preemption to find no victims", preemptor, msg)
	}
	if pod.Status.NominatedNodeName != "" {
		p.t.Errorf("pod %s nominated to %s, want preemption to find no node", preemptor, pod.Status.NominatedNodeName)
	}
	if gone := p.gone(names); len(gone) > 0 {
		p.t.Errorf("pods %v were evicted, want none", gone)
	}
}

// A high-priority pod asking for four GPUs of a node full of one-GPU pods
// of low priority evicts exactly four of them and gets their GPUs, with
// drasched's allocator and with allocator: upstream (whose dry run works
// on a copy of the edited state).
func TestPreemptionFreesDevices(t *testing.T) {
	for _, allocator := range []draschedconfig.AllocatorName{draschedconfig.AllocatorBuiltin, draschedconfig.AllocatorUpstream} {
		t.Run(string(allocator), func(t *testing.T) {
			p := setupPreemption(t)
			node := p.CreateNode("node")
			p.PublishSlices(p.NodeSlice(node, builder.Devices("gpu", 8, nil)...).Obj())
			class := p.CreateClass("gpu")
			p.CreateTemplate(builder.MakeTemplate("one", builder.MakeClaim("").Request("gpu", class, 1)))
			p.CreateTemplate(builder.MakeTemplate("four", builder.MakeClaim("").Request("gpu", class, 4)))
			p.StartScheduler(framework.SchedulerOptions{Configure: framework.UseAllocator(allocator)})

			lows := p.fill("low", p.low, "one", 8)
			before := p.devicesOf(lows)
			high := p.preemptor("four")

			victims := p.gone(lows)
			if len(victims) != 4 {
				t.Fatalf("evicted %v, want exactly four pods", victims)
			}
			var freed []string
			for _, v := range victims {
				freed = append(freed, before[v]...)
			}
			got := p.devices(high)
			slices.Sort(freed)
			slices.Sort(got)
			if !slices.Equal(freed, got) {
				t.Errorf("high-priority pod got %v, the victims held %v", got, freed)
			}
			p.preempted("high", "preempting 4 victims to free 4 devices of request gpu")
			p.VerifyAllocations()
		})
	}
}

// With matchAttribute on the PCIe root, the victims are the pods of one
// root: evicting pods spread over both would free four GPUs that the
// request cannot use together.
func TestPreemptionMatchAttribute(t *testing.T) {
	p := setupPreemption(t)
	node := p.CreateNode("node")
	root := func(i int) string { return []string{"pci-0", "pci-1"}[i/4] }
	p.PublishSlices(p.NodeSlice(node, builder.Devices("gpu", 8, func(i int, d *builder.DeviceWrapper) {
		d.String("pcieRoot", root(i))
	})...).Obj())
	class := p.CreateClass("gpu")
	attribute := p.Driver + "/pcieRoot"
	p.CreateTemplate(builder.MakeTemplate("one", builder.MakeClaim("").Request("gpu", class, 1)))
	p.CreateTemplate(builder.MakeTemplate("four", builder.MakeClaim("").Request("gpu", class, 4).MatchAttribute(attribute)))
	p.StartScheduler(framework.SchedulerOptions{})

	lows := p.fill("low", p.low, "one", 8)
	before := p.devicesOf(lows)
	high := p.preemptor("four")

	victims := p.gone(lows)
	if len(victims) != 4 {
		t.Fatalf("evicted %v, want exactly four pods", victims)
	}
	roots := sets.New[string]()
	for _, v := range victims {
		for _, d := range before[v] {
			var i int
			if _, err := fmt.Sscanf(d, "gpu-%d", &i); err != nil {
				t.Fatal(err)
			}
			roots.Insert(root(i))
		}
	}
	if roots.Len() != 1 {
		t.Errorf("victims held GPUs on roots %v, want one root", sets.List(roots))
	}
	if got := p.devices(high); len(got) != 4 {
		t.Errorf("high-priority pod got %v, want four GPUs", got)
	}
	p.VerifyAllocations()
}

// A claim shared by a low- and a high-priority pod stays allocated while
// the high-priority pod uses it: evicting the low-priority pod frees
// nothing, so it is not evicted.
func TestPreemptionSharedClaim(t *testing.T) {
	p := setupPreemption(t)
	node := p.CreateNode("node")
	p.PublishSlices(p.NodeSlice(node, builder.MakeDevice("gpu-0")).Obj())
	class := p.CreateClass("gpu")
	shared := p.CreateClaim(builder.MakeClaim("shared").Request("gpu", class, 1))
	p.CreateTemplate(builder.MakeTemplate("one", builder.MakeClaim("").Request("gpu", class, 1)))
	p.StartScheduler(framework.SchedulerOptions{})

	p.CreatePod(p.MakePod("low").Priority(p.low).Claim("gpu", shared.Name))
	p.WaitForPodScheduled("low")
	p.CreatePod(p.MakePod("high-user").Priority(p.high).Claim("gpu", shared.Name))
	p.WaitForPodScheduled("high-user")

	p.CreatePod(p.MakePod("preemptor").Priority(p.high).ClaimFromTemplate("gpu", "one"))
	p.stays("preemptor", []string{"low", "high-user"})
}

// Partitions (MIG devices) of two GPUs draw on per-GPU counters. A pod
// asking for a whole GPU evicts the pods of one GPU's partitions and no
// others.
func TestPreemptionPartitions(t *testing.T) {
	p := setupPreemption(t)
	node := p.CreateNode("node")
	counters := builder.MakeSlice(node.Name+"-counters").Driver(p.Driver).Node(node.Name).Pool(node.Name, 1, 2).
		Counters(builder.CounterSet("gpu-0", map[string]string{"memory": "8Gi"}), builder.CounterSet("gpu-1", map[string]string{"memory": "8Gi"}))
	devices := builder.MakeSlice(node.Name+"-devices").Driver(p.Driver).Node(node.Name).Pool(node.Name, 1, 2)
	for _, gpu := range []string{"gpu-0", "gpu-1"} {
		devices.Devices(builder.MakeDevice(gpu).String("size", "whole").Consumes(gpu, map[string]string{"memory": "8Gi"}))
		for _, part := range []string{"a", "b"} {
			devices.Devices(builder.MakeDevice(gpu+"-mig-"+part).String("size", "mig").String("parent", gpu).Consumes(gpu, map[string]string{"memory": "4Gi"}))
		}
	}
	p.PublishSlices(counters.Obj(), devices.Obj())
	whole := p.CreateClass("whole", driverSelector(p.Env, "size", "whole"))
	mig := p.CreateClass("mig", driverSelector(p.Env, "size", "mig"))
	p.CreateTemplate(builder.MakeTemplate("mig", builder.MakeClaim("").Request("gpu", mig, 1)))
	p.CreateTemplate(builder.MakeTemplate("whole", builder.MakeClaim("").Request("gpu", whole, 1)))
	p.StartScheduler(framework.SchedulerOptions{})

	lows := p.fill("low", p.low, "mig", 4)
	before := p.devicesOf(lows)
	high := p.preemptor("whole")

	gpu := p.devices(high)
	if len(gpu) != 1 {
		t.Fatalf("high-priority pod got %v, want one whole GPU", gpu)
	}
	var want []string
	for _, name := range lows {
		if strings.HasPrefix(before[name][0], gpu[0]+"-") {
			want = append(want, name)
		}
	}
	if got := p.gone(lows); !slices.Equal(got, want) {
		t.Errorf("evicted %v, want the pods of %s's partitions %v", got, gpu[0], want)
	}
	// The whole GPU is freed by evicting its partitions' pods.
	p.preempted("high", "preempting 2 victims to free 1 device of request gpu")
	p.VerifyAllocations()
}

// On a device with consumable capacity, a victim frees exactly its share:
// 8Gi for a pod asking for 8Gi of a device whose 10Gi are held as 4Gi, 4Gi
// and 2Gi takes the two 4Gi pods, never the 2Gi one.
func TestPreemptionConsumableCapacity(t *testing.T) {
	p := setupPreemption(t)
	node := p.CreateNode("node")
	p.PublishSlices(p.NodeSlice(node, builder.MakeDevice("gpu-0").Capacity("memory", "10Gi").Shareable(nil)).Obj())
	class := p.CreateClass("gpu")
	for name, size := range map[string]string{"2g": "2Gi", "4g": "4Gi", "8g": "8Gi"} {
		p.CreateTemplate(builder.MakeTemplate(name, builder.MakeClaim("").Request("gpu", class, 1).CapacityRequest("memory", size)))
	}
	p.StartScheduler(framework.SchedulerOptions{})

	fours := p.fill("low-4g", p.low, "4g", 2)
	two := p.fill("low-2g", p.low, "2g", 1)
	p.preemptor("8g")
	if got := p.gone(append(fours, two...)); !slices.Equal(got, fours) {
		t.Errorf("evicted %v, want %v", got, fours)
	}
	p.VerifyAllocations()
}

// Nothing is evicted for a pod of equal priority, for a pod that may not
// preempt, or for a pod whose request no device of the node matches; a pod
// protected by a PodDisruptionBudget is spared when another one will do.
func TestPreemptionNotAllowed(t *testing.T) {
	p := setupPreemption(t)
	node := p.CreateNode("node")
	p.PublishSlices(p.NodeSlice(node, builder.Devices("gpu", 2, nil)...).Obj())
	class := p.CreateClass("gpu")
	p.CreateTemplate(builder.MakeTemplate("one", builder.MakeClaim("").Request("gpu", class, 1)))
	// No disruption controller runs: the budget allows no disruption. It
	// exists before the scheduler starts, so that its informer has it.
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "protected"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "protected"}},
		},
	}
	if _, err := p.Client.PolicyV1().PodDisruptionBudgets(p.Namespace).Create(p.Ctx, pdb, metav1.CreateOptions{}); err != nil {
		p.t.Fatal(err)
	}
	p.StartScheduler(framework.SchedulerOptions{})

	p.CreatePod(p.MakePod("protected").Priority(p.low).Label("app", "protected").ClaimFromTemplate("gpu", "one"))
	p.WaitForPodScheduled("protected")
	p.CreatePod(p.MakePod("other").Priority(p.low).ClaimFromTemplate("gpu", "one"))
	p.WaitForPodScheduled("other")
	lows := []string{"protected", "other"}

	p.t.Run("equal priority", func(t *testing.T) {
		p.CreatePod(p.MakePod("equal").Priority(p.low).ClaimFromTemplate("gpu", "one"))
		p.stays("equal", lows)
		p.DeletePod("equal")
	})
	p.t.Run("PreemptionPolicy Never", func(t *testing.T) {
		never := p.CreatePriorityClass("high-never", 1000, v1.PreemptNever)
		p.CreatePod(p.MakePod("never").Priority(never).ClaimFromTemplate("gpu", "one"))
		p.stays("never", lows)
		p.DeletePod("never")
	})
	p.t.Run("no device matches", func(t *testing.T) {
		// Filter says UnschedulableAndUnresolvable: DefaultPreemption
		// does not even dry-run the node.
		other := p.CreateClass("other", `device.driver == "other.example.com"`)
		p.CreateTemplate(builder.MakeTemplate("other", builder.MakeClaim("").Request("gpu", other, 1)))
		p.CreatePod(p.MakePod("unmatched").Priority(p.high).ClaimFromTemplate("gpu", "other"))
		p.WaitForPodUnschedulable("unmatched", `no device matches the class and selectors`, "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")
		if gone := p.gone(lows); len(gone) > 0 {
			t.Errorf("pods %v were evicted, want none", gone)
		}
		p.DeletePod("unmatched")
	})
	p.t.Run("PodDisruptionBudget", func(t *testing.T) {
		p.preemptor("one")
		if got := p.gone(lows); !slices.Equal(got, []string{"other"}) {
			t.Errorf("evicted %v, want only the pod without a budget", got)
		}
		p.VerifyAllocations()
	})
}

// 100 low-priority one-GPU pods fill ten nodes; 20 high-priority two-GPU
// pods arrive at once. Every one of them binds, no device is in two claims,
// and each of their GPUs was freed by one victim: no pod is evicted for
// nothing.
func TestPreemptionAtScale(t *testing.T) {
	p := setupPreemption(t)
	for _, node := range p.CreateNodes(10) {
		p.PublishSlices(p.NodeSlice(node, builder.Devices("gpu", 10, nil)...).Obj())
	}
	class := p.CreateClass("gpu")
	p.CreateTemplate(builder.MakeTemplate("one", builder.MakeClaim("").Request("gpu", class, 1)))
	p.CreateTemplate(builder.MakeTemplate("two", builder.MakeClaim("").Request("gpu", class, 2)))
	p.StartScheduler(framework.SchedulerOptions{})

	var lowPods, highPods []*builder.PodWrapper
	var lows, highs []string
	for i := range 100 {
		name := fmt.Sprintf("low-%d", i)
		lows = append(lows, name)
		lowPods = append(lowPods, p.MakePod(name).Priority(p.low).ClaimFromTemplate("gpu", "one"))
	}
	p.CreatePods(lowPods)
	<-p.BoundPods(100)
	// Devices by node and name, as the claims hold them.
	held := map[string]string{}
	for name, devices := range p.devicesOf(lows) {
		pod, err := p.Client.CoreV1().Pods(p.Namespace).Get(p.Ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		held[name] = pod.Spec.NodeName + "/" + devices[0]
	}

	for i := range 20 {
		name := fmt.Sprintf("high-%d", i)
		highs = append(highs, name)
		highPods = append(highPods, p.MakePod(name).Priority(p.high).ClaimFromTemplate("gpu", "two"))
	}
	p.CreatePods(highPods)
	p.WaitFor(framework.Timeout, "all high-priority pods bound", func(ctx context.Context) (bool, string, error) {
		bound := 0
		var waiting []string
		for _, name := range highs {
			pod, err := p.Client.CoreV1().Pods(p.Namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			if pod.Spec.NodeName != "" {
				bound++
			} else if c := framework.PodScheduledCondition(pod); c != nil {
				waiting = append(waiting, fmt.Sprintf("%s (nominated %q): %s", name, pod.Status.NominatedNodeName, c.Message))
			}
		}
		return bound == len(highs), fmt.Sprintf("%d of %d bound; %v", bound, len(highs), waiting), nil
	})
	p.WaitForConsistentAllocations()

	got := sets.New[string]()
	for name, devices := range p.devicesOf(highs) {
		pod, err := p.Client.CoreV1().Pods(p.Namespace).Get(p.Ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range devices {
			got.Insert(pod.Spec.NodeName + "/" + d)
		}
	}
	victims := p.gone(lows)
	var wasted []string
	for _, v := range victims {
		if !got.Has(held[v]) {
			wasted = append(wasted, v+" ("+held[v]+")")
		}
	}
	t.Logf("%d low-priority pods evicted for 20 high-priority pods of two GPUs; evicted for no preemptor: %v", len(victims), wasted)
	if len(wasted) > 0 {
		p.logPreemptions(highs)
	}
	// Every GPU of a high-priority pod was held by a low-priority one.
	if len(victims)-len(wasted) != 40 {
		t.Errorf("%d evicted pods freed a device that a high-priority pod got, want 40", len(victims)-len(wasted))
	}
	// No eviction for nothing: claim nomination holds what each
	// preemptor's victims free for it, from the dry run that chose them
	// until it is bound (docs/preemption.md). A wasted eviction is a bug.
	if len(wasted) > 0 {
		t.Errorf("evicted pods whose device no high-priority pod got: %v", wasted)
	}
}
