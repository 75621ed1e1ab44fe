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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/utils/ptr"

	_ "github.com/drasched/drasched/apis/config/scheme" // StructuredDRAArgs

	"github.com/drasched/drasched/pkg/driver/gpu"
)

// podBuilder makes test pods: makePod("p").claim("gpu", "c").node("n").obj().
type podBuilder struct{ pod *corev1.Pod }

func makePod(name string) *podBuilder {
	return &podBuilder{pod: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{SchedulerName: "drasched"},
	}}
}

// templateClaim adds a claim made from a template; the controller named it
// claimName.
func (b *podBuilder) templateClaim(name, claimName string) *podBuilder {
	b.pod.Spec.ResourceClaims = append(b.pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: name, ResourceClaimTemplateName: ptr.To("tmpl")})
	b.pod.Status.ResourceClaimStatuses = append(b.pod.Status.ResourceClaimStatuses, corev1.PodResourceClaimStatus{Name: name, ResourceClaimName: ptr.To(claimName)})
	return b
}

func (b *podBuilder) claim(name, claimName string) *podBuilder {
	b.pod.Spec.ResourceClaims = append(b.pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: name, ResourceClaimName: ptr.To(claimName)})
	return b
}

func (b *podBuilder) node(name string) *podBuilder {
	b.pod.Spec.NodeName = name
	return b
}

func (b *podBuilder) unschedulable(message string) *podBuilder {
	b.pod.Status.Conditions = append(b.pod.Status.Conditions, corev1.PodCondition{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: message,
	})
	return b
}

func (b *podBuilder) obj() *corev1.Pod { return b.pod }

// allocatedClaim is a claim allocated "request=pool/device"... and reserved
// for the pods.
func allocatedClaim(name string, devices []string, pods ...*corev1.Pod) *resourceapi.ResourceClaim {
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Status:     resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}},
	}
	for _, d := range devices {
		request, id, _ := strings.Cut(d, "=")
		pool, device, _ := strings.Cut(id, "/")
		claim.Status.Allocation.Devices.Results = append(claim.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: request, Driver: gpu.DefaultDriverName, Pool: pool, Device: device,
		})
	}
	for _, pod := range pods {
		claim.Status.ReservedFor = append(claim.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: pod.Name, UID: pod.UID})
	}
	return claim
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
	one := makePod("one-gpu").templateClaim("gpu", "one-gpu-gpu-abc").node("n1").obj()
	mig := makePod("mig-slice").templateClaim("mig", "mig-slice-mig-def").node("n2").obj()
	sharedA := makePod("shared-a").claim("gpu", "shared").node("n1").obj()
	sharedB := makePod("shared-b").claim("gpu", "shared").node("n1").obj()
	big := makePod("big").templateClaim("gpus", "big-gpus-xyz").unschedulable("0/2 nodes are available: 2 cannot allocate all claims.").obj()
	other := makePod("other").obj()
	other.Spec.SchedulerName = "default-scheduler"
	return []runtime.Object{
		one, mig, sharedA, sharedB, big, other,
		allocatedClaim("one-gpu-gpu-abc", []string{"gpu=n1/gpu-0"}, one),
		allocatedClaim("mig-slice-mig-def", []string{"mig=n2/gpu-1-mig-x"}, mig),
		allocatedClaim("shared", []string{"gpu=n1/gpu-1"}, sharedA, sharedB),
		&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "big-gpus-xyz", Namespace: "default"}},
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
	if err := report(ctx, client, &out, "default", "drasched", sets.New("big"), 5*time.Second); err != nil {
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
	err := report(ctx, client, &out, "default", "drasched", sets.New("one-gpu"), time.Second)
	if err == nil || !strings.Contains(err.Error(), "want unschedulable [one-gpu], got [big]") {
		t.Fatalf("got error %v, want one naming the expected and the unschedulable pods", err)
	}
}

// TestVerify: the report checks the allocations it read with
// kwokcluster.Verify (tested there in detail).
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
		"device twice": {objects: twice, wantErr: "device gpu.drasched.dev/n1/gpu-0 is allocated to claims default/mig-slice-mig-def and default/one-gpu-gpu-abc"},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := readSnapshot(ctx, fake.NewClientset(tc.objects...), "default", "drasched")
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
	bound := makePod("a").node("n").obj()
	unschedulable := makePod("b").unschedulable("no").obj()
	pending := makePod("c").obj()
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
