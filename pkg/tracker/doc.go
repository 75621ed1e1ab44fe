// Package tracker is the StructuredDRA plugin's view of claim state: which
// claims exist, which devices are taken, and which allocations are between
// Reserve and the API.
//
// There is one claim cache in the scheduler process, and the tracker does
// not keep a second one. It builds on the scheduler's SharedDRAManager
// (kube-scheduler's DefaultDRAManager): an assume cache of ResourceClaims
// on the claim informer, a set of allocated devices maintained by an event
// handler of that cache, and a map of allocations in flight. The device
// handler is registered before the scheduler's own event handlers on the
// same cache, and the cache delivers each event to its handlers in order,
// so whatever a queueing hint reacts to (a deallocation, a deletion) is
// already reflected in the allocated devices when the pod it wakes runs
// PreFilter. Queueing hints only read.
//
// What the tracker adds on top is the lifecycle of the plugin's own
// in-flight allocations, which decides when devices may be counted as free
// again:
//
//   - Reserve puts an allocation in flight; Unreserve drops it only if no
//     write of it was attempted, or the write definitely failed.
//   - Written records a successful write. The written claim goes into the
//     assume cache first and only then leaves flight, so no snapshot misses
//     its devices (kube-scheduler's GatherAllocatedState detects a
//     concurrent change and is retried; the race of kubernetes#136269). A
//     claim created in the same PreBind (the claim for a pod's extended
//     resources) is not in the cache yet; it stays in flight until the
//     informer delivers it.
//   - WriteUnknown records a write whose outcome is unknown (a 504, a reset
//     connection): etcd may have committed it. The allocation stays in
//     flight until the claim cache or a fresh GET shows a version newer
//     than the one the write was based on, the claim is gone, or the API
//     server has shown the old version for longer than Options.UnknownGrace.
//
// A background worker settles written and unknown entries; when it drops
// an allocation without an event that announces free devices, it calls
// Options.Activate so that waiting pods are tried again.
//
// Locking: Tracker.mutex guards the entries map and every transition of an
// entry; calls into the SharedDRAManager happen under it only where they do
// not call back (Signal, Remove, Get). AssumeClaimAfterAPICall and
// AssumedClaimRestore deliver events to the scheduler's handlers
// synchronously, so they are never called with the mutex held. An
// allocation leaves flight only after the claim cache's handlers, the
// manager's count of allocated devices among them, have seen the claim
// that holds it: the cache's store shows a claim before that (see
// awaitClaimEvents; TestSettledOnlyOnceCounted). slicesMutex guards the cached slice list only.
package tracker
