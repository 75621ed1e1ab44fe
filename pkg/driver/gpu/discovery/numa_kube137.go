//go:build !kube1.36

package discovery

import "k8s.io/dynamic-resource-allocation/deviceattribute"

// numaNodeOf reads the NUMA node of the PCI device busID from the sysfs
// tree under sysfsRoot; nil where the device has none.
func numaNodeOf(busID, sysfsRoot string) (*int64, error) {
	attr, err := deviceattribute.GetNUMANodeAttributeByPCIBusID(busID, deviceattribute.ScalarAttribute, deviceattribute.WithFSFromRoot(sysfsRoot))
	if err != nil {
		return nil, err
	}
	return attr.Value.IntValue, nil
}
