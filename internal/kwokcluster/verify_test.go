package kwokcluster

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/pkg/driver/gpu"
)

const driver = gpu.DefaultDriverName

// podBuilder makes test pods: makePod("p").claim("gpu", "c").node("n").obj().
type podBuilder struct{ pod corev1.Pod }

func makePod(name string) *podBuilder {
	return &podBuilder{pod: corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)}}}
}

func (b *podBuilder) claim(name, claimName string) *podBuilder {
	b.pod.Spec.ResourceClaims = append(b.pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: name, ResourceClaimName: ptr.To(claimName)})
	return b
}

// templateClaim adds a claim made from a template; created says whether the
// claim controller has created it, as claimName.
func (b *podBuilder) templateClaim(name, claimName string, created bool) *podBuilder {
	b.pod.Spec.ResourceClaims = append(b.pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: name, ResourceClaimTemplateName: ptr.To("tmpl")})
	if created {
		b.pod.Status.ResourceClaimStatuses = append(b.pod.Status.ResourceClaimStatuses, corev1.PodResourceClaimStatus{Name: name, ResourceClaimName: ptr.To(claimName)})
	}
	return b
}

func (b *podBuilder) node(name string) *podBuilder {
	b.pod.Spec.NodeName = name
	return b
}

func (b *podBuilder) obj() corev1.Pod { return b.pod }

// claimBuilder makes claims: makeClaim("c").devices("n1/gpu-0").on("n1").reservedFor(pod).obj().
type claimBuilder struct{ claim resourceapi.ResourceClaim }

func makeClaim(name string) *claimBuilder {
	return &claimBuilder{claim: resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}}
}

// devices allocates "pool/device" of the GPU driver.
func (b *claimBuilder) devices(ids ...string) *claimBuilder {
	if b.claim.Status.Allocation == nil {
		b.claim.Status.Allocation = &resourceapi.AllocationResult{}
	}
	for _, id := range ids {
		pool, device, _ := strings.Cut(id, "/")
		b.claim.Status.Allocation.Devices.Results = append(b.claim.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "r", Driver: driver, Pool: pool, Device: device})
	}
	return b
}

// consuming sets the capacity that the last device consumes.
func (b *claimBuilder) consuming(name string, q string) *claimBuilder {
	results := b.claim.Status.Allocation.Devices.Results
	results[len(results)-1].ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{resourceapi.QualifiedName(name): resource.MustParse(q)}
	return b
}

// on sets the allocation's node selector to the node, as allocators do for
// node-local devices.
func (b *claimBuilder) on(node string) *claimBuilder {
	b.claim.Status.Allocation.NodeSelector = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
	}}}
	return b
}

func (b *claimBuilder) reservedFor(pods ...corev1.Pod) *claimBuilder {
	for _, pod := range pods {
		b.claim.Status.ReservedFor = append(b.claim.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: pod.Name, UID: pod.UID})
	}
	return b
}

func (b *claimBuilder) obj() resourceapi.ResourceClaim { return b.claim }

func node(name string) corev1.Node {
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}}
}

// plainSlice is a node-local slice of the GPU driver with devices by name.
func plainSlice(nodeName string, generation int64, devices ...string) resourceapi.ResourceSlice {
	s := resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{
		Driver: driver, NodeName: ptr.To(nodeName),
		Pool: resourceapi.ResourcePool{Name: nodeName, Generation: generation, ResourceSliceCount: 1},
	}}
	for _, d := range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: d})
	}
	return s
}

// sharedDevice is a device that claims may share, with 10 units of "bandwidth".
func sharedDevice(name string) resourceapi.Device {
	return resourceapi.Device{
		Name:                     name,
		AllowMultipleAllocations: ptr.To(true),
		Capacity:                 map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"bandwidth": {Value: resource.MustParse("10")}},
	}
}

// a100Slices are the slices that the GPU driver publishes for an A100 node
// with MIG devices: GPUs and MIG devices sharing counters.
func a100Slices(t *testing.T, nodeName string) []resourceapi.ResourceSlice {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	gpus, err := Discover(ctx, "../../config/inventory/a100-mig-8.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := NodeSlices(gpus, NodeObject(nodeName, "a100-mig-8.yaml", "test"))
	if err != nil {
		t.Fatal(err)
	}
	var out []resourceapi.ResourceSlice
	for _, s := range objs {
		out = append(out, *s)
	}
	return out
}

// migOf returns the name of the first MIG device of the GPU, from the
// driver's slices.
func migOf(t *testing.T, all []resourceapi.ResourceSlice, gpuName string) string {
	t.Helper()
	for _, s := range all {
		for _, d := range s.Spec.Devices {
			if strings.HasPrefix(d.Name, gpuName+"-mig-") {
				return d.Name
			}
		}
	}
	t.Fatalf("no MIG device of %s", gpuName)
	return ""
}

func TestVerify(t *testing.T) {
	p1 := makePod("p1").claim("c", "c1").node("n1").obj()
	p2 := makePod("p2").claim("c", "c2").node("n1").obj()
	nodes := []corev1.Node{node("n1"), node("n2")}
	twoGPUs := []resourceapi.ResourceSlice{plainSlice("n1", 0, "gpu-0", "gpu-1"), plainSlice("n2", 0, "gpu-0")}
	a100 := a100Slices(t, "n1")
	mig0, mig1 := migOf(t, a100, "gpu-0"), migOf(t, a100, "gpu-1")
	shared := plainSlice("n1", 0)
	shared.Spec.Devices = []resourceapi.Device{sharedDevice("nic-0")}

	for name, tc := range map[string]struct {
		pods    []corev1.Pod
		claims  []resourceapi.ResourceClaim
		slices  []resourceapi.ResourceSlice
		wantErr []string
	}{
		"good": {
			claims: []resourceapi.ResourceClaim{
				makeClaim("c1").devices("n1/gpu-0").on("n1").reservedFor(p1).obj(),
				makeClaim("c2").devices("n1/gpu-1").on("n1").reservedFor(p2).obj(),
			},
		},
		"device twice": {
			claims: []resourceapi.ResourceClaim{
				makeClaim("c1").devices("n1/gpu-0").on("n1").reservedFor(p1).obj(),
				makeClaim("c2").devices("n1/gpu-0").on("n1").reservedFor(p2).obj(),
			},
			wantErr: []string{"device gpu.drasched.dev/n1/gpu-0 is allocated to claims ns/c1 and ns/c2"},
		},
		"device twice, claim without pod": {
			claims: []resourceapi.ResourceClaim{
				makeClaim("c1").devices("n1/gpu-0").on("n1").reservedFor(p1).obj(),
				makeClaim("c2").devices("n1/gpu-1").on("n1").reservedFor(p2).obj(),
				makeClaim("orphan").devices("n1/gpu-1").on("n1").obj(),
			},
			wantErr: []string{"device gpu.drasched.dev/n1/gpu-1 is allocated to claims ns/c2 and ns/orphan"},
		},
		"device of another node": {
			claims: []resourceapi.ResourceClaim{
				makeClaim("c1").devices("n2/gpu-0").reservedFor(p1).obj(),
				makeClaim("c2").devices("n1/gpu-1").on("n1").reservedFor(p2).obj(),
			},
			wantErr: []string{"claim ns/c1 of pod ns/p1 on node n1 got device gpu.drasched.dev/n2/gpu-0 of node n2"},
		},
		"node selector of another node": {
			claims: []resourceapi.ResourceClaim{
				makeClaim("c1").devices("n1/gpu-0").on("n2").reservedFor(p1).obj(),
				makeClaim("c2").devices("n1/gpu-1").on("n1").reservedFor(p2).obj(),
			},
			wantErr: []string{"claim ns/c1 of pod ns/p1: the allocation's node selector does not match the pod's node n1"},
		},
		"device in no slice": {
			claims: []resourceapi.ResourceClaim{
				makeClaim("c1").devices("n1/gpu-7").on("n1").reservedFor(p1).obj(),
				makeClaim("c2").devices("n1/gpu-1").on("n1").reservedFor(p2).obj(),
			},
			wantErr: []string{"claim ns/c1 got device gpu.drasched.dev/n1/gpu-7, which is in no ResourceSlice"},
		},
		"device only in an old generation": {
			slices: []resourceapi.ResourceSlice{plainSlice("n1", 0, "gpu-0", "gpu-1"), plainSlice("n1", 1, "gpu-1")},
			claims: []resourceapi.ResourceClaim{
				makeClaim("c1").devices("n1/gpu-0").on("n1").reservedFor(p1).obj(),
				makeClaim("c2").devices("n1/gpu-1").on("n1").reservedFor(p2).obj(),
			},
			wantErr: []string{"device gpu.drasched.dev/n1/gpu-0, which is in no ResourceSlice"},
		},
		"not reserved": {
			claims: []resourceapi.ResourceClaim{
				makeClaim("c1").devices("n1/gpu-0").on("n1").obj(),
				makeClaim("c2").devices("n1/gpu-1").on("n1").reservedFor(p2).obj(),
			},
			wantErr: []string{"claim ns/c1 is not reserved for its pod ns/p1"},
		},
		"not allocated": {
			claims: []resourceapi.ResourceClaim{
				makeClaim("c1").obj(),
				makeClaim("c2").devices("n1/gpu-1").on("n1").reservedFor(p2).obj(),
			},
			wantErr: []string{"pod ns/p1 is bound but its claim ns/c1 is not allocated"},
		},
		"claim missing": {
			claims:  []resourceapi.ResourceClaim{makeClaim("c2").devices("n1/gpu-1").on("n1").reservedFor(p2).obj()},
			wantErr: []string{"pod ns/p1 is bound but its claim c (c1) does not exist"},
		},
		"template claim not created": {
			pods:    []corev1.Pod{makePod("p3").templateClaim("gpu", "", false).node("n1").obj()},
			wantErr: []string{"pod ns/p3 is bound but its claim gpu was not created"},
		},
		"node missing": {
			pods:    []corev1.Pod{makePod("p3").node("n9").obj()},
			wantErr: []string{"pod ns/p3 is bound to node n9, which does not exist"},
		},
		"pending pods are not checked": {
			pods: []corev1.Pod{makePod("p3").templateClaim("gpu", "", false).obj()},
		},
		"MIG devices of different GPUs": {
			slices: a100,
			claims: []resourceapi.ResourceClaim{
				makeClaim("c1").devices("n1/" + mig0).on("n1").reservedFor(p1).obj(),
				makeClaim("c2").devices("n1/" + mig1).on("n1").reservedFor(p2).obj(),
			},
		},
		"a GPU and its own MIG device": {
			slices: a100,
			claims: []resourceapi.ResourceClaim{
				makeClaim("c1").devices("n1/gpu-0").on("n1").reservedFor(p1).obj(),
				makeClaim("c2").devices("n1/" + mig0).on("n1").reservedFor(p2).obj(),
			},
			wantErr: []string{"of counter set gpu-0"},
		},
		"shared device within its capacity": {
			slices: []resourceapi.ResourceSlice{shared},
			claims: []resourceapi.ResourceClaim{
				makeClaim("c1").devices("n1/nic-0").consuming("bandwidth", "4").on("n1").reservedFor(p1).obj(),
				makeClaim("c2").devices("n1/nic-0").consuming("bandwidth", "6").on("n1").reservedFor(p2).obj(),
			},
		},
		"shared device beyond its capacity": {
			slices: []resourceapi.ResourceSlice{shared},
			claims: []resourceapi.ResourceClaim{
				makeClaim("c1").devices("n1/nic-0").consuming("bandwidth", "4").on("n1").reservedFor(p1).obj(),
				makeClaim("c2").devices("n1/nic-0").consuming("bandwidth", "7").on("n1").reservedFor(p2).obj(),
			},
			wantErr: []string{"device gpu.drasched.dev/n1/nic-0: claims consume 11 of capacity bandwidth"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := Cluster{Pods: tc.pods, Claims: tc.claims, Slices: tc.slices, Nodes: nodes}
			if c.Pods == nil {
				c.Pods = []corev1.Pod{p1, p2}
			}
			if c.Slices == nil {
				c.Slices = twoGPUs
			}
			errs := Verify(c)
			if len(errs) != len(tc.wantErr) {
				t.Fatalf("got %d errors %v, want %d: %q", len(errs), errs, len(tc.wantErr), tc.wantErr)
			}
			for i, want := range tc.wantErr {
				if !strings.Contains(errs[i].Error(), want) {
					t.Errorf("error %d: got %q, want one containing %q", i, errs[i], want)
				}
			}
		})
	}
}
