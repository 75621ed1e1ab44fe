//go:build kube1.36

package minor

import (
	"context"
	"errors"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	resourcev1alpha3 "k8s.io/api/resource/v1alpha3"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/featuregate"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/resourceslice/tracker"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/kubernetes/pkg/features"
)

// Minor is the Kubernetes minor this build is for.
const Minor = "1.36"

// OptionalNodeOperationsFeature: 1.36 has no optional node operations, so
// no node declares it.
const OptionalNodeOperationsFeature = ""

// DerivedAttribute: 1.36's requests have no derived attributes; the type
// has the fields the allocator reads so that its code is the same.
type DerivedAttribute struct {
	Name       resourceapi.FullyQualifiedName
	Expression string
}

// SkipNodeOperation: 1.36's slices skip no node operations.
type SkipNodeOperation string

// NewerFeaturesOf: 1.36's structured.Features has none of them.
func NewerFeaturesOf(structured.Features) NewerFeatures { return NewerFeatures{} }

// With returns f: 1.36's structured.Features cannot hold n's features,
// which no 1.36 gate enables.
func (n NewerFeatures) With(f structured.Features) structured.Features { return f }

// AllocatorFeatures are the allocator features that kube-scheduler 1.36
// derives from gate: its AllocatorFeatures leaves out ListTypeAttributes
// even where DRAListTypeAttributes is on.
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

// SubRequestDerivedAttributes: none in 1.36.
func SubRequestDerivedAttributes(*resourceapi.DeviceSubRequest) []DerivedAttribute { return nil }

// ExactDerivedAttributes: none in 1.36.
func ExactDerivedAttributes(*resourceapi.ExactDeviceRequest) []DerivedAttribute { return nil }

// SkipNodeOperations: none in 1.36.
func SkipNodeOperations(*resourceapi.ResourceSliceSpec) []SkipNodeOperation { return nil }

// ResultSkipNodeOperations: none in 1.36.
func ResultSkipNodeOperations(*resourceapi.DeviceRequestAllocationResult) []SkipNodeOperation {
	return nil
}

// SetResultSkipNodeOperations: 1.36's results have no such field, and its
// slices skip nothing, so ops is always empty.
func SetResultSkipNodeOperations(*resourceapi.DeviceRequestAllocationResult, []SkipNodeOperation) {}

// CompatibilityGroups: none in 1.36.
func CompatibilityGroups(*resourceapi.DeviceCounterConsumption) []string { return nil }

// CELOptions: 1.36 compiles no derived attributes.
func CELOptions(bool) cel.Options {
	return cel.Options{DisableCostEstimation: true}
}

// EnhanceRuntimeError: 1.36's allocator reports CEL runtime errors as the
// CEL library words them.
func EnhanceRuntimeError(err error) error { return err }

// EvaluateDerivedAttribute: unreachable in 1.36, whose requests have no
// derived attributes.
func EvaluateDerivedAttribute(context.Context, cel.CompilationResult, cel.Device) (*resourceapi.DeviceAttribute, error) {
	return nil, errors.New("derived attributes need Kubernetes 1.37")
}

// ClaimCreateLabels: 1.36's resourceclaim_creates_total has only the
// status label.
func ClaimCreateLabels(status string) []string { return []string{status} }

// PoolStatusSummaries: 1.36's pool status has neither partition nor
// shareable summaries (KEP-5677's summaries are 1.37), and its controller
// reports none of their validation errors.
const PoolStatusSummaries = false

// PartitionTypeStatus: only the fields drasched reads; never in a 1.36
// status.
type PartitionTypeStatus struct {
	Attribute, Type    string
	Total, Allocatable *int32
}

// ShareableSummaryStatus: only the fields drasched writes; never in a 1.36
// status.
type ShareableSummaryStatus struct {
	FullyAvailableDevices, PartiallyAvailableDevices *int32
	Capacity                                         []ShareableCapacityStatus
}

// ShareableCapacityStatus: see ShareableSummaryStatus.
type ShareableCapacityStatus struct {
	Name                       string
	Total, Consumed, Available *resource.Quantity
}

// PartitionSummary: none in 1.36.
func PartitionSummary(*resourcev1alpha3.PoolStatus) []PartitionTypeStatus { return nil }

// SetPoolSummaries: not called in 1.36 (PoolStatusSummaries is false).
func SetPoolSummaries(*resourcev1alpha3.PoolStatus, []PartitionTypeStatus, *ShareableSummaryStatus) {}

// PartitionTypeAttribute: 1.36's slices declare none.
func PartitionTypeAttribute(*resourceapi.ResourceSliceSpec) *resourceapi.FullyQualifiedName {
	return nil
}

// SetDefaultPartitionTypeAttribute: 1.36's ResourcePoolStatusRequest has no
// such field; the request would be answered without partitions.
func SetDefaultPartitionTypeAttribute(*resourcev1alpha3.ResourcePoolStatusRequestSpec, string) error {
	return errors.New("a ResourcePoolStatusRequest groups partitions by attribute only in Kubernetes 1.37 and later; this kubectl-drasched is built for " + Minor)
}

// ListDeviceTaintRules: 1.36 serves DeviceTaintRules as v1beta2, and only
// where DRADeviceTaintRules is on (off by default).
func ListDeviceTaintRules(ctx context.Context, client kubernetes.Interface) (int, error) {
	rules, err := client.ResourceV1beta2().DeviceTaintRules().List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return 0, err
	}
	return len(rules.Items), nil
}

// TaintTrackerOptions: 1.36's tracker applies v1beta2 DeviceTaintRules and
// needs the DeviceClasses for their selectors.
func TaintTrackerOptions(factory informers.SharedInformerFactory) tracker.Options {
	return tracker.Options{
		EnableDeviceTaintRules: true,
		SliceInformer:          factory.Resource().V1().ResourceSlices(),
		TaintInformer:          factory.Resource().V1beta2().DeviceTaintRules(),
		ClassInformer:          factory.Resource().V1().DeviceClasses(),
	}
}

// ClaimLimitPerRequest: 1.36's allocator checks the limit of devices per
// claim once, after all of the claim's requests.
const ClaimLimitPerRequest = false

// CapacityErrorSkipsDevice: 1.36's allocator skips a device whose capacity
// cannot be checked against a request, and leaves devices without the
// capacity left out of a request for all devices.
const CapacityErrorSkipsDevice = true

// ClaimConfigOncePerRequest: 1.36's allocator lists a claim config that
// names several allocated requests once per request.
const ClaimConfigOncePerRequest = true

// ConfigForAllHasNoRequests: 1.36's allocator keeps the request list of a
// config that applies to every request.
const ConfigForAllHasNoRequests = false

// CounterSlicesOnEveryNode: 1.36's allocator considers slices with shared
// counters on every node, whatever their node selection.
const CounterSlicesOnEveryNode = true

// SelectorRuntimeError: 1.36's allocator does not name the device.
func SelectorRuntimeError(owner string, i int, _ string, err error) error {
	return fmt.Errorf("%s: selector #%d: CEL runtime error: %w", owner, i, err)
}
