package dra

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/pkg/tracker"
	"github.com/drasched/drasched/pkg/tracker/trackertest"
)

const (
	extGPU      v1.ResourceName = "example.com/gpu"
	extNIC      v1.ResourceName = "example.com/nic"
	extFPGA     v1.ResourceName = v1.ResourceName(resourceapi.ResourceDeviceClassPrefix + "fpga")
	extGPUClass                 = "gpu.example.com"
)

func extRequest(name, class string, count int64) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
	}}
}

func extMapping(container string, resource v1.ResourceName, request string) v1.ContainerExtendedResourceRequest {
	return v1.ContainerExtendedResourceRequest{ContainerName: container, ResourceName: string(resource), RequestName: request}
}

// extGPUs is a pod requesting example.com/gpu, container by container.
func extGPUs() *st.PodWrapper {
	return st.MakePod().Name("pod").Namespace("default").UID("pod-uid")
}

func gpus(n string) map[v1.ResourceName]string { return map[v1.ResourceName]string{extGPU: n} }

// TestContainerRequests checks the device requests and container mappings
// for one resource against what upstream's plugin generates for the same
// pods (the kubelet relies on the names and mappings).
func TestContainerRequests(t *testing.T) {
	for name, tc := range map[string]struct {
		pod          *v1.Pod
		resource     v1.ResourceName
		wantRequests []resourceapi.DeviceRequest
		wantMappings []v1.ContainerExtendedResourceRequest
	}{
		"one container": {
			pod:          extGPUs().Res(gpus("2")).Obj(),
			wantRequests: []resourceapi.DeviceRequest{extRequest("container-0-request-0", extGPUClass, 2)},
			wantMappings: []v1.ContainerExtendedResourceRequest{extMapping("con0", extGPU, "container-0-request-0")},
		},
		"request index among the container's sorted requests": {
			pod:          extGPUs().Res(map[v1.ResourceName]string{v1.ResourceCPU: "1", extGPU: "1", v1.ResourceMemory: "1Gi"}).Obj(),
			wantRequests: []resourceapi.DeviceRequest{extRequest("container-0-request-1", extGPUClass, 1)},
			wantMappings: []v1.ContainerExtendedResourceRequest{extMapping("con0", extGPU, "container-0-request-1")},
		},
		"several containers use the resource": {
			pod: extGPUs().Res(gpus("1")).Res(map[v1.ResourceName]string{v1.ResourceCPU: "1"}).Res(gpus("2")).Obj(),
			wantRequests: []resourceapi.DeviceRequest{
				extRequest("container-0-request-0", extGPUClass, 1),
				extRequest("container-2-request-0", extGPUClass, 2),
			},
			wantMappings: []v1.ContainerExtendedResourceRequest{
				extMapping("con0", extGPU, "container-0-request-0"),
				extMapping("con2", extGPU, "container-2-request-0"),
			},
		},
		"init container reuses the devices of a later container": {
			pod:          extGPUs().InitReq(gpus("2")).Res(gpus("2")).Obj(),
			wantRequests: []resourceapi.DeviceRequest{extRequest("container-1-request-0", extGPUClass, 2)},
			wantMappings: []v1.ContainerExtendedResourceRequest{
				extMapping("con0", extGPU, "container-1-request-0"),
				extMapping("init-con0", extGPU, "container-1-request-0"),
			},
		},
		"init container asks for what later containers do not cover": {
			pod: extGPUs().InitReq(gpus("3")).Res(gpus("1")).Res(gpus("1")).Obj(),
			wantRequests: []resourceapi.DeviceRequest{
				extRequest("container-0-request-0", extGPUClass, 1),
				extRequest("container-1-request-0", extGPUClass, 1),
				extRequest("container-2-request-0", extGPUClass, 1),
			},
			wantMappings: []v1.ContainerExtendedResourceRequest{
				extMapping("con0", extGPU, "container-1-request-0"),
				extMapping("con1", extGPU, "container-2-request-0"),
				extMapping("init-con0", extGPU, "container-1-request-0"),
				extMapping("init-con0", extGPU, "container-2-request-0"),
				extMapping("init-con0", extGPU, "container-0-request-0"),
			},
		},
		"init containers share the largest request": {
			pod:          extGPUs().InitReq(gpus("2")).InitReq(gpus("3")).Res(map[v1.ResourceName]string{v1.ResourceCPU: "1"}).Obj(),
			wantRequests: []resourceapi.DeviceRequest{extRequest("container-1-request-0", extGPUClass, 3)},
			wantMappings: []v1.ContainerExtendedResourceRequest{
				extMapping("init-con0", extGPU, "container-1-request-0"),
				extMapping("init-con1", extGPU, "container-1-request-0"),
			},
		},
		"init containers asking the same share the first": {
			pod:          extGPUs().InitReq(gpus("2")).InitReq(gpus("2")).Obj(),
			wantRequests: []resourceapi.DeviceRequest{extRequest("container-0-request-0", extGPUClass, 2)},
			wantMappings: []v1.ContainerExtendedResourceRequest{
				extMapping("init-con0", extGPU, "container-0-request-0"),
				extMapping("init-con1", extGPU, "container-0-request-0"),
			},
		},
		"sidecar runs alongside later init containers": {
			// init-con0 may use the sidecar's device, which starts after
			// it; init-con2 may not, the sidecar runs, only con0's.
			pod: extGPUs().InitReq(gpus("1")).SidecarReq(gpus("1")).InitReq(gpus("2")).Res(gpus("1")).Obj(),
			wantRequests: []resourceapi.DeviceRequest{
				extRequest("container-2-request-0", extGPUClass, 1),
				extRequest("container-1-request-0", extGPUClass, 1),
				extRequest("container-3-request-0", extGPUClass, 1),
			},
			wantMappings: []v1.ContainerExtendedResourceRequest{
				extMapping("sidecar-con1", extGPU, "container-1-request-0"),
				extMapping("con0", extGPU, "container-3-request-0"),
				extMapping("init-con0", extGPU, "container-1-request-0"),
				extMapping("init-con2", extGPU, "container-3-request-0"),
				extMapping("init-con2", extGPU, "container-2-request-0"),
			},
		},
		"implicit class name": {
			pod:          extGPUs().Res(map[v1.ResourceName]string{extFPGA: "1", extGPU: "1"}).Obj(),
			resource:     extFPGA,
			wantRequests: []resourceapi.DeviceRequest{extRequest("container-0-request-0", extGPUClass, 1)},
			wantMappings: []v1.ContainerExtendedResourceRequest{extMapping("con0", extFPGA, "container-0-request-0")},
		},
		"zero is no request": {
			pod: extGPUs().Res(gpus("0")).InitReq(gpus("0")).Obj(),
		},
	} {
		t.Run(name, func(t *testing.T) {
			resource := tc.resource
			if resource == "" {
				resource = extGPU
			}
			requests, mappings := containerRequests(tc.pod, resource, extGPUClass)
			if diff := cmp.Diff(tc.wantRequests, requests, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantMappings, mappings, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("mappings (-want +got):\n%s", diff)
			}
		})
	}
}

// extClasses is a DeviceClassResolver from a map.
type extClasses map[v1.ResourceName]*resourceapi.DeviceClass

func (c extClasses) GetDeviceClass(name v1.ResourceName) *resourceapi.DeviceClass { return c[name] }

func extClass(name string, extendedResourceName string) *resourceapi.DeviceClass {
	class := builder.MakeClass(name)
	if extendedResourceName != "" {
		class.Spec.ExtendedResourceName = ptr.To(extendedResourceName)
	}
	return class
}

func extNodeInfo(name string, allocatable map[v1.ResourceName]string) fwk.NodeInfo {
	info := framework.NewNodeInfo()
	info.SetNode(st.MakeNode().Name(name).Capacity(allocatable).Obj())
	return info
}

// TestFilterExtended: per node, exactly the resources that the node does
// not provide in its allocatable and a class backs go into the claim;
// nodes needing the same share one claim object.
func TestFilterExtended(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	pl := &Plugin{
		fts: feature.Features{EnableDynamicResourceAllocation: true, EnableDRAExtendedResource: true},
		extendedResources: extendedResources{
			classes: extClasses{
				extGPU:  extClass(extGPUClass, string(extGPU)),
				extFPGA: extClass("fpga", ""),
			},
			claims:    cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{"extended": extendedClaimIndex}),
			indexName: "extended",
		},
	}
	// extNIC has no class: a device plugin must provide it.
	pod := extGPUs().Res(map[v1.ResourceName]string{extFPGA: "1", extGPU: "2", extNIC: "1"}).Obj()
	s := &stateData{}
	if status := pl.preFilterExtended(logger, s, pod); status != nil {
		t.Fatalf("PreFilter: %v", status)
	}
	if s.extended == nil {
		t.Fatal("PreFilter: no claim for extended resources")
	}
	fpga := extRequest("container-0-request-0", "fpga", 1)
	gpu := extRequest("container-0-request-1", extGPUClass, 2)

	claims := map[string]*resourceapi.ResourceClaim{}
	for name, tc := range map[string]struct {
		allocatable  map[v1.ResourceName]string
		wantRequests []resourceapi.DeviceRequest
		wantReason   string
	}{
		"nothing but the NIC from a device plugin": {
			allocatable:  map[v1.ResourceName]string{extNIC: "1"},
			wantRequests: []resourceapi.DeviceRequest{fpga, gpu},
		},
		"allocatable 0 is not provided": {
			allocatable:  map[v1.ResourceName]string{extNIC: "1", extGPU: "0"},
			wantRequests: []resourceapi.DeviceRequest{fpga, gpu},
		},
		"device plugin provides the GPUs": {
			allocatable:  map[v1.ResourceName]string{extNIC: "1", extGPU: "1"},
			wantRequests: []resourceapi.DeviceRequest{fpga},
		},
		"device plugins provide everything": {
			allocatable: map[v1.ResourceName]string{extNIC: "1", extGPU: "8", extFPGA: "1"},
		},
		"nobody provides the NIC": {
			allocatable: map[v1.ResourceName]string{extGPU: "8"},
			wantReason:  "node does not provide extended resource example.com/nic and no DeviceClass backs it",
		},
	} {
		t.Run(name, func(t *testing.T) {
			claim, status := pl.filterExtended(logger, s, pod, extNodeInfo(name, tc.allocatable))
			if tc.wantReason != "" {
				if status.Code() != fwk.UnschedulableAndUnresolvable || status.Message() != tc.wantReason {
					t.Fatalf("status %v, want UnschedulableAndUnresolvable: %s", status, tc.wantReason)
				}
				return
			}
			if status != nil {
				t.Fatalf("status %v", status)
			}
			if tc.wantRequests == nil {
				if claim != nil {
					t.Fatalf("claim with requests %v, want none", claim.Spec.Devices.Requests)
				}
				return
			}
			if diff := cmp.Diff(tc.wantRequests, claim.Spec.Devices.Requests); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
			if claim.Name != extendedClaimName || claim.GenerateName != "pod-extended-resources-" ||
				claim.Annotations[resourceapi.ExtendedResourceClaimAnnotation] != "true" || !isExtendedClaimOf(pod, claim) {
				t.Errorf("claim metadata %+v", claim.ObjectMeta)
			}
			claims[name] = claim
		})
	}
	if a, b := claims["nothing but the NIC from a device plugin"], claims["allocatable 0 is not provided"]; a == nil || a != b {
		t.Error("nodes needing the same resources do not share the claim object")
	}
}

// extPlugin is the plugin on a fake clientset, built as New does except
// for the framework handle, with started informers.
func extPlugin(t *testing.T, objects ...runtime.Object) (context.Context, *Plugin, *fake.Clientset) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	client := trackertest.VersionedClientset(objects...)
	factory := informers.NewSharedInformerFactory(client, 0)
	manager, err := trackertest.NewManager(ctx, client, factory)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tracker.New(ctx, tracker.Options{Manager: manager, Client: client})
	if err != nil {
		t.Fatal(err)
	}
	pl := testPlugin(t, ctx, client, factory, tr)
	return ctx, pl, client
}

func extEventually(t *testing.T, what string, condition func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !condition() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func extSlice(node string, devices int) *resourceapi.ResourceSlice {
	return builder.MakeSlice(node).Driver(extGPUClass).Node(node).Devices(builder.Devices("gpu", devices, nil)...).Obj()
}

// TestExtendedLifecycle runs one pod through the extension points on a
// fake clientset: the claim that PreBind creates, the pod status, the
// tracker's state, and Unreserve's cleanup.
func TestExtendedLifecycle(t *testing.T) {
	pod := extGPUs().Res(gpus("2")).Obj()
	ctx, pl, client := extPlugin(t, pod, extClass(extGPUClass, string(extGPU)), extSlice("node-a", 2))
	cs := framework.NewCycleState()
	if _, status := pl.PreFilter(ctx, cs, pod, nil); !status.IsSuccess() {
		t.Fatalf("PreFilter: %v", status)
	}
	if status := pl.Filter(ctx, cs, pod, extNodeInfo("node-a", nil)); !status.IsSuccess() {
		t.Fatalf("Filter: %v", status)
	}
	if status := pl.Reserve(ctx, cs, pod, "node-a"); !status.IsSuccess() {
		t.Fatalf("Reserve: %v", status)
	}
	if got := allocatedCount(t, ctx, pl); got != 2 {
		t.Errorf("%d devices taken after Reserve, want 2", got)
	}
	if status := pl.PreFlight.Run(cs, pod); !status.IsSuccess() {
		t.Fatalf("PreBindPreFlight: %v", status)
	}
	if status := pl.PreBind(ctx, cs, pod, "node-a"); !status.IsSuccess() {
		t.Fatalf("PreBind: %v", status)
	}

	claims, err := client.ResourceV1().ResourceClaims("default").List(ctx, metav1.ListOptions{})
	if err != nil || len(claims.Items) != 1 {
		t.Fatalf("claims after PreBind: %v, %v", claims, err)
	}
	claim := &claims.Items[0]
	want := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: "pod-extended-resources-x1y2z", GenerateName: "pod-extended-resources-",
			UID:             "uid-pod-extended-resources-x1y2z",
			Annotations:     map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "pod", UID: "pod-uid", Controller: ptr.To(true)}},
			Finalizers:      []string{resourceapi.Finalizer},
		},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{extRequest("container-0-request-0", extGPUClass, 2)}}},
		Status: resourceapi.ResourceClaimStatus{
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "pod", UID: "pod-uid"}},
		},
	}
	if diff := cmp.Diff(want, claim, cmpopts.IgnoreFields(metav1.ObjectMeta{}, "ResourceVersion", "ManagedFields"), cmpopts.IgnoreTypes(metav1.TypeMeta{}), cmpopts.IgnoreFields(resourceapi.ResourceClaimStatus{}, "Allocation")); diff != "" {
		t.Errorf("claim (-want +got):\n%s", diff)
	}
	if allocation := claim.Status.Allocation; allocation == nil || len(allocation.Devices.Results) != 2 || allocation.Devices.Results[0].Request != "container-0-request-0" {
		t.Errorf("allocation %+v, want two devices for container-0-request-0", allocation)
	}

	written, err := client.CoreV1().Pods("default").Get(ctx, "pod", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus := &v1.PodExtendedResourceClaimStatus{
		RequestMappings:   []v1.ContainerExtendedResourceRequest{extMapping("con0", extGPU, "container-0-request-0")},
		ResourceClaimName: claim.Name,
	}
	if diff := cmp.Diff(wantStatus, written.Status.ExtendedResourceClaimStatus); diff != "" {
		t.Errorf("pod status (-want +got):\n%s", diff)
	}
	// The created claim stays in flight under the placeholder until the
	// claim cache has it; its devices count once all along.
	if got := allocatedCount(t, ctx, pl); got != 2 {
		t.Errorf("%d devices taken after PreBind, want 2", got)
	}
	extEventually(t, "nothing in flight", func() bool { return len(pl.tracker.InFlight()) == 0 })
	if got := allocatedCount(t, ctx, pl); got != 2 {
		t.Errorf("%d devices taken once the claim cache has the claim, want 2", got)
	}

	// Binding fails: Unreserve deletes the claim, which frees the devices.
	pl.Unreserve(ctx, cs, pod, "node-a")
	claims, err = client.ResourceV1().ResourceClaims("default").List(ctx, metav1.ListOptions{})
	if err != nil || len(claims.Items) != 0 {
		t.Fatalf("claims after Unreserve: %v, %v", claims, err)
	}
	extEventually(t, "devices freed", func() bool { return allocatedCount(t, ctx, pl) == 0 })
	// Idempotent.
	pl.Unreserve(ctx, cs, pod, "node-a")
}

// TestExtendedUnreserveBeforePreBind: an allocation that PreBind never
// wrote leaves nothing behind.
func TestExtendedUnreserveBeforePreBind(t *testing.T) {
	pod := extGPUs().Res(gpus("2")).Obj()
	ctx, pl, client := extPlugin(t, pod, extClass(extGPUClass, string(extGPU)), extSlice("node-a", 2))
	cs := framework.NewCycleState()
	if _, status := pl.PreFilter(ctx, cs, pod, nil); !status.IsSuccess() {
		t.Fatalf("PreFilter: %v", status)
	}
	if status := pl.Filter(ctx, cs, pod, extNodeInfo("node-a", nil)); !status.IsSuccess() {
		t.Fatalf("Filter: %v", status)
	}
	if status := pl.Reserve(ctx, cs, pod, "node-a"); !status.IsSuccess() {
		t.Fatalf("Reserve: %v", status)
	}
	pl.Unreserve(ctx, cs, pod, "node-a")
	if inFlight := pl.tracker.InFlight(); len(inFlight) > 0 {
		t.Errorf("in flight after Unreserve: %v", inFlight)
	}
	if got := allocatedCount(t, ctx, pl); got != 0 {
		t.Errorf("%d devices taken after Unreserve", got)
	}
	if actions := extWrites(client); len(actions) > 0 {
		t.Errorf("API writes: %v", actions)
	}
}

func extWrites(client *fake.Clientset) []string {
	var writes []string
	for _, action := range client.Actions() {
		if verb := action.GetVerb(); verb != "get" && verb != "list" && verb != "watch" {
			writes = append(writes, verb+" "+action.GetResource().Resource)
		}
	}
	return writes
}

// TestExtendedDevicePlugin: on a node whose device plugin provides the
// resource, the pod gets no claim.
func TestExtendedDevicePlugin(t *testing.T) {
	pod := extGPUs().Res(gpus("2")).Obj()
	ctx, pl, client := extPlugin(t, pod, extClass(extGPUClass, string(extGPU)), extSlice("node-a", 2))
	cs := framework.NewCycleState()
	if _, status := pl.PreFilter(ctx, cs, pod, nil); !status.IsSuccess() {
		t.Fatalf("PreFilter: %v", status)
	}
	if status := pl.Filter(ctx, cs, pod, extNodeInfo("node-a", gpus("4"))); !status.IsSuccess() {
		t.Fatalf("Filter: %v", status)
	}
	if status := pl.Reserve(ctx, cs, pod, "node-a"); !status.IsSuccess() {
		t.Fatalf("Reserve: %v", status)
	}
	if status := pl.PreFlight.Run(cs, pod); status.Code() != fwk.Skip {
		t.Errorf("PreBindPreFlight: %v, want Skip", status)
	}
	if status := pl.PreBind(ctx, cs, pod, "node-a"); !status.IsSuccess() {
		t.Fatalf("PreBind: %v", status)
	}
	if actions := extWrites(client); len(actions) > 0 {
		t.Errorf("API writes: %v", actions)
	}
	if got := allocatedCount(t, ctx, pl); got != 0 {
		t.Errorf("%d devices taken", got)
	}
}

// TestExtendedFailureMessage: a node without enough devices says which
// resource of which container falls short, and by how much.
func TestExtendedFailureMessage(t *testing.T) {
	pod := extGPUs().Res(gpus("2")).Res(gpus("1")).Obj()
	ctx, pl, _ := extPlugin(t, pod, extClass(extGPUClass, string(extGPU)), extSlice("node-a", 1))
	cs := framework.NewCycleState()
	if _, status := pl.PreFilter(ctx, cs, pod, nil); !status.IsSuccess() {
		t.Fatalf("PreFilter: %v", status)
	}
	status := pl.Filter(ctx, cs, pod, extNodeInfo("node-a", nil))
	want := []string{`extended resource example.com/gpu for container "con0": 1 of 1 matching devices free, need 2`}
	if status.Code() != fwk.UnschedulableAndUnresolvable || !cmp.Equal(status.Reasons(), want) {
		t.Errorf("Filter: %v, want UnschedulableAndUnresolvable with %q", status, want)
	}

	// Each request alone fits on two devices, together they do not.
	ctx, pl, _ = extPlugin(t, pod, extClass(extGPUClass, string(extGPU)), extSlice("node-a", 2))
	cs = framework.NewCycleState()
	if _, status := pl.PreFilter(ctx, cs, pod, nil); !status.IsSuccess() {
		t.Fatalf("PreFilter: %v", status)
	}
	status = pl.Filter(ctx, cs, pod, extNodeInfo("node-a", nil))
	want = []string{"extended resources: requests compete for the same devices"}
	if status.Code() != fwk.UnschedulableAndUnresolvable || !cmp.Equal(status.Reasons(), want) {
		t.Errorf("Filter: %v, want UnschedulableAndUnresolvable with %q", status, want)
	}
}

// TestExtendedStaleClaim: a claim for the pod's extended resources from an
// earlier attempt makes PreFilter reject the pod and PostFilter delete it;
// the deletion requeues the pod.
func TestExtendedStaleClaim(t *testing.T) {
	pod := extGPUs().Res(gpus("2")).Obj()
	stale := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{
		Namespace: "default", Name: "pod-extended-resources-old", UID: "uid-old",
		Annotations:     map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "pod", UID: "pod-uid", Controller: ptr.To(true)}},
		Finalizers:      []string{resourceapi.Finalizer},
	}}
	other := stale.DeepCopy()
	other.Name, other.UID, other.OwnerReferences[0].UID = "other-extended-resources-1", "uid-other", "other-pod-uid"
	ctx, pl, client := extPlugin(t, pod, stale, other, extClass(extGPUClass, string(extGPU)), extSlice("node-a", 2))

	cs := framework.NewCycleState()
	_, status := pl.PreFilter(ctx, cs, pod, nil)
	if status.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(status.Message(), "default/pod-extended-resources-old") {
		t.Fatalf("PreFilter: %v, want Unschedulable because of the old claim", status)
	}
	_, status = pl.PostFilter(ctx, cs, pod, nil)
	if status.Code() != fwk.Unschedulable || status.Message() != "deletion of ResourceClaim completed" {
		t.Fatalf("PostFilter: %v", status)
	}
	claims, err := client.ResourceV1().ResourceClaims("default").List(ctx, metav1.ListOptions{})
	if err != nil || len(claims.Items) != 1 || claims.Items[0].Name != other.Name {
		t.Fatalf("claims after PostFilter: %v, %v; want only the other pod's", claims, err)
	}

	// The deletion brings the pod back, and only this pod.
	result, err := pl.podsForClaim(extLogger(t), stale, nil)
	if err != nil || !cmp.Equal(result.Pods, []types.NamespacedName{{Namespace: "default", Name: "pod"}}) {
		t.Errorf("podsForClaim: %+v, %v", result, err)
	}
	if hint, err := pl.afterClaimChange(extLogger(t), pod, stale, nil); hint != fwk.Queue || err != nil {
		t.Errorf("hint for deleted own claim: %v, %v", hint, err)
	}
	if hint, err := pl.afterClaimChange(extLogger(t), pod, other, nil); hint != fwk.QueueSkip || err != nil {
		t.Errorf("hint for another pod's deleted claim: %v, %v", hint, err)
	}

	extEventually(t, "informer sees the deletion", func() bool { return pl.findExtendedClaim(pod) == nil })
	cs = framework.NewCycleState()
	if _, status := pl.PreFilter(ctx, cs, pod, nil); !status.IsSuccess() {
		t.Fatalf("PreFilter after deletion: %v", status)
	}
}

func extLogger(t *testing.T) klog.Logger {
	logger, _ := ktesting.NewTestContext(t)
	return logger
}

// TestExtendedClassHint: class events requeue a pod whose extended
// resource the class maps, explicitly or implicitly, also when the mapping
// goes away.
func TestExtendedClassHint(t *testing.T) {
	// No tracker: the pod has no claims to look up.
	pl := &Plugin{}
	pod := extGPUs().Res(map[v1.ResourceName]string{extGPU: "1", extFPGA: "1"}).Obj()
	renamed := extClass(extGPUClass, "example.com/other")
	for name, tc := range map[string]struct {
		old, new *resourceapi.DeviceClass
		want     fwk.QueueingHint
	}{
		"explicit name added":    {new: extClass(extGPUClass, string(extGPU)), want: fwk.Queue},
		"implicit name":          {new: extClass("fpga", ""), want: fwk.Queue},
		"unrelated class":        {new: extClass("other", "example.com/other"), want: fwk.QueueSkip},
		"mapping removed":        {old: extClass(extGPUClass, string(extGPU)), new: renamed, want: fwk.Queue},
		"unrelated spec changes": {old: extClass("other", ""), new: extClass("other", "example.com/other"), want: fwk.QueueSkip},
	} {
		t.Run(name, func(t *testing.T) {
			var old any
			if tc.old != nil {
				old = tc.old
			}
			hint, err := pl.afterClassChange(extLogger(t), pod, old, tc.new)
			if err != nil || hint != tc.want {
				t.Errorf("hint %v, %v; want %v", hint, err, tc.want)
			}
		})
	}
}

// TestFilterExtendedConcurrent: Filter runs for many nodes at once; they
// all get the one claim object for the resources they need. Run with
// -race.
func TestFilterExtendedConcurrent(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	pl := &Plugin{
		fts:               feature.Features{EnableDynamicResourceAllocation: true, EnableDRAExtendedResource: true},
		extendedResources: extendedResources{classes: extClasses{extGPU: extClass(extGPUClass, string(extGPU))}},
	}
	pl.extendedResources.claims = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{"extended": extendedClaimIndex})
	pl.extendedResources.indexName = "extended"
	pod := extGPUs().Res(gpus("1")).Obj()
	s := &stateData{}
	if status := pl.preFilterExtended(logger, s, pod); status != nil {
		t.Fatal(status)
	}
	const nodes = 50
	claims := make([]*resourceapi.ResourceClaim, nodes)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() {
			claims[i], _ = pl.filterExtended(logger, s, pod, extNodeInfo(fmt.Sprintf("node-%d", i), nil))
		})
	}
	wg.Wait()
	for i, claim := range claims {
		if claim == nil || claim != claims[0] {
			t.Fatalf("node %d got claim %p, node 0 %p", i, claim, claims[0])
		}
	}
	if len(s.extended.nodes) != nodes {
		t.Errorf("%d nodes recorded, want %d", len(s.extended.nodes), nodes)
	}
}

// TestExtendedSliceHint: a slice requeues a pod waiting for an extended
// resource if one of its devices matches the resource's class.
func TestExtendedSliceHint(t *testing.T) {
	pod := extGPUs().Res(gpus("1")).Obj()
	class := extClass(extGPUClass, string(extGPU))
	class.Spec.Selectors = []resourceapi.DeviceSelector{builder.Selector(`device.driver == "gpu.example.com"`)}
	_, pl, _ := extPlugin(t, pod, class)
	for name, tc := range map[string]struct {
		slice *resourceapi.ResourceSlice
		want  fwk.QueueingHint
	}{
		"devices of the class": {slice: extSlice("node-a", 1), want: fwk.Queue},
		"other driver":         {slice: builder.MakeSlice("node-b").Driver("nic.example.com").Node("node-b").Devices(builder.Devices("nic", 1, nil)...).Obj(), want: fwk.QueueSkip},
	} {
		t.Run(name, func(t *testing.T) {
			hint, err := pl.afterSliceChange(extLogger(t), pod, nil, tc.slice)
			if err != nil || hint != tc.want {
				t.Errorf("hint %v, %v; want %v", hint, err, tc.want)
			}
		})
	}
}

// allocatedCount is the number of devices the plugin's tracker counts as
// taken.
func allocatedCount(t *testing.T, ctx context.Context, pl *Plugin) int {
	t.Helper()
	state, err := pl.tracker.AllocatedState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return state.AllocatedDevices.Len()
}
