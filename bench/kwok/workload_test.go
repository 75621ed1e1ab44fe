package main

import (
	"fmt"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2/ktesting"

	"github.com/drasched/drasched/internal/kwokcluster"
	"github.com/drasched/drasched/pkg/allocator"
)

// repoRoot is where hack/bench-kwok.sh runs the program: the inventories
// and DeviceClasses are relative to it.
const repoRoot = "../.."

func TestNodeMix(t *testing.T) {
	for n, want := range map[int]map[string]int{
		1000: {kindH100: 800, kindL40S: 100, kindA100: 100},
		100:  {kindH100: 80, kindL40S: 10, kindA100: 10},
		25:   {kindH100: 21, kindL40S: 2, kindA100: 2},
		3:    {kindH100: 1, kindL40S: 1, kindA100: 1},
		2:    {kindH100: 2, kindL40S: 0, kindA100: 0},
	} {
		if diff := cmp.Diff(want, nodeMix(n)); diff != "" {
			t.Errorf("nodeMix(%d) (-want +got):\n%s", n, diff)
		}
	}
}

// gpusOf returns the GPU count of a template made by h100Template.
func gpusOf(t *testing.T, template string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscanf(template, "h100-%d", &n); err != nil {
		t.Fatalf("template %q: %v", template, err)
	}
	return n
}

func TestFillPods(t *testing.T) {
	for _, tc := range []struct {
		gpus     int
		fraction float64
		want     map[int]int // pods by size
	}{
		{gpus: 640, fraction: 0.9, want: map[int]int{8: 18, 4: 36, 2: 72, 1: 144}},
		// 5760 GPUs, 1440 per size.
		{gpus: 6400, fraction: 0.9, want: map[int]int{8: 180, 4: 360, 2: 720, 1: 1440}},
		// 72 GPUs, 18 per size: 8-GPU pods take 16, 4-GPU 16, 2-GPU 18;
		// 1-GPU pods take their 18 and the 4 left.
		{gpus: 80, fraction: 0.9, want: map[int]int{8: 2, 4: 4, 2: 9, 1: 22}},
		{gpus: 8, fraction: 0.5, want: map[int]int{1: 4}},
	} {
		t.Run(fmt.Sprintf("%d GPUs", tc.gpus), func(t *testing.T) {
			pods := fillPods("fill", tc.gpus, tc.fraction)
			got := map[int]int{}
			total, last := 0, 8
			names := sets.New[string]()
			for _, p := range pods {
				size := gpusOf(t, p.template)
				if size > last {
					t.Fatalf("pod %s of %d GPUs after a pod of %d: not largest first", p.name, size, last)
				}
				last = size
				got[size]++
				total += size
				names.Insert(p.name)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("pods by size (-want +got):\n%s", diff)
			}
			if want := int(float64(tc.gpus) * tc.fraction); total != want {
				t.Errorf("%d GPUs requested, want %d", total, want)
			}
			if names.Len() != len(pods) {
				t.Errorf("%d names for %d pods", names.Len(), len(pods))
			}
		})
	}
}

// TestBoundedFillPods: a bound keeps fill's mix of sizes at a lower
// fraction; without one, or above the pods of the fraction, nothing
// changes.
func TestBoundedFillPods(t *testing.T) {
	// 5000 nodes: 4000 H100 nodes, 32000 GPUs; 90% is 13500 pods.
	pods, fraction := boundedFillPods("fill", 32000, 0.9, 5000)
	if len(pods) > 5000 || len(pods) < 4990 {
		t.Errorf("%d pods, want at most 5000 and not many fewer", len(pods))
	}
	sizes, total := map[int]int{}, 0
	for _, p := range pods {
		sizes[gpusOf(t, p.template)] += gpusOf(t, p.template)
		total += gpusOf(t, p.template)
	}
	if want := float64(total) / 32000; math.Abs(fraction-want) > 1e-9 || fraction > 0.9*5000/13500 {
		t.Errorf("fraction %v, want %v (the GPUs of the pods), at most %v", fraction, want, 0.9*5000/13500)
	}
	// Each size takes about the same share of the GPUs, as unbounded.
	for _, size := range fillSizes[:3] {
		if share := float64(sizes[size]) / float64(sizes[1]); share < 0.95 || share > 1.05 {
			t.Errorf("%d-GPU pods take %d GPUs, 1-GPU pods %d: the mix changed", size, sizes[size], sizes[1])
		}
	}
	for _, bound := range []int{0, 13500, 20000} {
		pods, fraction := boundedFillPods("fill", 32000, 0.9, bound)
		if len(pods) != 13500 || fraction != 0.9 {
			t.Errorf("bound %d: %d pods at %v, want 13500 at 0.9", bound, len(pods), fraction)
		}
	}
}

// TestNoClaimsPods: the noclaims case's pods are fill's without a claim.
func TestNoClaimsPods(t *testing.T) {
	pods := withoutClaims(fillPods("noclaims", 80, 0.9))
	if len(pods) != len(fillPods("noclaims", 80, 0.9)) {
		t.Fatalf("%d pods, want fill's", len(pods))
	}
	pod := podObject("bench", "bench", caseNoClaims, pods[0])
	if len(pod.Spec.ResourceClaims) != 0 || len(pod.Spec.Containers[0].Resources.Claims) != 0 {
		t.Errorf("noclaims pod has claims: %+v", pod.Spec)
	}
	withClaim := podObject("bench", "bench", caseFill, fillPods("fill", 80, 0.9)[0])
	if len(withClaim.Spec.ResourceClaims) != 1 || len(withClaim.Spec.Containers[0].Resources.Claims) != 1 {
		t.Errorf("fill pod without its claim: %+v", withClaim.Spec)
	}
}

func TestMatchPods(t *testing.T) {
	pods := matchPods(20, 0.9)
	if len(pods) != 18 {
		t.Fatalf("%d pods, want 18", len(pods))
	}
	for _, p := range pods {
		if p.template != matchTemplate {
			t.Errorf("pod %s: template %s", p.name, p.template)
		}
	}
}

func TestMIGPods(t *testing.T) {
	pods := migPods(map[string]int{"1g.5gb": 10, "3g.20gb": 3, "2g.10gb": 0}, 0.9)
	var got []string
	for _, p := range pods {
		got = append(got, p.template)
	}
	// 9 of 1g.5gb, 2 of 3g.20gb, interleaved.
	want := []string{"mig-1g-5gb", "mig-3g-20gb", "mig-1g-5gb", "mig-3g-20gb"}
	for range 7 {
		want = append(want, "mig-1g-5gb")
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("templates (-want +got):\n%s", diff)
	}
}

// driverSlices are the slices that the GPU driver publishes for a node of
// the kind.
func driverSlices(t *testing.T, kind, name string) []*resourceapi.ResourceSlice {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	inventory := repoRoot + "/" + inventories[kind]
	gpus, err := kwokcluster.Discover(ctx, inventory)
	if err != nil {
		t.Fatal(err)
	}
	s, err := kwokcluster.NodeSlices(gpus, kwokcluster.NodeObject(name, inventory, slicesFrom))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func values(ptrs []*resourceapi.ResourceSlice) []resourceapi.ResourceSlice {
	out := make([]resourceapi.ResourceSlice, len(ptrs))
	for i, s := range ptrs {
		out[i] = *s
	}
	return out
}

func TestCapacityOf(t *testing.T) {
	var all []*resourceapi.ResourceSlice
	for kind, n := range map[string]int{kindH100: 2, kindL40S: 3, kindA100: 1} {
		for i := range n {
			all = append(all, driverSlices(t, kind, nodeName(kind, i))...)
		}
	}
	// An old generation of a pool does not count.
	old := driverSlices(t, kindH100, nodeName(kindH100, 0))[0].DeepCopy()
	old.Name += "-old"
	for _, s := range all {
		s.Spec.Pool.Generation = 1
	}
	all = append(all, old)

	got := capacityOf(values(all))
	want := capacity{h100: 16, matchSlots: 6, mig: map[string]int{"1g.5gb": 17, "2g.10gb": 4, "3g.20gb": 3, "7g.40gb": 1}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(capacity{})); diff != "" {
		t.Errorf("capacity (-want +got):\n%s", diff)
	}
}

// TestTemplatesFit keeps the workloads honest without a cluster: with
// upstream's allocator, the GPU driver's DeviceClasses and slices, each
// template's claim fits on the nodes of its workload only, and the idle
// nodes take as many claims as capacityOf counts.
func TestTemplatesFit(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	classes, err := readDeviceClasses(repoRoot + "/config/gpu-driver/deviceclasses.yaml")
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]*corev1.Node{}
	var all []*resourceapi.ResourceSlice
	for _, kind := range []string{kindH100, kindL40S, kindA100} {
		name := nodeName(kind, 0)
		nodes[kind] = kwokcluster.NodeObject(name, inventories[kind], slicesFrom)
		all = append(all, driverSlices(t, kind, name)...)
	}
	capa := capacityOf(values(all))
	templates := map[string]*resourceapi.ResourceClaimTemplate{}
	var profiles []string
	for p := range capa.mig {
		profiles = append(profiles, p)
	}
	for _, tmpl := range claimTemplates("bench", profiles) {
		templates[tmpl.Name] = tmpl
	}
	features := structured.Features{PrioritizedList: true, PartitionableDevices: true, DeviceTaints: true, ConsumableCapacity: true}

	// fits returns how many claims of the template the node takes, one
	// after the other.
	fits := func(t *testing.T, template string, node *corev1.Node) int {
		t.Helper()
		tmpl, ok := templates[template]
		if !ok {
			t.Fatalf("no template %s", template)
		}
		allocated := sets.New[structured.DeviceID]()
		for n := 0; ; n++ {
			a, err := structured.NewAllocator(ctx, features, structured.AllocatedState{AllocatedDevices: allocated}, allocator.ClassList(classes), all, cel.NewCache(10, cel.Features{}))
			if err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("%s-%d", template, n)
			claim := &resourceapi.ResourceClaim{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench", UID: types.UID(name)},
				Spec:       tmpl.Spec.Spec,
			}
			results, err := a.Allocate(ctx, node, []*resourceapi.ResourceClaim{claim})
			if err != nil {
				t.Fatalf("%s on %s: %v", template, node.Name, err)
			}
			if results == nil {
				return n
			}
			for _, d := range results[0].Devices.Results {
				allocated.Insert(structured.MakeDeviceID(d.Driver, d.Pool, d.Device))
			}
		}
	}
	for name, want := range map[string]map[string]int{
		h100Template(1):        {kindH100: 8},
		h100Template(2):        {kindH100: 4},
		h100Template(4):        {kindH100: 2},
		h100Template(8):        {kindH100: 1},
		matchTemplate:          {kindL40S: capa.matchSlots},
		migTemplate("1g.5gb"):  {kindA100: capa.mig["1g.5gb"]},
		migTemplate("2g.10gb"): {kindA100: capa.mig["2g.10gb"]},
		migTemplate("3g.20gb"): {kindA100: capa.mig["3g.20gb"]},
		migTemplate("7g.40gb"): {kindA100: capa.mig["7g.40gb"]},
		// GPUs 0-5 of the A100 inventory are in MIG mode.
		migWholeTemplate: {kindA100: 6},
		// By count alone, as Kueue counts them: any GPU of any node, whole
		// (the A100s in MIG mode too). The queue case's ResourceFlavor
		// keeps its pods on the H100 nodes.
		queueTemplate(1): {kindH100: 8, kindL40S: 8, kindA100: 8},
		queueTemplate(2): {kindH100: 4, kindL40S: 4, kindA100: 4},
	} {
		t.Run(name, func(t *testing.T) {
			for kind, node := range nodes {
				if got := fits(t, name, node); got != want[kind] {
					t.Errorf("%d claims fit on an idle %s node, want %d", got, kind, want[kind])
				}
			}
		})
	}
	if len(templates) != len(fillSizes)+1+len(capa.mig)+1+len(queueShapes) {
		t.Errorf("%d templates, want one per fill size, one for match, one per MIG profile, one for a whole GPU in MIG mode, one per queue Job shape", len(templates))
	}
	// Kueue counts a request against quota only by class and count: no
	// selector, no constraint, exactly.
	for _, shape := range queueShapes {
		spec := templates[queueTemplate(shape.gpus)].Spec.Spec.Devices
		if len(spec.Constraints) != 0 || len(spec.Requests) != 1 || spec.Requests[0].Exactly == nil {
			t.Fatalf("%s: %+v, want one exact request and no constraints", queueTemplate(shape.gpus), spec)
		}
		if r := spec.Requests[0].Exactly; r.DeviceClassName != gpuClass || len(r.Selectors) != 0 || r.Count != int64(shape.gpus) ||
			r.AllocationMode != resourceapi.DeviceAllocationModeExactCount || r.AdminAccess != nil {
			t.Errorf("%s: request %+v, want %d of %s by count alone", queueTemplate(shape.gpus), r, shape.gpus, gpuClass)
		}
	}
}

func TestPodObject(t *testing.T) {
	pod := podObject("bench", "bench", caseFill, podSpec{name: "fill-00001", template: h100Template(2)})
	if pod.Spec.SchedulerName != "bench" || pod.Namespace != "bench" || pod.Labels[caseLabel] != caseFill || pod.Labels[appLabel] != appValue {
		t.Errorf("pod %+v", pod.ObjectMeta)
	}
	if got := *pod.Spec.ResourceClaims[0].ResourceClaimTemplateName; got != "h100-2" {
		t.Errorf("template %s", got)
	}
	if claims := pod.Spec.Containers[0].Resources.Claims; len(claims) != 1 || claims[0].Name != pod.Spec.ResourceClaims[0].Name {
		t.Errorf("container does not use the claim: %+v", claims)
	}
	if pod.Spec.PriorityClassName != "" {
		t.Errorf("pod without a PriorityClass has %q", pod.Spec.PriorityClassName)
	}
}
