package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/kwokcluster"
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
		if got := node.Annotations[kwokcluster.KwokNodeAnnotation]; got != "fake" {
			t.Errorf("%s: annotation %s=%q, want fake", n.Name, kwokcluster.KwokNodeAnnotation, got)
		}
		if got, want := node.Labels[kwokcluster.InventoryLabel], strings.TrimSuffix(filepath.Base(n.Inventory), ".yaml"); got != want {
			t.Errorf("%s: label %s=%q, want %q", n.Name, kwokcluster.InventoryLabel, got, want)
		}
		if got := node.Labels[kwokcluster.SlicesFromLabel]; got != publisher {
			t.Errorf("%s: label %s=%q, want %q", n.Name, kwokcluster.SlicesFromLabel, got, publisher)
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
