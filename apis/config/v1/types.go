package v1

import (
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// StructuredDRAArgs holds the arguments of the StructuredDRA plugin.
type StructuredDRAArgs struct {
	metav1.TypeMeta `json:",inline"`

	// FilterTimeout limits how long Filter may search for devices for one
	// pod on one node, as the in-tree DynamicResources plugin's
	// filterTimeout does. When it expires, Filter returns an error: the
	// scheduling attempt fails and the pod is retried after backoff, since
	// the next attempt may be faster (a timeout is not a verdict on the
	// node).
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

	// Allocation configures which devices drasched's own allocator chooses
	// on a node where several sets of devices fit. It has no effect with
	// allocator "upstream", which only has upstream's first fit; a policy
	// other than FirstFit with that allocator is invalid.
	Allocation *AllocationArgs `json:"allocation,omitempty"`

	// Preemption configures claim nomination: what a pod that preempted
	// others for devices holds while they go.
	Preemption *PreemptionArgs `json:"preemption,omitempty"`
}

// PreemptionArgs configures claim nomination. When the
// StructuredDRAPreemption plugin nominates a pod to a node, the devices
// that the evicted pods free there are nominated for it: pods of its
// priority or lower do not take them, and it does not preempt again while
// the evicted pods' claims are being freed. The nomination ends when the
// pod is bound or deleted, when it can no longer be honoured, and at the
// latest after the evicted pods' termination grace period plus
// nominationMargin.
type PreemptionArgs struct {
	// NominationMargin is how long past the evicted pods' termination
	// grace period a nomination lasts: time for the kubelet to stop them
	// and for the claim controller to free their claims. A pod that is
	// still terminating this long after its grace period ended counts as
	// stuck: preemption looks for other victims instead of waiting for it.
	//
	// Must be zero or positive. Default: 30s.
	NominationMargin *metav1.Duration `json:"nominationMargin,omitempty"`
}

// AllocationArgs configures how the builtin allocator chooses among fits.
type AllocationArgs struct {
	// Policy is "FirstFit" or "BestFit".
	//
	// FirstFit takes the first fit in upstream's device order (pools by
	// driver and name, slices by name, devices as listed): exactly the
	// allocation upstream's DynamicResources plugin makes.
	//
	// BestFit takes, among the fits on the node, the one that keeps the
	// most capacity whole, so that later pods asking for many devices, or
	// for devices on one PCIe root or NVLink domain, still find room:
	// shares of devices already shared first (consumable capacity), then
	// partitions (MIG) of GPUs already partitioned, then devices of the
	// topology group (see topologyAttributes) with the fewest free devices
	// that can still hold the request. A request for several devices
	// without matchAttribute gets them from one group where one can hold
	// them. With a device-aware scoring strategy, the node score also
	// counts the whole groups the allocation breaks. BestFit finds a fit on
	// exactly the nodes where FirstFit finds one: only the choice differs.
	//
	// Default: "FirstFit".
	Policy *AllocationPolicy `json:"policy,omitempty"`

	// TopologyAttributes are the fully qualified device attributes whose
	// values group devices for BestFit, most important first. A device
	// without one of them is a group of its own at that level. An empty
	// list turns topology grouping off.
	//
	// Default: ["resource.kubernetes.io/pcieRoot",
	// "gpu.drasched.dev/nvlinkDomain", "resource.kubernetes.io/numaNode"].
	TopologyAttributes []resourceapi.FullyQualifiedName `json:"topologyAttributes,omitempty"`
}

// AllocationPolicy names how the allocator chooses devices on a node:
// "FirstFit" or "BestFit".
type AllocationPolicy string

const (
	// AllocationPolicyFirstFit is upstream's first fit.
	AllocationPolicyFirstFit AllocationPolicy = "FirstFit"
	// AllocationPolicyBestFit keeps capacity whole.
	AllocationPolicyBestFit AllocationPolicy = "BestFit"
)

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
