//go:build !kube1.35 && !kube1.36

package dra

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

// Optional node operations are 1.37's.
func TestRequiresOptionalNodeOperations(t *testing.T) {
	allocation := &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu"}}}}
	if requiresOptionalNodeOperations(allocation) {
		t.Error("plain allocation needs optional node operations")
	}
	allocation.Devices.Results[0].SkipNodeOperations = []resourceapi.SkipNodeOperation{resourceapi.SkipNodeOperationNodePrepareResources}
	if !requiresOptionalNodeOperations(allocation) {
		t.Error("allocation that skips node operations does not need them")
	}
}
