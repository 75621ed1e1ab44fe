//go:build kube1.35

package discovery

import "errors"

// numaNodeOf: 1.35's deviceattribute has no reader for the NUMA node, so
// the driver compiled for 1.35 (only for tests and fakes: the driver image
// is built from the newest minor, docs/compatibility.md) finds none.
func numaNodeOf(string, string) (*int64, error) { return nil, nil }

// pcieRootOf: 1.35's deviceattribute reads only the host's own sysfs, not
// a tree under another root; the driver compiled for 1.35 reads none.
func pcieRootOf(busID, _ string) (string, error) {
	return "", errors.New("the PCIe root needs the deviceattribute of Kubernetes 1.36 or later")
}
