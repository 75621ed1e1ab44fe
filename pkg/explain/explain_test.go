package explain

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/internal/minor"
	"github.com/drasched/drasched/pkg/allocator"
	"github.com/drasched/drasched/pkg/capacity/kueue"
	"github.com/drasched/drasched/pkg/capacity/kueue/kueuetest"
)

const class = "gpu.example.com"

// gpus are n GPUs gpu-0 ... on the node, pool named after it, each on PCIe
// root pci<i/2> unless modify says otherwise.
func gpus(node string, n int, modify func(i int, d *builder.DeviceWrapper)) *resourceapi.ResourceSlice {
	return builder.MakeSlice(node).Node(node).Devices(builder.Devices("gpu", n, func(i int, d *builder.DeviceWrapper) {
		d.String("resource.kubernetes.io/pcieRoot", fmt.Sprintf("pci%d", i/2))
		if modify != nil {
			modify(i, d)
		}
	})...).Obj()
}

// pod is a pending pod in default with the named claims.
func pod(name string, claims ...string) *v1.Pod {
	w := builder.MakePod(name).UID(name + "-uid")
	for _, c := range claims {
		w.Claim(c, c)
	}
	return w.Obj()
}

// held is a claim allocated devices of the node, reserved for the pod.
func held(name, node string, holder *v1.Pod, devices ...string) *resourceapi.ResourceClaim {
	c := builder.MakeClaim(name).Request("gpu", class, int64(len(devices)))
	for _, d := range devices {
		c.Allocated("gpu", "gpu.example.com", node, d)
	}
	if holder != nil {
		c.ReservedFor(holder)
	}
	return c.Obj()
}

func run(t *testing.T, target string, opts Options, objects ...runtime.Object) *Report {
	t.Helper()
	objects = append(objects, builder.MakeClass(class))
	client := fake.NewClientset(objects...)
	report, err := Explain(context.Background(), client, "default", target, opts)
	if err != nil {
		t.Fatal(err)
	}
	return report
}

func nodeReport(t *testing.T, r *Report, node string) NodeReport {
	t.Helper()
	for _, nr := range r.Nodes {
		if nr.Node == node {
			return nr
		}
	}
	t.Fatalf("no report for node %s in %+v", node, r)
	return NodeReport{}
}

func TestInUseByPods(t *testing.T) {
	a, b := pod("a"), pod("b")
	a.Spec.NodeName, b.Spec.NodeName = "node-a", "node-a"
	objects := []runtime.Object{
		builder.MakeNode("node-a"), gpus("node-a", 2, nil), a, b,
		held("a-gpu", "node-a", a, "gpu-0"), held("b-gpu", "node-a", b, "gpu-1"),
	}

	t.Run("one pod frees enough", func(t *testing.T) {
		objs := append(slices.Clone(objects), pod("p", "one"), builder.MakeClaim("one").Request("gpu", class, 1).Obj())
		nr := nodeReport(t, run(t, "p", Options{}, objs...), "node-a")
		if nr.Fits || len(nr.Reasons) != 1 || nr.Reasons[0].Reason != allocator.ReasonDevicesInUse {
			t.Fatalf("node-a: %+v, want one reason: devices in use", nr)
		}
		holders := nr.Reasons[0].HeldBy
		if len(holders) != 2 || holders[0].Pod != "default/a" || holders[0].Frees != 1 || holders[1].Pod != "default/b" {
			t.Errorf("held by %+v, want pods a and b, one device each", holders)
		}
		want := []string{"fits if pod default/a is deleted", "fits if pod default/b is deleted"}
		if !slices.Equal(nr.Suggestions, want) {
			t.Errorf("suggestions %q, want %q", nr.Suggestions, want)
		}
	})
	t.Run("both pods needed", func(t *testing.T) {
		objs := append(slices.Clone(objects), pod("p", "two"), builder.MakeClaim("two").Request("gpu", class, 2).Obj())
		nr := nodeReport(t, run(t, "p", Options{}, objs...), "node-a")
		want := []string{"fits if pod default/a, pod default/b are deleted"}
		if !slices.Equal(nr.Suggestions, want) {
			t.Errorf("suggestions %q, want %q", nr.Suggestions, want)
		}
	})
}

func TestTaintAndConstraint(t *testing.T) {
	objects := []runtime.Object{
		// node-t: both GPUs tainted.
		builder.MakeNode("node-t"), gpus("node-t", 2, func(_ int, d *builder.DeviceWrapper) {
			d.Taint("gpu.drasched.dev/unhealthy", resourceapi.DeviceTaintEffectNoSchedule)
		}),
		// node-c: two free GPUs on different PCIe roots.
		builder.MakeNode("node-c"), gpus("node-c", 2, func(i int, d *builder.DeviceWrapper) {
			d.String("resource.kubernetes.io/pcieRoot", fmt.Sprintf("root-%d", i))
		}),
		// node-f: two GPUs on one root, free.
		builder.MakeNode("node-f"), gpus("node-f", 2, nil),
		pod("p", "pair"),
		builder.MakeClaim("pair").Request("gpu", class, 2).MatchAttribute("resource.kubernetes.io/pcieRoot").Obj(),
	}
	r := run(t, "p", Options{}, objects...)
	if r.Nodes[0].Node != "node-f" || !r.Nodes[0].Fits || len(r.Nodes[0].Devices) != 2 {
		t.Errorf("first node %+v, want node-f fitting with two devices", r.Nodes[0])
	}
	taint := nodeReport(t, r, "node-t")
	if len(taint.Reasons) == 0 || taint.Reasons[0].Tainted != 2 {
		t.Errorf("node-t reasons %+v, want 2 tainted", taint.Reasons)
	}
	if want := "fits with a toleration for the device taint gpu.drasched.dev/unhealthy=:NoSchedule"; !slices.Contains(taint.Suggestions, want) {
		t.Errorf("node-t suggestions %q, want %q", taint.Suggestions, want)
	}
	constraint := nodeReport(t, r, "node-c")
	if len(constraint.Reasons) == 0 || constraint.Reasons[0].Reason != allocator.ReasonConstraintUnsatisfiable {
		t.Errorf("node-c reasons %+v, want the constraint", constraint.Reasons)
	}
	if len(constraint.Suggestions) != 1 || !strings.Contains(constraint.Suggestions[0], "drops its constraint") {
		t.Errorf("node-c suggestions %q, want dropping the constraint", constraint.Suggestions)
	}

	// --node looks at that node only.
	r = run(t, "p", Options{Node: "node-c"}, objects...)
	if len(r.Nodes) != 1 || r.Nodes[0].Node != "node-c" {
		t.Errorf("with Node: %+v, want node-c only", r.Nodes)
	}
}

func TestBoundPod(t *testing.T) {
	p := pod("p", "one")
	p.Spec.NodeName = "node-a"
	r := run(t, "p", Options{}, builder.MakeNode("node-a"), gpus("node-a", 2, nil), p, held("one", "node-a", p, "gpu-1"))
	if r.Node != "node-a" || len(r.Placement) != 1 || r.Placement[0].Device != "gpu-1" || r.Placement[0].Claim != "default/one" {
		t.Errorf("bound pod: %+v, want node-a, claim one on gpu-1", r)
	}
	if len(r.Nodes) != 0 {
		t.Errorf("a bound pod's report looks at nodes: %+v", r.Nodes)
	}
}

func TestProblems(t *testing.T) {
	missingClass := builder.MakeClaim("gpu").Request("gpu", "no-such-class", 1).Obj()
	template := pod("t")
	template.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptrTo("tmpl")}}
	for name, tc := range map[string]struct {
		objects []runtime.Object
		target  string
		want    string
	}{
		"missing class":       {objects: []runtime.Object{pod("p", "gpu"), missingClass}, target: "p", want: "DeviceClass no-such-class does not exist"},
		"missing claim":       {objects: []runtime.Object{pod("p", "gpu")}, target: "p", want: "ResourceClaim default/gpu does not exist"},
		"claim not generated": {objects: []runtime.Object{template}, target: "t", want: "has not created it yet"},
	} {
		t.Run(name, func(t *testing.T) {
			r := run(t, tc.target, Options{}, append(tc.objects, builder.MakeNode("node-a"))...)
			if len(r.Problems) != 1 || !strings.Contains(r.Problems[0], tc.want) {
				t.Errorf("problems %q, want one saying %q", r.Problems, tc.want)
			}
			if len(r.Nodes) != 0 {
				t.Errorf("nodes looked at despite the problem: %+v", r.Nodes)
			}
		})
	}
	if _, err := Explain(context.Background(), fake.NewClientset(), "default", "nope", Options{}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("missing pod: %v, want an error naming it", err)
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestDeviceTaintRule: explain reads the cluster as top and fit do, with
// DeviceTaintRules applied; a rule it may not read leaves the device
// untainted and a note that says so.
func TestDeviceTaintRule(t *testing.T) {
	rule := minor.NewDeviceTaintRule("drain", nil, nil, ptrTo("gpu-1"), resourceapi.DeviceTaint{Key: "example.com/drain", Effect: resourceapi.DeviceTaintEffectNoSchedule})
	objects := []runtime.Object{builder.MakeNode("node-a"), gpus("node-a", 2, nil), pod("p", "two"),
		builder.MakeClaim("two").Request("gpu", class, 2).Obj(), rule}

	r := run(t, "p", Options{}, objects...)
	nr := nodeReport(t, r, "node-a")
	if nr.Fits || len(nr.Reasons) != 1 || !strings.Contains(nr.Reasons[0].Message, "1 tainted") {
		t.Errorf("with the rule: %+v, want no fit for one tainted device", nr)
	}
	if len(r.Notes) != 0 {
		t.Errorf("with the rule readable: notes %q", r.Notes)
	}

	client := fake.NewClientset(append(objects, builder.MakeClass(class))...)
	client.PrependReactor("list", "devicetaintrules", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "resource.k8s.io", Resource: "devicetaintrules"}, "", nil)
	})
	r, err := Explain(context.Background(), client, "default", "p", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !nodeReport(t, r, "node-a").Fits || len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "DeviceTaintRules not applied") {
		t.Errorf("rules forbidden: %+v, want a fit and a note that the rules were not applied", r)
	}
}

// TestMissingNode: Options.Node naming no node is an error that names it.
func TestMissingNode(t *testing.T) {
	client := fake.NewClientset(builder.MakeNode("node-a"), pod("p"))
	if _, err := Explain(context.Background(), client, "default", "p", Options{Node: "node-b"}); err == nil || !strings.Contains(err.Error(), "node-b") {
		t.Errorf("missing node: %v, want an error naming it", err)
	}
}

// TestKueue: a pod of a Job that Kueue admitted by quota and that fits on
// no node says both; a pending workload says why Kueue waits; without
// Kueue's API the report is as it was.
func TestKueue(t *testing.T) {
	holder := pod("holder")
	holder.Spec.NodeName = "node-a"
	train := kueuetest.OfJob(pod("train-0", "train-0-gpus"), "train")
	cluster := []runtime.Object{
		builder.MakeNode("node-a"), gpus("node-a", 2, nil), holder, held("holder-gpu", "node-a", holder, "gpu-0"),
		train, builder.MakeClaim("train-0-gpus").Request("gpu", class, 2).Obj(),
	}
	admitted := kueuetest.MakeWorkload("job-train-1").Job("train").Queue("team-a").
		Admitted("team-a", kueuetest.PodSet{Name: "main", Count: 1, Flavor: "gpus", Usage: map[string]string{"drasched.dev/gpu": "2"}})
	pending := kueuetest.MakeWorkload("job-train-1").Job("train").Queue("team-a").Pending("insufficient quota for drasched.dev/gpu in flavor gpus")
	for name, tc := range map[string]struct {
		served   bool
		workload *kueuetest.WorkloadWrapper
		want     *kueue.Admission
	}{
		"Kueue absent": {workload: admitted},
		"admitted": {served: true, workload: admitted, want: &kueue.Admission{
			Workload: "default/job-train-1", LocalQueue: "team-a", ClusterQueue: "team-a", Admitted: true, Reason: "Admitted", Message: "The workload is admitted",
			PodSets: []kueue.PodSetQuota{{Name: "main", Count: 1, Resources: []kueue.ResourceUsage{{Name: "drasched.dev/gpu", Quantity: resource.MustParse("2"), Flavor: "gpus"}}}},
		}},
		"pending": {served: true, workload: pending, want: &kueue.Admission{
			Workload: "default/job-train-1", LocalQueue: "team-a", Reason: "Pending", Message: "insufficient quota for drasched.dev/gpu in flavor gpus",
		}},
	} {
		t.Run(name, func(t *testing.T) {
			reader, _ := kueuetest.NewReader(tc.served, tc.workload.Obj())
			r := run(t, "train-0", Options{Kueue: reader}, cluster...)
			if diff := cmp.Diff(tc.want, r.Kueue); diff != "" {
				t.Errorf("Kueue's admission (-want +got):\n%s", diff)
			}
			if len(r.Notes) != 0 {
				t.Errorf("notes %q, want none", r.Notes)
			}
			// The devices' answer, whatever Kueue said.
			nr := nodeReport(t, r, "node-a")
			if nr.Fits || len(nr.Reasons) != 1 || nr.Reasons[0].Reason != allocator.ReasonDevicesInUse {
				t.Errorf("node-a: %+v, want no fit: devices in use", nr)
			}
		})
	}
}
