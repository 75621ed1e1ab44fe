// Package kwokcluster holds what the demo (demo/helper) and the kwok
// benchmark (bench/kwok) do alike on a kwok cluster: create GPU nodes whose
// devices come from the GPU driver's inventory files, publish their
// ResourceSlices with the driver's own slice building (pkg/driver/gpu),
// wait until the nodes can take pods and derive a scheduler configuration
// for the cluster from a shipped one. Both check what the scheduler did
// with internal/invariants.
//
// Nothing here starts processes or needs cluster binaries; the functions
// take a client or plain API objects, so that they are tested with fake
// clients.
package kwokcluster
