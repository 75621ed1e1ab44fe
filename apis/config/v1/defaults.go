package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
)

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
}
