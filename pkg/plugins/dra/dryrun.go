package dra

// Preemption's dry runs.
//
// DefaultPreemption finds victims with a dry run per node: it removes the
// lower-priority pods from a clone of the cycle state (RemovePod), checks
// that the pod fits (Filter), then adds victims back one by one (AddPod)
// and keeps those without which the pod still fits. Pod-group preemption
// removes its candidate victims from the scheduler's snapshot, runs the
// group's scheduling algorithm (PreFilter and Filter on fresh states),
// then adds victims back through AddPod in the same way.
//
// The plugin follows those edits with a dryRun per state. What the
// removed pods free is core.Victims, which needs neither the framework
// nor the plugin (the plugin gives it each pod's claims from the tracker):
//
//   - RemovePod: the claims of the pod free their devices if every pod they
//     are reserved for has been removed (a claim shared with a pod that
//     stays frees nothing), unless the pod is stuck terminating
//     (core.Stuck). Partitionable devices give back their counters and
//     consumable capacity exactly the victim's share, because freed
//     devices are counted by core.AddAllocation, the rule by which the
//     cycle's state counted them as taken; admin access frees nothing.
//   - AddPod of a removed pod undoes RemovePod. AddPod of any other pod is
//     a pod nominated to the node, which the framework adds before it
//     filters pods of lower or equal priority there: its devices are held
//     by its claim nomination, which the cycle counts already
//     (nomination.go), so it adds nothing.
//   - Filter allocates with the cycle's allocator edited accordingly
//     (allocator.WithEdits; with allocator: upstream, upstream's allocator
//     on the edited state), so the answer is upstream's for that state.
//     The nominations stay counted: a dry run cannot free what another
//     preemptor was promised. The freed devices are kept as pods are
//     removed and added back, and the edited allocator is built once per
//     set of edits: pod-group preemption dry-runs every pod of the group
//     on every node, and then adds thousands of victims back one by one,
//     so neither may cost the number of victims or of claims.
//   - In DefaultPreemption's dry run (the preemption plugin's
//     SelectVictimsOnNode names the node) the fit is not kept for Reserve:
//     the last successful Filter's allocation is what the pod gets once
//     the victims that SelectVictimsOnNode returns are gone, and becomes
//     its claim nomination if DefaultPreemption nominates it there.
//
// Filter rejects with Unschedulable only where evicting pods could help:
// the pod may preempt, a pod of lower priority runs on the node, and the
// claims would fit if no device there were allocated but the nominated
// ones. Otherwise (no device matches, taints, too few devices at all)
// UnschedulableAndUnresolvable keeps DefaultPreemption from dry-running
// the node for nothing.

import (
	"context"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drasched/drasched/internal/minor/schedminor"
	"github.com/drasched/drasched/pkg/allocator"
	"github.com/drasched/drasched/pkg/core"
)

// dryRun is the edits of one state: a clone that DefaultPreemption
// dry-runs a node on, or a state of pod-group preemption's simulation.
// Only the goroutine that owns the state touches it.
type dryRun struct {
	// victims are the pods the dry run took off and what they free,
	// kept by RemovePod and AddPod; nil until the first edit.
	victims *core.Victims

	// mutex guards alloc and allocInFlight: in pod-group preemption's
	// simulation, Filter runs for several nodes at once on one state.
	mutex sync.Mutex
	// alloc is the allocator for the current edits, built on first use.
	// It sees freedState, which the next edit changes in place: the
	// framework edits a state only between its Filter calls, and a clone,
	// which shares alloc and the edits, lives within one framework call
	// on the state it was cloned from.
	alloc nodeAllocator
	// allocInFlight are the allocations in flight that alloc counts, in
	// pod-group preemption's simulation.
	allocInFlight map[types.UID]*resourceapi.AllocationResult
	// live is the allocated state that the simulation's states allocate
	// on, shared by the states of one simulation.
	live *liveState
	// node is the node DefaultPreemption dry-runs; "" in other states.
	node string
	// fit is what the last successful Filter of DefaultPreemption's dry
	// run allocated, shared with the clones the framework makes of the
	// state to add the pods nominated to the node.
	fit *fitCell
	// simulation: the state is one that pod-group preemption made for its
	// simulation, which Reserve runs on; Filter keeps its allocations there.
	simulation bool
	// memo is what Filter found in the simulation, per node (memo.go);
	// nil in other states.
	memo *filterMemo
}

// clone returns the edits for a clone of the state, shared until the
// clone is edited (core.Victims.Clone); the clone of a state without edits
// gets an empty dryRun, ready to be edited.
func (d *dryRun) clone() *dryRun {
	if d == nil {
		return &dryRun{fit: &fitCell{}}
	}
	c := &dryRun{
		live:       d.live,
		node:       d.node,
		fit:        d.fit,
		simulation: d.simulation,
	}
	if d.victims != nil {
		c.victims = d.victims.Clone()
	}
	if d.memo != nil {
		// Its own: what the clone finds is for its edits.
		c.memo = newFilterMemo()
	}
	if c.fit == nil {
		c.fit = &fitCell{}
	}
	d.mutex.Lock()
	c.alloc, c.allocInFlight = d.alloc, d.allocInFlight
	d.mutex.Unlock()
	return c
}

// edit returns the dry run's victims to change, made on first use.
func (pl *Plugin) edit(d *dryRun) *core.Victims {
	if d.victims == nil {
		d.victims = core.NewVictims(pl.nominationMargin, pl.fts.EnableDRAConsumableCapacity)
	}
	return d.victims
}

// remove takes pods off with their claims and updates what they free.
func (pl *Plugin) remove(d *dryRun, pods map[types.UID]*v1.Pod) {
	pl.edit(d).Remove(pods, pl.claimsOfPod, time.Now())
	d.edited()
}

// edited drops the allocator of the previous edits.
func (d *dryRun) edited() {
	d.mutex.Lock()
	defer d.mutex.Unlock()
	d.alloc, d.allocInFlight = nil, nil
}

// removedPods returns the pods the dry run took off.
func (d *dryRun) removedPods() map[types.UID]*v1.Pod {
	if d == nil {
		return nil
	}
	return d.victims.Removed()
}

// active: the state's allocated state differs from the cycle's.
func (d *dryRun) active() bool {
	return len(d.removedPods()) > 0
}

// preempting: the state is one of DefaultPreemption's dry runs: Filter's
// fit is not for Reserve.
func (d *dryRun) preempting() bool {
	return d != nil && !d.simulation && (d.node != "" || d.active())
}

// fitCell holds the allocation that the last successful Filter of a dry
// run found.
type fitCell struct {
	mutex   sync.Mutex
	results []resourceapi.AllocationResult
}

func (c *fitCell) set(results []resourceapi.AllocationResult) {
	c.mutex.Lock()
	defer c.mutex.Unlock()
	c.results = results
}

func (c *fitCell) get() []resourceapi.AllocationResult {
	c.mutex.Lock()
	defer c.mutex.Unlock()
	return c.results
}

// preemptionFit is what DefaultPreemption's dry run found on one node.
type preemptionFit struct {
	// results match the claims Filter allocated (the pending claims,
	// then the claim for extended resources, if any); nil if the pod
	// allocates nothing.
	results []resourceapi.AllocationResult
	// victims are the pods SelectVictimsOnNode chose.
	victims []*v1.Pod
	// freed are the allocated claims the victims free.
	freed []*resourceapi.ResourceClaim
}

// PreFilterExtensions returns the plugin: it follows the pods that
// preemption's dry run removes and adds.
func (pl *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return pl }

// RemovePod takes a pod off in a state of preemption: the claims that
// only removed pods use free their devices. The pod may be on another node
// than the one the dry run is for (a victim PodGroup spans nodes); its
// claims then free devices there, which does not change what fits on the
// node.
func (pl *Plugin) RemovePod(ctx context.Context, cs fwk.CycleState, _ *v1.Pod, podInfoToRemove fwk.PodInfo, _ fwk.NodeInfo) *fwk.Status {
	s, d, status := pl.editable(ctx, cs)
	if s == nil {
		return status
	}
	pod := podInfoToRemove.GetPod()
	pl.remove(d, map[types.UID]*v1.Pod{pod.UID: pod})
	pl.memoEdited(d, pod)
	return nil
}

// AddPod puts back a pod that RemovePod took off. A pod nominated to the
// node holds its devices through its claim nomination, which the cycle
// counts already: nothing to add.
func (pl *Plugin) AddPod(ctx context.Context, cs fwk.CycleState, _ *v1.Pod, podInfoToAdd fwk.PodInfo, _ fwk.NodeInfo) *fwk.Status {
	s, d, status := pl.editable(ctx, cs)
	if s == nil {
		return status
	}
	if d.victims != nil && d.victims.Restore(podInfoToAdd.GetPod().UID, time.Now()) {
		d.edited()
		pl.memoEdited(d, podInfoToAdd.GetPod())
	}
	return nil
}

// editable returns the state and its edits, or the status to return when
// the pod has nothing to allocate (what other pods use cannot matter).
// DefaultPreemption and the nominated-pod pass edit clones; pod-group
// preemption edits the states of its simulation, which PreFilter gave a
// dryRun (simulation.go), or which get one here if the profile runs
// upstream's DefaultPreemption.
func (pl *Plugin) editable(ctx context.Context, cs fwk.CycleState) (*stateData, *dryRun, *fwk.Status) {
	s, err := getState(cs)
	if err != nil {
		return nil, nil, statusError(klog.FromContext(ctx), err)
	}
	if s.allocator == nil {
		return nil, nil, nil
	}
	if s.dryRun == nil {
		s.dryRun = (*dryRun)(nil).clone()
		s.dryRun.simulation = true
		s.dryRun.live = &liveState{}
		s.dryRun.memo = newFilterMemo()
	}
	return s, s.dryRun, nil
}

// freedClaims returns the claims that the removed pods free, by UID.
func (pl *Plugin) freedClaims(d *dryRun) []*resourceapi.ResourceClaim {
	if d == nil {
		return nil
	}
	return d.victims.Freed()
}

// edits are what the state's allocator sees changed from the cycle's
// allocated state: the claims the dry run's victims free, and the devices
// of the nominations that the pod yields to, which no victim frees.
func (pl *Plugin) edits(s *stateData) allocator.Edits {
	if s.dryRun == nil || s.dryRun.victims == nil {
		return allocator.Edits{Freed: core.NewAllocatedState(), Added: s.nominated}
	}
	return allocator.Edits{Freed: s.dryRun.victims.FreedState(), Added: s.nominated}
}

// claimsOfPod returns the claims a pod on a node holds: those of its spec
// and its claim for extended resources. Claims that cannot be found hold
// nothing the scheduler knows of.
func (pl *Plugin) claimsOfPod(pod *v1.Pod) []*resourceapi.ResourceClaim {
	var claims []*resourceapi.ResourceClaim
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil || name == nil {
			continue
		}
		if claim, err := pl.tracker.Claim(pod.Namespace, *name); err == nil {
			claims = append(claims, claim)
		}
	}
	if status := pod.Status.ExtendedResourceClaimStatus; status != nil && status.ResourceClaimName != "" {
		if claim, err := pl.tracker.Claim(pod.Namespace, status.ResourceClaimName); err == nil {
			claims = append(claims, claim)
		}
	}
	return claims
}

// dryRunAllocator returns the allocator for the state's edits, built once
// per set of edits; inFlight are the allocations in flight now, in
// pod-group preemption's simulation (nil in other dry runs).
//
// In pod-group preemption's simulation the set of edits includes the
// allocations in flight: the evaluator re-filters the group's pods one
// after the other while it adds victims back, and reserves each pod that
// fits before it filters the next, but each pod's state was made when the
// pods before it had their first devices. A pod that fits on other devices
// now holds those; without them, the next pod took the same devices, and a
// victim the group needs was spared. The group's pods that fit before this
// one hold their devices in flight, some of them devices that a victim's
// claim frees: they are taken whatever the victims free.
func (pl *Plugin) dryRunAllocator(ctx context.Context, s *stateData, inFlight map[types.UID]*resourceapi.AllocationResult) (nodeAllocator, error) {
	d := s.dryRun
	d.mutex.Lock()
	defer d.mutex.Unlock()
	if d.alloc != nil && (!d.simulation || sameAllocations(d.allocInFlight, inFlight)) {
		return d.alloc, nil
	}
	edits := pl.edits(s)
	var a nodeAllocator
	var err error
	if d.simulation {
		// Apart from the nominations, which are many more and do not
		// change: a rebuild costs the allocations in flight.
		edits.AlsoAdded = core.NewAllocatedState()
		for _, allocation := range inFlight {
			core.AddAllocation(&edits.AlsoAdded, allocation, pl.fts.EnableDRAConsumableCapacity)
		}
		a, err = d.live.allocator(ctx, pl, s, inFlight, edits)
	} else {
		a, err = pl.allocatorWith(ctx, s, edits)
	}
	if err != nil {
		return nil, err
	}
	d.alloc, d.allocInFlight = a, inFlight
	return a, nil
}

// inFlightAllocations returns the allocations in flight, by the UID they
// are in flight under.
func (pl *Plugin) inFlightAllocations() map[types.UID]*resourceapi.AllocationResult {
	uids := pl.tracker.InFlight()
	out := make(map[types.UID]*resourceapi.AllocationResult, len(uids))
	for _, uid := range uids {
		if allocation := pl.tracker.PendingAllocation(uid); allocation != nil {
			out[uid] = allocation
		}
	}
	return out
}

// sameAllocations: a and b hold the same allocations under the same UIDs.
// An allocation in flight is not changed in place, so comparing pointers
// suffices.
func sameAllocations(a, b map[types.UID]*resourceapi.AllocationResult) bool {
	return len(a) == len(b) && covers(a, b)
}

// covers: every allocation of b is in a, under the same UID.
func covers(a, b map[types.UID]*resourceapi.AllocationResult) bool {
	for uid, allocation := range b {
		if a[uid] != allocation {
			return false
		}
	}
	return true
}

// liveState is the tracker's allocated state as pod-group preemption's
// simulation allocates on it: gathered once for all the states of one
// simulation, not for each pod and node it filters (a gather copies every
// allocated device). It stays valid while the allocations that were in
// flight when it was gathered stay in flight: the simulation's own
// allocations come and go after that, and its states add those that are
// in flight at each Filter (dryRunAllocator). Allocations that the API
// server reports meanwhile are not seen until the next gather; the
// simulation only chooses victims, and the pods' scheduling cycles
// allocate on the state of their own.
type liveState struct {
	mutex sync.Mutex
	// state and slices are what was gathered; base is drasched's
	// allocator on them, nil with allocator: upstream.
	state  *structured.AllocatedState
	slices []*resourceapi.ResourceSlice
	base   *allocator.Allocator
	// inFlight are the allocations in flight when state was gathered.
	inFlight map[types.UID]*resourceapi.AllocationResult
}

// allocator returns an allocator of the cycle's kind on the live state
// with edits, gathering the state again if an allocation it counted as in
// flight is no longer (inFlight are those in flight now).
func (l *liveState) allocator(ctx context.Context, pl *Plugin, s *stateData, inFlight map[types.UID]*resourceapi.AllocationResult, edits allocator.Edits) (nodeAllocator, error) {
	l.mutex.Lock()
	defer l.mutex.Unlock()
	if l.state == nil || !covers(inFlight, l.inFlight) {
		state, slices, err := pl.gather(ctx)
		if err != nil {
			return nil, err
		}
		var base *allocator.Allocator
		if _, ours := s.allocator.(*allocator.Allocator); ours {
			if base, err = allocator.New(ctx, pl.features, *state, pl.tracker.DeviceClasses(), slices, pl.allocatorOptions()); err != nil {
				return nil, err
			}
		}
		l.state, l.slices, l.base, l.inFlight = state, slices, base, inFlight
	}
	if l.base != nil {
		return l.base.WithEdits(edits), nil
	}
	return structured.NewAllocator(ctx, pl.features, editedState(l.state, edits), pl.tracker.DeviceClasses(), l.slices, pl.celCache())
}

// liveAllocator returns an allocator of the cycle's kind on the tracker's
// allocated state as it is now, with edits.
func (pl *Plugin) liveAllocator(ctx context.Context, s *stateData, edits allocator.Edits) (nodeAllocator, error) {
	return (&liveState{}).allocator(ctx, pl, s, nil, edits)
}

// allocatorWith returns the cycle's allocator with edits of the cycle's
// allocated state (they replace the nominations it was built with).
func (pl *Plugin) allocatorWith(ctx context.Context, s *stateData, edits allocator.Edits) (nodeAllocator, error) {
	if base, ok := s.allocator.(*allocator.Allocator); ok {
		return base.WithEdits(edits), nil
	}
	return structured.NewAllocator(ctx, pl.features, editedState(s.base, edits), pl.tracker.DeviceClasses(), s.slices, pl.celCache())
}

// editedState applies edits to a copy of state, as upstream's scheduler
// would gather it after the claims were deallocated and allocated; for
// allocator: upstream, which cannot take edits.
func editedState(state *structured.AllocatedState, edits allocator.Edits) structured.AllocatedState {
	out := structured.AllocatedState{
		AllocatedDevices:         state.AllocatedDevices.Clone().Difference(edits.Freed.AllocatedDevices),
		AllocatedSharedDeviceIDs: state.AllocatedSharedDeviceIDs.Clone().Difference(edits.Freed.AllocatedSharedDeviceIDs),
		AggregatedCapacity:       state.AggregatedCapacity.Clone(),
	}
	for id, c := range edits.Freed.AggregatedCapacity {
		out.AggregatedCapacity.Remove(structured.DeviceConsumedCapacity{DeviceID: id, ConsumedCapacity: c})
	}
	core.AddState(&out, edits.Added)
	core.AddState(&out, edits.AlsoAdded)
	return out
}

// preemptionMayHelp reports whether evicting pods from the node could let
// the claims fit: the pod may preempt, a pod of lower priority runs there,
// and the claims fit the node with none of its devices allocated but the
// nominated ones. Priorities are compared as DefaultPreemption compares
// them: with GenericWorkload, a pod of a PodGroup has its group's.
func (pl *Plugin) preemptionMayHelp(ctx context.Context, s *stateData, pod *v1.Pod, nodeInfo fwk.NodeInfo, claims []*resourceapi.ResourceClaim) bool {
	if pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy == v1.PreemptNever {
		return false
	}
	priority := pl.preemptionPriority(pod)
	lower := false
	for _, p := range nodeInfo.GetPods() {
		if pl.preemptionPriority(p.GetPod()) < priority {
			lower = true
			break
		}
	}
	if !lower {
		return false
	}
	a, err := s.unoccupied(ctx, pl)
	if err != nil {
		return false
	}
	results, err := a.Allocate(ctx, nodeInfo.Node(), claims)
	return err == nil && len(results) == len(claims)
}

// preemptionPriority is the pod's priority as preemption compares it.
func (pl *Plugin) preemptionPriority(pod *v1.Pod) int32 {
	return schedminor.PreemptionPriority(pl.fh, pl.fts, pod)
}

// unoccupied returns drasched's allocator for the cycle with nothing
// allocated but the nominations, built once per cycle.
func (s *stateData) unoccupied(ctx context.Context, pl *Plugin) (*allocator.Allocator, error) {
	r := s.results
	r.unoccupiedOnce.Do(func() {
		a, err := s.explainer(ctx, pl)
		if err != nil {
			r.unoccupiedErr = err
			return
		}
		r.unoccupied = a.WithoutAllocations().WithEdits(allocator.Edits{Added: s.nominated})
	})
	return r.unoccupied, r.unoccupiedErr
}
