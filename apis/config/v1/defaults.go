package v1

import (
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	kubeschedulerv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/utils/ptr"
)

const (
	// DefaultFilterTimeout is the default of StructuredDRAArgs.FilterTimeout,
	// the same as the in-tree DynamicResources plugin's.
	DefaultFilterTimeout = kubeschedulerv1.DynamicResourcesFilterTimeoutDefault
	// DefaultBindingTimeout is the default of
	// StructuredDRAArgs.BindingTimeout, the same as the in-tree
	// DynamicResources plugin's.
	DefaultBindingTimeout = kubeschedulerv1.DynamicResourcesBindingTimeoutDefault
	// DefaultAllocator is the default of StructuredDRAArgs.Allocator.
	DefaultAllocator = AllocatorBuiltin
	// DefaultDeviceScoringStrategy is the default of
	// StructuredDRAArgs.Scoring.DeviceStrategy.
	DefaultDeviceScoringStrategy = DeviceScoringMostAllocated
	// DefaultAllocationPolicy is the default of
	// StructuredDRAArgs.Allocation.Policy: upstream's answers.
	DefaultAllocationPolicy = AllocationPolicyFirstFit
	// DefaultNominationMargin is the default of
	// StructuredDRAArgs.Preemption.NominationMargin: a kubelet stops a pod
	// within seconds of its grace period, and the claim controller frees
	// its claims within seconds of that.
	DefaultNominationMargin = 30 * time.Second
)

// DefaultTopologyAttributes is the default of
// StructuredDRAArgs.Allocation.TopologyAttributes: the standard PCIe root
// attribute, drasched's GPU driver's NVLink domain and the standard NUMA
// node attribute.
func DefaultTopologyAttributes() []resourceapi.FullyQualifiedName {
	return []resourceapi.FullyQualifiedName{
		resourceapi.FullyQualifiedName(deviceattribute.StandardDeviceAttributePCIeRoot),
		"gpu.drasched.dev/nvlinkDomain",
		// 1.37's deviceattribute.StandardDeviceAttributeNUMANode; spelled
		// out because 1.36's does not name it (docs/compatibility.md).
		deviceattribute.StandardDeviceAttributePrefix + "numaNode",
	}
}

// SetDefaults_StructuredDRAArgs fills in the fields that are not set.
//
// Unlike the in-tree DynamicResources plugin, the defaults do not depend on
// feature gates: the internal type has no pointers, so "not set" must become
// a value here, and the plugin decides at run time whether a setting applies.
func SetDefaults_StructuredDRAArgs(obj *StructuredDRAArgs) {
	if obj.FilterTimeout == nil {
		obj.FilterTimeout = &metav1.Duration{Duration: DefaultFilterTimeout}
	}
	if obj.BindingTimeout == nil {
		obj.BindingTimeout = &metav1.Duration{Duration: DefaultBindingTimeout}
	}
	if obj.Allocator == nil {
		obj.Allocator = ptr.To(DefaultAllocator)
	}
	if obj.Scoring == nil {
		obj.Scoring = &ScoringArgs{}
	}
	if obj.Scoring.DeviceStrategy == nil {
		obj.Scoring.DeviceStrategy = ptr.To(DefaultDeviceScoringStrategy)
	}
	if obj.Allocation == nil {
		obj.Allocation = &AllocationArgs{}
	}
	if obj.Allocation.Policy == nil {
		obj.Allocation.Policy = ptr.To(DefaultAllocationPolicy)
	}
	// Only a missing list is defaulted: an empty one turns grouping off.
	if obj.Allocation.TopologyAttributes == nil {
		obj.Allocation.TopologyAttributes = DefaultTopologyAttributes()
	}
	if obj.Preemption == nil {
		obj.Preemption = &PreemptionArgs{}
	}
	if obj.Preemption.NominationMargin == nil {
		obj.Preemption.NominationMargin = &metav1.Duration{Duration: DefaultNominationMargin}
	}
}
