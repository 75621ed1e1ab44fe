//go:build !kube1.35 && !kube1.36

package dra

// Node-allocatable resources backed by devices (feature gate
// DRANodeAllocatableResources, alpha in 1.37): a device may stand for CPU,
// memory or hugepages of its node (Device.NodeAllocatableResources), as a
// mapping (the device is so much CPU) or an overhead (using the device costs
// so much CPU per pod or per container). A pod's claims with such devices
// add to what the pod takes from the node; Filter checks that the node has
// it, and the pod's status.nodeAllocatableResourceClaimStatuses says what
// the kubelet and the scheduler's NodeResourcesFit count for the pod. A
// claim with a mapped device cannot be shared by pods.
//
// As upstream's DynamicResources: PreFilter finds the allocated claims with
// mapped devices, Filter refuses to share them and checks the pod's
// demand with its devices' resources against the node, Reserve computes
// the statuses for the chosen node, PreBind patches them into the pod's
// status, and Unreserve clears them.
//
// kube-scheduler copies the statuses into the assumed pod before its cache
// counts the pod, from upstream's own cycle state only, so its cache counts
// a pod of this plugin without its devices' resources until the bound pod
// comes back from the API. Filter makes up for it (uncountedPods below):
// for every pod, also those without claims, while such pods are on the
// node.

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	v1helper "k8s.io/kubernetes/pkg/apis/core/v1/helper"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"
)

// nodeAllocatable is the cycle's state for node-allocatable resources; nil
// in stateData while the feature gate is off. Clones share it.
type nodeAllocatable struct {
	// slices are the ResourceSlices as PreFilter saw them, so that Filter
	// and Reserve compute with the same devices. Read-only.
	slices []*resourceapi.ResourceSlice
	// mapped are the claims allocated before Filter (or pending for the
	// pod's group) with a device that maps a node-allocatable resource.
	// Read-only after PreFilter.
	mapped sets.Set[types.UID]
	// statuses are what Reserve computed for the chosen node, for PreBind
	// and Unreserve, which run after it.
	statuses []v1.NodeAllocatableResourceClaimStatus
}

// supportNodeAllocatable: this build implements DRANodeAllocatableResources.
func supportNodeAllocatable(feature.Features) error { return nil }

// pendingSharers returns the pods (by UID) of the pod's group that share
// the in-flight allocation of a claim in this pod group cycle. A nil
// function means that the pod is not scheduled as part of a group.
type pendingSharers func(claim types.UID) sets.Set[types.UID]

// claimAllocation is the claim's allocation as the cycle knows it before
// Reserve: its status, or an allocation pending for the pod's group.
func (s *stateData) claimAllocation(index int) *resourceapi.AllocationResult {
	if allocation := s.claims[index].Status.Allocation; allocation != nil {
		return allocation
	}
	return s.info[index].allocation
}

// preFilterNodeAllocatable records which allocated claims have mapped
// devices, for the sharing check in Filter.
func (pl *Plugin) preFilterNodeAllocatable(logger klog.Logger, s *stateData) *fwk.Status {
	if !pl.fts.EnableDRANodeAllocatableResources {
		return nil
	}
	slices, err := pl.tracker.Slices()
	if err != nil {
		return statusError(logger, fmt.Errorf("list resource slices: %w", err))
	}
	s.nodeAllocatable = &nodeAllocatable{slices: slices, mapped: sets.New[types.UID]()}
	for i, claim := range s.claims {
		if allocation := s.claimAllocation(i); allocation != nil && hasMappedDevice(slices, allocation) {
			s.nodeAllocatable.mapped.Insert(claim.UID)
		}
	}
	return nil
}

// hasMappedDevice: a device of the allocation maps a node-allocatable
// resource. Devices that are not found do not count, as upstream's.
func hasMappedDevice(slices []*resourceapi.ResourceSlice, allocation *resourceapi.AllocationResult) bool {
	for i := range allocation.Devices.Results {
		device, err := findDevice(slices, &allocation.Devices.Results[i], nil)
		if err != nil {
			continue
		}
		for _, r := range device.NodeAllocatableResources {
			if r.Mapping != nil {
				return true
			}
		}
	}
	return false
}

// checkNodeAllocatableSharing refuses a claim with a mapped device that
// another pod uses already or, in a pod group cycle, shares a pending
// allocation with another pod of the group: the device's CPU or memory
// cannot belong to two pods. Overhead-only claims can be shared.
func (pl *Plugin) checkNodeAllocatableSharing(s *stateData, pod *v1.Pod, index int, sharers pendingSharers) *fwk.Status {
	if s.nodeAllocatable == nil || s.claimAllocation(index) == nil {
		return nil
	}
	claim := s.claims[index]
	if !s.nodeAllocatable.mapped.Has(claim.UID) {
		return nil
	}
	shared := len(claim.Status.ReservedFor) > 0 && !resourceclaim.IsReservedForPod(pod, claim, pl.fts.EnableDRAWorkloadResourceClaims)
	if !shared && sharers != nil {
		for uid := range sharers(claim.UID) {
			if uid != pod.UID {
				shared = true
				break
			}
		}
	}
	if shared {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("node allocatable resource claim %s has a mapped device and cannot be shared across pods", claim.Name))
	}
	return nil
}

// filterNodeAllocatable checks that the node has room for the pod's
// requests together with the resources of its claims' devices. results
// are Filter's allocations for s.pending on this node.
func (pl *Plugin) filterNodeAllocatable(ctx context.Context, s *stateData, pod *v1.Pod, nodeInfo fwk.NodeInfo, results []resourceapi.AllocationResult) *fwk.Status {
	if s.nodeAllocatable == nil {
		return nil
	}
	logger := klog.FromContext(ctx)
	statuses, err := s.nodeAllocatableStatuses(pod, nodeInfo.Node(), results)
	if err != nil {
		return statusError(logger, err, "pod", klog.KObj(pod), "node", klog.KObj(nodeInfo.Node()))
	}
	uncounted := pl.uncounted.on(nodeInfo)
	if len(statuses) == 0 && uncounted == nil {
		return nil
	}
	withDevices := pod.DeepCopy()
	withDevices.Status.NodeAllocatableResourceClaimStatuses = statuses
	if status := pl.podLevelResourcesCoverDevices(withDevices); status != nil {
		return status
	}
	if status := fitsNode(nodeInfo, pl.podDemand(withDevices), uncounted); status != nil {
		logger.V(5).Info("Node lacks the pod's resources with its devices'", "pod", klog.KObj(pod), "node", klog.KObj(nodeInfo.Node()), "reasons", status.Reasons())
		return status
	}
	return nil
}

// nodeAllocatableStatuses computes the pod's status entries for its claims
// with node-allocatable devices, allocated on the node: claims allocated
// before, and those in s.pending with results. It returns nothing if no
// claim has such a device, and an error if a device of such a claim is not
// found.
func (s *stateData) nodeAllocatableStatuses(pod *v1.Pod, node *v1.Node, results []resourceapi.AllocationResult) ([]v1.NodeAllocatableResourceClaimStatus, error) {
	allocations := make(map[types.UID]*resourceapi.AllocationResult, len(s.claims))
	for i, claim := range s.claims {
		if allocation := s.claimAllocation(i); allocation != nil {
			allocations[claim.UID] = allocation
		}
	}
	for k, claim := range s.pending {
		if k < len(results) {
			allocations[claim.UID] = &results[k]
		}
	}
	nodeSlices := slicesForNode(s.nodeAllocatable.slices, node)

	var statuses []v1.NodeAllocatableResourceClaimStatus
	byClaim := make(map[types.UID]int)
	for _, claim := range s.claims {
		allocation := allocations[claim.UID]
		if allocation == nil || !hasNodeAllocatableDevice(nodeSlices, allocation, node) {
			continue
		}
		status, err := claimNodeAllocatable(claim, allocation, nodeSlices, node)
		if err != nil {
			return nil, err
		}
		if status != nil {
			byClaim[claim.UID] = len(statuses)
			statuses = append(statuses, *status)
		}
	}
	if len(statuses) == 0 {
		return nil, nil
	}

	// The containers that use each claim, init containers first.
	claimUIDs := make(map[string]types.UID, len(pod.Spec.ResourceClaims))
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil || name == nil {
			continue
		}
		for _, claim := range s.claims {
			if claim.Name == *name {
				claimUIDs[pod.Spec.ResourceClaims[i].Name] = claim.UID
			}
		}
	}
	for _, containers := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, container := range containers {
			for _, ref := range container.Resources.Claims {
				if index, ok := byClaim[claimUIDs[ref.Name]]; ok {
					statuses[index].Containers = append(statuses[index].Containers, container.Name)
				}
			}
		}
	}
	sort.Slice(statuses, func(i, j int) bool { return statuses[i].ResourceClaimName < statuses[j].ResourceClaimName })
	return statuses, nil
}

// hasNodeAllocatableDevice: a device of the allocation, found among the
// node's slices, has node-allocatable resources.
func hasNodeAllocatableDevice(nodeSlices []*resourceapi.ResourceSlice, allocation *resourceapi.AllocationResult, node *v1.Node) bool {
	for i := range allocation.Devices.Results {
		if device, err := findDevice(nodeSlices, &allocation.Devices.Results[i], node); err == nil && len(device.NodeAllocatableResources) > 0 {
			return true
		}
	}
	return false
}

// claimNodeAllocatable sums the mapped resources and the overheads of the
// claim's devices; nil if they have none.
func claimNodeAllocatable(claim *resourceapi.ResourceClaim, allocation *resourceapi.AllocationResult, nodeSlices []*resourceapi.ResourceSlice, node *v1.Node) (*v1.NodeAllocatableResourceClaimStatus, error) {
	mapped := make(map[v1.ResourceName]resource.Quantity)
	overhead := make(map[v1.ResourceName]v1.NodeAllocatableOverheadResources)
	for i := range allocation.Devices.Results {
		result := &allocation.Devices.Results[i]
		device, err := findDevice(nodeSlices, result, node)
		if err != nil {
			return nil, fmt.Errorf("claim %s: %w", klog.KObj(claim), err)
		}
		for name, r := range device.NodeAllocatableResources {
			if r.Mapping != nil {
				q, ok, err := mappedQuantity(r.Mapping, result)
				if err != nil {
					return nil, fmt.Errorf("claim %s, device %s, resource %s: %w", klog.KObj(claim), result.Device, name, err)
				}
				if ok {
					sum := mapped[name]
					sum.Add(q)
					mapped[name] = sum
				}
			}
			if r.Overhead != nil {
				overhead[name] = addOverhead(overhead[name], name, r.Overhead)
			}
		}
	}
	if len(mapped) == 0 && len(overhead) == 0 {
		return nil, nil
	}
	status := &v1.NodeAllocatableResourceClaimStatus{
		ResourceClaimName: claim.Name,
		Containers:        []string{},
		Mapping:           []v1.NodeAllocatableMappedResources{},
		Overhead:          []v1.NodeAllocatableOverheadResources{},
	}
	for name, q := range mapped {
		status.Mapping = append(status.Mapping, v1.NodeAllocatableMappedResources{Name: name, Quantity: &q})
	}
	for _, o := range overhead {
		status.Overhead = append(status.Overhead, o)
	}
	slices.SortFunc(status.Mapping, func(a, b v1.NodeAllocatableMappedResources) int { return compareNames(a.Name, b.Name) })
	slices.SortFunc(status.Overhead, func(a, b v1.NodeAllocatableOverheadResources) int { return compareNames(a.Name, b.Name) })
	return status, nil
}

func compareNames(a, b v1.ResourceName) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// mappedQuantity is what one allocated device maps of a resource: the
// consumed capacity under the mapping's key times its multiplier, or the
// device multiplier. ok is false if the allocation consumed nothing under
// the key; a mapping by capacity of a device allocated without consumed
// capacity is an error.
func mappedQuantity(mapping *resourceapi.NodeAllocatableMapping, result *resourceapi.DeviceRequestAllocationResult) (resource.Quantity, bool, error) {
	if key := mapping.CapacityKey; key != nil && *key != "" {
		if result.ConsumedCapacity == nil {
			return resource.Quantity{}, false, fmt.Errorf("mapped by capacity %s, but the allocation consumed no capacity", *key)
		}
		consumed, ok := result.ConsumedCapacity[*key]
		if !ok {
			return resource.Quantity{}, false, nil
		}
		q := consumed.DeepCopy()
		if m := mapping.CapacityMultiplier; m != nil && !m.Equal(resource.MustParse("1")) {
			product := q.AsDec()
			product.Mul(product, m.AsDec())
			q = *resource.NewDecimalQuantity(*product, consumed.Format)
		}
		return q, true, nil
	}
	if mapping.DeviceMultiplier != nil {
		return mapping.DeviceMultiplier.DeepCopy(), true, nil
	}
	return resource.Quantity{}, false, nil
}

// addOverhead adds a device's overhead for a resource to the sum.
func addOverhead(sum v1.NodeAllocatableOverheadResources, name v1.ResourceName, o *resourceapi.NodeAllocatableOverhead) v1.NodeAllocatableOverheadResources {
	sum.Name = name
	add := func(to **resource.Quantity, q *resource.Quantity) {
		if q == nil {
			return
		}
		if *to == nil {
			c := q.DeepCopy()
			*to = &c
			return
		}
		(*to).Add(*q)
	}
	add(&sum.PerPod, o.PerPod)
	add(&sum.PerContainer, o.PerContainer)
	return sum
}

// slicesForNode returns the slices whose devices may be on the node: the
// node's own, those for all nodes or for nodes the selector matches, and
// those that select nodes per device. A nil node selects all slices.
func slicesForNode(all []*resourceapi.ResourceSlice, node *v1.Node) []*resourceapi.ResourceSlice {
	if node == nil {
		return all
	}
	var result []*resourceapi.ResourceSlice
	for _, slice := range all {
		spec := &slice.Spec
		switch {
		case spec.NodeName != nil && *spec.NodeName == node.Name,
			spec.AllNodes != nil && *spec.AllNodes,
			spec.PerDeviceNodeSelection != nil && *spec.PerDeviceNodeSelection && spec.NodeSelector == nil:
			result = append(result, slice)
		case spec.NodeSelector != nil:
			if selector, err := nodeaffinity.NewNodeSelector(spec.NodeSelector); err == nil && selector.Match(node) {
				result = append(result, slice)
			}
		}
	}
	return result
}

// findDevice looks up an allocated device. With a node, a device of a slice
// with per-device node selection must be on it.
func findDevice(slices []*resourceapi.ResourceSlice, result *resourceapi.DeviceRequestAllocationResult, node *v1.Node) (*resourceapi.Device, error) {
	for _, slice := range slices {
		if slice.Spec.Driver != result.Driver || slice.Spec.Pool.Name != result.Pool {
			continue
		}
		for i := range slice.Spec.Devices {
			device := &slice.Spec.Devices[i]
			if device.Name != result.Device {
				continue
			}
			if node != nil && slice.Spec.PerDeviceNodeSelection != nil && *slice.Spec.PerDeviceNodeSelection && !deviceOnNode(device, node) {
				return nil, fmt.Errorf("device %s is not on node %s", result.Device, node.Name)
			}
			return device, nil
		}
	}
	return nil, fmt.Errorf("device %s not found in pool %s of driver %s", result.Device, result.Pool, result.Driver)
}

// deviceOnNode: a device of a slice with per-device node selection is
// available on the node.
func deviceOnNode(device *resourceapi.Device, node *v1.Node) bool {
	switch {
	case device.NodeName != nil:
		return *device.NodeName == node.Name
	case device.AllNodes != nil && *device.AllNodes:
		return true
	case device.NodeSelector != nil:
		selector, err := nodeaffinity.NewNodeSelector(device.NodeSelector)
		return err == nil && selector.Match(node)
	}
	return false
}

// podLevelResourcesCoverDevices checks what API validation cannot, since
// the devices are only known now: pod-level requests cover the containers'
// requests with the devices' resources, pod-level hugepages limits the
// containers' limits with them, and each other pod-level limit each
// container's limit with its devices' overhead.
func (pl *Plugin) podLevelResourcesCoverDevices(pod *v1.Pod) *fwk.Status {
	if !pl.fts.EnablePodLevelResources || pod.Spec.Resources == nil {
		return nil
	}
	opts := resourcehelper.PodResourcesOptions{SkipPodLevelResources: true, UseDRANodeAllocatableResourceClaimStatus: true}
	if podRequests := pod.Spec.Resources.Requests; podRequests != nil {
		containers := resourcehelper.AggregateContainerRequests(pod, opts)
		for name, podLevel := range podRequests {
			if q, ok := containers[name]; ok && resourcehelper.IsSupportedPodLevelResource(name) && q.Cmp(podLevel) > 0 {
				return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("pod level request for %s is insufficient to cover the aggregated container and node-allocatable DRA requests", name))
			}
		}
	}
	podLimits := pod.Spec.Resources.Limits
	if podLimits == nil {
		return nil
	}
	for name, q := range resourcehelper.AggregateContainerLimits(pod, opts) {
		if podLevel, ok := podLimits[name]; ok && v1helper.IsHugePageResourceName(name) && q.Cmp(podLevel) > 0 {
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("pod level limit for %s is insufficient to cover the aggregated container and node-allocatable DRA limits", name))
		}
	}
	for _, container := range pod.Spec.Containers {
		devices := resourcehelper.GetContainerDRAAllocations(pod, container.Name)
		for name, limit := range container.Resources.Limits {
			podLevel, ok := podLimits[name]
			if !ok || v1helper.IsHugePageResourceName(name) {
				continue
			}
			effective := limit.DeepCopy()
			effective.Add(devices[name])
			if effective.Cmp(podLevel) > 0 {
				return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("pod level limit for %s is insufficient to cover the limit and DRA overhead for container %s", name, container.Name))
			}
		}
	}
	return nil
}

// podDemand is what the pod requests of its node, with the resources of
// the devices in its status.
func (pl *Plugin) podDemand(pod *v1.Pod) *framework.Resource {
	return framework.NewResource(resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{
		SkipPodLevelResources:                    !pl.fts.EnablePodLevelResources,
		UseDRANodeAllocatableResourceClaimStatus: true,
	}))
}

// fitsNode checks the pod's demand for CPU, memory, ephemeral storage and
// hugepages against what the node has left, with the node's pods
// requesting uncounted more than nodeInfo says (nil: nothing). It is
// Unschedulable if evicting pods could make room,
// UnschedulableAndUnresolvable if the node is too small for it.
func fitsNode(nodeInfo fwk.NodeInfo, demand, uncounted *framework.Resource) *fwk.Status {
	allocatable, requested := nodeInfo.GetAllocatable(), nodeInfo.GetRequested()
	if uncounted == nil {
		uncounted = &framework.Resource{}
	}
	var reasons []string
	code := fwk.Unschedulable
	check := func(name v1.ResourceName, want, capacity, used int64) {
		if want <= 0 || want <= capacity-used {
			return
		}
		reasons = append(reasons, fmt.Sprintf("Insufficient %s", name))
		if want > capacity {
			code = fwk.UnschedulableAndUnresolvable
		}
	}
	check(v1.ResourceCPU, demand.MilliCPU, allocatable.GetMilliCPU(), requested.GetMilliCPU()+uncounted.MilliCPU)
	check(v1.ResourceMemory, demand.Memory, allocatable.GetMemory(), requested.GetMemory()+uncounted.Memory)
	check(v1.ResourceEphemeralStorage, demand.EphemeralStorage, allocatable.GetEphemeralStorage(), requested.GetEphemeralStorage()+uncounted.EphemeralStorage)
	names := make([]v1.ResourceName, 0, len(demand.ScalarResources))
	for name := range demand.ScalarResources {
		if v1helper.IsHugePageResourceName(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		check(name, demand.ScalarResources[name], allocatable.GetScalarResources()[name], requested.GetScalarResources()[name]+uncounted.ScalarResources[name])
	}
	if len(reasons) == 0 {
		return nil
	}
	return fwk.NewStatus(code, reasons...)
}

// reserveNodeAllocatable computes the statuses for the chosen node and
// sets them in the pod that Reserve gets. That is the object that the
// scheduler's cache holds for the assumed pod, but the cache counted its
// resources when it assumed it, before Reserve: until the bound pod comes
// back from the API, other pods' cycles count this pod on the node without
// its devices' resources (upstream's DynamicResources avoids that because
// kube-scheduler copies the statuses from its cycle state, and only its,
// before assuming the pod). Setting them here keeps the cached object
// equal to what PreBind writes.
func (pl *Plugin) reserveNodeAllocatable(logger klog.Logger, s *stateData, pod *v1.Pod, nodeName string) *fwk.Status {
	if s.nodeAllocatable == nil {
		return nil
	}
	results, _ := s.results.allocation(nodeName)
	// Without the node: Filter found these devices on it, and a device is
	// known by driver, pool and name, whichever slice holds it.
	statuses, err := s.nodeAllocatableStatuses(pod, nil, results)
	if err != nil {
		return statusError(logger, err, "pod", klog.KObj(pod), "node", nodeName)
	}
	s.nodeAllocatable.statuses = statuses
	if len(statuses) > 0 {
		without := pl.podDemand(pod)
		pod.Status.NodeAllocatableResourceClaimStatuses = statuses
		pl.uncounted.add(pod, nodeName, subtract(pl.podDemand(pod), without))
	}
	return nil
}

// preBindNodeAllocatable writes the statuses to the pod. The pod object
// carries them already (Reserve), so the patch is computed against a copy
// without them, as upstream does.
func (pl *Plugin) preBindNodeAllocatable(ctx context.Context, s *stateData, pod *v1.Pod) error {
	if s.nodeAllocatable == nil || len(s.nodeAllocatable.statuses) == 0 {
		return nil
	}
	old := pod.Status.DeepCopy()
	old.NodeAllocatableResourceClaimStatuses = nil
	updated := pod.Status.DeepCopy()
	updated.NodeAllocatableResourceClaimStatuses = s.nodeAllocatable.statuses
	if err := schedutil.PatchPodStatus(ctx, pl.client, pod.Name, pod.Namespace, old, updated); err != nil {
		return fmt.Errorf("set nodeAllocatableResourceClaimStatuses of pod %s: %w", klog.KObj(pod), err)
	}
	klog.FromContext(ctx).V(5).Info("Patched pod's node-allocatable claim statuses", "pod", klog.KObj(pod), "statuses", updated.NodeAllocatableResourceClaimStatuses)
	return nil
}

// unreserveNodeAllocatable clears the statuses that Reserve computed, in
// the API (PreBind may have written them). An explicit empty list, because
// an omitted field could be an old client's; the UID precondition keeps
// the patch off a new pod of the same name.
func (pl *Plugin) unreserveNodeAllocatable(ctx context.Context, s *stateData, pod *v1.Pod) {
	if s.nodeAllocatable == nil || len(s.nodeAllocatable.statuses) == 0 {
		return
	}
	pl.uncounted.remove(pod.UID)
	logger := klog.FromContext(ctx)
	patch := fmt.Appendf(nil, `{"metadata":{"uid":%q},"status":{"nodeAllocatableResourceClaimStatuses":[]}}`, pod.UID)
	if _, err := pl.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		// The pod is scheduled again; its next PreBind overwrites them.
		logger.Error(err, "Clear node-allocatable claim statuses", "pod", klog.KObj(pod))
		return
	}
	logger.V(5).Info("Cleared node-allocatable claim statuses", "pod", klog.KObj(pod))
}

// uncountedPods are the pods that Reserve gave devices standing for CPU or
// memory and that the scheduler's cache counts without them: it counted
// each pod's requests when it assumed it, before Reserve, and without the
// statuses, which kube-scheduler takes from the in-tree plugin's cycle
// state only. Until the cache replaces its object of the pod with the
// bound pod from the API (which has the statuses, written by PreBind), the
// pod's node looks emptier than it is, and another pod could get the
// CPU of its devices. Filter adds what the cache misses, for every pod
// while there are such pods (prefilter.go does not skip pods without
// claims then).
//
// A pod is known by the object that Reserve got, which is the one the
// cache holds while the pod is assumed: a node's pods in the snapshot
// include that very object only until the cache has the pod from the API.
// Pods that other profiles reserved are not seen.
type uncountedPods struct {
	// mutex guards pods: Filter runs for many nodes in parallel.
	mutex sync.Mutex
	pods  map[types.UID]uncountedPod
}

type uncountedPod struct {
	node string
	// pod is the assumed pod's object in the scheduler's cache.
	pod *v1.Pod
	// missing is the part of the pod's requests that the cache lacks.
	missing *framework.Resource
}

func (u *uncountedPods) add(pod *v1.Pod, node string, missing *framework.Resource) {
	u.mutex.Lock()
	defer u.mutex.Unlock()
	if u.pods == nil {
		u.pods = make(map[types.UID]uncountedPod)
	}
	u.pods[pod.UID] = uncountedPod{node: node, pod: pod, missing: missing}
}

func (u *uncountedPods) remove(uid types.UID) {
	u.mutex.Lock()
	defer u.mutex.Unlock()
	delete(u.pods, uid)
}

// empty: no pod is uncounted.
func (u *uncountedPods) empty() bool {
	u.mutex.Lock()
	defer u.mutex.Unlock()
	return len(u.pods) == 0
}

// on returns what the node's pods request beyond what nodeInfo counts; nil
// if nothing. A pod that preemption's dry run removed from nodeInfo does
// not count.
func (u *uncountedPods) on(nodeInfo fwk.NodeInfo) *framework.Resource {
	u.mutex.Lock()
	defer u.mutex.Unlock()
	node := nodeInfo.Node()
	if len(u.pods) == 0 || node == nil {
		return nil
	}
	var sum *framework.Resource
	for _, p := range u.pods {
		if p.node != node.Name || !holds(nodeInfo, p.pod) {
			continue
		}
		if sum == nil {
			sum = &framework.Resource{}
		}
		sum.MilliCPU += p.missing.MilliCPU
		sum.Memory += p.missing.Memory
		sum.EphemeralStorage += p.missing.EphemeralStorage
		for name, q := range p.missing.ScalarResources {
			sum.AddScalar(name, q)
		}
	}
	return sum
}

// sweep forgets the pods that the cache counts now: the scheduler's
// snapshot no longer holds their assumed object on their node.
func (u *uncountedPods) sweep(nodeInfos func(node string) (fwk.NodeInfo, error)) {
	u.mutex.Lock()
	defer u.mutex.Unlock()
	for uid, p := range u.pods {
		if nodeInfo, err := nodeInfos(p.node); err != nil || !holds(nodeInfo, p.pod) {
			delete(u.pods, uid)
		}
	}
}

// holds: the node's pods include this very object.
func holds(nodeInfo fwk.NodeInfo, pod *v1.Pod) bool {
	for _, podInfo := range nodeInfo.GetPods() {
		if podInfo.GetPod() == pod {
			return true
		}
	}
	return false
}

// subtract returns what a has beyond b, per resource.
func subtract(a, b *framework.Resource) *framework.Resource {
	diff := &framework.Resource{
		MilliCPU:         max(a.MilliCPU-b.MilliCPU, 0),
		Memory:           max(a.Memory-b.Memory, 0),
		EphemeralStorage: max(a.EphemeralStorage-b.EphemeralStorage, 0),
	}
	for name, q := range a.ScalarResources {
		if d := q - b.ScalarResources[name]; d > 0 {
			diff.SetScalar(name, d)
		}
	}
	return diff
}

// preFilterUncounted: with uncounted pods, pods without claims go through
// Filter too; it also forgets the pods the cache counts by now.
func (pl *Plugin) preFilterUncounted() *fwk.Status {
	if pl.uncounted.empty() {
		return fwk.NewStatus(fwk.Skip)
	}
	pl.uncounted.sweep(pl.fh.SnapshotSharedLister().NodeInfos().Get)
	if pl.uncounted.empty() {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// filterUncounted checks a pod without claims against the node with the
// uncounted pods' devices' resources.
func (pl *Plugin) filterUncounted(pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	uncounted := pl.uncounted.on(nodeInfo)
	if uncounted == nil {
		return nil
	}
	return fitsNode(nodeInfo, pl.podDemand(pod), uncounted)
}
