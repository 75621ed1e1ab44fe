package core

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
)

// RemoveAllocation undoes AddAllocation for one allocation and leaves the
// others' devices, shares and capacity as they were; admin access took
// nothing and gives nothing back.
func TestRemoveAllocation(t *testing.T) {
	result := func(device string, share types.UID, memory string) resourceapi.DeviceRequestAllocationResult {
		r := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: "gpu.example.com", Pool: "node-a", Device: device}
		if share != "" {
			r.ShareID = ptr.To(share)
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}
		}
		return r
	}
	allocation := func(results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.AllocationResult {
		return &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	}
	admin := result("gpu-1", "", "")
	admin.AdminAccess = ptr.To(true)
	kept := allocation(result("gpu-0", "", ""), result("shared", "a", "10Gi"))
	removed := allocation(result("gpu-2", "", ""), result("shared", "b", "30Gi"), admin)

	want := NewAllocatedState()
	AddAllocation(&want, kept, true)
	got := NewAllocatedState()
	AddAllocation(&got, kept, true)
	AddAllocation(&got, removed, true)
	if got.AllocatedDevices.Has(structured.MakeDeviceID("gpu.example.com", "node-a", "gpu-1")) {
		t.Error("a device with admin access counted as taken")
	}
	RemoveAllocation(&got, removed, true)
	RemoveAllocation(&got, nil, true)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("after removing an allocation (-only the other +got):\n%s", diff)
	}
	RemoveAllocation(&got, kept, true)
	if diff := cmp.Diff(NewAllocatedState(), got); diff != "" {
		t.Errorf("after removing both (-empty +got):\n%s", diff)
	}
}
