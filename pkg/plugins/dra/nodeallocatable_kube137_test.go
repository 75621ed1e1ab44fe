//go:build !kube1.35 && !kube1.36

package dra

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/pkg/tracker/trackertest"
)

// The devices of these tests stand for CPU of node-a: "cpus-N" maps N
// CPUs, "pool" maps the "cpu" capacity a claim consumes, "overhead" costs
// one CPU per pod and 100Mi per container.

func quantity(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }

// cpuDevice maps n CPUs (or, with n == "", nothing).
func cpuDevice(name, n string) *builder.DeviceWrapper {
	d := builder.MakeDevice(name)
	if n != "" {
		d.NodeAllocatableResources = map[v1.ResourceName]resourceapi.NodeAllocatableResource{
			v1.ResourceCPU: {Mapping: &resourceapi.NodeAllocatableMapping{DeviceMultiplier: quantity(n)}},
		}
	}
	return d
}

func poolDevice() *builder.DeviceWrapper {
	d := builder.MakeDevice("pool").Capacity("cpu", "64")
	d.NodeAllocatableResources = map[v1.ResourceName]resourceapi.NodeAllocatableResource{
		v1.ResourceCPU:    {Mapping: &resourceapi.NodeAllocatableMapping{CapacityKey: ptr.To[resourceapi.QualifiedName]("cpu"), CapacityMultiplier: quantity("1")}},
		v1.ResourceMemory: {Mapping: &resourceapi.NodeAllocatableMapping{CapacityKey: ptr.To[resourceapi.QualifiedName]("cpu"), CapacityMultiplier: quantity("2Gi")}},
	}
	return d
}

func overheadDevice() *builder.DeviceWrapper {
	d := builder.MakeDevice("overhead")
	d.NodeAllocatableResources = map[v1.ResourceName]resourceapi.NodeAllocatableResource{
		v1.ResourceCPU:    {Overhead: &resourceapi.NodeAllocatableOverhead{PerPod: quantity("1")}},
		v1.ResourceMemory: {Overhead: &resourceapi.NodeAllocatableOverhead{PerContainer: quantity("100Mi")}},
	}
	return d
}

func cpuSlice() *resourceapi.ResourceSlice {
	return builder.MakeSlice("node-a").Node("node-a").Devices(cpuDevice("cpus-4", "4"), cpuDevice("cpus-16", "16"), cpuDevice("plain", ""), poolDevice(), overheadDevice()).Obj()
}

// cpuClass selects the devices "cpus-N" of kindSlice.
var cpuClass = builder.MakeClass(gpuClass, `device.attributes["gpu.example.com"].kind == "cpus"`)

// kindSlice is cpuSlice with an attribute "kind": "cpus" for the devices
// "cpus-N", "other" for the others.
func kindSlice() *resourceapi.ResourceSlice {
	slice := cpuSlice()
	for i := range slice.Spec.Devices {
		kind := "other"
		if strings.HasPrefix(slice.Spec.Devices[i].Name, "cpus-") {
			kind = "cpus"
		}
		slice.Spec.Devices[i].Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"kind": {StringValue: ptr.To(kind)}}
	}
	return slice
}

// allocation allocates devices of node-a's pool.
func allocation(devices ...string) *resourceapi.AllocationResult {
	a := &resourceapi.AllocationResult{}
	for _, d := range devices {
		a.Devices.Results = append(a.Devices.Results, resourceapi.DeviceRequestAllocationResult{Request: "cpu", Driver: "gpu.example.com", Pool: "node-a", Device: d})
	}
	return a
}

// nodeWithCPU is node-a with cpus allocatable CPUs and 64Gi of memory, of
// which the pods on it request used.
func nodeWithCPU(cpus, used string) fwk.NodeInfo {
	node := builder.MakeNode("node-a")
	node.Status.Allocatable = v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpus), v1.ResourceMemory: resource.MustParse("64Gi"), v1.ResourcePods: resource.MustParse("110")}
	nodeInfo := framework.NewNodeInfo()
	nodeInfo.SetNode(node)
	if used != "" {
		nodeInfo.AddPod(builder.MakePod("other").Containers(builder.Container("ctr", map[v1.ResourceName]string{v1.ResourceCPU: used})).Obj())
	}
	return nodeInfo
}

func TestMappedQuantity(t *testing.T) {
	key := ptr.To[resourceapi.QualifiedName]("cpu")
	consumed := func(q string) *resourceapi.DeviceRequestAllocationResult {
		return &resourceapi.DeviceRequestAllocationResult{Device: "d", ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"cpu": resource.MustParse(q)}}
	}
	for name, tc := range map[string]struct {
		mapping *resourceapi.NodeAllocatableMapping
		result  *resourceapi.DeviceRequestAllocationResult
		want    string // "" for nothing
		wantErr string
	}{
		"device multiplier":      {mapping: &resourceapi.NodeAllocatableMapping{DeviceMultiplier: quantity("16")}, result: &resourceapi.DeviceRequestAllocationResult{}, want: "16"},
		"capacity":               {mapping: &resourceapi.NodeAllocatableMapping{CapacityKey: key}, result: consumed("3"), want: "3"},
		"capacity multiplier 1":  {mapping: &resourceapi.NodeAllocatableMapping{CapacityKey: key, CapacityMultiplier: quantity("1")}, result: consumed("500m"), want: "500m"},
		"capacity times 2Gi":     {mapping: &resourceapi.NodeAllocatableMapping{CapacityKey: key, CapacityMultiplier: quantity("2Gi")}, result: consumed("3"), want: "6Gi"},
		"other capacity":         {mapping: &resourceapi.NodeAllocatableMapping{CapacityKey: ptr.To[resourceapi.QualifiedName]("memory")}, result: consumed("3")},
		"no consumed capacity":   {mapping: &resourceapi.NodeAllocatableMapping{CapacityKey: key}, result: &resourceapi.DeviceRequestAllocationResult{}, wantErr: "consumed no capacity"},
		"empty key, multiplier":  {mapping: &resourceapi.NodeAllocatableMapping{CapacityKey: ptr.To[resourceapi.QualifiedName](""), DeviceMultiplier: quantity("2")}, result: &resourceapi.DeviceRequestAllocationResult{}, want: "2"},
		"neither key nor factor": {mapping: &resourceapi.NodeAllocatableMapping{}, result: &resourceapi.DeviceRequestAllocationResult{}},
	} {
		t.Run(name, func(t *testing.T) {
			q, ok, err := mappedQuantity(tc.mapping, tc.result)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ok != (tc.want != "") {
				t.Fatalf("ok %v, want %v", ok, tc.want != "")
			}
			if ok && q.Cmp(resource.MustParse(tc.want)) != 0 {
				t.Errorf("got %s, want %s", q.String(), tc.want)
			}
		})
	}
}

func TestNodeAllocatableStatuses(t *testing.T) {
	mapped := func(name v1.ResourceName, q string) v1.NodeAllocatableMappedResources {
		return v1.NodeAllocatableMappedResources{Name: name, Quantity: quantity(q)}
	}
	// The pod: claim "a" used by an init container and the main one, "b"
	// by nobody.
	pod := builder.MakePod("pod").Claim("a", "claim-a").Obj()
	pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, v1.PodResourceClaim{Name: "b", ResourceClaimName: ptr.To("claim-b")})
	pod.Spec.InitContainers = []v1.Container{{Name: "init", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "a"}}}}}
	claimA, claimB := builder.MakeClaim("claim-a").Obj(), builder.MakeClaim("claim-b").Obj()
	withAllocation := func(claim *resourceapi.ResourceClaim, a *resourceapi.AllocationResult) *resourceapi.ResourceClaim {
		claim = claim.DeepCopy()
		claim.Status.Allocation = a
		return claim
	}
	unknown := builder.MakeSlice("node-a").Node("node-a").Devices(cpuDevice("cpus-4", "4")).Obj()
	unknown.Spec.Devices[0].NodeAllocatableResources["example.com/unknown"] = resourceapi.NodeAllocatableResource{Mapping: &resourceapi.NodeAllocatableMapping{DeviceMultiplier: quantity("3")}}
	otherNode := builder.MakeSlice("node-a").Node("node-b").Devices(cpuDevice("cpus-4", "4")).Obj()
	consumed := allocation("pool")
	consumed.Devices.Results[0].ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"cpu": resource.MustParse("2")}

	for name, tc := range map[string]struct {
		slices []*resourceapi.ResourceSlice
		claims []*resourceapi.ResourceClaim
		// pending claims (by index into claims) and Filter's results.
		pending []int
		results []resourceapi.AllocationResult
		want    []v1.NodeAllocatableResourceClaimStatus
		wantErr string
	}{
		"allocated before": {
			claims: []*resourceapi.ResourceClaim{withAllocation(claimA, allocation("cpus-4", "cpus-16"))},
			want: []v1.NodeAllocatableResourceClaimStatus{{ResourceClaimName: "claim-a", Containers: []string{"init", "ctr"},
				Mapping: []v1.NodeAllocatableMappedResources{mapped(v1.ResourceCPU, "20")}, Overhead: []v1.NodeAllocatableOverheadResources{}}},
		},
		"allocated by Filter, sorted by claim, unused claim without containers": {
			claims:  []*resourceapi.ResourceClaim{claimB, withAllocation(claimA, allocation("overhead"))},
			pending: []int{0},
			results: []resourceapi.AllocationResult{*consumed},
			want: []v1.NodeAllocatableResourceClaimStatus{
				{ResourceClaimName: "claim-a", Containers: []string{"init", "ctr"}, Mapping: []v1.NodeAllocatableMappedResources{},
					Overhead: []v1.NodeAllocatableOverheadResources{{Name: v1.ResourceCPU, PerPod: quantity("1")}, {Name: v1.ResourceMemory, PerContainer: quantity("100Mi")}}},
				{ResourceClaimName: "claim-b", Containers: []string{},
					Mapping: []v1.NodeAllocatableMappedResources{mapped(v1.ResourceCPU, "2"), mapped(v1.ResourceMemory, "4Gi")}, Overhead: []v1.NodeAllocatableOverheadResources{}},
			},
		},
		"devices without node-allocatable resources": {
			claims: []*resourceapi.ResourceClaim{withAllocation(claimA, allocation("plain"))},
		},
		"not allocated, no result": {
			claims: []*resourceapi.ResourceClaim{claimA},
		},
		"a resource the scheduler does not know is reported": {
			slices: []*resourceapi.ResourceSlice{unknown},
			claims: []*resourceapi.ResourceClaim{withAllocation(claimA, allocation("cpus-4"))},
			want: []v1.NodeAllocatableResourceClaimStatus{{ResourceClaimName: "claim-a", Containers: []string{"init", "ctr"},
				Mapping: []v1.NodeAllocatableMappedResources{mapped(v1.ResourceCPU, "4"), mapped("example.com/unknown", "3")}, Overhead: []v1.NodeAllocatableOverheadResources{}}},
		},
		"another device of the claim is gone": {
			claims:  []*resourceapi.ResourceClaim{withAllocation(claimA, allocation("cpus-4", "gone"))},
			wantErr: "device gone not found",
		},
		"mapped by capacity without consumed capacity": {
			claims:  []*resourceapi.ResourceClaim{withAllocation(claimA, allocation("pool"))},
			wantErr: "consumed no capacity",
		},
		"slice of another node": {
			slices: []*resourceapi.ResourceSlice{otherNode},
			claims: []*resourceapi.ResourceClaim{withAllocation(claimA, allocation("cpus-4"))},
		},
	} {
		t.Run(name, func(t *testing.T) {
			slices := tc.slices
			if slices == nil {
				slices = []*resourceapi.ResourceSlice{cpuSlice()}
			}
			s := &stateData{claims: tc.claims, info: make([]claimInfo, len(tc.claims)), nodeAllocatable: &nodeAllocatable{slices: slices}}
			for _, i := range tc.pending {
				s.toAllocate = append(s.toAllocate, i)
				s.pending = append(s.pending, tc.claims[i])
			}
			got, err := s.nodeAllocatableStatuses(pod, builder.MakeNode("node-a"), tc.results)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("statuses (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckNodeAllocatableSharing(t *testing.T) {
	pod := podWithClaims("c")
	reservedFor := func(device string, uids ...types.UID) *resourceapi.ResourceClaim {
		claim := builder.MakeClaim("c").Obj()
		claim.Status.Allocation = allocation(device)
		for _, uid := range uids {
			claim.Status.ReservedFor = append(claim.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: string(uid), UID: uid})
		}
		return claim
	}
	group := func(uids ...types.UID) pendingSharers {
		return func(types.UID) sets.Set[types.UID] { return sets.New(uids...) }
	}
	for name, tc := range map[string]struct {
		claim   *resourceapi.ResourceClaim
		sharers pendingSharers
		gateOff bool
		refused bool
	}{
		"mapped, unreserved":                           {claim: reservedFor("cpus-4")},
		"mapped, reserved for the pod":                 {claim: reservedFor("cpus-4", pod.UID)},
		"mapped, reserved for another pod":             {claim: reservedFor("cpus-4", "other"), refused: true},
		"mapped, for the pod and another: as upstream": {claim: reservedFor("cpus-4", pod.UID, "other")},
		"overhead only, another pod":                   {claim: reservedFor("overhead", "other")},
		"no node-allocatable resources":                {claim: reservedFor("plain", "other")},
		"mapped, pending for the group":                {claim: reservedFor("cpus-4"), sharers: group(pod.UID)},
		"mapped, pending for another of it":            {claim: reservedFor("cpus-4"), sharers: group(pod.UID, "other"), refused: true},
		"not allocated":                                {claim: builder.MakeClaim("c").Obj(), sharers: group("other")},
		"feature gate off":                             {claim: reservedFor("cpus-4", "other"), gateOff: true},
		"device gone: upstream lets it pass":           {claim: reservedFor("gone", "other")},
	} {
		t.Run(name, func(t *testing.T) {
			pl := &Plugin{tracker: fakeSlices(cpuSlice())}
			pl.fts.EnableDRANodeAllocatableResources = !tc.gateOff
			s := &stateData{claims: []*resourceapi.ResourceClaim{tc.claim}, info: make([]claimInfo, 1)}
			if status := pl.preFilterNodeAllocatable(klog.Background(), s); status != nil {
				t.Fatal(status)
			}
			status := pl.checkNodeAllocatableSharing(s, pod, 0, tc.sharers)
			if tc.refused {
				if status.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(status.Message(), "node allocatable resource claim c has a mapped device and cannot be shared across pods") {
					t.Errorf("got %v %q, want the claim refused", status.Code(), status.Message())
				}
			} else if status != nil {
				t.Errorf("got %v, want success", status)
			}
		})
	}
}

func TestFitsNode(t *testing.T) {
	demand := func(list v1.ResourceList) *framework.Resource { return framework.NewResource(list) }
	hugepages := v1.ResourceName("hugepages-2Mi")
	for name, tc := range map[string]struct {
		nodeInfo fwk.NodeInfo
		demand   v1.ResourceList
		want     *wantStatus
	}{
		"fits":                                 {nodeInfo: nodeWithCPU("8", "2"), demand: v1.ResourceList{v1.ResourceCPU: resource.MustParse("6")}},
		"others use too much":                  {nodeInfo: nodeWithCPU("8", "4"), demand: v1.ResourceList{v1.ResourceCPU: resource.MustParse("6")}, want: &wantStatus{code: fwk.Unschedulable, message: "Insufficient cpu"}},
		"more than the node has":               {nodeInfo: nodeWithCPU("8", ""), demand: v1.ResourceList{v1.ResourceCPU: resource.MustParse("9")}, want: unresolvable("Insufficient cpu")},
		"memory":                               {nodeInfo: nodeWithCPU("8", ""), demand: v1.ResourceList{v1.ResourceMemory: resource.MustParse("65Gi")}, want: unresolvable("Insufficient memory")},
		"hugepages the node lacks":             {nodeInfo: nodeWithCPU("8", ""), demand: v1.ResourceList{hugepages: resource.MustParse("2Mi")}, want: unresolvable("Insufficient hugepages-2Mi")},
		"other resources are not checked here": {nodeInfo: nodeWithCPU("8", ""), demand: v1.ResourceList{"example.com/unknown": resource.MustParse("3")}},
	} {
		t.Run(name, func(t *testing.T) {
			status := fitsNode(tc.nodeInfo, demand(tc.demand), nil)
			if tc.want == nil {
				if status != nil {
					t.Errorf("got %v, want success", status)
				}
				return
			}
			tc.want.check(t, "fitsNode", status)
		})
	}
}

func TestPodLevelResourcesCoverDevices(t *testing.T) {
	pl := &Plugin{}
	pl.fts.EnablePodLevelResources = true
	// 2 CPUs for the container, 4 mapped by its claim, 1 overhead per
	// container.
	pod := func(requests, limits v1.ResourceList) *v1.Pod {
		p := builder.MakePod("pod").Containers(builder.Container("ctr", map[v1.ResourceName]string{v1.ResourceCPU: "2"})).Claim("a", "claim-a").Obj()
		p.Spec.Resources = &v1.ResourceRequirements{Requests: requests, Limits: limits}
		p.Status.NodeAllocatableResourceClaimStatuses = []v1.NodeAllocatableResourceClaimStatus{{
			ResourceClaimName: "claim-a", Containers: []string{"ctr"},
			Mapping:  []v1.NodeAllocatableMappedResources{{Name: v1.ResourceCPU, Quantity: quantity("4")}},
			Overhead: []v1.NodeAllocatableOverheadResources{{Name: v1.ResourceCPU, PerContainer: quantity("1")}},
		}}
		return p
	}
	cpu := func(q string) v1.ResourceList { return v1.ResourceList{v1.ResourceCPU: resource.MustParse(q)} }
	for name, tc := range map[string]struct {
		pod     *v1.Pod
		gateOff bool
		want    string
	}{
		"request covers containers and devices":   {pod: pod(cpu("7"), nil)},
		"request too small for the devices":       {pod: pod(cpu("6"), nil), want: "pod level request for cpu is insufficient to cover the aggregated container and node-allocatable DRA requests"},
		"limit covers the container's devices":    {pod: pod(nil, cpu("7"))},
		"limit too small for the devices":         {pod: pod(nil, cpu("6500m")), want: "pod level limit for cpu is insufficient to cover the limit and DRA overhead for container ctr"},
		"no pod-level resources":                  {pod: pod(nil, nil)},
		"PodLevelResources off: nothing to check": {pod: pod(cpu("1"), nil), gateOff: true},
	} {
		t.Run(name, func(t *testing.T) {
			pl.fts.EnablePodLevelResources = !tc.gateOff
			status := pl.podLevelResourcesCoverDevices(tc.pod)
			if tc.want == "" {
				if status != nil {
					t.Errorf("got %v, want success", status)
				}
				return
			}
			unresolvable(tc.want).check(t, "podLevelResourcesCoverDevices", status)
		})
	}
}

func TestSlicesForNode(t *testing.T) {
	nodeA := builder.MakeNode("node-a", "rack", "1")
	own := builder.MakeSlice("own").Node("node-a").Obj()
	other := builder.MakeSlice("other").Node("node-b").Obj()
	all := builder.MakeSlice("all").AllNodes().Obj()
	rack := func(name, value string) *resourceapi.ResourceSlice {
		s := builder.MakeSlice(name).Obj()
		s.Spec.NodeSelector = &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{{Key: "rack", Operator: v1.NodeSelectorOpIn, Values: []string{value}}}}}}
		return s
	}
	perDevice := builder.MakeSlice("per-device").Devices(builder.MakeDevice("here"), builder.MakeDevice("there"), builder.MakeDevice("everywhere")).Obj()
	perDevice.Spec.PerDeviceNodeSelection = ptr.To(true)
	perDevice.Spec.Devices[0].NodeName = ptr.To("node-a")
	perDevice.Spec.Devices[1].NodeName = ptr.To("node-b")
	perDevice.Spec.Devices[2].AllNodes = ptr.To(true)
	slices := []*resourceapi.ResourceSlice{own, other, all, rack("rack-1", "1"), rack("rack-2", "2"), perDevice}

	var names []string
	for _, s := range slicesForNode(slices, nodeA) {
		names = append(names, s.Name)
	}
	if diff := cmp.Diff([]string{"own", "all", "rack-1", "per-device"}, names); diff != "" {
		t.Errorf("slices of node-a (-want +got):\n%s", diff)
	}
	if got := slicesForNode(slices, nil); len(got) != len(slices) {
		t.Errorf("without a node: %d slices, want all %d", len(got), len(slices))
	}
	result := func(device string) *resourceapi.DeviceRequestAllocationResult {
		return &resourceapi.DeviceRequestAllocationResult{Driver: "gpu.example.com", Pool: "per-device", Device: device}
	}
	for device, wantErr := range map[string]string{"here": "", "everywhere": "", "there": "not on node node-a", "nowhere": "not found"} {
		_, err := findDevice(slices, result(device), nodeA)
		if wantErr == "" && err != nil || wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)) {
			t.Errorf("device %s: error %v, want %q", device, err, wantErr)
		}
	}
	if _, err := findDevice(slices, result("there"), nil); err != nil {
		t.Errorf("device there without a node: %v", err)
	}
}

// TestNodeAllocatableWalk walks pods through the extension points as the
// framework calls them and checks Filter's verdict and what the API gets.
func TestNodeAllocatableWalk(t *testing.T) {
	claim := builder.MakeClaim("c").Request("cpu", gpuClass, 1)
	allocatedCPUs := func(uids ...types.UID) *resourceapi.ResourceClaim {
		c := claim.Obj().DeepCopy()
		c.Finalizers = []string{resourceapi.Finalizer}
		c.Status.Allocation = allocation("cpus-16")
		for _, uid := range uids {
			c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: string(uid), UID: uid})
		}
		return c
	}
	withStatuses := v1.NodeAllocatableResourceClaimStatus{ResourceClaimName: "c", Containers: []string{"ctr"}}

	for name, tc := range map[string]struct {
		claim    *resourceapi.ResourceClaim
		nodeInfo fwk.NodeInfo
		filter   *wantStatus
		// unreserve: the binding fails after PreBind.
		unreserve bool
		// want is the device's CPUs in the pod's status in the API.
		want string
		// writes to the pod.
		writes []string
	}{
		"allocated by Filter: 4 of the node's 8 CPUs": {claim: claim.Obj(), nodeInfo: nodeWithCPU("8", "2"), filter: ok(), want: "4", writes: []string{"patch pods/status"}},
		"allocated by Filter: no room left":           {claim: claim.Obj(), nodeInfo: nodeWithCPU("8", "6"), filter: &wantStatus{code: fwk.Unschedulable, message: "Insufficient cpu"}},
		"allocated before: 16 CPUs on a small node":   {claim: allocatedCPUs(), nodeInfo: nodeWithCPU("8", ""), filter: unresolvable("Insufficient cpu")},
		"allocated before: 16 CPUs":                   {claim: allocatedCPUs(), nodeInfo: nodeWithCPU("32", ""), filter: ok(), want: "16", writes: []string{"patch pods/status"}},
		"reserved for another pod":                    {claim: allocatedCPUs("other"), nodeInfo: nodeWithCPU("32", ""), filter: unresolvable("cannot be shared across pods")},
		"binding fails: statuses cleared":             {claim: claim.Obj(), nodeInfo: nodeWithCPU("8", ""), filter: ok(), unreserve: true, want: "4", writes: []string{"patch pods/status", "patch pods/status"}},
	} {
		t.Run(name, func(t *testing.T) {
			pod := podWithClaims("c")
			env := newPluginEnv(t, pod, tc.claim, cpuClass, kindSlice())
			pl, ctx := env.plugin, env.ctx
			pl.fts.EnableDRANodeAllocatableResources = true
			pl.fts.EnablePodLevelResources = true

			cs := framework.NewCycleState()
			if _, status := pl.PreFilter(ctx, cs, pod, nil); !status.IsSuccess() {
				t.Fatalf("PreFilter: %v", status)
			}
			status := pl.Filter(ctx, cs, pod, tc.nodeInfo)
			tc.filter.check(t, "Filter", status)
			if !status.IsSuccess() {
				return
			}
			assumed := pod.DeepCopy()
			if status := pl.Reserve(ctx, cs, assumed, "node-a"); !status.IsSuccess() {
				t.Fatalf("Reserve: %v", status)
			}
			if got := assumed.Status.NodeAllocatableResourceClaimStatuses; len(got) != 1 || got[0].Mapping[0].Quantity.Cmp(resource.MustParse(tc.want)) != 0 {
				t.Errorf("Reserve set the assumed pod's statuses to %+v, want %s CPUs", got, tc.want)
			}
			if status := pl.PreBind(ctx, cs, assumed, "node-a"); !status.IsSuccess() {
				t.Fatalf("PreBind: %v", status)
			}
			apiPod, err := env.client.CoreV1().Pods("default").Get(context.Background(), pod.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got := apiPod.Status.NodeAllocatableResourceClaimStatuses
			if len(got) != 1 || got[0].ResourceClaimName != withStatuses.ResourceClaimName || !cmp.Equal(got[0].Containers, withStatuses.Containers) || got[0].Mapping[0].Quantity.Cmp(resource.MustParse(tc.want)) != 0 {
				t.Errorf("pod's statuses in the API: %+v, want %s CPUs for claim c, container ctr", got, tc.want)
			}
			if tc.unreserve {
				pl.Unreserve(ctx, cs, assumed, "node-a")
				apiPod, err := env.client.CoreV1().Pods("default").Get(context.Background(), pod.Name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if len(apiPod.Status.NodeAllocatableResourceClaimStatuses) != 0 {
					t.Errorf("Unreserve left the statuses %+v", apiPod.Status.NodeAllocatableResourceClaimStatuses)
				}
				if patch := lastPodPatch(env); !strings.Contains(patch, `"nodeAllocatableResourceClaimStatuses":[]`) || !strings.Contains(patch, string(pod.UID)) {
					t.Errorf("Unreserve's patch %s, want an empty list with the pod's UID", patch)
				}
			}
			var podWrites []string
			for _, w := range env.writes() {
				if strings.Contains(w, "pods") {
					podWrites = append(podWrites, w)
				}
			}
			if diff := cmp.Diff(tc.writes, podWrites); diff != "" {
				t.Errorf("writes to the pod (-want +got):\n%s", diff)
			}
		})
	}
}

// lastPodPatch is the last patch of a pod's status, as JSON.
func lastPodPatch(env *pluginEnv) string {
	actions := env.client.Actions()
	for i := len(actions) - 1; i >= 0; i-- {
		if patch, ok := actions[i].(k8stesting.PatchAction); ok && actions[i].GetResource().Resource == "pods" {
			var v any
			if json.Unmarshal(patch.GetPatch(), &v) == nil {
				return string(patch.GetPatch())
			}
		}
	}
	return ""
}

// fakeSlices is a tracker that holds the slices.
func fakeSlices(slices ...*resourceapi.ResourceSlice) *trackertest.Fake {
	f := trackertest.NewFake()
	for _, slice := range slices {
		f.Add(slice)
	}
	return f
}

func TestUncountedPods(t *testing.T) {
	assumed := builder.MakePod("assumed").Obj()
	assumed.UID = "assumed"
	fromAPI := assumed.DeepCopy()
	missing := framework.NewResource(v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), "hugepages-2Mi": resource.MustParse("4Mi")})
	holding := func(node string, pods ...*v1.Pod) fwk.NodeInfo {
		nodeInfo := framework.NewNodeInfo(pods...)
		nodeInfo.SetNode(builder.MakeNode(node))
		return nodeInfo
	}
	var u uncountedPods
	if got := u.on(holding("node-a", assumed)); got != nil {
		t.Errorf("nothing recorded: got %v", got)
	}
	u.add(assumed, "node-a", missing)
	if got := u.on(holding("node-a", assumed)); got == nil || got.MilliCPU != 4000 || got.ScalarResources["hugepages-2Mi"] != 4<<20 {
		t.Errorf("assumed pod on its node: got %+v, want 4 CPUs and 4Mi hugepages", got)
	}
	if got := u.on(holding("node-a", fromAPI)); got != nil {
		t.Errorf("the cache has the pod from the API: got %v, want nothing", got)
	}
	if got := u.on(holding("node-a")); got != nil {
		t.Errorf("preemption's dry run removed the pod: got %v, want nothing", got)
	}
	if got := u.on(holding("node-b", assumed)); got != nil {
		t.Errorf("another node: got %v, want nothing", got)
	}

	// sweep keeps the pod while the cache holds the assumed object.
	nodes := map[string]fwk.NodeInfo{"node-a": holding("node-a", assumed)}
	get := func(node string) (fwk.NodeInfo, error) {
		if n, ok := nodes[node]; ok {
			return n, nil
		}
		return nil, errors.New("not found")
	}
	u.sweep(get)
	if u.empty() {
		t.Fatal("sweep forgot a pod the cache still counts without its devices")
	}
	nodes["node-a"] = holding("node-a", fromAPI)
	u.sweep(get)
	if !u.empty() {
		t.Error("sweep kept a pod that the cache has from the API")
	}
	u.add(assumed, "node-gone", missing)
	u.sweep(get)
	if !u.empty() {
		t.Error("sweep kept a pod of a node that is gone")
	}
	u.add(assumed, "node-a", missing)
	u.remove(assumed.UID)
	if !u.empty() {
		t.Error("remove kept the pod")
	}
}

// TestUncountedWalk: pod A gets 4 CPUs through its claim on node-a (8
// CPUs); until the cache has A from the API, B (no claims, 6 CPUs) does
// not fit there, although the cache counts A with nothing.
func TestUncountedWalk(t *testing.T) {
	podA := podWithClaims("c")
	env := newPluginEnv(t, podA, builder.MakeClaim("c").Request("cpu", gpuClass, 1).Obj(), cpuClass, kindSlice())
	pl, ctx := env.plugin, env.ctx
	pl.fts.EnableDRANodeAllocatableResources = true

	cs := framework.NewCycleState()
	if _, status := pl.PreFilter(ctx, cs, podA, nil); !status.IsSuccess() {
		t.Fatalf("PreFilter A: %v", status)
	}
	if status := pl.Filter(ctx, cs, podA, nodeWithCPU("8", "")); !status.IsSuccess() {
		t.Fatalf("Filter A: %v", status)
	}
	assumedA := podA.DeepCopy()
	assumedA.Spec.NodeName = "node-a"
	// The cache counts A as it was when assumed: without the statuses.
	cached := nodeWithCPU("8", "")
	cached.(*framework.NodeInfo).AddPod(assumedA)
	if status := pl.Reserve(ctx, cs, assumedA, "node-a"); !status.IsSuccess() {
		t.Fatalf("Reserve A: %v", status)
	}
	pl.fh = snapshotHandle{testHandle: pl.fh.(testHandle), nodes: map[string]fwk.NodeInfo{"node-a": cached}}

	podB := builder.MakePod("b").Containers(builder.Container("ctr", map[v1.ResourceName]string{v1.ResourceCPU: "6"})).Obj()
	podB.UID = "b"
	csB := framework.NewCycleState()
	if _, status := pl.PreFilter(ctx, csB, podB, nil); status != nil {
		t.Fatalf("PreFilter B: %v, want Filter to run", status)
	}
	(&wantStatus{code: fwk.Unschedulable, message: "Insufficient cpu"}).check(t, "Filter B", pl.Filter(ctx, csB, podB, cached))

	// The bound pod arrives from the API: the cache counts its devices.
	bound := nodeWithCPU("8", "")
	bound.(*framework.NodeInfo).AddPod(assumedA.DeepCopy())
	pl.fh = snapshotHandle{testHandle: pl.fh.(snapshotHandle).testHandle, nodes: map[string]fwk.NodeInfo{"node-a": bound}}
	if _, status := pl.PreFilter(ctx, framework.NewCycleState(), podB, nil); !status.IsSkip() {
		t.Errorf("PreFilter B after the cache caught up: %v, want Skip", status)
	}
}
