//go:build kube1.36

package discovery

import (
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/utils/ptr"
)

// numaNodeOf: 1.36's deviceattribute has no reader for the NUMA node, so
// the driver compiled for 1.36 (only for tests and fakes: the driver image
// is built from the newest minor, docs/compatibility.md) finds none.
func numaNodeOf(string, string) (*int64, error) { return nil, nil }

// pcieRootOf reads the PCIe root of the PCI device busID from the sysfs
// tree under sysfsRoot.
func pcieRootOf(busID, sysfsRoot string) (string, error) {
	attr, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(busID, deviceattribute.WithFSFromRoot(sysfsRoot))
	if err != nil {
		return "", err
	}
	return ptr.Deref(attr.Value.StringValue, ""), nil
}
