//go:build kube1.35 || kube1.36

package gpu

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/utils/ptr"
)

// numaNodeAttribute: 1.36's deviceattribute does not name the standard NUMA
// node attribute yet; the driver compiled for 1.36 (only for tests and
// fakes) writes the name and form that 1.37's does.
func numaNodeAttribute(node int) (resourceapi.QualifiedName, resourceapi.DeviceAttribute, error) {
	return deviceattribute.StandardDeviceAttributePrefix + "numaNode", resourceapi.DeviceAttribute{IntValue: ptr.To(int64(node))}, nil
}
