// Package dra is the StructuredDRA scheduler plugin: it gathers a pod's
// ResourceClaims in PreFilter, allocates devices per node in Filter with
// pkg/allocator, frees blocking claims in PostFilter, scores nodes, marks
// claims in flight in Reserve, rolls back in Unreserve and writes allocations
// in PreBind. One file per extension point.
//
// The plugin arrives with the scheduler issue; until then this package only
// documents where it will live.
package dra
