// Package capacity says what DRA devices are free, where: per resource
// pool, per node and per DeviceClass, from a cluster's API objects alone.
// kubectl drasched top (cmd/kubectl-drasched) prints its Report; the
// scheduler's device metrics (pkg/plugins/dra) count with its Count.
// Package fit (pkg/capacity/fit) answers the question that follows: how
// many more pods like this one fit, and where. Read is the one reader of
// the cluster for top, fit and explain (pkg/explain), so that the three
// agree on a device that a DeviceTaintRule drains.
//
// # Definitions
//
// The numbers are KEP-5677's, as kube-controller-manager's
// ResourcePoolStatusRequest controller (resource.k8s.io/v1alpha3,
// DRAResourcePoolStatus) computes them for a PoolStatus, so that for the
// same cluster Pool.Status equals the controller's answer field for field
// (test/integration/capacity compares them on random clusters):
//
//   - only the slices of a pool's newest generation count; a pool with
//     fewer of them than its resourceSliceCount is incomplete and has a
//     validation error instead of counts;
//   - total: the devices of those slices;
//   - allocated: the distinct devices of the pool that allocated claims
//     name, admin access left out, a shared device once however many
//     claims share it (and a device that a claim still holds after it left
//     the pool's slices, also in the node view);
//   - unavailable: the devices with a NoSchedule or NoExecute taint, the
//     driver's own or a DeviceTaintRule's (allocator.Unavailable, the
//     allocator's rule), allocated or not;
//   - available: total − allocated − unavailable, at least 0. A device that
//     is both allocated and tainted is subtracted twice, as the controller
//     does (the API's field comment says unavailable devices are "not
//     allocated"; the controller's code counts them all);
//   - partition summary: per partition type (the value of the slice's
//     partitionTypeAttribute, or Options.PartitionAttribute), how many
//     devices of the type there are and how many more of it the pool's
//     shared counters still allow, each type on its own;
//   - shareable summary: the devices that allow multiple allocations, fully
//     free or partly used, and their capacity, total, consumed and free.
//
// Views beyond the PoolStatus count with the same rules: nodes (the devices
// of slices or devices that name the node), DeviceClasses (the devices the
// class's selectors match, through the allocator's CEL cache), free
// partitions per type also where the controller reports none because
// devices of one type draw on different counters (MIG placements), counter
// sets (GPUs) wholly free, partly used or full, the capacity of each shared
// device, and topology groups (allocator.TopologyGroups) wholly free.
//
// # What it sees
//
// The API's state at the moment of the read. Allocations that the
// scheduler holds in flight between Reserve and PreBind are not in the API
// yet; the scheduler's metric drasched_plugin_devices counts them.
package capacity
