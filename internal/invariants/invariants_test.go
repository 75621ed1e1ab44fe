package invariants

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
)

// The checks must be able to fail: each case
// builds API state with one violation (or a legitimate look-alike) and
// expects the problems it names.
func TestCheckDevices(t *testing.T) {
	slice := builder.MakeSlice("s").Driver("d").Pool("p", 1, 2).Node("n").Devices(
		builder.MakeDevice("exclusive"),
		builder.MakeDevice("shared").Capacity("mem", "10Gi").Shareable(nil),
		builder.MakeDevice("part-a").Consumes("gpu", map[string]string{"mem": "6Gi"}),
		builder.MakeDevice("part-b").Consumes("gpu", map[string]string{"mem": "6Gi"}),
	).Obj()
	counters := builder.MakeSlice("c").Driver("d").Pool("p", 1, 2).Node("n").
		Counters(builder.CounterSet("gpu", map[string]string{"mem": "8Gi"})).Obj()
	stale := builder.MakeSlice("old").Driver("d").Pool("p", 0, 1).Node("n").Devices(
		builder.MakeDevice("shared").Capacity("mem", "100Gi").Shareable(nil),
	).Obj()
	resourceSlices := []resourceapi.ResourceSlice{*slice, *counters, *stale}

	result := func(device string) resourceapi.DeviceRequestAllocationResult {
		return resourceapi.DeviceRequestAllocationResult{Request: "r", Driver: "d", Pool: "p", Device: device}
	}
	share := func(device, id, mem string) resourceapi.DeviceRequestAllocationResult {
		r := result(device)
		r.ShareID = ptr.To(types.UID(id))
		r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"mem": resource.MustParse(mem)}
		return r
	}
	admin := func(device string) resourceapi.DeviceRequestAllocationResult {
		r := result(device)
		r.AdminAccess = ptr.To(true)
		return r
	}

	for name, tc := range map[string]struct {
		results [][]resourceapi.DeviceRequestAllocationResult // one claim each
		want    []string                                      // substrings, one per problem
	}{
		"one-claim-per-device": {results: [][]resourceapi.DeviceRequestAllocationResult{{result("exclusive")}, {result("part-a")}}},
		"double-allocation": {
			results: [][]resourceapi.DeviceRequestAllocationResult{{result("exclusive")}, {result("exclusive")}},
			want:    []string{"device d/p/exclusive is allocated to ns/claim-0 (request r) and ns/claim-1 (request r)"},
		},
		"admin-access-shares": {results: [][]resourceapi.DeviceRequestAllocationResult{{result("exclusive")}, {admin("exclusive")}}},
		"shares-within-capacity": {
			results: [][]resourceapi.DeviceRequestAllocationResult{{share("shared", "a", "4Gi")}, {share("shared", "b", "6Gi")}},
		},
		"shares-over-capacity": {
			// The stale slice's 100Gi do not count.
			results: [][]resourceapi.DeviceRequestAllocationResult{{share("shared", "a", "6Gi")}, {share("shared", "b", "6Gi")}},
			want:    []string{"device d/p/shared: shares consume 12Gi of capacity mem, the device has 10Gi"},
		},
		"same-share-twice": {
			results: [][]resourceapi.DeviceRequestAllocationResult{{share("shared", "a", "1Gi")}, {share("shared", "a", "1Gi")}},
			want:    []string{"device d/p/shared: share a is allocated to ns/claim-0 (request r) and ns/claim-1 (request r)"},
		},
		"shared-and-exclusive": {
			results: [][]resourceapi.DeviceRequestAllocationResult{{result("shared")}, {share("shared", "a", "1Gi")}},
			want:    []string{"device d/p/shared is allocated to ns/claim-0 (request r) and shared by 1 other allocations"},
		},
		"share-of-exclusive-device": {
			results: [][]resourceapi.DeviceRequestAllocationResult{{share("exclusive", "a", "1Gi")}},
			want: []string{
				"device d/p/exclusive does not allow multiple allocations but is shared by 1",
				"device d/p/exclusive: shares consume capacity mem, which the device does not have",
			},
		},
		"counters-exceeded": {
			results: [][]resourceapi.DeviceRequestAllocationResult{{result("part-a")}, {result("part-b")}},
			want:    []string{"pool d/p: allocated devices consume 12Gi of counter gpu/mem, the pool has 8Gi"},
		},
		"device-of-deleted-slice": {results: [][]resourceapi.DeviceRequestAllocationResult{{result("gone")}}},
		// A device only in an old generation is no more published than one
		// whose slice is gone.
		"device-of-old-generation": {results: [][]resourceapi.DeviceRequestAllocationResult{{share("shared", "a", "60Gi")}},
			want: []string{"device d/p/shared: shares consume 60Gi of capacity mem, the device has 10Gi"}},
	} {
		t.Run(name, func(t *testing.T) {
			var claims []resourceapi.ResourceClaim
			for i, results := range tc.results {
				claim := builder.MakeClaim(fmt.Sprintf("claim-%d", i)).Obj()
				claim.Namespace = "ns"
				claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
				claims = append(claims, *claim)
			}
			assertProblems(t, Check(Cluster{Claims: claims, Slices: resourceSlices}, Options{}), tc.want)
		})
	}
}

func TestCheckPodsAndReservations(t *testing.T) {
	node := *builder.MakeNode("n", v1.LabelHostname, "n")
	onNode := &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{
		{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{"n"}},
	}}}}
	onOther := &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{
		{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{"other"}},
	}}}}
	pod := func(nodeName string) v1.Pod {
		pod := builder.MakePod("pod").Claim("gpu", "claim").Obj()
		pod.Namespace, pod.UID, pod.Spec.NodeName = "ns", "pod-uid", nodeName
		return *pod
	}
	claim := func(selector *v1.NodeSelector, reservedFor types.UID, owner types.UID) *resourceapi.ResourceClaim {
		claim := builder.MakeClaim("claim").Obj()
		claim.Namespace = "ns"
		if selector != nil {
			claim.Status.Allocation = &resourceapi.AllocationResult{NodeSelector: selector}
		}
		if reservedFor != "" {
			claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "pod", UID: reservedFor}}
		}
		if owner != "" {
			claim.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "pod", UID: owner, Controller: ptr.To(true)}}
		}
		return claim
	}

	for name, tc := range map[string]struct {
		pods  []v1.Pod
		claim *resourceapi.ResourceClaim
		want  []string
	}{
		"bound-and-consistent": {pods: []v1.Pod{pod("n")}, claim: claim(onNode, "pod-uid", "")},
		"pending-pod":          {pods: []v1.Pod{pod("")}, claim: claim(nil, "", "")},
		"not-allocated": {
			pods: []v1.Pod{pod("n")}, claim: claim(nil, "", ""),
			want: []string{"pod ns/pod is bound but its claim ns/claim is not allocated"},
		},
		"not-reserved": {
			pods: []v1.Pod{pod("n")}, claim: claim(onNode, "", ""),
			want: []string{"claim ns/claim is not reserved for its pod ns/pod"},
		},
		"other-node": {
			pods: []v1.Pod{pod("n")}, claim: claim(onOther, "pod-uid", ""),
			want: []string{"claim ns/claim of pod ns/pod: the allocation's node selector does not match the pod's node n"},
		},
		"reserved-for-deleted-pod": {
			claim: claim(onNode, "pod-uid", ""),
			want:  []string{"claim ns/claim is reserved for pod pod (pod-uid), which does not exist"},
		},
		"allocated-for-deleted-owner": {
			claim: claim(onNode, "", "pod-uid"),
			want:  []string{"claim ns/claim is allocated, but was generated for pod pod (pod-uid), which does not exist"},
		},
		"deallocated-for-deleted-owner": {claim: claim(nil, "", "pod-uid")},
	} {
		t.Run(name, func(t *testing.T) {
			c := Cluster{Pods: tc.pods, Claims: []resourceapi.ResourceClaim{*tc.claim}, Nodes: []v1.Node{node}}
			assertProblems(t, Check(c, Options{Namespace: "ns", GonePods: true}), tc.want)
			// Without GonePods, Pods may be a subset: a claim of a pod
			// not among them is not checked.
			var bound []string
			for _, w := range tc.want {
				if !strings.Contains(w, "which does not exist") {
					bound = append(bound, w)
				}
			}
			assertProblems(t, Check(c, Options{Namespace: "ns"}), bound)
		})
	}
}

func assertProblems(t *testing.T, problems []error, want []string) {
	t.Helper()
	if len(problems) != len(want) {
		t.Fatalf("got problems %q, want %d: %q", problems, len(want), want)
	}
	for i := range want {
		if !strings.Contains(problems[i].Error(), want[i]) {
			t.Errorf("problem %d is %q, want it to say %q", i, problems[i], want[i])
		}
	}
}
