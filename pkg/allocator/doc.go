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
// Cache.Matches evaluates one selector on one device through the Cache,
// for tools that count devices per class, and honours the context like
// Allocate. Cache.MatchesWithin does the same on a CostBudget, for callers
// that must not wait for whatever selectors cost (queueing hints): a result
// the Cache holds is free, an evaluation costs what cel-go counts, and once
// the budget is spent a result the Cache does not hold is ErrBudgetSpent.
// The Cache is safe for concurrent use; a CostBudget is not.
//
// With the default policy (zero Options) the results are exactly those of
// structured.NewAllocator with structured.EnableAllocators("incubating",
// "experimental"): the same devices in the same order, the same configs,
// node selector, consumed capacity and binding conditions. That is what
// kube-scheduler 1.37 runs with its default feature gates, under which
// upstream never picks its third tier, "stable" (it lacks binding
// conditions, which are on); with the gates of every feature stable lacks
// turned off, upstream picks stable, and this package still answers as
// "incubating". Like upstream, the behaviour is picked per Features from
// the first tier ("incubating", then "experimental") that supports them;
// unlike upstream, the tiers share one search core and differ only in
// switches.
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
// What the Cache keeps costs memory while no DRA pod is scheduled: about
// 2.3 KB per GPU node of eight devices once a pod has been filtered on it
// (BenchmarkCacheAtRest). A prepared slice therefore keeps per device only
// what the hot path reads (its ID); the CEL input is built per evaluation.
//
// # Logging
//
// Contextual logging only (klog.FromContext), and only at V(5): New logs
// the tier and the size of its input once, and each Allocate call logs its
// start (claims, candidates) and its end (success or error, search steps,
// feasibility prunes, symmetry skips, memo hits), with BestFit once more
// for the BestFit search. Nothing is logged per device or per search step:
// Filter runs the search for every node, and Explain says per request why
// a node has no fit.
//
// # Files
//
//	doc.go                 this page: the contract, policies, speed, logging, files
//	allocator.go           Options, Allocator, New, Allocate, DeviceUsage; "All" requests; recycled searches
//	tiers.go               upstream's allocator variants as switches on the one search, and picking one
//	classlist.go           ClassList: a list of DeviceClasses as a structured.DeviceClassLister
//	cache.go               Cache: compiled CEL, prepared slices, CEL results per slice version, node views; Matches, on a budget too
//	prepare.go             a ResourceSlice prepared once: device IDs, capacity, node selection
//	pools.go               the pools and candidate devices a node sees, kept per node, and the slice index
//	requests.go            claims and requests prepared once per Allocator: classes, selectors, validation
//	search.go              the first-fit backtracking search: slots, placement and undo, symmetry
//	accept.go              accepts, the one rule whether a candidate can take a slot
//	evaluate.go            CEL selectors and derived attributes of a candidate, through the Cache
//	constraints.go         matchAttribute and distinctAttribute while devices come and go
//	counters.go            partitionable devices: counters drawn per pool, compatibility groups
//	capacity.go            consumable capacity: what a request consumes of a shared device
//	feasible.go            the count of candidates a slot could still take, before it is filled
//	matchingbound.go       the bound once the search backtracks: remaining requests as a matching; traps
//	capacitybound.go       the matching bound's part for the capacity left on shared devices
//	memo.go                the hashes of the search state under which failed sub-searches are kept
//	result.go              AllocationResults from an assignment: device order, configs, node selector
//	bestfit.go             PolicyBestFit's candidate order, topology groups, WholeFree
//	edits.go               Edits, WithEdits and WithoutAllocations for preemption's dry run
//	explain.go             Explain: why claims do not fit on a node, with Reasons
//	internal/randinst      random allocation problems for the differential tests and the fuzzer
//	differential_test.go   results and errors equal to upstream's on random problems; the fuzzer
//	edits_test.go          WithEdits equal to upstream on the edited state
//	badinput_test.go       invalid input, cancellation, concurrent nodes
//	bestfit_test.go        BestFit's choices, the errors it keeps, WholeFree
//	cache_test.go          reuse, sweeping and bounds of the Cache; Matches with a context and a budget
//	capacitybound_test.go  the capacity bound
//	matchingbound_test.go  the matching with limited shared devices
//	symmetry_test.go       when shared devices count as interchangeable; writeAttribute
//	explain_test.go        Explain's reasons, and its context
//	tiers_test.go          the tiers against upstream's variants
//	bench_test.go          BenchmarkAllocate and BenchmarkExplain, ours against upstream
//	memory_test.go         BenchmarkCacheAtRest: the heap the Cache keeps per node between cycles
package allocator
