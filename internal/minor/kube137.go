//go:build !kube1.35 && !kube1.36

package minor

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	resourcev1alpha3 "k8s.io/api/resource/v1alpha3"
	schedulingapi "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	resourceclient "k8s.io/client-go/kubernetes/typed/resource/v1"
	schedulingclient "k8s.io/client-go/kubernetes/typed/scheduling/v1beta1"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-helpers/nodedeclaredfeatures/features/draoptionalnodeoperations"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/resourceslice/tracker"
	"k8s.io/dynamic-resource-allocation/structured"
	schedulingdefaults "k8s.io/kubernetes/pkg/apis/scheduling/v1beta1"
	"k8s.io/kubernetes/pkg/features"
)

// Minor is the Kubernetes minor this build is for.
const Minor = "1.37"

// GoFlags are the go command's flags that build this minor from the
// repository's root: none, go.mod is this minor's (hack/lib/minor.sh).
var GoFlags []string

// OptionalNodeOperationsFeature is the node declared feature that lets a
// node run pods whose devices skip node operations.
const OptionalNodeOperationsFeature = draoptionalnodeoperations.DRAOptionalNodeOperationsFeatureGate

// DerivedAttribute is a request's derived attribute.
type DerivedAttribute = resourceapi.DeviceDerivedAttribute

// SkipNodeOperation is a node operation a slice's devices skip.
type SkipNodeOperation = resourceapi.SkipNodeOperation

// NewerFeaturesOf reads the allocator features that not every minor has.
func NewerFeaturesOf(f structured.Features) NewerFeatures {
	return NewerFeatures{
		FractionalCapacityRange: f.FractionalCapacityRange,
		OptionalNodeOperations:  f.OptionalNodeOperations,
		DerivedAttributes:       f.DerivedAttributes,
		CompatibilityGroups:     f.CompatibilityGroups,
		ListTypeAttributes:      f.ListTypeAttributes,
	}
}

// With returns f with n's features set.
func (n NewerFeatures) With(f structured.Features) structured.Features {
	f.FractionalCapacityRange = n.FractionalCapacityRange
	f.OptionalNodeOperations = n.OptionalNodeOperations
	f.DerivedAttributes = n.DerivedAttributes
	f.CompatibilityGroups = n.CompatibilityGroups
	f.ListTypeAttributes = n.ListTypeAttributes
	return f
}

// CELFeatures are the features of the CEL compiler: consumable capacity and
// list-type attributes.
func CELFeatures(consumableCapacity, listTypeAttributes bool) cel.Features {
	return cel.Features{EnableConsumableCapacity: consumableCapacity, EnableListTypeAttributes: listTypeAttributes}
}

// AttributeLists are the list values of attr (DRAListTypeAttributes).
func AttributeLists(attr *resourceapi.DeviceAttribute) (ints []int64, bools []bool, strs, versions []string) {
	return attr.IntValues, attr.BoolValues, attr.StringValues, attr.VersionValues
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

// ClaimCreatesMetric is the name of kube-scheduler's count of the claims it
// creates for extended resources.
const ClaimCreatesMetric = "dynamic_resource_allocation_resourceclaim_creates_total"

// ClaimCreateLabels are the label values of kube-scheduler's
// resourceclaim_creates_total for a claim for a pod's extended resources.
func ClaimCreateLabels(status string) []string {
	return []string{status, "false", "", "Pod"}
}

// PoolStatus is the count of a pool's devices that KEP-5677's
// ResourcePoolStatusRequest answers with (resource.k8s.io/v1alpha3).
type PoolStatus = resourcev1alpha3.PoolStatus

// PoolStatusSummaries is true: a ResourcePoolStatusRequest's pool status has
// KEP-5677's partition and shareable summaries.
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

// SetPartitionTypeAttribute declares attr as the attribute that names the
// partition type of spec's devices.
func SetPartitionTypeAttribute(spec *resourceapi.ResourceSliceSpec, attr resourceapi.FullyQualifiedName) {
	spec.PartitionTypeAttribute = &attr
}

// SetDefaultPartitionTypeAttribute asks a ResourcePoolStatusRequest to group
// the partitions of pools that declare no attribute by attr.
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
// checked against a request fails the allocation with an error, and a device
// that is busy makes a request for all devices fail.
const CapacityErrorSkipsDevice = false

// ClaimConfigOncePerRequest is false: a claim config that names several
// allocated requests is listed in the allocation once (1.36's upstream lists
// it once per request).
const ClaimConfigOncePerRequest = false

// ConfigForAllHasNoRequests is true: an allocated config that applies to
// every request of the claim lists no requests, which means "all".
const ConfigForAllHasNoRequests = true

// CounterSlicesOnEveryNode is false: slices with shared counters are read
// only where a device of the pool needs them (1.36's upstream considers them
// on every node, whatever their node selection).
const CounterSlicesOnEveryNode = false

// SelectorRuntimeError is upstream's allocator's error for a CEL selector
// (#i of owner, "class NAME" or "claim NAMESPACE/NAME") that fails on
// device.
func SelectorRuntimeError(owner string, i int, device string, err error) error {
	return fmt.Errorf("%s: selector #%d on device %s: CEL runtime error: %w", owner, i, device, err)
}

// PodGroupAPI is true: this minor serves PodGroups.
const PodGroupAPI = true

// PodGroup is the PodGroup API of this minor: scheduling.k8s.io/v1beta1
// (feature gate GenericWorkload, beta and off by default).
type PodGroup = schedulingapi.PodGroup

// PodGroupSpec, PodGroupSchedulingPolicy and GangSchedulingPolicy are the
// types of a PodGroup's spec that drasched writes.
type (
	PodGroupSpec             = schedulingapi.PodGroupSpec
	PodGroupSchedulingPolicy = schedulingapi.PodGroupSchedulingPolicy
	GangSchedulingPolicy     = schedulingapi.GangSchedulingPolicy
)

// PodGroupScheduledCondition is the condition a PodGroup gets once its
// scheduling policy was met: PodGroupInitiallyScheduled.
const PodGroupScheduledCondition = schedulingapi.PodGroupInitiallyScheduled

// PodGroupAPIVersion is the API group and version of PodGroup.
var PodGroupAPIVersion = schedulingapi.SchemeGroupVersion

// RegisterPodGroupDefaults registers the API server's defaults of PodGroup
// (and the other types of its API version) in a scheme.
var RegisterPodGroupDefaults = schedulingdefaults.RegisterDefaults

// PodGroups is the client of the PodGroups in namespace.
func PodGroups(client kubernetes.Interface, namespace string) schedulingclient.PodGroupInterface {
	return client.SchedulingV1beta1().PodGroups(namespace)
}

// DeviceTaintRule is the DeviceTaintRule API of this minor:
// resource.k8s.io/v1 (DRADeviceTaintRules, on by default).
type DeviceTaintRule = resourceapi.DeviceTaintRule

// DeviceTaintRuleAPIVersion is the API group and version of DeviceTaintRule.
var DeviceTaintRuleAPIVersion = resourceapi.SchemeGroupVersion

// NewDeviceTaintRule is a DeviceTaintRule that puts taint on the devices
// that driver, pool and device select (nil: any).
func NewDeviceTaintRule(name string, driver, pool, device *string, taint resourceapi.DeviceTaint) *DeviceTaintRule {
	return &DeviceTaintRule{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.DeviceTaintRuleSpec{
			DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: driver, Pool: pool, Device: device},
			Taint:          taint,
		},
	}
}

// DeviceTaintRules is the client of the DeviceTaintRules.
func DeviceTaintRules(client kubernetes.Interface) resourceclient.DeviceTaintRuleInterface {
	return client.ResourceV1().DeviceTaintRules()
}
