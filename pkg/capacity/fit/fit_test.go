package fit_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/pkg/capacity"
	"github.com/drasched/drasched/pkg/capacity/fit"
	"github.com/drasched/drasched/pkg/capacity/kueue"
)

const gpuClass = "gpu"

// gpuNode is a node with eight GPUs of which the first used are allocated
// to claims, and the claims.
func gpuNode(name string, used int, labels ...string) (*v1.Node, *resourceapi.ResourceSlice, []*resourceapi.ResourceClaim) {
	node := builder.MakeNode(name, labels...)
	node.Status.Allocatable = v1.ResourceList{v1.ResourceCPU: resource.MustParse("8"), v1.ResourcePods: resource.MustParse("110")}
	slice := builder.MakeSlice(name).Node(name).Devices(builder.Devices("gpu", 8, func(i int, d *builder.DeviceWrapper) {
		d.String("type", "gpu")
	})...).Obj()
	var claims []*resourceapi.ResourceClaim
	for i := range used {
		c := builder.MakeClaim(fmt.Sprintf("%s-used-%d", name, i)).Request("gpu", gpuClass, 1).Obj()
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: "gpu.example.com", Pool: name, Device: fmt.Sprintf("gpu-%d", i),
		}}}}
		claims = append(claims, c)
	}
	return node, slice, claims
}

func snapshot(nodes ...func() (*v1.Node, *resourceapi.ResourceSlice, []*resourceapi.ResourceClaim)) *capacity.Snapshot {
	s := &capacity.Snapshot{Classes: []*resourceapi.DeviceClass{builder.MakeClass(gpuClass, `device.attributes["gpu.example.com"].type == "gpu"`)}}
	for _, n := range nodes {
		node, slice, claims := n()
		s.Nodes = append(s.Nodes, node)
		s.Slices = append(s.Slices, slice)
		s.Claims = append(s.Claims, claims...)
	}
	return s
}

func node(name string, used int, labels ...string) func() (*v1.Node, *resourceapi.ResourceSlice, []*resourceapi.ResourceClaim) {
	return func() (*v1.Node, *resourceapi.ResourceSlice, []*resourceapi.ResourceClaim) {
		return gpuNode(name, used, labels...)
	}
}

const oneGPUPod = `
apiVersion: v1
kind: Pod
metadata: {name: job}
spec:
  resourceClaims:
  - {name: gpu, resourceClaimTemplateName: one-gpu}
  containers:
  - name: c
    image: x
    resources:
      requests: {cpu: "1"}
      claims: [{name: gpu}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu, count: %d}
`

func TestFit(t *testing.T) {
	for name, tc := range map[string]struct {
		snap     *capacity.Snapshot
		manifest string
		opts     fit.Options
		fits     int
		nodes    []fit.NodeCount
		reasons  []string
	}{
		// MostAllocated: the fuller node first, until it is full.
		"fill the fuller node first": {
			snap:     snapshot(node("node-a", 3), node("node-b", 5)),
			manifest: fmt.Sprintf(oneGPUPod, 1),
			fits:     8,
			nodes:    []fit.NodeCount{{Node: "node-a", Pods: 5}, {Node: "node-b", Pods: 3}},
			reasons:  []string{`request "gpu": 0 of 8 matching devices free, need 1 (8 in use)`},
		},
		"count": {
			snap:     snapshot(node("node-a", 3), node("node-b", 5)),
			manifest: fmt.Sprintf(oneGPUPod, 1),
			opts:     fit.Options{Count: 2},
			fits:     2,
			nodes:    []fit.NodeCount{{Node: "node-b", Pods: 2}},
		},
		// One CPU each of 8: the node with 8 free GPUs takes 8 pods, but
		// the request for 3 GPUs takes them two at a time.
		"three GPUs": {
			snap:     snapshot(node("node-a", 0), node("node-b", 1)),
			manifest: fmt.Sprintf(oneGPUPod, 3),
			fits:     4,
			nodes:    []fit.NodeCount{{Node: "node-a", Pods: 2}, {Node: "node-b", Pods: 2}},
			reasons:  []string{`request "gpu": 2 of 8 matching devices free, need 3 (6 in use)`, `request "gpu": 1 of 8 matching devices free, need 3 (7 in use)`},
		},
		"CPU before devices": {
			snap:     snapshot(node("node-a", 0)),
			manifest: fmt.Sprintf(oneGPUPod, 1),
			opts:     fit.Options{Count: 10},
			fits:     8,
			nodes:    []fit.NodeCount{{Node: "node-a", Pods: 8}},
			reasons:  []string{"Insufficient cpu"},
		},
		"node selection": {
			snap:     snapshot(node("node-a", 0, "pool", "x"), node("node-b", 6, "pool", "y")),
			manifest: fmt.Sprintf(oneGPUPod, 1),
			opts:     fit.Options{Count: 3, Selector: mustSelector(t, "pool=y")},
			fits:     2,
			nodes:    []fit.NodeCount{{Node: "node-b", Pods: 2}},
			reasons:  []string{`request "gpu": 0 of 8 matching devices free, need 1 (8 in use)`},
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			w, err := fit.Load([]byte(tc.manifest), "default")
			if err != nil {
				t.Fatal(err)
			}
			res, err := fit.Fit(ctx, tc.snap, w, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if res.Fits != tc.fits {
				t.Errorf("%d fit, want %d", res.Fits, tc.fits)
			}
			if diff := cmp.Diff(tc.nodes, res.Nodes); diff != "" {
				t.Errorf("pods per node (-want +got):\n%s", diff)
			}
			var reasons []string
			if res.Unplaced != nil {
				for _, r := range res.Unplaced.Reasons {
					reasons = append(reasons, r.Message)
				}
			}
			if diff := cmp.Diff(tc.reasons, reasons); diff != "" {
				t.Errorf("reasons (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFitSharedClaim: pods that share a claim by name go where it is
// allocated, and all of them fit there.
func TestFitSharedClaim(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	snap := snapshot(node("node-a", 0), node("node-b", 1))
	shared := snap.Claims[0].DeepCopy()
	shared.Name = "shared"
	snap.Claims = append(snap.Claims, shared)
	manifest := `
apiVersion: v1
kind: Pod
metadata: {name: user}
spec:
  resourceClaims:
  - {name: gpu, resourceClaimName: shared}
  containers: [{name: c, image: x}]
`
	w, err := fit.Load([]byte(manifest), "default")
	if err != nil {
		t.Fatal(err)
	}
	res, err := fit.Fit(ctx, snap, w, fit.Options{Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]fit.NodeCount{{Node: "node-b", Pods: 3}}, res.Nodes); diff != "" {
		t.Errorf("pods per node (-want +got):\n%s", diff)
	}
}

// TestFitClusterQueue: with a Kueue ClusterQueue, fit says how many more
// pods fit in its nominal quota as well as on the nodes, and the fewer of
// the two is the answer.
func TestFitClusterQueue(t *testing.T) {
	const gpu = "example.com/gpu"
	mapping := kueue.Mapping{gpuClass: gpu}
	queue := func(nominal, inUse, borrowed string) *kueue.ClusterQueue {
		return &kueue.ClusterQueue{Name: "team-a", Cohort: "gpus", Groups: []kueue.ResourceGroup{{Covered: []string{gpu}, Flavors: []kueue.FlavorQuota{{
			Name: "gpus", Resources: []kueue.Quota{{Name: gpu, Nominal: resource.MustParse(nominal), InUse: resource.MustParse(inUse), Borrowed: resource.MustParse(borrowed)}},
		}}}}}
	}
	for name, tc := range map[string]struct {
		queue       *kueue.ClusterQueue
		mapping     kueue.Mapping
		quota       *int
		answer      int
		notAdmitted string
	}{
		// Two GPUs a pod; the nodes take 6 (12 free GPUs).
		"the quota is fewer":  {queue: queue("8", "3", "0"), mapping: mapping, quota: ptr.To(2), answer: 2},
		"the nodes are fewer": {queue: queue("40", "0", "0"), mapping: mapping, quota: ptr.To(20), answer: 6},
		"over-used quota":     {queue: queue("4", "6", "2"), mapping: mapping, quota: ptr.To(0), answer: 0},
		"a class Kueue does not map": {queue: queue("40", "0", "0"), mapping: kueue.Mapping{}, quota: ptr.To(0), answer: 0,
			notAdmitted: "ResourceClaimTemplate one-gpu: DeviceClass gpu is not mapped in Kueue's deviceClassMappings"},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			w, err := fit.Load([]byte(fmt.Sprintf(oneGPUPod, 2)), "default")
			if err != nil {
				t.Fatal(err)
			}
			res, err := fit.Fit(ctx, snapshot(node("node-a", 2), node("node-b", 2)), w, fit.Options{ClusterQueue: tc.queue, Mapping: tc.mapping})
			if err != nil {
				t.Fatal(err)
			}
			if res.Fits != 6 {
				t.Errorf("%d fit on the nodes, want 6", res.Fits)
			}
			if res.Quota == nil || !cmp.Equal(res.Quota.Fits, tc.quota) || res.Quota.NotAdmitted != tc.notAdmitted {
				t.Errorf("quota %+v, want %v fitting, not admitted %q", res.Quota, ptr.Deref(tc.quota, -1), tc.notAdmitted)
			}
			if res.Answer == nil || *res.Answer != tc.answer {
				t.Errorf("answer %v, want %d", res.Answer, tc.answer)
			}
		})
	}
	// Without a queue: as before, no quota and no answer.
	_, ctx := ktesting.NewTestContext(t)
	w, err := fit.Load([]byte(fmt.Sprintf(oneGPUPod, 2)), "default")
	if err != nil {
		t.Fatal(err)
	}
	res, err := fit.Fit(ctx, snapshot(node("node-a", 2)), w, fit.Options{})
	if err != nil || res.Quota != nil || res.Answer != nil {
		t.Errorf("without a queue: %+v, %v; want no quota, no answer", res, err)
	}
}

func TestFitErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		manifest string
		opts     fit.Options
		want     error
		text     string
	}{
		"unknown class":    {manifest: `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaimTemplate","metadata":{"name":"t"},"spec":{"spec":{"devices":{"requests":[{"name":"r","exactly":{"deviceClassName":"nope"}}]}}}}`, want: capacity.ErrNotFound, text: "DeviceClass nope"},
		"unknown node":     {manifest: fmt.Sprintf(oneGPUPod, 1), opts: fit.Options{Node: "node-x"}, want: capacity.ErrNotFound, text: "node node-x"},
		"missing template": {manifest: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"resourceClaims":[{"name":"g","resourceClaimTemplateName":"gone"}],"containers":[{"name":"c","image":"x"}]}}`, want: capacity.ErrNotFound, text: "ResourceClaimTemplate default/gone"},
		"missing claim":    {manifest: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"resourceClaims":[{"name":"g","resourceClaimName":"gone"}],"containers":[{"name":"c","image":"x"}]}}`, want: capacity.ErrNotFound, text: "ResourceClaim default/gone"},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			w, err := fit.Load([]byte(tc.manifest), "default")
			if err != nil {
				t.Fatal(err)
			}
			_, err = fit.Fit(ctx, snapshot(node("node-a", 0)), w, tc.opts)
			if !errors.Is(err, tc.want) || !contains(err, tc.text) {
				t.Errorf("got %v, want %v naming %q", err, tc.want, tc.text)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	for name, tc := range map[string]struct {
		manifest string
		replicas int
		pods     int
		err      string
	}{
		"deployment":     {manifest: `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},"spec":{"replicas":3,"selector":{},"template":{"spec":{"resourceClaims":[{"name":"g","resourceClaimTemplateName":"t"}],"containers":[{"name":"c","image":"x"}]}}}}`, replicas: 3, pods: 1},
		"template alone": {manifest: `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaimTemplate","metadata":{"name":"t"},"spec":{"spec":{}}}`, pods: 1},
		"no claims":      {manifest: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"x"}]}}`, err: "has no resourceClaims"},
		"malformed":      {manifest: "kind: Pod\n  bad: [", err: "document 1"},
		"unknown field":  {manifest: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containerz":[]}}`, err: "unknown field"},
		"two pods":       {manifest: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"}}` + "\n---\n" + `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"b"}}`, err: "one kind of pod"},
		"a Service":      {manifest: `{"apiVersion":"v1","kind":"Service","metadata":{"name":"s"}}`, err: "fit places pods"},
		"empty":          {manifest: "# nothing\n", err: "no objects"},
	} {
		t.Run(name, func(t *testing.T) {
			w, err := fit.Load([]byte(tc.manifest), "default")
			if tc.err != "" {
				if !contains(err, tc.err) {
					t.Fatalf("got %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if w.Replicas != tc.replicas || len(w.Pods) != tc.pods {
				t.Errorf("got %d replicas of %d pods, want %d of %d", w.Replicas, len(w.Pods), tc.replicas, tc.pods)
			}
		})
	}
}

func contains(err error, text string) bool {
	return err != nil && (text == "" || containsString(err.Error(), text))
}

func containsString(s, sub string) bool { return strings.Contains(s, sub) }

func mustSelector(t *testing.T, s string) labels.Selector {
	t.Helper()
	sel, err := labels.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}
