// Package extendedresources tests extended resources backed by DRA
// (DRAExtendedResource) end to end on test/integration/framework: a real
// kube-apiserver with etcd and RBAC, the scheduler with drasched's profile
// and kube-scheduler's default one running as drasched's ServiceAccount,
// and the API effects that upstream's DynamicResources plugin has.
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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/test/integration/framework"
)

func TestExtendedResources(t *testing.T) {
	t.Run("allocated", func(t *testing.T) {
		e := setup(t)
		node := e.CreateNode("node")
		e.publish(node, e.Driver, "gpu", 4)

		e.CreatePod(e.MakePod("pod").Containers(builder.Container("app", e.gpus("2"))))
		bound := e.WaitForPodScheduled("pod")
		if bound.Spec.NodeName != node.Name {
			t.Fatalf("pod on node %q, want %s", bound.Spec.NodeName, node.Name)
		}
		claims := e.claims(t)
		if len(claims) != 1 {
			t.Fatalf("%d claims, want 1", len(claims))
		}
		claim := claims[0]
		checkClaimMeta(t, &claim, bound)
		wantRequests := []resourceapi.DeviceRequest{{Name: "container-0-request-0", Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: e.class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2,
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
			if result.Request != "container-0-request-0" || result.Driver != e.Driver || result.Pool != node.Name {
				t.Errorf("unexpected result %+v", result)
			}
			devices = append(devices, result.Device)
		}
		if want := []string{"gpu-0", "gpu-1"}; !slices.Equal(devices, want) {
			t.Errorf("devices %v, want %v", devices, want)
		}
		wantSelector := &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{node.Name},
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
			RequestMappings:   []v1.ContainerExtendedResourceRequest{{ContainerName: "app", ResourceName: string(e.resource), RequestName: "container-0-request-0"}},
		}
		if diff := cmp.Diff(wantStatus, bound.Status.ExtendedResourceClaimStatus); diff != "" {
			t.Errorf("pod status (-want +got):\n%s", diff)
		}

		// A second pod gets the other two devices, none twice.
		e.CreatePod(e.MakePod("second").Containers(builder.Container("app", e.gpus("2"))))
		secondClaim := e.claimOf(t, e.WaitForPodScheduled("second"))
		var secondDevices []string
		for _, result := range secondClaim.Status.Allocation.Devices.Results {
			secondDevices = append(secondDevices, result.Device)
		}
		if want := []string{"gpu-2", "gpu-3"}; !slices.Equal(secondDevices, want) {
			t.Errorf("second pod's devices %v, want %v", secondDevices, want)
		}
	})

	t.Run("device plugin", func(t *testing.T) {
		e := setup(t)
		// The node's device plugin provides the resource; its driver
		// publishes the same GPUs, which must not be allocated as well.
		node := e.CreateNodeWithResources("node", v1.ResourceList{e.resource: resource.MustParse("4")})
		e.publish(node, e.Driver, "gpu", 4)

		e.CreatePod(e.MakePod("pod").Containers(builder.Container("app", e.gpus("2"))))
		bound := e.WaitForPodScheduled("pod")
		if bound.Spec.NodeName != node.Name {
			t.Fatalf("pod on node %q, want %s", bound.Spec.NodeName, node.Name)
		}
		if claims := e.claims(t); len(claims) != 0 {
			t.Errorf("claims %v, want none", names(claims))
		}
		if bound.Status.ExtendedResourceClaimStatus != nil {
			t.Errorf("pod status has %+v, want no extended resource claim", bound.Status.ExtendedResourceClaimStatus)
		}
	})

	t.Run("not enough devices", func(t *testing.T) {
		e := setup(t)
		node := e.CreateNode("node")
		slice := e.publish(node, e.Driver, "gpu", 1)

		e.CreatePod(e.MakePod("pod").Containers(builder.Container("app", e.gpus("2"))))
		e.WaitForPodUnschedulable("pod", fmt.Sprintf(`extended resource %s for container "app": 1 of 1 matching devices free, need 2`, e.resource))
		if claims := e.claims(t); len(claims) != 0 {
			t.Errorf("claims %v, want none", names(claims))
		}

		// A second device arrives: the slice's queueing hint brings the
		// pod back.
		slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{Name: "gpu-1"})
		slice.Spec.Pool.Generation++
		if _, err := e.Client.ResourceV1().ResourceSlices().Update(e.Ctx, slice, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		bound := e.WaitForPodScheduled("pod")
		if claim := e.claimOf(t, bound); claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 2 {
			t.Errorf("claim %s has allocation %+v, want two devices", claim.Name, claim.Status.Allocation)
		}
	})

	t.Run("pod deleted during binding", func(t *testing.T) {
		e := setup(t)
		e.publish(e.CreateNode("node"), e.Driver, "gpu", 2)

		pod := e.CreatePod(e.MakePod("pod").Containers(builder.Container("app", e.gpus("2"))).Label(hookLabel, hookDeletePod))
		e.WaitFor(framework.Timeout, "pod deleted by the hook", func(ctx context.Context) (bool, string, error) {
			_, err := e.Client.CoreV1().Pods(e.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, "", nil
			}
			return false, "pod exists", err
		})
		if seen := e.hook.seen(pod); len(seen) != 1 {
			t.Fatalf("claims when binding started: %v, want the one PreBind created", seen)
		}
		// No garbage collector or claim controller runs here: only
		// Unreserve deletes it.
		e.WaitFor(framework.Timeout, "claim deleted", func(ctx context.Context) (bool, string, error) {
			claims := e.claims(t)
			return len(claims) == 0, fmt.Sprintf("claims %v", names(claims)), nil
		})

		// Its devices are free again.
		e.CreatePod(e.MakePod("next").Containers(builder.Container("app", e.gpus("2"))))
		if claim := e.claimOf(t, e.WaitForPodScheduled("next")); claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 2 {
			t.Errorf("claim %s has allocation %+v, want two devices", claim.Name, claim.Status.Allocation)
		}
	})

	t.Run("binding fails once", func(t *testing.T) {
		e := setup(t)
		e.publish(e.CreateNode("node"), e.Driver, "gpu", 2)

		pod := e.CreatePod(e.MakePod("pod").Containers(builder.Container("app", e.gpus("2"))).Label(hookLabel, hookFailOnce))
		bound := e.WaitForPodScheduled(pod.Name)
		first := e.hook.seen(pod)
		if len(first) != 1 {
			t.Fatalf("claims at the failed attempt: %v, want the one PreBind created", first)
		}
		claims := e.claims(t)
		if len(claims) != 1 || claims[0].Name == first[0] {
			t.Fatalf("claims %v, want one new claim instead of %s", names(claims), first[0])
		}
		if got := bound.Status.ExtendedResourceClaimStatus; got == nil || got.ResourceClaimName != claims[0].Name {
			t.Errorf("pod status %+v, want claim %s", got, claims[0].Name)
		}
	})

	t.Run("claim from an earlier attempt", func(t *testing.T) {
		e := setup(t)
		node := e.CreateNode("node")
		e.publish(node, e.Driver, "gpu", 4)

		// A scheduler that restarted in PreBind left claims and the pods
		// unbound: one with the allocation of two devices written, one
		// before that.
		allocated := e.CreatePod(e.MakePod("allocated").Containers(builder.Container("app", e.gpus("2"))).SchedulingGate("test"))
		unallocated := e.CreatePod(e.MakePod("unallocated").Containers(builder.Container("app", e.gpus("2"))).SchedulingGate("test"))
		stale := map[string]string{
			allocated.Name:   e.staleClaim(t, allocated, node.Name, "gpu-0", "gpu-1").Name,
			unallocated.Name: e.staleClaim(t, unallocated, node.Name).Name,
		}
		// A restarted scheduler has the claims in its cache before it
		// schedules; this one must too, or it could schedule a pod before
		// its claim informer delivers the stale claim (both are watched
		// apart) and rightly create a second claim. The lister reads the
		// store PreFilter's index of claims for extended resources is on.
		e.WaitFor(framework.Timeout, "the scheduler's cache to hold the stale claims", func(context.Context) (bool, string, error) {
			for pod, name := range stale {
				cached, err := e.sched.CachedClaim(e.Namespace, name)
				if apierrors.IsNotFound(err) {
					return false, fmt.Sprintf("claim %s of pod %s not cached", name, pod), nil
				}
				if err != nil {
					return false, "", err
				}
				if pod == allocated.Name && cached.Status.Allocation == nil {
					return false, fmt.Sprintf("claim %s cached without its allocation", name), nil
				}
			}
			return true, "", nil
		})
		for _, pod := range []*v1.Pod{allocated, unallocated} {
			pod.Spec.SchedulingGates = nil
			if _, err := e.Client.CoreV1().Pods(e.Namespace).Update(e.Ctx, pod, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		// PreFilter rejects the pods, PostFilter deletes the claims. The
		// pods get scheduled within the timeout only if the deletions
		// requeue them: unschedulable pods are flushed every 5 minutes,
		// and a claim without allocation frees nothing for other pods.
		for _, pod := range []*v1.Pod{allocated, unallocated} {
			claim := e.claimOf(t, e.WaitForPodScheduled(pod.Name))
			if claim.Name == stale[pod.Name] {
				t.Errorf("pod %s uses the old claim %s", pod.Name, claim.Name)
			}
			if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 2 {
				t.Errorf("claim %s has allocation %+v, want two devices", claim.Name, claim.Status.Allocation)
			}
		}
		if claims := e.claims(t); len(claims) != 2 || slices.ContainsFunc(claims, func(c resourceapi.ResourceClaim) bool {
			return c.Name == stale[allocated.Name] || c.Name == stale[unallocated.Name]
		}) {
			t.Errorf("claims %v, want two new ones, none of %v", names(claims), stale)
		}
		e.VerifyAllocations()
	})

	t.Run("same as upstream", func(t *testing.T) {
		e := setup(t)
		// A second resource, with the implicit name of its class.
		fpgaDriver := "fpga-" + e.Driver
		fpga := v1.ResourceName(resourceapi.ResourceDeviceClassPrefix + e.createClass("fpga", fpgaDriver, ""))
		theirNode, ourNode := e.CreateNode("theirs"), e.CreateNode("ours")
		for _, node := range []*v1.Node{theirNode, ourNode} {
			e.publish(node, e.Driver, "gpu", 16)
			e.publish(node, fpgaDriver, "fpga", 4)
		}
		shapes := map[string]func(*builder.PodWrapper) *builder.PodWrapper{
			"containers": func(p *builder.PodWrapper) *builder.PodWrapper {
				return p.Containers(builder.Container("a", e.gpus("1")),
					builder.Container("b", map[v1.ResourceName]string{v1.ResourceCPU: "100m", e.resource: "2", fpga: "1"}))
			},
			"init and sidecar": func(p *builder.PodWrapper) *builder.PodWrapper {
				return p.InitContainers(builder.Container("setup", e.gpus("4")), builder.Sidecar(builder.Container("proxy", e.gpus("1"))),
					builder.Container("late", map[v1.ResourceName]string{e.resource: "3", fpga: "1"})).
					Containers(builder.Container("app", e.gpus("2")))
			},
			"init containers": func(p *builder.PodWrapper) *builder.PodWrapper {
				return p.InitContainers(builder.Container("one", e.gpus("2")), builder.Container("two", e.gpus("3"))).
					Containers(builder.Container("app", map[v1.ResourceName]string{fpga: "2"}))
			},
		}
		for _, name := range []string{"containers", "init and sidecar", "init containers"} {
			shape := shapes[name]
			podName := strings.ReplaceAll(name, " ", "-")
			e.CreatePod(shape(e.MakePod(podName+"-theirs").SchedulerName(upstreamScheduler).NodeSelector(v1.LabelHostname, theirNode.Name)))
			e.CreatePod(shape(e.MakePod(podName+"-ours").NodeSelector(v1.LabelHostname, ourNode.Name)))
			theirs, ours := e.WaitForPodScheduled(podName+"-theirs"), e.WaitForPodScheduled(podName+"-ours")
			theirClaim, ourClaim := e.claimOf(t, theirs), e.claimOf(t, ours)
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
// creates it, and allocates the devices of the node's pool if any are
// given.
func (e *env) staleClaim(t *testing.T, pod *v1.Pod, pool string, devices ...string) *resourceapi.ResourceClaim {
	t.Helper()
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: e.Namespace, GenerateName: pod.Name + "-extended-resources-",
			Annotations:     map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: ptr.To(true)}},
			Finalizers:      []string{resourceapi.Finalizer},
		},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "container-0-request-0", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: e.class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2},
		}}}},
	}
	claim, err := e.Client.ResourceV1().ResourceClaims(e.Namespace).Create(e.Ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(devices) == 0 {
		return claim
	}
	claim.Status.Allocation = &resourceapi.AllocationResult{}
	for _, device := range devices {
		claim.Status.Allocation.Devices.Results = append(claim.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "container-0-request-0", Driver: e.Driver, Pool: pool, Device: device,
		})
	}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
	claim, err = e.Client.ResourceV1().ResourceClaims(e.Namespace).UpdateStatus(e.Ctx, claim, metav1.UpdateOptions{})
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
func (e *env) claimOf(t *testing.T, pod *v1.Pod) *resourceapi.ResourceClaim {
	t.Helper()
	status := pod.Status.ExtendedResourceClaimStatus
	if status == nil {
		t.Fatalf("pod %s has no extended resource claim in its status", pod.Name)
	}
	claim, err := e.Client.ResourceV1().ResourceClaims(pod.Namespace).Get(e.Ctx, status.ResourceClaimName, metav1.GetOptions{})
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
