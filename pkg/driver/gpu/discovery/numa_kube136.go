//go:build kube1.36

package discovery

// numaNodeOf: 1.36's deviceattribute has no reader for the NUMA node, so
// the driver compiled for 1.36 (only for tests and fakes: the driver image
// is built from the newest minor, docs/compatibility.md) finds none.
func numaNodeOf(string, string) (*int64, error) { return nil, nil }
