package kwokcluster

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/pkg/driver/gpu"
	"github.com/drasched/drasched/pkg/driver/gpu/device"
)

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
			if got := PoolComplete("n", tc.slices); got != tc.want {
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
	var many []runtime.Object
	var manyNames []string
	for i := range 5 {
		name := fmt.Sprintf("m%d", i)
		many = append(many, readyNode(name, notReady))
		manyNames = append(manyNames, name)
	}
	for name, tc := range map[string]struct {
		objects     []runtime.Object
		names       []string
		showWaiting int
		wantErr     string
	}{
		"ready":       {objects: []runtime.Object{readyNode("n"), &s}},
		"tainted":     {objects: []runtime.Object{readyNode("n", notReady), &s}, wantErr: "taints node.kubernetes.io/not-ready"},
		"no slices":   {objects: []runtime.Object{readyNode("n")}, wantErr: "no complete ResourceSlice pool"},
		"not created": {wantErr: "n: missing"},
		"many waiting, two named": {
			objects: many, names: manyNames, showWaiting: 2,
			wantErr: "0/5 nodes ready (m0: taints node.kubernetes.io/not-ready; no complete ResourceSlice pool; m1: taints node.kubernetes.io/not-ready; no complete ResourceSlice pool; 3 more)",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			client := fake.NewClientset(tc.objects...)
			names := tc.names
			if names == nil {
				names = []string{"n"}
			}
			var out bytes.Buffer
			opts := WaitOptions{Timeout: time.Second, Settle: 100 * time.Millisecond, Interval: 50 * time.Millisecond, ShowWaiting: tc.showWaiting}
			err := WaitNodes(ctx, client, &out, names, opts)
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

// TestCreateNode: the node is a kwok node labelled with its inventory, and
// gets the driver's slices, owned by it.
func TestCreateNode(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	inventory := "../../config/inventory/h100-hgx-8.yaml"
	gpus, err := Discover(ctx, inventory)
	if err != nil {
		t.Fatal(err)
	}
	count, err := CreateNode(ctx, client, NodeObject("n1", inventory, "bench"), gpus)
	if err != nil {
		t.Fatal(err)
	}
	node, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantLabels := map[string]string{InventoryLabel: "h100-hgx-8", SlicesFromLabel: "bench"}
	for k, v := range wantLabels {
		if node.Labels[k] != v {
			t.Errorf("label %s=%q, want %q", k, node.Labels[k], v)
		}
	}
	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != count || count == 0 {
		t.Fatalf("%d slices in the cluster, CreateNode says %d", len(list.Items), count)
	}
	devices := 0
	for _, s := range list.Items {
		want := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n1", Controller: ptr.To(true)}}
		if diff := cmp.Diff(want, s.OwnerReferences); diff != "" {
			t.Errorf("slice %s owner (-want +got):\n%s", s.Name, diff)
		}
		devices += len(s.Spec.Devices)
	}
	if devices != 8 {
		t.Errorf("%d devices, want the 8 GPUs of the inventory", devices)
	}
	if !PoolComplete("n1", list.Items) {
		t.Error("pool not complete")
	}
}

// The fleet has the benchmark's mix, at least one node of each kind, and
// every node's slices name it; a missing inventory is an error.
func TestFleetSlices(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	for size, want := range map[int]map[string]int{
		20: {"h100-hgx-8": 16, "l40s-8-pcie-switch": 2, "a100-mig-8": 2},
		1:  {"h100-hgx-8": 1, "l40s-8-pcie-switch": 1, "a100-mig-8": 1},
	} {
		nodes, slices, err := FleetSlices(ctx, "../../config/inventory", "fleet", size)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		names := map[string]bool{}
		for _, node := range nodes {
			kind := strings.TrimPrefix(node.Name[:strings.LastIndex(node.Name, "-")], "fleet-")
			got[kind]++
			names[node.Name] = true
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("size %d: nodes by kind (-want +got):\n%s", size, diff)
		}
		published := map[string]bool{}
		for _, slice := range slices {
			if slice.Spec.NodeName == nil || !names[*slice.Spec.NodeName] {
				t.Fatalf("size %d: slice %s is not on a node of the fleet", size, slice.Name)
			}
			published[*slice.Spec.NodeName] = true
		}
		if len(published) != len(nodes) {
			t.Errorf("size %d: %d of %d nodes have slices", size, len(published), len(nodes))
		}
		// Like real nodes, no two have a GPU with the same UUID.
		uuids := map[string]string{}
		for _, slice := range slices {
			for _, d := range slice.Spec.Devices {
				id := d.Attributes["uuid"].StringValue
				if id == nil {
					t.Fatalf("size %d: device %s of slice %s has no UUID", size, d.Name, slice.Name)
				}
				if other, ok := uuids[*id]; ok && other != *slice.Spec.NodeName {
					t.Errorf("size %d: UUID %s on nodes %s and %s", size, *id, other, *slice.Spec.NodeName)
				}
				uuids[*id] = *slice.Spec.NodeName
			}
		}
	}
	if _, _, err := FleetSlices(ctx, t.TempDir(), "fleet", 10); err == nil {
		t.Error("FleetSlices with no inventory files: no error")
	}
}

// Each node's GPUs have UUIDs of their own, valid ones, the same in every
// run, and the inventory's GPUs stay as they were.
func TestNodeGPUs(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	gpus, err := Discover(ctx, "../../config/inventory/a100-mig-8.yaml")
	if err != nil {
		t.Fatal(err)
	}
	inventory := fmt.Sprint(gpus)
	uuids := func(gpus []device.GPU) []string {
		var out []string
		for _, g := range gpus {
			out = append(out, g.UUID)
			for _, m := range g.MIG {
				out = append(out, m.UUID)
			}
		}
		return out
	}
	a, b := NodeGPUs(gpus, "node-a"), NodeGPUs(gpus, "node-b")
	seen := map[string]string{}
	for node, gpus := range map[string][]device.GPU{"node-a": a, "node-b": b, "inventory": gpus} {
		if err := device.Validate(gpus); err != nil {
			t.Errorf("%s: %v", node, err)
		}
		for _, id := range uuids(gpus) {
			if other, ok := seen[id]; ok {
				t.Errorf("UUID %s on %s and %s", id, other, node)
			}
			seen[id] = node
		}
	}
	if len(uuids(gpus)) < 9 {
		t.Fatalf("want an inventory with MIG devices, got %d UUIDs", len(uuids(gpus)))
	}
	if diff := cmp.Diff(uuids(a), uuids(NodeGPUs(gpus, "node-a"))); diff != "" {
		t.Errorf("node-a's UUIDs differ between calls (-first +second):\n%s", diff)
	}
	if got := fmt.Sprint(gpus); got != inventory {
		t.Errorf("the inventory's GPUs changed:\nbefore %s\nafter  %s", inventory, got)
	}
}
