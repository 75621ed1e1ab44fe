//go:build kube1.36

package controlplane

import "k8s.io/kubernetes/pkg/features"

// Features are the feature gates the scenarios need in the build for 1.36
// (features_kube137.go says how they are used). Gates that are on by
// default are listed as in 1.37's file. DRADeviceTaintRules is beta and
// off by default in 1.36; it is on, with its API version, for the tests of
// DeviceTaintRules. The workload gates are alpha in 1.36 and stay off: the
// tests of gang scheduling are 1.37's (gang_test.go), and upstream's 1.36
// DRA integration suite (make conformance KUBE_MINOR=1.36) runs its pod
// group tests with them on.
var Features = map[string]bool{
	string(features.DRAAdminAccess):          true, // GA, locked
	string(features.DRAPrioritizedList):      true, // GA, locked
	string(features.DRADeviceTaints):         true, // beta
	string(features.DRADeviceTaintRules):     true, // beta, off by default
	string(features.DRAPartitionableDevices): true, // beta
	string(features.DRAConsumableCapacity):   true, // beta
}

// RuntimeConfig enables the API versions the gates above need:
// DeviceTaintRules are resource.k8s.io/v1beta2 in 1.36.
var RuntimeConfig = "resource.k8s.io/v1beta2=true"
