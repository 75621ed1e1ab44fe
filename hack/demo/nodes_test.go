package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/pkg/driver/gpu"
)

func TestParseNodes(t *testing.T) {
	for name, tc := range map[string]struct {
		own, plugin []string
		want        []demoNode
		wantErr     string
	}{
		"both kinds": {
			own:    []string{"a=x.yaml"},
			plugin: []string{"b=dir/y.yaml"},
			want:   []demoNode{{Name: "a", Inventory: "x.yaml"}, {Name: "b", Inventory: "dir/y.yaml", ByPlugin: true}},
		},
		"no inventory": {own: []string{"a"}, wantErr: "want NAME=INVENTORY"},
		"empty name":   {own: []string{"=x.yaml"}, wantErr: "want NAME=INVENTORY"},
		"twice":        {own: []string{"a=x.yaml"}, plugin: []string{"a=y.yaml"}, wantErr: "node a given twice"},
		"none":         {wantErr: errNoNodes.Error()},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := parseNodes(tc.own, tc.plugin)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestCreateNodes: nodes are kwok nodes labelled with their inventory;
// nodes not served by the plugin get exactly the slices the driver would
// publish, owned by the node.
func TestCreateNodes(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	own := demoNode{Name: "gpu-a100-mig-0", Inventory: inventory("a100-mig-8")}
	byPlugin := demoNode{Name: "gpu-l40s-0", Inventory: inventory("l40s-4"), ByPlugin: true}
	var out bytes.Buffer
	if err := createNodes(ctx, client, &out, []demoNode{own, byPlugin}); err != nil {
		t.Fatal(err)
	}

	for n, publisher := range map[demoNode]string{own: publisherDemo, byPlugin: publisherPlugin} {
		node, err := client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := node.Annotations[kwokNodeAnnotation]; got != "fake" {
			t.Errorf("%s: annotation %s=%q, want fake", n.Name, kwokNodeAnnotation, got)
		}
		if got, want := node.Labels[inventoryLabel], strings.TrimSuffix(filepath.Base(n.Inventory), ".yaml"); got != want {
			t.Errorf("%s: label %s=%q, want %q", n.Name, inventoryLabel, got, want)
		}
		if got := node.Labels[publisherLabel]; got != publisher {
			t.Errorf("%s: label %s=%q, want %q", n.Name, publisherLabel, got, publisher)
		}
		if node.Status.Allocatable.Pods().IsZero() {
			t.Errorf("%s: no pods allocatable", n.Name)
		}
	}

	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []*resourceapi.ResourceSlice
	for i := range list.Items {
		s := &list.Items[i]
		want := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: own.Name, Controller: ptr.To(true)}}
		if diff := cmp.Diff(want, s.OwnerReferences); diff != "" {
			t.Errorf("slice %s owner (-want +got):\n%s", s.Name, diff)
		}
		got = append(got, s)
	}
	want := driverSlicesOf(t, own)
	sortByName := cmpopts.SortSlices(func(a, b *resourceapi.ResourceSlice) bool { return a.Name < b.Name })
	ignore := cmpopts.IgnoreFields(metav1.ObjectMeta{}, "OwnerReferences", "ResourceVersion", "ManagedFields")
	if diff := cmp.Diff(want, got, sortByName, ignore, cmpopts.IgnoreFields(metav1.TypeMeta{}, "Kind", "APIVersion")); diff != "" {
		t.Errorf("slices (-want +got):\n%s", diff)
	}
	if !strings.Contains(out.String(), "gpu-l40s-0") || !strings.Contains(out.String(), "25 MIG devices") {
		t.Errorf("output does not describe the nodes:\n%s", out.String())
	}
}

func slice(node string, generation, count int64) resourceapi.ResourceSlice {
	return resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{
		Driver:   gpu.DefaultDriverName,
		NodeName: ptr.To(node),
		Pool:     resourceapi.ResourcePool{Name: node, Generation: generation, ResourceSliceCount: count},
	}}
}

func TestPoolComplete(t *testing.T) {
	other := slice("n", 0, 1)
	other.Spec.Driver = "other.example.com"
	for name, tc := range map[string]struct {
		slices []resourceapi.ResourceSlice
		want   bool
	}{
		"none":                 {},
		"one of one":           {slices: []resourceapi.ResourceSlice{slice("n", 0, 1)}, want: true},
		"one of two":           {slices: []resourceapi.ResourceSlice{slice("n", 0, 2)}},
		"two of two":           {slices: []resourceapi.ResourceSlice{slice("n", 0, 2), slice("n", 0, 2)}, want: true},
		"old generation":       {slices: []resourceapi.ResourceSlice{slice("n", 0, 1), slice("n", 1, 2)}},
		"new generation whole": {slices: []resourceapi.ResourceSlice{slice("n", 0, 2), slice("n", 1, 1)}, want: true},
		"other node":           {slices: []resourceapi.ResourceSlice{slice("m", 0, 1)}},
		"other driver":         {slices: []resourceapi.ResourceSlice{other}},
	} {
		t.Run(name, func(t *testing.T) {
			if got := poolComplete("n", tc.slices); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func readyNode(name string, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
}

func TestWaitNodes(t *testing.T) {
	notReady := corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}
	s := slice("n", 0, 1)
	for name, tc := range map[string]struct {
		objects []runtime.Object
		wantErr string
	}{
		"ready":       {objects: []runtime.Object{readyNode("n"), &s}},
		"tainted":     {objects: []runtime.Object{readyNode("n", notReady), &s}, wantErr: "taints node.kubernetes.io/not-ready"},
		"no slices":   {objects: []runtime.Object{readyNode("n")}, wantErr: "no complete ResourceSlice pool"},
		"not created": {wantErr: "n: missing"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			client := fake.NewClientset(tc.objects...)
			var out bytes.Buffer
			err := waitNodes(ctx, client, &out, []string{"n"}, time.Second, 100*time.Millisecond)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("%v\noutput:\n%s", err, out.String())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestDescribeGPUs(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	got := map[string]string{}
	for _, name := range []string{"h100-hgx-8", "a100-mig-8", "l40s-8-pcie-switch"} {
		gpus, err := demoNode{Inventory: inventory(name)}.discover(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got[name] = describeGPUs(gpus)
	}
	want := map[string]string{
		"h100-hgx-8":         "8x NVIDIA H100 80GB HBM3",
		"a100-mig-8":         "8x NVIDIA A100-SXM4-40GB, 25 MIG devices",
		"l40s-8-pcie-switch": "8x NVIDIA L40S",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := describeGPUs(nil); got != "no GPUs" {
		t.Errorf("no GPUs: got %q", got)
	}
}
