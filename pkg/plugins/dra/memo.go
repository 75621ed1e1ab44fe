package dra

// Filter's memo in pod-group preemption's simulation.
//
// Upstream's pod-group evaluator reprieves its candidate victims one at a
// time: it adds a victim back and filters every pod of the group again on
// the node it was assigned, whichever node the victim runs on. With
// thousands of lower-priority pods in the cluster, nearly all of them on
// other nodes than the group's, those searches repeat the same question on
// the same devices thousands of times (the design note of 2026-12-07 on
// preemption's timeline measured them at a quarter of the scheduler's
// CPU in preempt_gang on 1,000 nodes).
//
// A search on node N depends on the pod's claims, the node, the devices
// that the victims free and that are usable on N, and the allocations in
// flight usable on N. The memo counts, per node, the edits of victims whose
// claims hold devices of that node only (an allocation whose node selector
// names exactly that node); an edit of a victim whose claims hold devices
// usable on more nodes (network-attached devices, or a selector by labels)
// counts for every node. A search is answered from the memo when neither
// count changed and the allocations in flight usable on N are the same;
// anything else searches again.

import (
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
)

// filterMemo is what the searches of one state of the simulation found,
// per node, and the edits that make them stale.
type filterMemo struct {
	mutex sync.Mutex
	// edits counts the edits of victims per node; global those of victims
	// with devices usable on more than one node.
	edits  map[string]uint64
	global uint64
	// found are the searches by node.
	found map[string]memoEntry
}

// memoEntry is one search and what it depended on.
type memoEntry struct {
	edits, global uint64
	// claims is the slice of claims searched for, compared by identity:
	// the state's pending claims, built once per cycle.
	claims   []*resourceapi.ResourceClaim
	inFlight map[types.UID]*resourceapi.AllocationResult
	results  []resourceapi.AllocationResult
	err      error
}

func newFilterMemo() *filterMemo {
	return &filterMemo{edits: map[string]uint64{}, found: map[string]memoEntry{}}
}

// edited records an edit of a victim on node whose claims hold devices
// usable on other nodes too (local false) or on that node only.
func (m *filterMemo) edited(node string, local bool) {
	m.mutex.Lock()
	defer m.mutex.Unlock()
	m.edits[node]++
	if !local {
		m.global++
	}
}

// get returns the search on node for claims, if nothing it depended on
// changed; inFlight are the allocations in flight now, all nodes'.
func (m *filterMemo) get(node string, claims []*resourceapi.ResourceClaim, inFlight map[types.UID]*resourceapi.AllocationResult) ([]resourceapi.AllocationResult, error, bool) {
	m.mutex.Lock()
	defer m.mutex.Unlock()
	e, ok := m.found[node]
	if !ok || e.edits != m.edits[node] || e.global != m.global || !sameClaims(e.claims, claims) {
		return nil, nil, false
	}
	if !sameAllocations(e.inFlight, usableOn(node, inFlight)) {
		return nil, nil, false
	}
	return e.results, e.err, true
}

// put remembers a search on node as of the current edits.
func (m *filterMemo) put(node string, claims []*resourceapi.ResourceClaim, inFlight map[types.UID]*resourceapi.AllocationResult, results []resourceapi.AllocationResult, err error) {
	usable := usableOn(node, inFlight)
	m.mutex.Lock()
	defer m.mutex.Unlock()
	m.found[node] = memoEntry{
		edits:    m.edits[node],
		global:   m.global,
		claims:   claims,
		inFlight: usable,
		results:  results,
		err:      err,
	}
}

// sameClaims: a and b are the same slice of claims.
func sameClaims(a, b []*resourceapi.ResourceClaim) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// usableOn returns the allocations whose devices may be usable on node:
// all but those whose node selector names another node only.
func usableOn(node string, allocations map[types.UID]*resourceapi.AllocationResult) map[types.UID]*resourceapi.AllocationResult {
	var out map[types.UID]*resourceapi.AllocationResult
	for uid, allocation := range allocations {
		if only, ok := allocationNode(allocation); ok && only != node {
			continue
		}
		if out == nil {
			out = map[types.UID]*resourceapi.AllocationResult{}
		}
		out[uid] = allocation
	}
	return out
}

// allocationNode returns the node that an allocation's devices are
// usable on, if its node selector names exactly one node by name, as the
// allocators write it for the devices of a node's own ResourceSlices.
func allocationNode(allocation *resourceapi.AllocationResult) (string, bool) {
	if allocation == nil || allocation.NodeSelector == nil {
		return "", false
	}
	return singleNode(allocation.NodeSelector)
}

// memoEdited records in the state's memo that a victim was removed or
// added back: its node's searches, or all of them if its claims hold
// devices usable elsewhere, are stale.
func (pl *Plugin) memoEdited(d *dryRun, pod *v1.Pod) {
	m := d.memo
	if m == nil {
		return
	}
	local := true
	for _, claim := range pl.claimsOfPod(pod) {
		if claim.Status.Allocation == nil {
			continue
		}
		if only, ok := allocationNode(claim.Status.Allocation); !ok || only != pod.Spec.NodeName {
			local = false
			break
		}
	}
	m.edited(pod.Spec.NodeName, local)
}
