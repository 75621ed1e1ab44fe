//go:build !kube1.35 && !kube1.36

package v1

import (
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
)

// TestDefaultTopologyAttributesNUMA: the NUMA node attribute spelled out
// for the minors whose deviceattribute does not name it is the one 1.37's
// names.
func TestDefaultTopologyAttributesNUMA(t *testing.T) {
	if want := resourceapi.FullyQualifiedName(deviceattribute.StandardDeviceAttributeNUMANode); !slices.Contains(DefaultTopologyAttributes(), want) {
		t.Errorf("DefaultTopologyAttributes() = %v, want %s among them", DefaultTopologyAttributes(), want)
	}
}
