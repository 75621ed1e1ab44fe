// Package builder has fluent builders for the DRA API objects that tests
// and benchmarks need: MakeSlice("s").Node("n").Devices(...).Obj().
package builder

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// SliceWrapper builds a ResourceSlice.
type SliceWrapper struct{ resourceapi.ResourceSlice }

// MakeSlice starts a slice of the given name, driver "gpu.example.com",
// pool named like the slice, generation 1, one slice in the pool.
func MakeSlice(name string) *SliceWrapper {
	return &SliceWrapper{resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: "gpu.example.com",
			Pool:   resourceapi.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: 1},
		},
	}}
}

func (w *SliceWrapper) Obj() *resourceapi.ResourceSlice { return &w.ResourceSlice }

func (w *SliceWrapper) Driver(driver string) *SliceWrapper {
	w.Spec.Driver = driver
	return w
}

// Pool sets the pool name, generation and number of slices in the pool.
func (w *SliceWrapper) Pool(name string, generation, count int64) *SliceWrapper {
	w.Spec.Pool = resourceapi.ResourcePool{Name: name, Generation: generation, ResourceSliceCount: count}
	return w
}

func (w *SliceWrapper) Node(name string) *SliceWrapper {
	w.Spec.NodeName = ptr.To(name)
	return w
}

func (w *SliceWrapper) AllNodes() *SliceWrapper {
	w.Spec.AllNodes = ptr.To(true)
	return w
}

func (w *SliceWrapper) Devices(devices ...*DeviceWrapper) *SliceWrapper {
	for _, d := range devices {
		w.Spec.Devices = append(w.Spec.Devices, d.Device)
	}
	return w
}

func (w *SliceWrapper) Counters(sets ...resourceapi.CounterSet) *SliceWrapper {
	w.Spec.SharedCounters = append(w.Spec.SharedCounters, sets...)
	return w
}

// CounterSet builds a counter set from name/quantity pairs.
func CounterSet(name string, counters map[string]string) resourceapi.CounterSet {
	set := resourceapi.CounterSet{Name: name, Counters: map[string]resourceapi.Counter{}}
	for counter, value := range counters {
		set.Counters[counter] = resourceapi.Counter{Value: resource.MustParse(value)}
	}
	return set
}

// DeviceWrapper builds a Device.
type DeviceWrapper struct{ resourceapi.Device }

func MakeDevice(name string) *DeviceWrapper {
	return &DeviceWrapper{resourceapi.Device{Name: name}}
}

// Devices returns n devices named prefix-0 ... prefix-(n-1), each modified
// by the optional function.
func Devices(prefix string, n int, modify func(i int, d *DeviceWrapper)) []*DeviceWrapper {
	devices := make([]*DeviceWrapper, n)
	for i := range devices {
		devices[i] = MakeDevice(fmt.Sprintf("%s-%d", prefix, i))
		if modify != nil {
			modify(i, devices[i])
		}
	}
	return devices
}

func (w *DeviceWrapper) attr(name string, attr resourceapi.DeviceAttribute) *DeviceWrapper {
	if w.Attributes == nil {
		w.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	}
	w.Attributes[resourceapi.QualifiedName(name)] = attr
	return w
}

func (w *DeviceWrapper) String(name, value string) *DeviceWrapper {
	return w.attr(name, resourceapi.DeviceAttribute{StringValue: ptr.To(value)})
}

func (w *DeviceWrapper) Int(name string, value int64) *DeviceWrapper {
	return w.attr(name, resourceapi.DeviceAttribute{IntValue: ptr.To(value)})
}

func (w *DeviceWrapper) Version(name, value string) *DeviceWrapper {
	return w.attr(name, resourceapi.DeviceAttribute{VersionValue: ptr.To(value)})
}

func (w *DeviceWrapper) Capacity(name, value string) *DeviceWrapper {
	if w.Device.Capacity == nil {
		w.Device.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{}
	}
	w.Device.Capacity[resourceapi.QualifiedName(name)] = resourceapi.DeviceCapacity{Value: resource.MustParse(value)}
	return w
}

// Shareable allows multiple allocations; the capacity, if any, gets the
// given request policy.
func (w *DeviceWrapper) Shareable(policy *resourceapi.CapacityRequestPolicy) *DeviceWrapper {
	w.AllowMultipleAllocations = ptr.To(true)
	for name, c := range w.Device.Capacity {
		c.RequestPolicy = policy
		w.Device.Capacity[name] = c
	}
	return w
}

func (w *DeviceWrapper) Taint(key string, effect resourceapi.DeviceTaintEffect) *DeviceWrapper {
	w.Taints = append(w.Taints, resourceapi.DeviceTaint{Key: key, Effect: effect})
	return w
}

// Consumes adds a counter consumption from name/quantity pairs.
func (w *DeviceWrapper) Consumes(set string, counters map[string]string) *DeviceWrapper {
	consumption := resourceapi.DeviceCounterConsumption{CounterSet: set, Counters: map[string]resourceapi.Counter{}}
	for counter, value := range counters {
		consumption.Counters[counter] = resourceapi.Counter{Value: resource.MustParse(value)}
	}
	w.ConsumesCounters = append(w.ConsumesCounters, consumption)
	return w
}

// MakeClass builds a DeviceClass with CEL selectors.
func MakeClass(name string, selectors ...string) *resourceapi.DeviceClass {
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, expr := range selectors {
		class.Spec.Selectors = append(class.Spec.Selectors, Selector(expr))
	}
	return class
}

// Selector is a CEL device selector.
func Selector(expr string) resourceapi.DeviceSelector {
	return resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}
}

// ClaimWrapper builds a ResourceClaim.
type ClaimWrapper struct{ resourceapi.ResourceClaim }

func MakeClaim(name string) *ClaimWrapper {
	return &ClaimWrapper{resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: "default", UID: types.UID("uid-" + name),
	}}}
}

func (w *ClaimWrapper) Obj() *resourceapi.ResourceClaim { return &w.ResourceClaim }

// Request adds an exact-count request.
func (w *ClaimWrapper) Request(name, class string, count int64, selectors ...string) *ClaimWrapper {
	request := resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
	}}
	for _, expr := range selectors {
		request.Exactly.Selectors = append(request.Exactly.Selectors, Selector(expr))
	}
	w.Spec.Devices.Requests = append(w.Spec.Devices.Requests, request)
	return w
}

// RequestAll adds a request for all matching devices.
func (w *ClaimWrapper) RequestAll(name, class string) *ClaimWrapper {
	w.Spec.Devices.Requests = append(w.Spec.Devices.Requests, resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeAll,
	}})
	return w
}

// Exact returns the last request's exact part for further changes.
func (w *ClaimWrapper) Exact() *resourceapi.ExactDeviceRequest {
	return w.Spec.Devices.Requests[len(w.Spec.Devices.Requests)-1].Exactly
}

// CapacityRequest makes the last request ask for capacity.
func (w *ClaimWrapper) CapacityRequest(name, value string) *ClaimWrapper {
	exact := w.Exact()
	if exact.Capacity == nil {
		exact.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{}}
	}
	exact.Capacity.Requests[resourceapi.QualifiedName(name)] = resource.MustParse(value)
	return w
}

// Tolerate makes the last request tolerate a taint key.
func (w *ClaimWrapper) Tolerate(key string) *ClaimWrapper {
	exact := w.Exact()
	exact.Tolerations = append(exact.Tolerations, resourceapi.DeviceToleration{Key: key, Operator: resourceapi.DeviceTolerationOpExists})
	return w
}

// FirstAvailable adds a request with prioritized subrequests.
func (w *ClaimWrapper) FirstAvailable(name string, subs ...resourceapi.DeviceSubRequest) *ClaimWrapper {
	w.Spec.Devices.Requests = append(w.Spec.Devices.Requests, resourceapi.DeviceRequest{Name: name, FirstAvailable: subs})
	return w
}

// SubRequest is an exact-count subrequest.
func SubRequest(name, class string, count int64, selectors ...string) resourceapi.DeviceSubRequest {
	sub := resourceapi.DeviceSubRequest{Name: name, DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}
	for _, expr := range selectors {
		sub.Selectors = append(sub.Selectors, Selector(expr))
	}
	return sub
}

// MatchAttribute adds a matchAttribute constraint over the named requests
// (all if none).
func (w *ClaimWrapper) MatchAttribute(attribute string, requests ...string) *ClaimWrapper {
	w.Spec.Devices.Constraints = append(w.Spec.Devices.Constraints, resourceapi.DeviceConstraint{
		Requests: requests, MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(attribute)),
	})
	return w
}

// DistinctAttribute adds a distinctAttribute constraint.
func (w *ClaimWrapper) DistinctAttribute(attribute string, requests ...string) *ClaimWrapper {
	w.Spec.Devices.Constraints = append(w.Spec.Devices.Constraints, resourceapi.DeviceConstraint{
		Requests: requests, DistinctAttribute: ptr.To(resourceapi.FullyQualifiedName(attribute)),
	})
	return w
}

// MakeNode builds a node with labels from key/value pairs.
func MakeNode(name string, labels ...string) *v1.Node {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	for i := 0; i+1 < len(labels); i += 2 {
		node.Labels[labels[i]] = labels[i+1]
	}
	return node
}
