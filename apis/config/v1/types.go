package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// StructuredDRAArgs holds the arguments of the StructuredDRA plugin.
type StructuredDRAArgs struct {
	metav1.TypeMeta `json:",inline"`

	// FilterTimeout limits how long Filter may search for devices for one
	// pod on one node, as the in-tree DynamicResources plugin's
	// filterTimeout does. When it expires, the node is unschedulable for the
	// pod: other nodes that fit are used instead; if none fits, the pod waits
	// in the unschedulable queue until ResourceSlices or ResourceClaims
	// change, with exponential backoff on repeated failures.
	//
	// Zero disables the timeout. Negative values are invalid.
	// Default: 10s (DynamicResourcesArgs' default).
	FilterTimeout *metav1.Duration `json:"filterTimeout,omitempty"`

	// BindingTimeout limits how long PreBind waits for the binding
	// conditions of allocated devices (DRADeviceBindingConditions) to become
	// true, as the in-tree DynamicResources plugin's bindingTimeout does.
	// When it expires, or a binding failure condition becomes true, the
	// allocation is cleared and the pod is scheduled again. It has an effect
	// only while the DRADeviceBindingConditions and
	// DRAResourceClaimDeviceStatus feature gates are enabled (both are on by
	// default in Kubernetes 1.37).
	//
	// Must be at least 1s. Default: 10m (DynamicResourcesArgs' default).
	BindingTimeout *metav1.Duration `json:"bindingTimeout,omitempty"`

	// Allocator selects the structured allocator that finds devices for
	// claims: "builtin" (drasched's own, which returns the same allocations
	// as upstream's, found faster) or "upstream" (the allocator of
	// k8s.io/dynamic-resource-allocation/structured that the in-tree
	// DynamicResources plugin uses), for comparing the two in one cluster.
	//
	// Default: "builtin".
	Allocator *AllocatorName `json:"allocator,omitempty"`

	// Scoring configures how the plugin's Score extension point ranks the
	// nodes that passed Filter.
	Scoring *ScoringArgs `json:"scoring,omitempty"`
}

// AllocatorName names a structured allocator implementation: "builtin" or
// "upstream".
type AllocatorName string

const (
	// AllocatorBuiltin is drasched's own allocator.
	AllocatorBuiltin AllocatorName = "builtin"
	// AllocatorUpstream is the allocator of
	// k8s.io/dynamic-resource-allocation/structured.
	AllocatorUpstream AllocatorName = "upstream"
)

// ScoringArgs configures the plugin's Score extension point.
type ScoringArgs struct {
	// DeviceStrategy selects the device-aware part of the node score:
	// "MostAllocated" prefers nodes whose devices are already in use
	// (packing GPUs, which keeps whole nodes free for large pods),
	// "LeastAllocated" prefers nodes whose devices are least in use
	// (spreading GPU pods), and "None" ranks nodes only as the in-tree
	// DynamicResources plugin does, by the prioritized-list subrequests
	// (firstAvailable) their allocation uses.
	//
	// Default: "MostAllocated".
	DeviceStrategy *DeviceScoringStrategy `json:"deviceStrategy,omitempty"`
}

// DeviceScoringStrategy names a way to rank nodes by their devices:
// "MostAllocated", "LeastAllocated" or "None".
type DeviceScoringStrategy string

const (
	// DeviceScoringMostAllocated prefers nodes whose devices are in use.
	DeviceScoringMostAllocated DeviceScoringStrategy = "MostAllocated"
	// DeviceScoringLeastAllocated prefers nodes whose devices are free.
	DeviceScoringLeastAllocated DeviceScoringStrategy = "LeastAllocated"
	// DeviceScoringNone adds no device-aware score.
	DeviceScoringNone DeviceScoringStrategy = "None"
)
