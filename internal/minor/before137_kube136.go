//go:build kube1.35 || kube1.36

package minor

// What the builds for Kubernetes 1.35 and 1.36 share: the differences of
// both from 1.37. Each minor's own file (kube135.go, kube136.go) holds the
// rest.

import (
	"context"
	"errors"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/component-base/featuregate"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/kubernetes/pkg/features"
)

// OptionalNodeOperationsFeature: before 1.37 there are no optional node
// operations, so no node declares it.
const OptionalNodeOperationsFeature = ""

// DerivedAttribute: before 1.37, requests have no derived attributes; the
// type has the fields the allocator reads so that its code is the same.
type DerivedAttribute struct {
	Name       resourceapi.FullyQualifiedName
	Expression string
}

// SkipNodeOperation: before 1.37, slices skip no node operations.
type SkipNodeOperation string

// AllocatorFeatures are the allocator features that kube-scheduler 1.35 and
// 1.36 derives from gate: its AllocatorFeatures leaves out
// ListTypeAttributes even where DRAListTypeAttributes is on.
func AllocatorFeatures(gate featuregate.FeatureGate) structured.Features {
	return structured.Features{
		AdminAccess:            gate.Enabled(features.DRAAdminAccess),
		PrioritizedList:        gate.Enabled(features.DRAPrioritizedList),
		PartitionableDevices:   gate.Enabled(features.DRAPartitionableDevices),
		DeviceTaints:           gate.Enabled(features.DRADeviceTaints),
		DeviceBindingAndStatus: gate.Enabled(features.DRADeviceBindingConditions) && gate.Enabled(features.DRAResourceClaimDeviceStatus),
		ConsumableCapacity:     gate.Enabled(features.DRAConsumableCapacity),
	}
}

// SubRequestDerivedAttributes: none before 1.37.
func SubRequestDerivedAttributes(*resourceapi.DeviceSubRequest) []DerivedAttribute { return nil }

// ExactDerivedAttributes: none before 1.37.
func ExactDerivedAttributes(*resourceapi.ExactDeviceRequest) []DerivedAttribute { return nil }

// SkipNodeOperations: none before 1.37.
func SkipNodeOperations(*resourceapi.ResourceSliceSpec) []SkipNodeOperation { return nil }

// ResultSkipNodeOperations: none before 1.37.
func ResultSkipNodeOperations(*resourceapi.DeviceRequestAllocationResult) []SkipNodeOperation {
	return nil
}

// SetResultSkipNodeOperations: before 1.37, results have no such field, and
// its slices skip nothing, so ops is always empty.
func SetResultSkipNodeOperations(*resourceapi.DeviceRequestAllocationResult, []SkipNodeOperation) {}

// CompatibilityGroups: none before 1.37.
func CompatibilityGroups(*resourceapi.DeviceCounterConsumption) []string { return nil }

// CELOptions: before 1.37, nothing compiles no derived attributes.
func CELOptions(bool) cel.Options {
	return cel.Options{DisableCostEstimation: true}
}

// EnhanceRuntimeError: the allocators of 1.35 and 1.36 report CEL runtime
// errors as the

// CEL library words them.
func EnhanceRuntimeError(err error) error { return err }

// EvaluateDerivedAttribute: unreachable before 1.37, whose requests have no
// derived attributes.
func EvaluateDerivedAttribute(context.Context, cel.CompilationResult, cel.Device) (*resourceapi.DeviceAttribute, error) {
	return nil, errors.New("derived attributes need Kubernetes 1.37")
}

// ClaimCreatesMetric: kube-scheduler before 1.37 names its count of the
// claims it creates for extended resources in its own subsystem.
const ClaimCreatesMetric = "scheduler_resourceclaim_creates_total"

// ClaimCreateLabels: before 1.37, resourceclaim_creates_total has only the
// status label.
func ClaimCreateLabels(status string) []string { return []string{status} }

// ClaimLimitPerRequest: the allocator of 1.35 and 1.36 checks the limit of
// devices per claim once, after all of the claim's requests.
const ClaimLimitPerRequest = false

// CapacityErrorSkipsDevice: the allocator of 1.35 and 1.36 skips a device
// whose capacity cannot be checked against a request, and leaves devices
// without the capacity left out of a request for all devices.
const CapacityErrorSkipsDevice = true

// ClaimConfigOncePerRequest: the allocator of 1.35 and 1.36 lists a claim
// config that names several allocated requests once per request.
const ClaimConfigOncePerRequest = true

// ConfigForAllHasNoRequests: the allocator of 1.35 and 1.36 keeps the
// request list of a config that applies to every request.
const ConfigForAllHasNoRequests = false

// CounterSlicesOnEveryNode: the allocator of 1.35 and 1.36 considers slices
// with shared counters on every node, whatever their node selection.
const CounterSlicesOnEveryNode = true

// SelectorRuntimeError: the allocator of 1.35 and 1.36 does not name the
// device.
func SelectorRuntimeError(owner string, i int, _ string, err error) error {
	return fmt.Errorf("%s: selector #%d: CEL runtime error: %w", owner, i, err)
}
