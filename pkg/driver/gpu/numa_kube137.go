//go:build !kube1.35 && !kube1.36

package gpu

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
)

// numaNodeAttribute is the standard NUMA node attribute of a device on
// NUMA node node.
func numaNodeAttribute(node int) (resourceapi.QualifiedName, resourceapi.DeviceAttribute, error) {
	attr, err := deviceattribute.GetNUMANodeAttribute(node, deviceattribute.ScalarAttribute)
	return attr.Name, attr.Value, err
}
