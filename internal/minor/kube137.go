//go:build !kube1.36

package minor

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	resourcev1alpha3 "k8s.io/api/resource/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-helpers/nodedeclaredfeatures/features/draoptionalnodeoperations"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/resourceslice/tracker"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/kubernetes/pkg/features"
)

// Minor is the Kubernetes minor this build is for.
const Minor = "1.37"

// OptionalNodeOperationsFeature is the node declared feature that lets a
// node run pods whose devices skip node operations.
const OptionalNodeOperationsFeature = draoptionalnodeoperations.DRAOptionalNodeOperationsFeatureGate

// DerivedAttribute is a request's derived attribute.
type DerivedAttribute = resourceapi.DeviceDerivedAttribute

// SkipNodeOperation is a node operation a slice's devices skip.
type SkipNodeOperation = resourceapi.SkipNodeOperation

// NewerFeaturesOf reads the allocator features that only 1.37 has.
func NewerFeaturesOf(f structured.Features) NewerFeatures {
	return NewerFeatures{
		FractionalCapacityRange: f.FractionalCapacityRange,
		OptionalNodeOperations:  f.OptionalNodeOperations,
		DerivedAttributes:       f.DerivedAttributes,
		CompatibilityGroups:     f.CompatibilityGroups,
	}
}

// With returns f with n's features set.
func (n NewerFeatures) With(f structured.Features) structured.Features {
	f.FractionalCapacityRange = n.FractionalCapacityRange
	f.OptionalNodeOperations = n.OptionalNodeOperations
	f.DerivedAttributes = n.DerivedAttributes
	f.CompatibilityGroups = n.CompatibilityGroups
	return f
}

// AllocatorFeatures are the allocator features that kube-scheduler derives
// from gate (upstream's dynamicresources.AllocatorFeatures of the
// scheduler's feature set). Binding conditions need the device status gate
// too: without device status the scheduler could not see a driver report
// that a binding condition is met.
func AllocatorFeatures(gate featuregate.FeatureGate) structured.Features {
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

// SubRequestDerivedAttributes are sub's derived attributes.
func SubRequestDerivedAttributes(sub *resourceapi.DeviceSubRequest) []DerivedAttribute {
	return sub.DerivedAttributes
}

// ExactDerivedAttributes are exactly's derived attributes.
func ExactDerivedAttributes(exactly *resourceapi.ExactDeviceRequest) []DerivedAttribute {
	return exactly.DerivedAttributes
}

// SkipNodeOperations are the node operations spec's devices skip.
func SkipNodeOperations(spec *resourceapi.ResourceSliceSpec) []SkipNodeOperation {
	return spec.SkipNodeOperations
}

// ResultSkipNodeOperations are the node operations result's device skips.
func ResultSkipNodeOperations(result *resourceapi.DeviceRequestAllocationResult) []SkipNodeOperation {
	return result.SkipNodeOperations
}

// SetResultSkipNodeOperations records in result the node operations its
// device skips.
func SetResultSkipNodeOperations(result *resourceapi.DeviceRequestAllocationResult, ops []SkipNodeOperation) {
	result.SkipNodeOperations = ops
}

// CompatibilityGroups are the compatibility groups of a device's draw on a
// counter set.
func CompatibilityGroups(consumption *resourceapi.DeviceCounterConsumption) []string {
	return consumption.CompatibilityGroups
}

// CELOptions are the compile options of a selector (derived false) or of a
// derived attribute's expression.
func CELOptions(derived bool) cel.Options {
	return cel.Options{DisableCostEstimation: true, DerivedAttribute: derived}
}

// EnhanceRuntimeError is upstream's allocator's wording of a CEL runtime
// error.
func EnhanceRuntimeError(err error) error {
	return cel.EnhanceRuntimeError(err)
}

// EvaluateDerivedAttribute evaluates a compiled derived attribute on device.
func EvaluateDerivedAttribute(ctx context.Context, result cel.CompilationResult, device cel.Device) (*resourceapi.DeviceAttribute, error) {
	attr, _, err := result.EvaluateDerivedAttribute(ctx, device)
	return attr, err
}

// ClaimCreateLabels are the label values of kube-scheduler's
// resourceclaim_creates_total for a claim for a pod's extended resources.
func ClaimCreateLabels(status string) []string {
	return []string{status, "false", "", "Pod"}
}

// PoolStatusSummaries is true: a ResourcePoolStatusRequest's pool status
// has KEP-5677's partition and shareable summaries.
const PoolStatusSummaries = true

// PartitionTypeStatus is one line of a pool status's partition summary.
type PartitionTypeStatus = resourcev1alpha3.PartitionTypeStatus

// ShareableSummaryStatus is a pool status's shareable summary.
type ShareableSummaryStatus = resourcev1alpha3.ShareableSummaryStatus

// ShareableCapacityStatus is one capacity of a shareable summary.
type ShareableCapacityStatus = resourcev1alpha3.ShareableCapacityStatus

// PartitionSummary is st's partition summary.
func PartitionSummary(st *resourcev1alpha3.PoolStatus) []PartitionTypeStatus {
	return st.PartitionSummary
}

// SetPoolSummaries records in st its partition and shareable summaries.
func SetPoolSummaries(st *resourcev1alpha3.PoolStatus, partitions []PartitionTypeStatus, shareable *ShareableSummaryStatus) {
	st.PartitionSummary, st.ShareableSummary = partitions, shareable
}

// PartitionTypeAttribute is the attribute that names the partition type of
// spec's devices, if the slice declares one.
func PartitionTypeAttribute(spec *resourceapi.ResourceSliceSpec) *resourceapi.FullyQualifiedName {
	return spec.PartitionTypeAttribute
}

// SetDefaultPartitionTypeAttribute asks a ResourcePoolStatusRequest to
// group the partitions of pools that declare no attribute by attr.
func SetDefaultPartitionTypeAttribute(spec *resourcev1alpha3.ResourcePoolStatusRequestSpec, attr string) error {
	spec.DefaultPartitionTypeAttribute = &attr
	return nil
}

// ListDeviceTaintRules lists at most one DeviceTaintRule, to learn whether
// there are any and whether they can be read.
func ListDeviceTaintRules(ctx context.Context, client kubernetes.Interface) (int, error) {
	rules, err := client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return 0, err
	}
	return len(rules.Items), nil
}

// TaintTrackerOptions are the options of a ResourceSlice tracker that
// applies DeviceTaintRules, on factory's informers.
func TaintTrackerOptions(factory informers.SharedInformerFactory) tracker.Options {
	return tracker.Options{
		EnableDeviceTaintRules: true,
		SliceInformer:          factory.Resource().V1().ResourceSlices(),
		TaintInformer:          factory.Resource().V1().DeviceTaintRules(),
	}
}

// ClaimLimitPerRequest is true: the allocator checks the limit of devices
// per claim request by request, naming the request that crosses it.
const ClaimLimitPerRequest = true

// CapacityErrorSkipsDevice is false: a device whose capacity cannot be
// checked against a request fails the allocation with an error, and a
// device that is busy makes a request for all devices fail.
const CapacityErrorSkipsDevice = false

// ClaimConfigOncePerRequest is false: a claim config that names several
// allocated requests is listed in the allocation once (1.36's upstream
// lists it once per request).
const ClaimConfigOncePerRequest = false

// ConfigForAllHasNoRequests is true: an allocated config that applies to every
// request of the claim lists no requests, which means "all".
const ConfigForAllHasNoRequests = true

// CounterSlicesOnEveryNode is false: slices with shared counters are read
// only where a device of the pool needs them (1.36's upstream considers
// them on every node, whatever their node selection).
const CounterSlicesOnEveryNode = false

// SelectorRuntimeError is upstream's allocator's error for a CEL selector
// (#i of owner, "class NAME" or "claim NAMESPACE/NAME") that fails on
// device.
func SelectorRuntimeError(owner string, i int, device string, err error) error {
	return fmt.Errorf("%s: selector #%d on device %s: CEL runtime error: %w", owner, i, device, err)
}
