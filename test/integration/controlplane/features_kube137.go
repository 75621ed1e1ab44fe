//go:build !kube1.35 && !kube1.36

package controlplane

import "k8s.io/kubernetes/pkg/features"

// Features are the feature gates the scenarios need, set process-wide by
// StartControlPlane, so the apiserver, the scheduler and the claim
// controller agree. A test package that needs more (an alpha API) adds
// them in its TestMain, before the control plane starts. The DRA gates are on by default in Kubernetes 1.37;
// they are listed so that a default changing in a bump shows up here
// instead of as a puzzling scheduling failure. The workload gates (beta,
// off by default) are on for the gang scheduling tests: every other test
// then runs as it would in a cluster that uses gang scheduling, and
// upstream's suite (make conformance) covers drasched with them off.
var Features = map[string]bool{
	string(features.GenericWorkload):           true, // beta, off by default
	string(features.DRAWorkloadResourceClaims): true, // beta, off by default
	string(features.DRAAdminAccess):            true, // GA, locked
	string(features.DRAPrioritizedList):        true, // GA, locked
	string(features.DRADeviceTaints):           true, // GA
	string(features.DRADeviceTaintRules):       true, // GA
	string(features.DRAPartitionableDevices):   true, // beta
	string(features.DRAConsumableCapacity):     true, // beta
}

// RuntimeConfig enables the API versions the gates above need: PodGroups
// are scheduling.k8s.io/v1beta1, which beta APIs keep off by default. Like
// Features, a test package's TestMain may add to it (comma-separated).
var RuntimeConfig = "scheduling.k8s.io/v1beta1=true"
