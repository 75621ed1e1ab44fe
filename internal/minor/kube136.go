//go:build kube1.36

package minor

import (
	"context"
	"errors"

	resourceapi "k8s.io/api/resource/v1"
	resourcev1alpha3 "k8s.io/api/resource/v1alpha3"
	resourcev1beta2 "k8s.io/api/resource/v1beta2"
	schedulingapi "k8s.io/api/scheduling/v1alpha2"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	resourceclient "k8s.io/client-go/kubernetes/typed/resource/v1beta2"
	schedulingclient "k8s.io/client-go/kubernetes/typed/scheduling/v1alpha2"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/resourceslice/tracker"
	"k8s.io/dynamic-resource-allocation/structured"
	schedulingdefaults "k8s.io/kubernetes/pkg/apis/scheduling/v1alpha2"
)

// Minor is the Kubernetes minor this build is for.
const Minor = "1.36"

// GoFlags are the go command's flags that build this minor from the
// repository's root: its module file and build tag (hack/lib/minor.sh).
var GoFlags = []string{"-modfile=hack/minor/1.36/go.mod", "-tags=kube1.36"}

// NewerFeaturesOf: 1.36's structured.Features has ListTypeAttributes
// (alpha), none of the others.
func NewerFeaturesOf(f structured.Features) NewerFeatures {
	return NewerFeatures{ListTypeAttributes: f.ListTypeAttributes}
}

// With returns f with n's ListTypeAttributes: 1.36's structured.Features
// cannot hold the others, which no 1.36 gate enables.
func (n NewerFeatures) With(f structured.Features) structured.Features {
	f.ListTypeAttributes = n.ListTypeAttributes
	return f
}

// CELFeatures are the features of the CEL compiler: consumable capacity
// and list-type attributes.
func CELFeatures(consumableCapacity, listTypeAttributes bool) cel.Features {
	return cel.Features{EnableConsumableCapacity: consumableCapacity, EnableListTypeAttributes: listTypeAttributes}
}

// AttributeLists are the list values of attr (DRAListTypeAttributes).
func AttributeLists(attr *resourceapi.DeviceAttribute) (ints []int64, bools []bool, strs, versions []string) {
	return attr.IntValues, attr.BoolValues, attr.StringValues, attr.VersionValues
}

// PoolStatus is the count of a pool's devices that KEP-5677's
// ResourcePoolStatusRequest answers with (resource.k8s.io/v1alpha3).
type PoolStatus = resourcev1alpha3.PoolStatus

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

// SetPartitionTypeAttribute: 1.36's slices cannot declare one.
func SetPartitionTypeAttribute(*resourceapi.ResourceSliceSpec, resourceapi.FullyQualifiedName) {}

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

// PodGroupAPI is true: this minor serves PodGroups.
const PodGroupAPI = true

// PodGroup is the PodGroup API of this minor: scheduling.k8s.io/v1alpha2
// (feature gate GenericWorkload, alpha and off by default; the API version
// must be enabled on the API server too).
type PodGroup = schedulingapi.PodGroup

// PodGroupSpec, PodGroupSchedulingPolicy and GangSchedulingPolicy: see
// kube137.go.
type (
	PodGroupSpec             = schedulingapi.PodGroupSpec
	PodGroupSchedulingPolicy = schedulingapi.PodGroupSchedulingPolicy
	GangSchedulingPolicy     = schedulingapi.GangSchedulingPolicy
)

// PodGroupScheduledCondition is the condition a PodGroup gets once its
// scheduling policy was met: PodGroupScheduled (1.37 renamed it
// PodGroupInitiallyScheduled).
const PodGroupScheduledCondition = schedulingapi.PodGroupScheduled

// PodGroupAPIVersion is the API group and version of PodGroup.
var PodGroupAPIVersion = schedulingapi.SchemeGroupVersion

// RegisterPodGroupDefaults registers the API server's defaults of
// PodGroup (and the other types of its API version) in a scheme.
var RegisterPodGroupDefaults = schedulingdefaults.RegisterDefaults

// PodGroups is the client of the PodGroups in namespace.
func PodGroups(client kubernetes.Interface, namespace string) schedulingclient.PodGroupInterface {
	return client.SchedulingV1alpha2().PodGroups(namespace)
}

// DeviceTaintRule is the DeviceTaintRule API of this minor:
// resource.k8s.io/v1beta2, served where DRADeviceTaintRules is on (off by
// default in 1.36).
type DeviceTaintRule = resourcev1beta2.DeviceTaintRule

// DeviceTaintRuleAPIVersion is the API group and version of DeviceTaintRule.
var DeviceTaintRuleAPIVersion = resourcev1beta2.SchemeGroupVersion

// NewDeviceTaintRule is a DeviceTaintRule that puts taint on the devices
// that driver, pool and device select (nil: any).
func NewDeviceTaintRule(name string, driver, pool, device *string, taint resourceapi.DeviceTaint) *DeviceTaintRule {
	return &DeviceTaintRule{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1beta2.DeviceTaintRuleSpec{
			DeviceSelector: &resourcev1beta2.DeviceTaintSelector{Driver: driver, Pool: pool, Device: device},
			Taint: resourcev1beta2.DeviceTaint{
				Key: taint.Key, Value: taint.Value, TimeAdded: taint.TimeAdded,
				Effect: resourcev1beta2.DeviceTaintEffect(taint.Effect),
			},
		},
	}
}

// DeviceTaintRules is the client of the DeviceTaintRules.
func DeviceTaintRules(client kubernetes.Interface) resourceclient.DeviceTaintRuleInterface {
	return client.ResourceV1beta2().DeviceTaintRules()
}
