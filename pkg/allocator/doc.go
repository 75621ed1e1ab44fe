// Package allocator is drasched's structured allocator for DRA
// ResourceClaims: given the ResourceSlices, DeviceClasses and already
// allocated devices of a cluster, it finds devices on a node for a pod's
// claims. With the default policy it returns exactly what upstream's
// k8s.io/dynamic-resource-allocation/structured allocator returns.
package allocator
