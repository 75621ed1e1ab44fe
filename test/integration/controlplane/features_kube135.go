//go:build kube1.35

package controlplane

import "k8s.io/kubernetes/pkg/features"

// Features are the feature gates the scenarios need in the build for 1.35
// (features_kube137.go says how they are used). In 1.35 the DRA features
// beyond the core are alpha and off by default (partitionable devices,
// device taints and DeviceTaintRules, consumable capacity, binding
// conditions, extended resources); they are on here, as the tests of them
// need, with DeviceTaintRules' API version; but extended resources only in
// test/integration/extendedresources, as with them on 1.35's kube-scheduler
// batches no pod. AdminAccess and PrioritizedList are beta and on.
var Features = map[string]bool{
	string(features.DRAAdminAccess):          true, // beta
	string(features.DRAPrioritizedList):      true, // beta
	string(features.DRADeviceTaints):         true, // alpha, off by default
	string(features.DRADeviceTaintRules):     true, // alpha, off by default
	string(features.DRAPartitionableDevices): true, // alpha, off by default
	string(features.DRAConsumableCapacity):   true, // alpha, off by default
}

// RuntimeConfig enables the API versions the gates above need:
// DeviceTaintRules are resource.k8s.io/v1alpha3 in 1.35.
var RuntimeConfig = "resource.k8s.io/v1alpha3=true"
