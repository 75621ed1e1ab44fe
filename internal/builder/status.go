package builder

import (
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// What the API server, the scheduler and the claim controller write: the
// status of claims and pods, and the fields they set for tests that start
// from objects already scheduled.

// Namespace moves the claim to another namespace.
func (w *ClaimWrapper) Namespace(namespace string) *ClaimWrapper {
	w.ObjectMeta.Namespace = namespace
	return w
}

// UID replaces the claim's UID.
func (w *ClaimWrapper) UID(uid string) *ClaimWrapper {
	w.ObjectMeta.UID = types.UID(uid)
	return w
}

// Allocated adds a device to the claim's allocation, which it creates if the
// claim has none.
func (w *ClaimWrapper) Allocated(request, driver, pool, device string) *ClaimWrapper {
	a := w.allocation()
	a.Devices.Results = append(a.Devices.Results, resourceapi.DeviceRequestAllocationResult{
		Request: request, Driver: driver, Pool: pool, Device: device,
	})
	return w
}

// AllocatedAdminAccess gives the last allocated device admin access.
func (w *ClaimWrapper) AllocatedAdminAccess() *ClaimWrapper {
	w.lastResult().AdminAccess = ptr.To(true)
	return w
}

// ConsumedCapacity sets what the last allocated device's share consumes of
// a capacity.
func (w *ClaimWrapper) ConsumedCapacity(name, quantity string) *ClaimWrapper {
	r := w.lastResult()
	if r.ConsumedCapacity == nil {
		r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{}
	}
	r.ConsumedCapacity[resourceapi.QualifiedName(name)] = resource.MustParse(quantity)
	return w
}

// AllocatedOn sets the allocation's node selector to the node, as
// allocators do for node-local devices.
func (w *ClaimWrapper) AllocatedOn(node string) *ClaimWrapper {
	w.allocation().NodeSelector = &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
		MatchFields: []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{node}}},
	}}}
	return w
}

// AllocationConfig adds an opaque configuration of the driver to the
// allocation, from source, for the requests (all if none).
func (w *ClaimWrapper) AllocationConfig(source resourceapi.AllocationConfigSource, driver, parameters string, requests ...string) *ClaimWrapper {
	a := w.allocation()
	a.Devices.Config = append(a.Devices.Config, resourceapi.DeviceAllocationConfiguration{
		Source:   source,
		Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(parameters)},
		}},
	})
	return w
}

// ReservedFor adds the pods to the claim's consumers.
func (w *ClaimWrapper) ReservedFor(pods ...*v1.Pod) *ClaimWrapper {
	for _, pod := range pods {
		w.Status.ReservedFor = append(w.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{
			Resource: "pods", Name: pod.Name, UID: pod.UID,
		})
	}
	return w
}

func (w *ClaimWrapper) allocation() *resourceapi.AllocationResult {
	if w.Status.Allocation == nil {
		w.Status.Allocation = &resourceapi.AllocationResult{}
	}
	return w.Status.Allocation
}

func (w *ClaimWrapper) lastResult() *resourceapi.DeviceRequestAllocationResult {
	results := w.allocation().Devices.Results
	return &results[len(results)-1]
}

// Namespace moves the pod to another namespace.
func (w *PodWrapper) Namespace(namespace string) *PodWrapper {
	w.ObjectMeta.Namespace = namespace
	return w
}

// UID sets the pod's UID.
func (w *PodWrapper) UID(uid string) *PodWrapper {
	w.ObjectMeta.UID = types.UID(uid)
	return w
}

// Node binds the pod to the node (spec.nodeName).
func (w *PodWrapper) Node(name string) *PodWrapper {
	w.Spec.NodeName = name
	return w
}

// ClaimStatus records the name of the claim that the resource claim
// controller made for the pod claim (status.resourceClaimStatuses), as it
// does for a claim from a template.
func (w *PodWrapper) ClaimStatus(name, claimName string) *PodWrapper {
	w.Status.ResourceClaimStatuses = append(w.Status.ResourceClaimStatuses, v1.PodResourceClaimStatus{Name: name, ResourceClaimName: ptr.To(claimName)})
	return w
}

// Unschedulable adds the PodScheduled condition that the scheduler sets on
// a pod it could not place, with the message.
func (w *PodWrapper) Unschedulable(message string) *PodWrapper {
	w.Status.Conditions = append(w.Status.Conditions, v1.PodCondition{
		Type: v1.PodScheduled, Status: v1.ConditionFalse, Reason: v1.PodReasonUnschedulable, Message: message,
	})
	return w
}
