// Package extendedresources tests extended resources backed by DRA
// (DRAExtendedResource) end to end: a real kube-apiserver with etcd, the
// scheduler with drasched's profile running as its ServiceAccount, and the
// API effects that upstream's DynamicResources plugin has.
package extendedresources

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// scenario is one subtest's names: its own driver, class and extended
// resource, so that subtests sharing the cluster cannot use each other's
// devices.
type scenario struct {
	name     string
	driver   string
	class    string
	resource v1.ResourceName
}

func newScenario(t *testing.T, e *env, name string) scenario {
	t.Helper()
	s := scenario{
		name:     name,
		driver:   name + ".gpu.example.com",
		class:    name + "-gpu",
		resource: v1.ResourceName("example.com/gpu-" + name),
	}
	e.namespace(t, name)
	e.class(t, s.class, s.driver, string(s.resource))
	return s
}

func (s scenario) gpus(n string) map[v1.ResourceName]string {
	return map[v1.ResourceName]string{s.resource: n}
}

func TestExtendedResources(t *testing.T) {
	e := setup(t)

	t.Run("allocated", func(t *testing.T) {
		s := newScenario(t, e, "allocated")
		e.node(t, "allocated-node", nil)
		e.slice(t, "allocated-node", s.driver, "gpu", 4)

		pod := e.create(t, makePod(s.name, "pod").Container("app", s.gpus("2")).Obj())
		bound := e.scheduled(t, pod)
		if bound.Spec.NodeName != "allocated-node" {
			t.Fatalf("pod on node %q, want allocated-node", bound.Spec.NodeName)
		}
		claims := e.claims(t, s.name)
		if len(claims) != 1 {
			t.Fatalf("%d claims, want 1", len(claims))
		}
		claim := claims[0]
		checkClaimMeta(t, &claim, bound)
		wantRequests := []resourceapi.DeviceRequest{{Name: "container-0-request-0", Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: s.class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2,
		}}}
		if diff := cmp.Diff(wantRequests, claim.Spec.Devices.Requests); diff != "" {
			t.Errorf("requests (-want +got):\n%s", diff)
		}
		allocation := claim.Status.Allocation
		if allocation == nil {
			t.Fatal("claim not allocated")
		}
		var devices []string
		for _, result := range allocation.Devices.Results {
			if result.Request != "container-0-request-0" || result.Driver != s.driver || result.Pool != "allocated-node" {
				t.Errorf("unexpected result %+v", result)
			}
			devices = append(devices, result.Device)
		}
		if want := []string{"gpu-0", "gpu-1"}; !slices.Equal(devices, want) {
			t.Errorf("devices %v, want %v", devices, want)
		}
		wantSelector := &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{"allocated-node"},
		}}}}}
		if diff := cmp.Diff(wantSelector, allocation.NodeSelector); diff != "" {
			t.Errorf("node selector (-want +got):\n%s", diff)
		}
		wantReserved := []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "pod", UID: bound.UID}}
		if diff := cmp.Diff(wantReserved, claim.Status.ReservedFor); diff != "" {
			t.Errorf("reservedFor (-want +got):\n%s", diff)
		}
		wantStatus := &v1.PodExtendedResourceClaimStatus{
			ResourceClaimName: claim.Name,
			RequestMappings:   []v1.ContainerExtendedResourceRequest{{ContainerName: "app", ResourceName: string(s.resource), RequestName: "container-0-request-0"}},
		}
		if diff := cmp.Diff(wantStatus, bound.Status.ExtendedResourceClaimStatus); diff != "" {
			t.Errorf("pod status (-want +got):\n%s", diff)
		}

		// A second pod gets the other two devices, none twice.
		second := e.scheduled(t, e.create(t, makePod(s.name, "second").Container("app", s.gpus("2")).Obj()))
		secondClaim := claimOf(t, e, second)
		var secondDevices []string
		for _, result := range secondClaim.Status.Allocation.Devices.Results {
			secondDevices = append(secondDevices, result.Device)
		}
		if want := []string{"gpu-2", "gpu-3"}; !slices.Equal(secondDevices, want) {
			t.Errorf("second pod's devices %v, want %v", secondDevices, want)
		}
	})

	t.Run("device plugin", func(t *testing.T) {
		s := newScenario(t, e, "deviceplugin")
		// The node's device plugin provides the resource; its driver
		// publishes the same GPUs, which must not be allocated as well.
		e.node(t, "deviceplugin-node", s.gpus("4"))
		e.slice(t, "deviceplugin-node", s.driver, "gpu", 4)

		bound := e.scheduled(t, e.create(t, makePod(s.name, "pod").Container("app", s.gpus("2")).Obj()))
		if bound.Spec.NodeName != "deviceplugin-node" {
			t.Fatalf("pod on node %q, want deviceplugin-node", bound.Spec.NodeName)
		}
		if claims := e.claims(t, s.name); len(claims) != 0 {
			t.Errorf("claims %v, want none", names(claims))
		}
		if bound.Status.ExtendedResourceClaimStatus != nil {
			t.Errorf("pod status has %+v, want no extended resource claim", bound.Status.ExtendedResourceClaimStatus)
		}
	})

	t.Run("not enough devices", func(t *testing.T) {
		s := newScenario(t, e, "short")
		e.node(t, "short-node", nil)
		slice := e.slice(t, "short-node", s.driver, "gpu", 1)

		pod := e.create(t, makePod(s.name, "pod").Container("app", s.gpus("2")).Obj())
		message := e.unschedulable(t, pod)
		want := fmt.Sprintf(`extended resource %s for container "app": 1 of 1 matching devices free, need 2`, s.resource)
		if !strings.Contains(message, want) {
			t.Errorf("message %q does not say %q", message, want)
		}
		if claims := e.claims(t, s.name); len(claims) != 0 {
			t.Errorf("claims %v, want none", names(claims))
		}

		// A second device arrives: the slice's queueing hint brings the
		// pod back.
		slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{Name: "gpu-1"})
		slice.Spec.Pool.Generation++
		if _, err := e.admin.ResourceV1().ResourceSlices().Update(e.ctx, slice, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		bound := e.scheduled(t, pod)
		if claim := claimOf(t, e, bound); claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 2 {
			t.Errorf("claim %s has allocation %+v, want two devices", claim.Name, claim.Status.Allocation)
		}
	})

	t.Run("pod deleted during binding", func(t *testing.T) {
		s := newScenario(t, e, "deleted")
		e.node(t, "deleted-node", nil)
		e.slice(t, "deleted-node", s.driver, "gpu", 2)

		pod := e.create(t, makePod(s.name, "pod").Container("app", s.gpus("2")).Label(hookLabel, hookDeletePod).Obj())
		e.eventually(t, "pod deleted by the hook", func(ctx context.Context) (bool, error) {
			_, err := e.admin.CoreV1().Pods(s.name).Get(ctx, pod.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if seen := e.hook.seen(pod); len(seen) != 1 {
			t.Fatalf("claims when binding started: %v, want the one PreBind created", seen)
		}
		// No garbage collector runs here: only Unreserve deletes it.
		e.eventually(t, "claim deleted", func(ctx context.Context) (bool, error) {
			return len(e.claims(t, s.name)) == 0, nil
		})

		// Its devices are free again.
		next := e.scheduled(t, e.create(t, makePod(s.name, "next").Container("app", s.gpus("2")).Obj()))
		if claim := claimOf(t, e, next); claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 2 {
			t.Errorf("claim %s has allocation %+v, want two devices", claim.Name, claim.Status.Allocation)
		}
	})

	t.Run("binding fails once", func(t *testing.T) {
		s := newScenario(t, e, "retried")
		e.node(t, "retried-node", nil)
		e.slice(t, "retried-node", s.driver, "gpu", 2)

		pod := e.create(t, makePod(s.name, "pod").Container("app", s.gpus("2")).Label(hookLabel, hookFailOnce).Obj())
		bound := e.scheduled(t, pod)
		first := e.hook.seen(pod)
		if len(first) != 1 {
			t.Fatalf("claims at the failed attempt: %v, want the one PreBind created", first)
		}
		claims := e.claims(t, s.name)
		if len(claims) != 1 || claims[0].Name == first[0] {
			t.Fatalf("claims %v, want one new claim instead of %s", names(claims), first[0])
		}
		if got := bound.Status.ExtendedResourceClaimStatus; got == nil || got.ResourceClaimName != claims[0].Name {
			t.Errorf("pod status %+v, want claim %s", got, claims[0].Name)
		}
	})

	t.Run("claim from an earlier attempt", func(t *testing.T) {
		s := newScenario(t, e, "stale")
		e.node(t, "stale-node", nil)
		e.slice(t, "stale-node", s.driver, "gpu", 4)

		// A scheduler that restarted in PreBind left claims and the pods
		// unbound: one with the allocation of two devices written, one
		// before that.
		allocated := e.create(t, makePod(s.name, "allocated").Container("app", s.gpus("2")).Gate("test").Obj())
		unallocated := e.create(t, makePod(s.name, "unallocated").Container("app", s.gpus("2")).Gate("test").Obj())
		stale := map[string]string{
			allocated.Name:   e.staleClaim(t, s, allocated, "gpu-0", "gpu-1").Name,
			unallocated.Name: e.staleClaim(t, s, unallocated).Name,
		}
		for _, pod := range []*v1.Pod{allocated, unallocated} {
			pod.Spec.SchedulingGates = nil
			if _, err := e.admin.CoreV1().Pods(s.name).Update(e.ctx, pod, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		// PreFilter rejects the pods, PostFilter deletes the claims. The
		// pods get scheduled within the timeout only if the deletions
		// requeue them: unschedulable pods are flushed every 5 minutes,
		// and a claim without allocation frees nothing for other pods.
		for _, pod := range []*v1.Pod{allocated, unallocated} {
			bound := e.scheduled(t, pod)
			claim := claimOf(t, e, bound)
			if claim.Name == stale[pod.Name] {
				t.Errorf("pod %s uses the old claim %s", pod.Name, claim.Name)
			}
			if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 2 {
				t.Errorf("claim %s has allocation %+v, want two devices", claim.Name, claim.Status.Allocation)
			}
		}
		if claims := e.claims(t, s.name); len(claims) != 2 || slices.ContainsFunc(claims, func(c resourceapi.ResourceClaim) bool {
			return c.Name == stale[allocated.Name] || c.Name == stale[unallocated.Name]
		}) {
			t.Errorf("claims %v, want two new ones, none of %v", names(claims), stale)
		}
	})

	t.Run("same as upstream", func(t *testing.T) {
		s := newScenario(t, e, "upstream")
		// A second resource, with the implicit name of its class.
		fpgaDriver := "upstream.fpga.example.com"
		e.class(t, "upstream-fpga", fpgaDriver, "")
		fpga := v1.ResourceName(resourceapi.ResourceDeviceClassPrefix + "upstream-fpga")
		for _, node := range []string{"upstream-theirs", "upstream-ours"} {
			e.node(t, node, nil)
			e.slice(t, node, s.driver, "gpu", 16)
			e.slice(t, node, fpgaDriver, "fpga", 4)
		}
		shapes := map[string]func(*podWrapper) *podWrapper{
			"containers": func(p *podWrapper) *podWrapper {
				return p.Container("a", s.gpus("1")).Container("b", map[v1.ResourceName]string{v1.ResourceCPU: "100m", s.resource: "2", fpga: "1"})
			},
			"init and sidecar": func(p *podWrapper) *podWrapper {
				return p.Init("setup", s.gpus("4")).Sidecar("proxy", s.gpus("1")).Init("late", map[v1.ResourceName]string{s.resource: "3", fpga: "1"}).
					Container("app", s.gpus("2"))
			},
			"init containers": func(p *podWrapper) *podWrapper {
				return p.Init("one", s.gpus("2")).Init("two", s.gpus("3")).Container("app", map[v1.ResourceName]string{fpga: "2"})
			},
		}
		for _, name := range []string{"containers", "init and sidecar", "init containers"} {
			shape := shapes[name]
			podName := strings.ReplaceAll(name, " ", "-")
			theirs := e.scheduled(t, e.create(t, shape(makePod(s.name, podName+"-theirs").Scheduler(upstreamScheduler).OnNode("upstream-theirs")).Obj()))
			ours := e.scheduled(t, e.create(t, shape(makePod(s.name, podName+"-ours").OnNode("upstream-ours")).Obj()))
			theirClaim, ourClaim := claimOf(t, e, theirs), claimOf(t, e, ours)
			checkClaimMeta(t, theirClaim, theirs)
			checkClaimMeta(t, ourClaim, ours)
			if diff := cmp.Diff(theirClaim.Spec, ourClaim.Spec); diff != "" {
				t.Errorf("%s: claim spec (-upstream +drasched):\n%s", name, diff)
			}
			if diff := cmp.Diff(devicesOf(theirClaim), devicesOf(ourClaim)); diff != "" {
				t.Errorf("%s: allocated devices (-upstream +drasched):\n%s", name, diff)
			}
			if diff := cmp.Diff(theirs.Status.ExtendedResourceClaimStatus.RequestMappings, ours.Status.ExtendedResourceClaimStatus.RequestMappings); diff != "" {
				t.Errorf("%s: request mappings (-upstream +drasched):\n%s", name, diff)
			}
			if diff := cmp.Diff(theirClaim.Finalizers, ourClaim.Finalizers); diff != "" {
				t.Errorf("%s: finalizers (-upstream +drasched):\n%s", name, diff)
			}
		}
	})
}

// staleClaim creates a claim for the pod's extended resources, as PreBind
// creates it, and allocates the devices if any are given.
func (e *env) staleClaim(t *testing.T, s scenario, pod *v1.Pod, devices ...string) *resourceapi.ResourceClaim {
	t.Helper()
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: s.name, GenerateName: pod.Name + "-extended-resources-",
			Annotations:     map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: ptr.To(true)}},
			Finalizers:      []string{resourceapi.Finalizer},
		},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "container-0-request-0", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: s.class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2},
		}}}},
	}
	claim, err := e.admin.ResourceV1().ResourceClaims(s.name).Create(e.ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(devices) == 0 {
		return claim
	}
	claim.Status.Allocation = &resourceapi.AllocationResult{}
	for _, device := range devices {
		claim.Status.Allocation.Devices.Results = append(claim.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "container-0-request-0", Driver: s.driver, Pool: pod.Namespace + "-node", Device: device,
		})
	}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
	claim, err = e.admin.ResourceV1().ResourceClaims(s.name).UpdateStatus(e.ctx, claim, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return claim
}

// checkClaimMeta checks what marks a claim as the pod's claim for extended
// resources.
func checkClaimMeta(t *testing.T, claim *resourceapi.ResourceClaim, pod *v1.Pod) {
	t.Helper()
	if claim.GenerateName != pod.Name+"-extended-resources-" || !strings.HasPrefix(claim.Name, claim.GenerateName) {
		t.Errorf("claim %s has generateName %q, want %s-extended-resources-", claim.Name, claim.GenerateName, pod.Name)
	}
	if claim.Annotations[resourceapi.ExtendedResourceClaimAnnotation] != "true" {
		t.Errorf("claim %s has annotations %v", claim.Name, claim.Annotations)
	}
	want := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: ptr.To(true)}}
	if diff := cmp.Diff(want, claim.OwnerReferences); diff != "" {
		t.Errorf("claim %s owner references (-want +got):\n%s", claim.Name, diff)
	}
	if !slices.Contains(claim.Finalizers, resourceapi.Finalizer) {
		t.Errorf("claim %s has finalizers %v, want %s", claim.Name, claim.Finalizers, resourceapi.Finalizer)
	}
}

// claimOf returns the pod's claim named in its status.
func claimOf(t *testing.T, e *env, pod *v1.Pod) *resourceapi.ResourceClaim {
	t.Helper()
	status := pod.Status.ExtendedResourceClaimStatus
	if status == nil {
		t.Fatalf("pod %s has no extended resource claim in its status", pod.Name)
	}
	claim, err := e.admin.ResourceV1().ResourceClaims(pod.Namespace).Get(e.ctx, status.ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return claim
}

// devicesOf lists request and device of each allocated device; pools are
// nodes, which differ between the pods compared.
func devicesOf(claim *resourceapi.ResourceClaim) []string {
	if claim.Status.Allocation == nil {
		return nil
	}
	var devices []string
	for _, result := range claim.Status.Allocation.Devices.Results {
		devices = append(devices, result.Request+"="+result.Driver+"/"+result.Device)
	}
	return devices
}

func names(claims []resourceapi.ResourceClaim) []string {
	var out []string
	for _, claim := range claims {
		out = append(out, claim.Name)
	}
	return out
}
