package controlplane

import "k8s.io/kubernetes/pkg/features"

// Features are the feature gates the scenarios need, set process-wide by
// StartControlPlane, so the apiserver, the scheduler and the claim
// controller agree. All of them are on by default in Kubernetes 1.37; they
// are listed so that a default changing in a bump shows up here instead of
// as a puzzling scheduling failure.
var Features = map[string]bool{
	string(features.DRAAdminAccess):          true, // GA, locked
	string(features.DRAPrioritizedList):      true, // GA, locked
	string(features.DRADeviceTaints):         true, // GA
	string(features.DRADeviceTaintRules):     true, // GA
	string(features.DRAPartitionableDevices): true, // beta
	string(features.DRAConsumableCapacity):   true, // beta
}
