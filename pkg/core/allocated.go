package core

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
	eachTaken(allocation, consumableCapacity,
		func(id structured.DeviceID) { state.AllocatedDevices.Insert(id) },
		func(id structured.SharedDeviceID) { state.AllocatedSharedDeviceIDs.Insert(id) },
		state.AggregatedCapacity.Insert)
}

// RemoveAllocation takes out of state what AddAllocation added for the same
// allocation: preemption's dry runs put victims back one at a time.
// Devices are taken by one claim each, so removing one claim's devices
// cannot free another's.
func RemoveAllocation(state *structured.AllocatedState, allocation *resourceapi.AllocationResult, consumableCapacity bool) {
	eachTaken(allocation, consumableCapacity,
		func(id structured.DeviceID) { state.AllocatedDevices.Delete(id) },
		func(id structured.SharedDeviceID) { state.AllocatedSharedDeviceIDs.Delete(id) },
		state.AggregatedCapacity.Remove)
}

// eachTaken calls device, share and capacity for what the allocation
// takes, by AddAllocation's rule.
func eachTaken(allocation *resourceapi.AllocationResult, consumableCapacity bool,
	device func(structured.DeviceID), share func(structured.SharedDeviceID), capacity func(structured.DeviceConsumedCapacity)) {
	if allocation == nil {
		return
	}
	for _, result := range allocation.Devices.Results {
		if ptr.Deref(result.AdminAccess, false) {
			continue
		}
		id := structured.MakeDeviceID(result.Driver, result.Pool, result.Device)
		if consumableCapacity && result.ShareID != nil {
			share(structured.MakeSharedDeviceID(id, result.ShareID))
			if result.ConsumedCapacity != nil {
				capacity(structured.NewDeviceConsumedCapacity(id, result.ConsumedCapacity))
			}
			continue
		}
		device(id)
	}
}

// AddState adds what one allocated state takes to another.
func AddState(to *structured.AllocatedState, from structured.AllocatedState) {
	to.AllocatedDevices.Insert(from.AllocatedDevices.UnsortedList()...)
	to.AllocatedSharedDeviceIDs.Insert(from.AllocatedSharedDeviceIDs.UnsortedList()...)
	for id, c := range from.AggregatedCapacity {
		to.AggregatedCapacity.Insert(structured.DeviceConsumedCapacity{DeviceID: id, ConsumedCapacity: c})
	}
}
