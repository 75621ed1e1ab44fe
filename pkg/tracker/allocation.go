package tracker

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
)

// NewAllocatedState returns an empty state with all its collections made.
func NewAllocatedState() structured.AllocatedState {
	return structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
}

// AddAllocation adds what an allocation takes to state, by the rule
// kube-scheduler's allocated-device tracking (and so AllocatedState) uses:
// devices with admin access take nothing; with consumable capacity, a
// result with a share ID takes that share and the capacity it consumed;
// any other result takes its device exclusively. Preemption uses it to
// count what evicting a pod would free, the same way the devices were
// counted as taken.
func AddAllocation(state *structured.AllocatedState, allocation *resourceapi.AllocationResult, consumableCapacity bool) {
	if allocation == nil {
		return
	}
	for _, result := range allocation.Devices.Results {
		if ptr.Deref(result.AdminAccess, false) {
			continue
		}
		id := structured.MakeDeviceID(result.Driver, result.Pool, result.Device)
		if consumableCapacity && result.ShareID != nil {
			state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, result.ShareID))
			if result.ConsumedCapacity != nil {
				state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, result.ConsumedCapacity))
			}
			continue
		}
		state.AllocatedDevices.Insert(id)
	}
}
