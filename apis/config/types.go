package config

import (
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// StructuredDRAArgs holds the arguments of the StructuredDRA plugin, with
// defaults applied. See the v1 type of the same name for what each field
// means to users.
type StructuredDRAArgs struct {
	metav1.TypeMeta

	// FilterTimeout limits how long Filter may search for devices for one
	// pod on one node. Zero disables the timeout.
	FilterTimeout metav1.Duration

	// BindingTimeout limits how long PreBind waits for the binding
	// conditions of allocated devices. At least one second.
	BindingTimeout metav1.Duration

	// Allocator selects the structured allocator.
	Allocator AllocatorName

	// Scoring configures how Score ranks nodes.
	Scoring ScoringArgs

	// Allocation configures which devices the builtin allocator chooses on
	// a node where several sets fit.
	Allocation AllocationArgs

	// Preemption configures claim nomination.
	Preemption PreemptionArgs
}

// PreemptionArgs configures how long a preemptor holds what its
// preemption freed.
type PreemptionArgs struct {
	// NominationMargin is how long past its victims' termination grace
	// period a claim nomination lasts, and after which a pod that stays
	// terminating counts as stuck. At least zero.
	NominationMargin metav1.Duration
}

// AllocationArgs configures the builtin allocator's choice among fits.
type AllocationArgs struct {
	// Policy selects how the allocator chooses among the fits of a node.
	Policy AllocationPolicy

	// TopologyAttributes are the device attributes whose values group
	// devices for BestFit, most important first. Empty: no grouping.
	TopologyAttributes []resourceapi.FullyQualifiedName
}

// AllocationPolicy names how the allocator chooses devices on a node.
type AllocationPolicy string

const (
	// AllocationPolicyFirstFit takes the first fit in upstream's device
	// order: exactly upstream's allocation.
	AllocationPolicyFirstFit AllocationPolicy = "FirstFit"
	// AllocationPolicyBestFit takes, among the fits, the one that keeps the
	// most capacity whole: partly used topology groups, partitioned GPUs and
	// already shared devices first. It finds a fit on exactly the nodes
	// where FirstFit finds one.
	AllocationPolicyBestFit AllocationPolicy = "BestFit"
)

// AllocatorName names a structured allocator implementation.
type AllocatorName string

const (
	// AllocatorBuiltin is drasched's own allocator (pkg/allocator).
	AllocatorBuiltin AllocatorName = "builtin"
	// AllocatorUpstream is the allocator of
	// k8s.io/dynamic-resource-allocation/structured, as the in-tree
	// DynamicResources plugin uses it.
	AllocatorUpstream AllocatorName = "upstream"
)

// ScoringArgs configures the plugin's Score extension point.
type ScoringArgs struct {
	// DeviceStrategy selects the device-aware part of the node score.
	DeviceStrategy DeviceScoringStrategy
}

// DeviceScoringStrategy names a way to rank nodes by their devices.
type DeviceScoringStrategy string

const (
	// DeviceScoringMostAllocated prefers nodes whose devices are already in
	// use, packing GPUs onto few nodes and keeping whole nodes free.
	DeviceScoringMostAllocated DeviceScoringStrategy = "MostAllocated"
	// DeviceScoringLeastAllocated prefers nodes whose devices are least in
	// use, spreading GPU pods across nodes.
	DeviceScoringLeastAllocated DeviceScoringStrategy = "LeastAllocated"
	// DeviceScoringNone adds no device-aware score: nodes are ranked only as
	// the in-tree DynamicResources plugin ranks them, by the prioritized-list
	// subrequests (firstAvailable) that their allocation uses.
	DeviceScoringNone DeviceScoringStrategy = "None"
)
