// Package allocator is drasched's structured allocator for DRA
// ResourceClaims: given the ResourceSlices, DeviceClasses and already
// allocated devices of a cluster, it finds devices on a node for a pod's
// claims.
//
// # Contract
//
// New builds an Allocator for one scheduling cycle; Allocate is then called
// for each candidate node, concurrently for different nodes. The types of
// k8s.io/dynamic-resource-allocation/structured are the vocabulary
// (Features, AllocatedState, DeviceClassLister, ErrFailedAllocationOnNode),
// and the semantics are upstream's:
//
//   - nil results and a nil error: the claims do not fit on this node,
//     which includes resource pools that are being updated;
//   - an error wrapping structured.ErrFailedAllocationOnNode: this node
//     fails, others may not;
//   - any other error: fatal for the pod (invalid input such as a CEL
//     runtime error or a missing DeviceClass);
//   - cancelling the context returns an error wrapping the context's error.
//
// Explain, for a node where Allocate found nothing, says why. It judges each
// device with the search's own check (accepts), so that the explanation
// cannot disagree with the search, and it honours the context like
// Allocate.
//
// With the default policy (zero Options) the results are exactly those of
// structured.NewAllocator with structured.EnableAllocators("incubating",
// "experimental"), Kubernetes 1.37's default: the same devices in the same
// order, the same configs, node selector, consumed capacity and binding
// conditions. Like upstream, the behaviour is picked per Features from the
// first tier ("incubating", then "experimental") that supports them; unlike
// upstream, the tiers share one search core and differ only in switches.
//
// # Policies
//
// Options.Policy PolicyBestFit searches the same space in another order of
// candidates (bestfit.go): devices of units already in use (shares of
// shared devices, partitions of partitioned GPUs), then of the topology
// groups (Options.TopologyAttributes) with the fewest free units that hold
// the pod's devices. It finds a fit on exactly the nodes where the default
// policy finds one and reports the same errors; only which devices differ.
// WholeFree tells scoring how much of a node's free capacity an allocation
// leaves in whole groups.
//
// # Speed
//
// Upstream converts every ResourceSlice of a node on every Allocate call,
// evaluates CEL selectors afresh per call and searches exhaustively. This
// package prepares each slice object once and keeps CEL results per slice
// version and expression in a Cache that outlives the cycle (Options.Cache),
// and it prunes the search without changing its first-fit answer: feasibility
// counts per slot (with matchAttribute candidates bucketed by value), a
// matching bound over the remaining requests that also counts the capacity
// shared devices have left (capacitybound.go), symmetry between
// interchangeable devices (shared ones included, while their shares consume
// the same), and a memo of failed sub-searches. See search.go for why each
// pruning keeps results identical, including which errors surface. What
// requests consume of a device and what partitionable devices draw from
// their pool's counters are, like CEL results, computed once and kept with
// the slice and the pool.
//
// # Logging
//
// Contextual logging only: V(5) once per call, V(6) for progress, V(7) for
// per-device detail.
package allocator
