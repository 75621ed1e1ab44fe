package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/utils/ptr"

	_ "github.com/drasched/drasched/apis/config/scheme" // StructuredDRAArgs
	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/internal/minor"
	"github.com/drasched/drasched/pkg/driver/gpu"
)

// demoPod starts a pod of the demo's scheduler.
func demoPod(name string) *builder.PodWrapper {
	return builder.MakePod(name).UID("uid-" + name).SchedulerName("drasched")
}

func gpuSlice(node string, devices ...resourceapi.Device) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-slice"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: gpu.DefaultDriverName, NodeName: ptr.To(node),
			Pool:    resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
			Devices: devices,
		},
	}
}

func gpuDevice(name, product, root string) resourceapi.Device {
	return resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"type":                            {StringValue: ptr.To("gpu")},
		"productName":                     {StringValue: ptr.To(product)},
		"resource.kubernetes.io/pcieRoot": {StringValue: ptr.To(root)},
	}}
}

func migDevice(name, product, profile string, parent int64) resourceapi.Device {
	return resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"type":        {StringValue: ptr.To("mig")},
		"productName": {StringValue: ptr.To(product)},
		"profile":     {StringValue: ptr.To(profile)},
		"parentIndex": {IntValue: ptr.To(parent)},
	}}
}

// cluster is a settled demo: four pods bound (two share a claim), one
// unschedulable, plus a pod of another scheduler.
func cluster() []runtime.Object {
	one := demoPod("one-gpu").ClaimFromTemplate("gpu", "tmpl").ClaimStatus("gpu", "one-gpu-gpu-abc").Node("n1").Obj()
	mig := demoPod("mig-slice").ClaimFromTemplate("mig", "tmpl").ClaimStatus("mig", "mig-slice-mig-def").Node("n2").Obj()
	sharedA := demoPod("shared-a").Claim("gpu", "shared").Node("n1").Obj()
	sharedB := demoPod("shared-b").Claim("gpu", "shared").Node("n1").Obj()
	big := demoPod("big").ClaimFromTemplate("gpus", "tmpl").ClaimStatus("gpus", "big-gpus-xyz").Unschedulable("0/2 nodes are available: 2 cannot allocate all claims.").Obj()
	other := demoPod("other").Obj()
	other.Spec.SchedulerName = "default-scheduler"
	return []runtime.Object{
		one, mig, sharedA, sharedB, big, other,
		builder.MakeClaim("one-gpu-gpu-abc").Allocated("gpu", gpu.DefaultDriverName, "n1", "gpu-0").ReservedFor(one).Obj(),
		builder.MakeClaim("mig-slice-mig-def").Allocated("mig", gpu.DefaultDriverName, "n2", "gpu-1-mig-x").ReservedFor(mig).Obj(),
		builder.MakeClaim("shared").Allocated("gpu", gpu.DefaultDriverName, "n1", "gpu-1").ReservedFor(sharedA, sharedB).Obj(),
		builder.MakeClaim("big-gpus-xyz").Obj(),
		gpuSlice("n1", gpuDevice("gpu-0", "NVIDIA L40S", "pci0000:00"), gpuDevice("gpu-1", "NVIDIA L40S", "pci0000:40")),
		gpuSlice("n2", migDevice("gpu-1-mig-x", "NVIDIA A100-SXM4-40GB", "1g.5gb", 1)),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}},
	}
}

func TestReport(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset(cluster()...)
	var out bytes.Buffer
	if err := report(ctx, client, &out, query{namespace: "default", schedulerName: "drasched"}, sets.New("big"), nil, 5*time.Second); err != nil {
		t.Fatalf("%v\noutput:\n%s", err, out.String())
	}
	// Drop the progress lines, which carry times.
	_, table, _ := strings.Cut(out.String(), "\n\n")
	want := `POD        NODE  REQUEST  DEVICE       WHAT
big        -     -        -            unschedulable, see below
mig-slice  n2    mig      gpu-1-mig-x  MIG 1g.5gb on gpu-1, A100-SXM4-40GB
one-gpu    n1    gpu      gpu-0        L40S, pcieRoot pci0000:00
shared-a   n1    gpu      gpu-1        L40S, pcieRoot pci0000:40 (claim shared, shared by 2 pods)
shared-b   n1    gpu      gpu-1        L40S, pcieRoot pci0000:40 (claim shared, shared by 2 pods)

Why the scheduler left pods pending (their PodScheduled condition):
  big: 0/2 nodes are available: 2 cannot allocate all claims.

Checked: 4 pods bound, every claim allocated on its pod's node and reserved for it, no device allocated twice.
`
	if diff := cmp.Diff(want, table); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
}

func TestReportUnexpected(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset(cluster()...)
	var out bytes.Buffer
	err := report(ctx, client, &out, query{namespace: "default", schedulerName: "drasched"}, sets.New("one-gpu"), nil, time.Second)
	if err == nil || !strings.Contains(err.Error(), "want unschedulable [one-gpu], got [big]") {
		t.Fatalf("got error %v, want one naming the expected and the unschedulable pods", err)
	}
}

func gang(name string, minCount int32) *minor.PodGroup {
	return &minor.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: minor.PodGroupSpec{SchedulingPolicy: minor.PodGroupSchedulingPolicy{
			Gang: &minor.GangSchedulingPolicy{MinCount: minCount},
		}},
	}
}

// gangCluster is the demo's gang step: the cluster() pods, a gang of two
// bound with its claims, and a gang of two that is unschedulable with its
// claims unallocated; mutate changes the objects before they are stored.
func gangCluster(mutate func(fits, fails []*corev1.Pod, claims []*resourceapi.ResourceClaim)) []runtime.Object {
	fits := []*corev1.Pod{
		demoPod("fits-0").PodGroup("fits").Label("gang", "fits").ClaimFromTemplate("gpus", "tmpl").ClaimStatus("gpus", "fits-0-gpus").Node("n3").Obj(),
		demoPod("fits-1").PodGroup("fits").Label("gang", "fits").ClaimFromTemplate("gpus", "tmpl").ClaimStatus("gpus", "fits-1-gpus").Node("n3").Obj(),
	}
	fails := []*corev1.Pod{
		demoPod("fails-0").PodGroup("fails").Label("gang", "fails").ClaimFromTemplate("gpus", "tmpl").ClaimStatus("gpus", "fails-0-gpus").Unschedulable("pod group is unschedulable").Obj(),
		demoPod("fails-1").PodGroup("fails").Label("gang", "fails").ClaimFromTemplate("gpus", "tmpl").ClaimStatus("gpus", "fails-1-gpus").Unschedulable("1 request \"gpus\": 0 of 2 matching devices free").Obj(),
	}
	claims := []*resourceapi.ResourceClaim{
		builder.MakeClaim("fits-0-gpus").Allocated("gpus", gpu.DefaultDriverName, "n3", "gpu-0").ReservedFor(fits[0]).Obj(),
		builder.MakeClaim("fits-1-gpus").Allocated("gpus", gpu.DefaultDriverName, "n3", "gpu-1").ReservedFor(fits[1]).Obj(),
		builder.MakeClaim("fails-0-gpus").Obj(),
		builder.MakeClaim("fails-1-gpus").Obj(),
	}
	if mutate != nil {
		mutate(fits, fails, claims)
	}
	objects := append(cluster(),
		gang("fits", 2), gang("fails", 2),
		gpuSlice("n3", gpuDevice("gpu-0", "NVIDIA H100 80GB HBM3", "pci0000:15"), gpuDevice("gpu-1", "NVIDIA H100 80GB HBM3", "pci0000:15"),
			gpuDevice("gpu-2", "NVIDIA H100 80GB HBM3", "pci0000:16")),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n3"}})
	for _, pod := range append(fits, fails...) {
		objects = append(objects, pod)
	}
	for _, claim := range claims {
		objects = append(objects, claim)
	}
	return objects
}

// gangSelector selects the pods of gangs, as demo/demo.sh does.
func gangSelector(t *testing.T) labels.Selector {
	t.Helper()
	selector, err := labels.Parse("gang")
	if err != nil {
		t.Fatal(err)
	}
	return selector
}

// TestReportGangs: the report of the demo's gang step, on the pods of a
// selector: one gang bound, the other expected unschedulable as a group.
func TestReportGangs(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset(gangCluster(nil)...)
	var out bytes.Buffer
	q := query{namespace: "default", schedulerName: "drasched", selector: gangSelector(t)}
	if err := report(ctx, client, &out, q, nil, sets.New("fails"), 5*time.Second); err != nil {
		t.Fatalf("%v\noutput:\n%s", err, out.String())
	}
	_, table, _ := strings.Cut(out.String(), "\n\n")
	want := `POD      NODE  REQUEST  DEVICE  WHAT
fails-0  -     -        -       unschedulable, see below
fails-1  -     -        -       unschedulable, see below
fits-0   n3    gpus     gpu-0   H100 80GB HBM3, pcieRoot pci0000:15
fits-1   n3    gpus     gpu-1   H100 80GB HBM3, pcieRoot pci0000:15

Why the scheduler left pods pending (their PodScheduled condition):
  fails-0: pod group is unschedulable
  fails-1: 1 request "gpus": 0 of 2 matching devices free

PodGroups (gang scheduling: all of a gang's pods are bound, or none and none of their claims is allocated):
  fails (gang, minCount 2): 0 of 2 pods bound, 0 of 2 claims allocated
  fits (gang, minCount 2): 2 of 2 pods bound, 2 of 2 claims allocated

Checked: 2 pods bound, every claim allocated on its pod's node and reserved for it, no device allocated twice; every gang bound all together, or not at all and holding no device.
`
	if diff := cmp.Diff(want, table); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}

	// The other gang expected: the report waits for it, then says so.
	out.Reset()
	err := report(ctx, client, &out, q, nil, sets.New("fits"), time.Second)
	if err == nil || !strings.Contains(err.Error(), "want unschedulable [fits-0 fits-1], got [fails-0 fails-1]") {
		t.Errorf("got error %v, want one naming the expected and the unschedulable pods", err)
	}
}

// TestReportGangsBroken: a gang that got part of what it asked for fails
// the report.
func TestReportGangsBroken(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	for name, tc := range map[string]struct {
		mutate  func(fits, fails []*corev1.Pod, claims []*resourceapi.ResourceClaim)
		wantErr string
	}{
		"claim of a pending gang allocated": {
			mutate: func(_, fails []*corev1.Pod, claims []*resourceapi.ResourceClaim) {
				claims[2] = builder.MakeClaim(claims[2].Name).Allocated("gpus", gpu.DefaultDriverName, "n3", "gpu-2").Obj()
			},
			wantErr: "PodGroup fails: no pod bound, but 1 of its pods' claims allocated",
		},
		"gang bound in part": {
			mutate: func(fits, _ []*corev1.Pod, claims []*resourceapi.ResourceClaim) {
				fits[1].Spec.NodeName = ""
				fits[1].Status.Conditions = demoPod("x").Unschedulable("no").Obj().Status.Conditions
				claims[1].Status = resourceapi.ResourceClaimStatus{}
			},
			wantErr: "PodGroup fits: 1 pods bound, fewer than its minCount 2",
		},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			q := query{namespace: "default", schedulerName: "drasched", selector: gangSelector(t)}
			err := report(ctx, fake.NewClientset(gangCluster(tc.mutate)...), &out, q, nil, nil, 5*time.Second)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("got error %v, want one containing %q\noutput:\n%s", err, tc.wantErr, out.String())
			}
		})
	}
}

// TestVerify: the report checks the allocations it read with
// invariants.Check (tested there in detail).
func TestVerify(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	good := cluster()
	twice := cluster()
	for i, obj := range twice {
		if c, ok := obj.(*resourceapi.ResourceClaim); ok && c.Name == "mig-slice-mig-def" {
			other := c.DeepCopy()
			other.Status.Allocation.Devices.Results[0].Pool = "n1"
			other.Status.Allocation.Devices.Results[0].Device = "gpu-0"
			twice[i] = other
		}
	}
	for name, tc := range map[string]struct {
		objects []runtime.Object
		wantErr string
	}{
		"good":         {objects: good},
		"device twice": {objects: twice, wantErr: "device gpu.drasched.dev/n1/gpu-0 is allocated to default/mig-slice-mig-def (request mig) and default/one-gpu-gpu-abc"},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := readSnapshot(ctx, fake.NewClientset(tc.objects...), query{namespace: "default", schedulerName: "drasched"})
			if err != nil {
				t.Fatal(err)
			}
			err = verify(s)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("got error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestSettled(t *testing.T) {
	bound := demoPod("a").Node("n").Obj()
	unschedulable := demoPod("b").Unschedulable("no").Obj()
	pending := demoPod("c").Obj()
	for name, tc := range map[string]struct {
		pods     []*corev1.Pod
		expected sets.Set[string]
		want     bool
	}{
		"no pods":               {},
		"all bound":             {pods: []*corev1.Pod{bound}, want: true},
		"pending":               {pods: []*corev1.Pod{bound, pending}},
		"unschedulable":         {pods: []*corev1.Pod{bound, unschedulable}, want: true},
		"expected":              {pods: []*corev1.Pod{bound, unschedulable}, expected: sets.New("b"), want: true},
		"expected, not yet":     {pods: []*corev1.Pod{bound, pending}, expected: sets.New("c")},
		"expected other":        {pods: []*corev1.Pod{bound, unschedulable}, expected: sets.New("a")},
		"expected none, one is": {pods: []*corev1.Pod{bound, unschedulable}, expected: sets.New[string]()},
	} {
		t.Run(name, func(t *testing.T) {
			s := &snapshot{pods: tc.pods}
			if got := s.settled(tc.expected); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSchedulerConfig: the demo's configuration is the shipped one, loaded
// as kube-scheduler loads it, with only the kubeconfig added.
func TestSchedulerConfig(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	shipped := filepath.Join(repoRoot, "config", "scheduler-config.yaml")
	out := filepath.Join(t.TempDir(), "scheduler-config.yaml")
	if err := writeSchedulerConfig(shipped, "/demo/kubeconfig", out); err != nil {
		t.Fatal(err)
	}
	want, err := options.LoadConfigFromFile(logger, shipped)
	if err != nil {
		t.Fatal(err)
	}
	got, err := options.LoadConfigFromFile(logger, out)
	if err != nil {
		t.Fatal(err)
	}
	if got.ClientConnection.Kubeconfig != "/demo/kubeconfig" {
		t.Errorf("clientConnection.kubeconfig %q, want /demo/kubeconfig", got.ClientConnection.Kubeconfig)
	}
	want.ClientConnection.Kubeconfig = got.ClientConnection.Kubeconfig
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("configuration (-shipped +demo):\n%s", diff)
	}

	if err := writeSchedulerConfig(filepath.Join(t.TempDir(), "missing.yaml"), "/k", out); err == nil || !os.IsNotExist(err) {
		t.Errorf("missing input: got error %v", err)
	}
}
