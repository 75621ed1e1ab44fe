//go:build !kube1.35

package minor

import (
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
)

// IsForPod checks that claim belongs to pod, or (acceptGroup, with
// DRAWorkloadResourceClaims) to the pod's PodGroup.
func IsForPod(pod *v1.Pod, claim *resourceapi.ResourceClaim, acceptGroup bool) error {
	return resourceclaim.IsForPod(pod, claim, acceptGroup)
}

// IsReservedForPod reports whether claim's reservedFor names pod, or
// (acceptGroup) the pod's PodGroup.
func IsReservedForPod(pod *v1.Pod, claim *resourceapi.ResourceClaim, acceptGroup bool) bool {
	return resourceclaim.IsReservedForPod(pod, claim, acceptGroup)
}

// PodGroupName is the name of the pod's PodGroup (spec.schedulingGroup), nil
// if it has none.
func PodGroupName(pod *v1.Pod) *string {
	if pod.Spec.SchedulingGroup == nil {
		return nil
	}
	return pod.Spec.SchedulingGroup.PodGroupName
}

// SetPodGroupName makes pod one of the PodGroup's.
func SetPodGroupName(pod *v1.Pod, name string) {
	pod.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: &name}
}

// SliceMaxDevicesAdvanced is the most devices a ResourceSlice may hold when
// one of them uses taints, counters or other advanced features.
const SliceMaxDevicesAdvanced = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures

// PCIBusIDAttribute is the standard PCI bus ID attribute of busID.
func PCIBusIDAttribute(busID string) (resourceapi.QualifiedName, resourceapi.DeviceAttribute, error) {
	attr, err := deviceattribute.GetPCIBusIDAttribute(busID)
	return attr.Name, attr.Value, err
}

// IntListAttribute is an attribute with the list values
// (DRAListTypeAttributes).
func IntListAttribute(values []int64) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{IntValues: values}
}

// IncubatingBindingAndCapacity is true: upstream's incubating allocator
// supports binding conditions and consumable capacity.
const IncubatingBindingAndCapacity = true

// BindingConditionSlicesLast is false: the slices of a pool are tried in
// name order.
const BindingConditionSlicesLast = false
