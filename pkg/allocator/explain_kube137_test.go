//go:build !kube1.35 && !kube1.36

package allocator_test

import (
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/component-helpers/nodedeclaredfeatures/features/draoptionalnodeoperations"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/pkg/allocator"
)

// newerExplainCases are the cases of TestExplain for the features that only
// Kubernetes 1.37 has: optional node operations and compatibility groups.
func newerExplainCases(allFeatures structured.Features, allocated func(names ...string) structured.AllocatedState) map[string]explainCase {
	// The experimental tier: it honours SkipNodeOperations and knows
	// compatibility groups.
	experimental := allFeatures
	experimental.OptionalNodeOperations, experimental.CompatibilityGroups, experimental.ListTypeAttributes = true, true, true
	withoutNodeOperations := experimental
	withoutNodeOperations.OptionalNodeOperations = false
	// Two devices from a slice that skips node operations, one from a slice
	// that does not.
	skipping := []*resourceapi.ResourceSlice{
		skipNodeOperations(builder.MakeSlice("skipping").Node("node-0").Devices(builder.MakeDevice("gpu-0"), builder.MakeDevice("gpu-1")).Obj()),
		builder.MakeSlice("plain").Node("node-0").Devices(builder.MakeDevice("gpu-2")).Obj(),
	}
	// Four partitions of one GPU: two may share it with MIG, two with MPS,
	// and a MIG partition is allocated already.
	partitions := []*resourceapi.ResourceSlice{
		builder.MakeSlice("counters").Node("node-0").Pool("node-0", 1, 2).Counters(builder.CounterSet("gpu-0", map[string]string{"memory": "80Gi"})).Obj(),
		builder.MakeSlice("parts").Node("node-0").Pool("node-0", 1, 2).Devices(
			inGroups(builder.MakeDevice("mig-0").Consumes("gpu-0", map[string]string{"memory": "20Gi"}), "mig"),
			inGroups(builder.MakeDevice("mps-0").Consumes("gpu-0", map[string]string{"memory": "20Gi"}), "mps"),
			inGroups(builder.MakeDevice("mig-1").Consumes("gpu-0", map[string]string{"memory": "20Gi"}), "mig"),
			inGroups(builder.MakeDevice("mps-1").Consumes("gpu-0", map[string]string{"memory": "20Gi"}), "mps")).Obj(),
	}
	return map[string]explainCase{
		"node without optional node operations": {
			features: &experimental,
			slices:   skipping,
			claims:   []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", 2).Obj()},
			want:     []allocator.Failure{{Claim: "default/c", Request: "gpu", DeviceClass: "gpu", Reason: allocator.ReasonNodeOperationsUnsupported, Need: 2, Matching: 3, Free: 1, NodeOperations: 2}},
			message:  `request "gpu": 1 of 3 matching devices free, need 2 (2 need optional node operations)`,
		},
		"optional node operations disabled": {
			features: &withoutNodeOperations,
			node:     declaringOptionalNodeOperations(builder.MakeNode("node-0")),
			slices:   skipping,
			claims:   []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", 2).Obj()},
			want:     []allocator.Failure{{Claim: "default/c", Request: "gpu", DeviceClass: "gpu", Reason: allocator.ReasonNodeOperationsUnsupported, Need: 2, Matching: 3, Free: 1, NodeOperations: 2}},
			message:  `request "gpu": 1 of 3 matching devices free, need 2 (2 need optional node operations)`,
		},
		"node with optional node operations": {
			features: &experimental,
			node:     declaringOptionalNodeOperations(builder.MakeNode("node-0")),
			slices:   skipping,
			claims:   []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", 3).Obj()},
		},
		"compatibility groups": {
			features: &experimental,
			slices:   partitions,
			state:    allocated("mig-0"),
			claims:   []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", 2).Obj()},
			want:     []allocator.Failure{{Claim: "default/c", Request: "gpu", DeviceClass: "gpu", Reason: allocator.ReasonDevicesIncompatible, Need: 2, Matching: 4, Free: 1, InUse: 1, Incompatible: 2}},
			message:  `request "gpu": 1 of 4 matching devices free, need 2 (1 in use, 2 incompatible with allocated devices)`,
		},
		"compatibility groups allow": {
			features: &experimental,
			slices:   partitions,
			state:    allocated("mig-0"),
			claims:   []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", 1).Obj()},
		},
	}
}

// skipNodeOperations marks a slice as one whose devices skip all node
// operations.
func skipNodeOperations(slice *resourceapi.ResourceSlice) *resourceapi.ResourceSlice {
	slice.Spec.SkipNodeOperations = []resourceapi.SkipNodeOperation{resourceapi.SkipNodeOperationAll}
	return slice
}

// declaringOptionalNodeOperations makes the node declare support for
// devices that skip node operations.
func declaringOptionalNodeOperations(node *v1.Node) *v1.Node {
	node.Status.DeclaredFeatures = append(node.Status.DeclaredFeatures, draoptionalnodeoperations.DRAOptionalNodeOperationsFeatureGate)
	return node
}

// inGroups sets the compatibility groups of the device's last counter
// consumption.
func inGroups(d *builder.DeviceWrapper, groups ...string) *builder.DeviceWrapper {
	d.ConsumesCounters[len(d.ConsumesCounters)-1].CompatibilityGroups = groups
	return d
}
