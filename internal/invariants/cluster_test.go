package invariants

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

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/internal/kwokcluster"
	"github.com/drasched/drasched/pkg/driver/gpu"
)

const driver = gpu.DefaultDriverName

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
	gpus, err := kwokcluster.Discover(ctx, "../../config/inventory/a100-mig-8.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := kwokcluster.NodeSlices(gpus, kwokcluster.NodeObject(nodeName, "a100-mig-8.yaml", "test"))
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

// TestCheckCluster: the checks as an observer of a whole cluster runs them
// after the fact (the demo, the benchmarks): with Options.Unpublished.
func TestCheckCluster(t *testing.T) {
	p1 := builder.MakePod("p1").UID("uid-p1").Claim("c", "c1").Node("n1").Obj()
	p2 := builder.MakePod("p2").UID("uid-p2").Claim("c", "c2").Node("n1").Obj()
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
				*builder.MakeClaim("c1").Allocated("r", driver, "n1", "gpu-0").AllocatedOn("n1").ReservedFor(p1).Obj(),
				*builder.MakeClaim("c2").Allocated("r", driver, "n1", "gpu-1").AllocatedOn("n1").ReservedFor(p2).Obj(),
			},
		},
		"device twice": {
			claims: []resourceapi.ResourceClaim{
				*builder.MakeClaim("c1").Allocated("r", driver, "n1", "gpu-0").AllocatedOn("n1").ReservedFor(p1).Obj(),
				*builder.MakeClaim("c2").Allocated("r", driver, "n1", "gpu-0").AllocatedOn("n1").ReservedFor(p2).Obj(),
			},
			wantErr: []string{"device gpu.drasched.dev/n1/gpu-0 is allocated to default/c1 (request r) and default/c2 (request r)"},
		},
		"device twice, claim without pod": {
			claims: []resourceapi.ResourceClaim{
				*builder.MakeClaim("c1").Allocated("r", driver, "n1", "gpu-0").AllocatedOn("n1").ReservedFor(p1).Obj(),
				*builder.MakeClaim("c2").Allocated("r", driver, "n1", "gpu-1").AllocatedOn("n1").ReservedFor(p2).Obj(),
				*builder.MakeClaim("orphan").Allocated("r", driver, "n1", "gpu-1").AllocatedOn("n1").Obj(),
			},
			wantErr: []string{"device gpu.drasched.dev/n1/gpu-1 is allocated to default/c2 (request r) and default/orphan (request r)"},
		},
		"device of another node": {
			claims: []resourceapi.ResourceClaim{
				*builder.MakeClaim("c1").Allocated("r", driver, "n2", "gpu-0").ReservedFor(p1).Obj(),
				*builder.MakeClaim("c2").Allocated("r", driver, "n1", "gpu-1").AllocatedOn("n1").ReservedFor(p2).Obj(),
			},
			wantErr: []string{"claim default/c1 of pod default/p1 on node n1 got device gpu.drasched.dev/n2/gpu-0 of node n2"},
		},
		"node selector of another node": {
			claims: []resourceapi.ResourceClaim{
				*builder.MakeClaim("c1").Allocated("r", driver, "n1", "gpu-0").AllocatedOn("n2").ReservedFor(p1).Obj(),
				*builder.MakeClaim("c2").Allocated("r", driver, "n1", "gpu-1").AllocatedOn("n1").ReservedFor(p2).Obj(),
			},
			wantErr: []string{"claim default/c1 of pod default/p1: the allocation's node selector does not match the pod's node n1"},
		},
		"device in no slice": {
			claims: []resourceapi.ResourceClaim{
				*builder.MakeClaim("c1").Allocated("r", driver, "n1", "gpu-7").AllocatedOn("n1").ReservedFor(p1).Obj(),
				*builder.MakeClaim("c2").Allocated("r", driver, "n1", "gpu-1").AllocatedOn("n1").ReservedFor(p2).Obj(),
			},
			wantErr: []string{"claim default/c1 got device gpu.drasched.dev/n1/gpu-7, which is in no ResourceSlice"},
		},
		"device only in an old generation": {
			slices: []resourceapi.ResourceSlice{plainSlice("n1", 0, "gpu-0", "gpu-1"), plainSlice("n1", 1, "gpu-1")},
			claims: []resourceapi.ResourceClaim{
				*builder.MakeClaim("c1").Allocated("r", driver, "n1", "gpu-0").AllocatedOn("n1").ReservedFor(p1).Obj(),
				*builder.MakeClaim("c2").Allocated("r", driver, "n1", "gpu-1").AllocatedOn("n1").ReservedFor(p2).Obj(),
			},
			wantErr: []string{"device gpu.drasched.dev/n1/gpu-0, which is in no ResourceSlice"},
		},
		"not reserved": {
			claims: []resourceapi.ResourceClaim{
				*builder.MakeClaim("c1").Allocated("r", driver, "n1", "gpu-0").AllocatedOn("n1").Obj(),
				*builder.MakeClaim("c2").Allocated("r", driver, "n1", "gpu-1").AllocatedOn("n1").ReservedFor(p2).Obj(),
			},
			wantErr: []string{"claim default/c1 is not reserved for its pod default/p1"},
		},
		"not allocated": {
			claims: []resourceapi.ResourceClaim{
				*builder.MakeClaim("c1").Obj(),
				*builder.MakeClaim("c2").Allocated("r", driver, "n1", "gpu-1").AllocatedOn("n1").ReservedFor(p2).Obj(),
			},
			wantErr: []string{"pod default/p1 is bound but its claim default/c1 is not allocated"},
		},
		"claim missing": {
			claims:  []resourceapi.ResourceClaim{*builder.MakeClaim("c2").Allocated("r", driver, "n1", "gpu-1").AllocatedOn("n1").ReservedFor(p2).Obj()},
			wantErr: []string{"pod default/p1 is bound but its claim c (c1) does not exist"},
		},
		"template claim not created": {
			pods:    []corev1.Pod{*builder.MakePod("p3").UID("uid-p3").ClaimFromTemplate("gpu", "tmpl").Node("n1").Obj()},
			wantErr: []string{"pod default/p3 is bound but its claim gpu was not created"},
		},
		"node missing": {
			pods:    []corev1.Pod{*builder.MakePod("p3").UID("uid-p3").Node("n9").Obj()},
			wantErr: []string{"pod default/p3 is bound to node n9, which does not exist"},
		},
		"pending pods are not checked": {
			pods: []corev1.Pod{*builder.MakePod("p3").UID("uid-p3").ClaimFromTemplate("gpu", "tmpl").Obj()},
		},
		"MIG devices of different GPUs": {
			slices: a100,
			claims: []resourceapi.ResourceClaim{
				*builder.MakeClaim("c1").Allocated("r", driver, "n1", mig0).AllocatedOn("n1").ReservedFor(p1).Obj(),
				*builder.MakeClaim("c2").Allocated("r", driver, "n1", mig1).AllocatedOn("n1").ReservedFor(p2).Obj(),
			},
		},
		"a GPU and its own MIG device": {
			slices: a100,
			claims: []resourceapi.ResourceClaim{
				*builder.MakeClaim("c1").Allocated("r", driver, "n1", "gpu-0").AllocatedOn("n1").ReservedFor(p1).Obj(),
				*builder.MakeClaim("c2").Allocated("r", driver, "n1", mig0).AllocatedOn("n1").ReservedFor(p2).Obj(),
			},
			wantErr: []string{"of counter gpu-0-memory-slices/"},
		},
		"shared device within its capacity": {
			slices: []resourceapi.ResourceSlice{shared},
			claims: []resourceapi.ResourceClaim{
				share(builder.MakeClaim("c1").Allocated("r", driver, "n1", "nic-0").ConsumedCapacity("bandwidth", "4").AllocatedOn("n1").ReservedFor(p1).Obj(), "a"),
				share(builder.MakeClaim("c2").Allocated("r", driver, "n1", "nic-0").ConsumedCapacity("bandwidth", "6").AllocatedOn("n1").ReservedFor(p2).Obj(), "b"),
			},
		},
		"shared device without shares": {
			// The allocator gives every allocation of a device that allows
			// multiple allocations a share ID; two without are two claims
			// on one device.
			slices: []resourceapi.ResourceSlice{shared},
			claims: []resourceapi.ResourceClaim{
				*builder.MakeClaim("c1").Allocated("r", driver, "n1", "nic-0").AllocatedOn("n1").ReservedFor(p1).Obj(),
				*builder.MakeClaim("c2").Allocated("r", driver, "n1", "nic-0").AllocatedOn("n1").ReservedFor(p2).Obj(),
			},
			wantErr: []string{"device gpu.drasched.dev/n1/nic-0 is allocated to default/c1 (request r) and default/c2 (request r)"},
		},
		"shared device beyond its capacity": {
			slices: []resourceapi.ResourceSlice{shared},
			claims: []resourceapi.ResourceClaim{
				share(builder.MakeClaim("c1").Allocated("r", driver, "n1", "nic-0").ConsumedCapacity("bandwidth", "4").AllocatedOn("n1").ReservedFor(p1).Obj(), "a"),
				share(builder.MakeClaim("c2").Allocated("r", driver, "n1", "nic-0").ConsumedCapacity("bandwidth", "7").AllocatedOn("n1").ReservedFor(p2).Obj(), "b"),
			},
			wantErr: []string{"device gpu.drasched.dev/n1/nic-0: shares consume 11 of capacity bandwidth"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := Cluster{Pods: tc.pods, Claims: tc.claims, Slices: tc.slices, Nodes: nodes}
			if c.Pods == nil {
				c.Pods = []corev1.Pod{*p1, *p2}
			}
			if c.Slices == nil {
				c.Slices = twoGPUs
			}
			errs := Check(c, Options{Unpublished: true})
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

// share gives the claim's one device result a share ID, as the allocator
// does on a device that allows multiple allocations.
func share(claim *resourceapi.ResourceClaim, id string) resourceapi.ResourceClaim {
	claim.Status.Allocation.Devices.Results[0].ShareID = ptr.To(types.UID(id))
	return *claim
}
