//go:build kube1.35

package minortest

import (
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/kubernetes/pkg/features"
)

// EnableDRAFeatures turns on the DRA features that are alpha in 1.35 and
// beta, on by default, in 1.36.
func EnableDRAFeatures() {
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{
		string(features.DRADeviceTaints):              true,
		string(features.DRAPartitionableDevices):      true,
		string(features.DRAConsumableCapacity):        true,
		string(features.DRAExtendedResource):          true,
		string(features.DRADeviceBindingConditions):   true,
		string(features.DRAResourceClaimDeviceStatus): true,
	}); err != nil {
		panic(err)
	}
}
