package core

import (
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/kubernetes/pkg/features"
)

// Features are the allocator features that kube-scheduler derives from
// gate (upstream's dynamicresources.AllocatorFeatures of the scheduler's
// feature set). Binding conditions need the device status gate too, as in
// kube-scheduler: without device status the scheduler could not see a
// driver report that a binding condition is met.
func Features(gate featuregate.FeatureGate) structured.Features {
	return structured.Features{
		AdminAccess:             gate.Enabled(features.DRAAdminAccess),
		PrioritizedList:         gate.Enabled(features.DRAPrioritizedList),
		PartitionableDevices:    gate.Enabled(features.DRAPartitionableDevices),
		DeviceTaints:            gate.Enabled(features.DRADeviceTaints),
		DeviceBindingAndStatus:  gate.Enabled(features.DRADeviceBindingConditions) && gate.Enabled(features.DRAResourceClaimDeviceStatus),
		ConsumableCapacity:      gate.Enabled(features.DRAConsumableCapacity),
		FractionalCapacityRange: gate.Enabled(features.DRAFractionalCapacityRange),
		ListTypeAttributes:      gate.Enabled(features.DRAListTypeAttributes),
		OptionalNodeOperations:  gate.Enabled(features.DRAOptionalNodeOperations),
		DerivedAttributes:       gate.Enabled(features.DRADerivedAttributes),
		CompatibilityGroups:     gate.Enabled(features.DRADeviceCompatibilityGroups),
	}
}

// DefaultFeatures are the allocator features of this binary's feature
// gates (the process-wide gate that --feature-gates sets): with no flag,
// kube-scheduler's defaults of the Kubernetes minor drasched is built on.
func DefaultFeatures() structured.Features {
	return Features(utilfeature.DefaultFeatureGate)
}
