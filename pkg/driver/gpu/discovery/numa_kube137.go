//go:build !kube1.35 && !kube1.36

package discovery

import (
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/utils/ptr"
)

// numaNodeOf reads the NUMA node of the PCI device busID from the sysfs
// tree under sysfsRoot; nil where the device has none.
func numaNodeOf(busID, sysfsRoot string) (*int64, error) {
	attr, err := deviceattribute.GetNUMANodeAttributeByPCIBusID(busID, deviceattribute.ScalarAttribute, deviceattribute.WithFSFromRoot(sysfsRoot))
	if err != nil {
		return nil, err
	}
	return attr.Value.IntValue, nil
}

// pcieRootOf reads the PCIe root of the PCI device busID from the sysfs
// tree under sysfsRoot.
func pcieRootOf(busID, sysfsRoot string) (string, error) {
	attr, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(busID, deviceattribute.WithFSFromRoot(sysfsRoot))
	if err != nil {
		return "", err
	}
	return ptr.Deref(attr.Value.StringValue, ""), nil
}
