//go:build kube1.35

package minor

import (
	"context"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	resourcev1alpha3 "k8s.io/api/resource/v1alpha3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	resourceclient "k8s.io/client-go/kubernetes/typed/resource/v1alpha3"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/resourceslice/tracker"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Minor is the Kubernetes minor this build is for.
const Minor = "1.35"

// GoFlags are the go command's flags that build this minor from the
// repository's root: its module file and build tag (hack/lib/minor.sh).
var GoFlags = []string{"-modfile=hack/minor/1.35/go.mod", "-tags=kube1.35"}

// NewerFeaturesOf: 1.35's structured.Features has none of them.
func NewerFeaturesOf(structured.Features) NewerFeatures { return NewerFeatures{} }

// With returns f: 1.35's structured.Features cannot hold n's features,
// which no 1.35 gate enables.
func (n NewerFeatures) With(f structured.Features) structured.Features { return f }

// CELFeatures are the features of 1.35's CEL compiler: consumable capacity
// (it has no list-type attributes).
func CELFeatures(consumableCapacity, _ bool) cel.Features {
	return cel.Features{EnableConsumableCapacity: consumableCapacity}
}

// AttributeLists: 1.35's attributes have no lists.
func AttributeLists(*resourceapi.DeviceAttribute) (ints []int64, bools []bool, strs, versions []string) {
	return nil, nil, nil, nil
}

// PoolStatus is the count of a pool's devices that KEP-5677's
// ResourcePoolStatusRequest answers with in 1.36 and later
// (resource.k8s.io/v1alpha3). 1.35 has no such API; kubectl drasched top
// computes the same counts itself and shows them in this shape.
type PoolStatus struct {
	Driver             string  `json:"driver,omitempty"`
	PoolName           string  `json:"poolName,omitempty"`
	Generation         int64   `json:"generation"`
	ResourceSliceCount *int32  `json:"resourceSliceCount,omitempty"`
	TotalDevices       *int32  `json:"totalDevices,omitempty"`
	AllocatedDevices   *int32  `json:"allocatedDevices,omitempty"`
	AvailableDevices   *int32  `json:"availableDevices,omitempty"`
	UnavailableDevices *int32  `json:"unavailableDevices,omitempty"`
	NodeName           *string `json:"nodeName,omitempty"`
	ValidationError    *string `json:"validationError,omitempty"`
}

// PoolStatusSummaries: 1.35 has no pool status API, let alone its
// summaries.
const PoolStatusSummaries = false

// PartitionTypeStatus: only the fields drasched reads; never in a 1.35
// status.
type PartitionTypeStatus struct {
	Attribute, Type    string
	Total, Allocatable *int32
}

// ShareableSummaryStatus: never in a 1.35 status.
type ShareableSummaryStatus struct {
	FullyAvailableDevices, PartiallyAvailableDevices *int32
	Capacity                                         []ShareableCapacityStatus
}

// ShareableCapacityStatus: see ShareableSummaryStatus.
type ShareableCapacityStatus struct {
	Name                       string
	Total, Consumed, Available *resource.Quantity
}

// PartitionSummary: none in 1.35.
func PartitionSummary(*PoolStatus) []PartitionTypeStatus { return nil }

// SetPoolSummaries: not called in 1.35 (PoolStatusSummaries is false).
func SetPoolSummaries(*PoolStatus, []PartitionTypeStatus, *ShareableSummaryStatus) {}

// PartitionTypeAttribute: 1.35's slices declare none.
func PartitionTypeAttribute(*resourceapi.ResourceSliceSpec) *resourceapi.FullyQualifiedName {
	return nil
}

// SetPartitionTypeAttribute: 1.35's slices cannot declare one.
func SetPartitionTypeAttribute(*resourceapi.ResourceSliceSpec, resourceapi.FullyQualifiedName) {}

// ListDeviceTaintRules: 1.35 serves DeviceTaintRules as v1alpha3, and only
// where DRADeviceTaintRules is on (alpha, off by default).
func ListDeviceTaintRules(ctx context.Context, client kubernetes.Interface) (int, error) {
	rules, err := DeviceTaintRules(client).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return 0, err
	}
	return len(rules.Items), nil
}

// TaintTrackerOptions: 1.35's tracker applies v1alpha3 DeviceTaintRules and
// needs the DeviceClasses for their selectors.
func TaintTrackerOptions(factory informers.SharedInformerFactory) tracker.Options {
	return tracker.Options{
		EnableDeviceTaintRules: true,
		SliceInformer:          factory.Resource().V1().ResourceSlices(),
		TaintInformer:          factory.Resource().V1alpha3().DeviceTaintRules(),
		ClassInformer:          factory.Resource().V1().DeviceClasses(),
	}
}

// DeviceTaintRule is the DeviceTaintRule API of this minor:
// resource.k8s.io/v1alpha3, served where DRADeviceTaintRules is on (alpha,
// off by default in 1.35).
type DeviceTaintRule = resourcev1alpha3.DeviceTaintRule

// DeviceTaintRuleAPIVersion is the API group and version of DeviceTaintRule.
var DeviceTaintRuleAPIVersion = resourcev1alpha3.SchemeGroupVersion

// NewDeviceTaintRule is a DeviceTaintRule that puts taint on the devices
// that driver, pool and device select (nil: any).
func NewDeviceTaintRule(name string, driver, pool, device *string, taint resourceapi.DeviceTaint) *DeviceTaintRule {
	return &DeviceTaintRule{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1alpha3.DeviceTaintRuleSpec{
			DeviceSelector: &resourcev1alpha3.DeviceTaintSelector{Driver: driver, Pool: pool, Device: device},
			Taint: resourcev1alpha3.DeviceTaint{
				Key: taint.Key, Value: taint.Value, TimeAdded: taint.TimeAdded,
				Effect: resourcev1alpha3.DeviceTaintEffect(taint.Effect),
			},
		},
	}
}

// DeviceTaintRules is the client of the DeviceTaintRules.
func DeviceTaintRules(client kubernetes.Interface) resourceclient.DeviceTaintRuleInterface {
	return client.ResourceV1alpha3().DeviceTaintRules()
}

// PodGroupAPI is false: 1.35 has no PodGroup API (its alpha gang
// scheduling is the Workload API's, scheduling.k8s.io/v1alpha1, which
// drasched does not implement). PodGroup and the names beside it stand
// in for 1.36's and 1.37's so that the code is the same; no object of
// them is ever made from the API.
const PodGroupAPI = false

// PodGroup: see PodGroupAPI.
type PodGroup struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Spec   PodGroupSpec
	Status PodGroupStatus
}

// DeepCopyObject makes PodGroup a runtime.Object, as the API's is.
func (g *PodGroup) DeepCopyObject() runtime.Object {
	c := *g
	return &c
}

// PodGroupSpec, PodGroupResourceClaim, PodGroupSchedulingPolicy,
// GangSchedulingPolicy and PodGroupStatus: see PodGroupAPI.
type (
	PodGroupSpec struct {
		SchedulingPolicy PodGroupSchedulingPolicy
		ResourceClaims   []PodGroupResourceClaim
	}
	PodGroupResourceClaim struct {
		Name                                         string
		ResourceClaimName, ResourceClaimTemplateName *string
	}
	PodGroupSchedulingPolicy struct {
		Gang *GangSchedulingPolicy
	}
	GangSchedulingPolicy struct {
		MinCount int32
	}
	PodGroupStatus struct {
		Conditions []metav1.Condition
	}
)

// PodGroupScheduledCondition: see PodGroupAPI.
const PodGroupScheduledCondition = "PodGroupScheduled"

// PodGroupAPIVersion: none (see PodGroupAPI).
var PodGroupAPIVersion schema.GroupVersion

// RegisterPodGroupDefaults: nothing to register (see PodGroupAPI).
func RegisterPodGroupDefaults(*runtime.Scheme) error { return nil }

// PodGroupClient reads PodGroups.
type PodGroupClient interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*PodGroup, error)
}

// PodGroups is the client of the PodGroups in namespace: in 1.35 every one
// is not found (see PodGroupAPI).
func PodGroups(_ kubernetes.Interface, namespace string) PodGroupClient {
	return noPodGroups(namespace)
}

type noPodGroups string

func (n noPodGroups) Get(_ context.Context, name string, _ metav1.GetOptions) (*PodGroup, error) {
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: "scheduling.k8s.io", Resource: "podgroups"}, string(n)+"/"+name)
}

// IsForPod checks that claim belongs to pod: 1.35 has no PodGroup claims.
func IsForPod(pod *v1.Pod, claim *resourceapi.ResourceClaim, _ bool) error {
	return resourceclaim.IsForPod(pod, claim)
}

// IsReservedForPod: claim's reservedFor names pod (1.35 has no PodGroup
// claims).
func IsReservedForPod(pod *v1.Pod, claim *resourceapi.ResourceClaim, _ bool) bool {
	return resourceclaim.IsReservedForPod(pod, claim)
}

// PodGroupName: 1.35's pods name no PodGroup (see PodGroupAPI).
func PodGroupName(*v1.Pod) *string { return nil }

// SetPodGroupName: 1.35's pods cannot name a PodGroup (see PodGroupAPI).
func SetPodGroupName(*v1.Pod, string) {}

// SliceMaxDevicesAdvanced is the most devices a ResourceSlice may hold
// when one of them uses taints or counters.
const SliceMaxDevicesAdvanced = resourceapi.ResourceSliceMaxDevicesWithTaintsOrConsumesCounters

// PCIBusIDAttribute: 1.35's deviceattribute has no PCI bus ID attribute;
// the name and form are 1.36's (the driver compiled for 1.35 serves tests
// and fakes only, docs/compatibility.md).
func PCIBusIDAttribute(busID string) (resourceapi.QualifiedName, resourceapi.DeviceAttribute, error) {
	return deviceattribute.StandardDeviceAttributePrefix + "pciBusID", resourceapi.DeviceAttribute{StringValue: &busID}, nil
}

// IntListAttribute: 1.35's attributes have no lists; the first value
// stands for them.
func IntListAttribute(values []int64) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{IntValue: &values[0]}
}

// IncubatingBindingAndCapacity is false: 1.35's incubating allocator
// supports neither binding conditions nor consumable capacity; they are
// the experimental allocator's.
const IncubatingBindingAndCapacity = false

// BindingConditionSlicesLast is true: 1.35's allocator tries the slices of
// a pool that have devices with binding conditions after the others.
const BindingConditionSlicesLast = true
