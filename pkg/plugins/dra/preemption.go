package dra

// DRA-aware preemption.
//
// DefaultPreemption finds victims with a dry run per node: it removes the
// lower-priority pods from a clone of the cycle state (RemovePod), checks
// that the pod fits (Filter), then adds victims back one by one (AddPod)
// and keeps those without which the pod still fits. The framework also
// adds the pods nominated to a node (AddPod) before it filters other pods
// there, so that the devices freed for a preemptor are not given to a pod
// of lower priority in the meantime.
//
// The plugin follows those edits with a dryRun per clone:
//
//   - RemovePod: the claims of the pod free their devices if every pod they
//     are reserved for has been removed (a claim shared with a pod that
//     stays frees nothing). Partitionable devices give back their counters
//     and consumable capacity exactly the victim's share, because freed
//     devices are counted by tracker.AddAllocation, the rule by which the
//     cycle's state counted them as taken; admin access frees nothing.
//   - AddPod of a removed pod undoes RemovePod. AddPod of any other pod is a
//     nominated pod: its claims without an allocation are allocated on the
//     node against the edited state, and those devices are taken.
//   - Filter allocates with the cycle's allocator edited accordingly
//     (allocator.WithEdits; with allocator: upstream, upstream's allocator
//     on the edited state), so the answer is upstream's for that state.
//
// Filter rejects with Unschedulable only where evicting pods could help:
// the pod may preempt, a pod of lower priority runs on the node, and the
// claims would fit if no device there were allocated. Otherwise (no device
// matches, taints, too few devices at all) UnschedulableAndUnresolvable
// keeps DefaultPreemption from dry-running the node for nothing.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drasched/drasched/pkg/allocator"
	"github.com/drasched/drasched/pkg/tracker"
)

// dryRun is the edits of one clone of the cycle state.
type dryRun struct {
	// removed are the pods the dry run took off, by UID.
	removed map[types.UID]*v1.Pod
	// claims are the claims of each removed pod as they were when it was
	// removed, by pod UID: a preemptor's victims' claims are deleted soon
	// after the victims, but the devices they held stay the preemptor's
	// until it is bound.
	claims map[types.UID][]*resourceapi.ResourceClaim
	// nominated are the allocations of the claims of pods nominated to
	// the node, by pod UID.
	nominated map[types.UID][]resourceapi.AllocationResult
	// alloc is the allocator for the current edits, built on first use.
	alloc nodeAllocator
	// preemptor and node are the pod and node of DefaultPreemption's dry
	// run, set by RemovePod.
	preemptor types.UID
	node      string
	// promised are the claims that the victims of the other preemptors
	// nominated to the node free (see edits), found at the dry run's
	// first RemovePod: the nominations do not change during a dry run,
	// and Filter rebuilds the allocator after every edit. Read-only.
	promised sets.Set[types.UID]
	// fit is what the last successful Filter of the dry run allocated
	// (preemptor.go), shared with the clones that add nominated pods.
	fit *fitCell
	// simulation: the state is not a clone but one that the preemption of
	// pod groups made for its simulation, which Reserve runs on; Filter
	// keeps its allocations there.
	simulation bool
}

// clone copies the edits for a clone of the state; the clone of a state
// without edits gets an empty dryRun, ready to be edited.
func (d *dryRun) clone() *dryRun {
	c := &dryRun{
		removed:   map[types.UID]*v1.Pod{},
		claims:    map[types.UID][]*resourceapi.ResourceClaim{},
		nominated: map[types.UID][]resourceapi.AllocationResult{},
	}
	if d != nil {
		maps.Copy(c.removed, d.removed)
		maps.Copy(c.claims, d.claims)
		maps.Copy(c.nominated, d.nominated)
		c.alloc = d.alloc
		c.fit = d.fit
		c.preemptor, c.node, c.promised = d.preemptor, d.node, d.promised
		c.simulation = d.simulation
	}
	if c.fit == nil {
		c.fit = &fitCell{}
	}
	return c
}

// removedPods returns the pods the dry run took off.
func (d *dryRun) removedPods() map[types.UID]*v1.Pod {
	if d == nil {
		return nil
	}
	return d.removed
}

// active: the clone's allocated state differs from the cycle's.
func (d *dryRun) active() bool {
	return d != nil && (len(d.removed) > 0 || len(d.nominated) > 0)
}

// PreFilterExtensions returns the plugin: it follows the pods that
// preemption's dry run removes and adds, and the pods nominated to a node.
func (pl *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return pl }

// RemovePod takes a pod off the node in a clone of the cycle state: the
// claims that only removed pods use free their devices.
func (pl *Plugin) RemovePod(ctx context.Context, cs fwk.CycleState, podToSchedule *v1.Pod, podInfoToRemove fwk.PodInfo, nodeInfo fwk.NodeInfo) *fwk.Status {
	s, d, status := pl.editable(ctx, cs)
	if s == nil {
		return status
	}
	pod := podInfoToRemove.GetPod()
	if _, ok := d.nominated[pod.UID]; ok {
		delete(d.nominated, pod.UID)
	} else {
		d.removed[pod.UID] = pod
		d.claims[pod.UID] = pl.claimsOfPod(pod)
	}
	d.alloc = nil
	if !d.simulation {
		if d.promised == nil {
			d.preemptor, d.node = podToSchedule.UID, nodeInfo.Node().Name
			d.promised = sets.New[types.UID]()
			for _, claim := range pl.promised(d.node, d.preemptor) {
				d.promised.Insert(claim.UID)
			}
		}
		pl.preemptions.record(podToSchedule, s.results, d.node, d, pl.pendingPod)
	}
	return nil
}

// preemptions remembers, per preemptor, the dry runs of its last
// preemption attempt, by node: once DefaultPreemption nominates the pod to
// one of them, that dry run's removed pods are the victims it is evicting.
//
// A nominated pod's devices must be held for it from the moment it is
// nominated, also in the cycles that run before the scheduler's informer
// has seen its victims deleted (the deletions are sent asynchronously, and
// the next cycle starts at once): without its victims, what is free on
// the node does not fit the nominated pod, it would hold nothing, and the
// next preemptor would evict pods for the same devices.
type preemptions struct {
	mutex sync.Mutex
	// byPod are the dry runs by preemptor UID, then node.
	byPod map[types.UID]*preemptionAttempt
}

// preemptionAttempt is the dry runs of one scheduling cycle.
type preemptionAttempt struct {
	namespace, name string
	results         *filterResults
	nodes           map[string]*dryRun
}

// record notes the dry run on node of the preemptor's current cycle. A
// dry run's edits change until DefaultPreemption has chosen its victims;
// they are read in later cycles only. A new attempt also drops the
// attempts of pods that pending no longer finds waiting (deleted, or bound
// by another path than Reserve).
func (p *preemptions) record(preemptor *v1.Pod, results *filterResults, node string, d *dryRun, pending func(namespace, name string, uid types.UID) bool) {
	p.mutex.Lock()
	defer p.mutex.Unlock()
	if p.byPod == nil {
		p.byPod = map[types.UID]*preemptionAttempt{}
	}
	attempt := p.byPod[preemptor.UID]
	if attempt == nil || attempt.results != results {
		for uid, other := range p.byPod {
			if !pending(other.namespace, other.name, uid) {
				delete(p.byPod, uid)
			}
		}
		attempt = &preemptionAttempt{namespace: preemptor.Namespace, name: preemptor.Name, results: results, nodes: map[string]*dryRun{}}
		p.byPod[preemptor.UID] = attempt
	}
	attempt.nodes[node] = d
}

// dryRun returns the preemptor's last dry run on node; nil if there was
// none.
func (p *preemptions) dryRun(preemptor types.UID, node string) *dryRun {
	p.mutex.Lock()
	defer p.mutex.Unlock()
	if attempt := p.byPod[preemptor]; attempt != nil {
		return attempt.nodes[node]
	}
	return nil
}

// nodes returns the nodes of the preemptor's last attempt's dry runs.
func (p *preemptions) nodes(preemptor types.UID) []string {
	p.mutex.Lock()
	defer p.mutex.Unlock()
	if attempt := p.byPod[preemptor]; attempt != nil {
		return slices.Collect(maps.Keys(attempt.nodes))
	}
	return nil
}

// victimClaims returns the claims that the victims of the preemptor's
// last dry run on node free, as they were when the dry run removed them;
// nil if there was none.
func (p *preemptions) victimClaims(preemptor types.UID, node string) []*resourceapi.ResourceClaim {
	if d := p.dryRun(preemptor, node); d != nil {
		return d.freedClaims()
	}
	return nil
}

// freedClaims returns the claims of the removed pods that they free: those
// reserved only for removed pods, once each.
func (d *dryRun) freedClaims() []*resourceapi.ResourceClaim {
	var freed []*resourceapi.ResourceClaim
	seen := sets.New[types.UID]()
	for uid := range d.removed {
		for _, claim := range d.claims[uid] {
			if !seen.Has(claim.UID) && freedBy(claim, d.removed) {
				seen.Insert(claim.UID)
				freed = append(freed, claim)
			}
		}
	}
	return freed
}

// forget drops what is known of the pod's preemptions: it was assumed on
// a node, or deleted.
func (p *preemptions) forget(pod types.UID) {
	p.mutex.Lock()
	defer p.mutex.Unlock()
	delete(p.byPod, pod)
}

// AddPod puts back a pod that RemovePod took off, or adds a pod nominated
// to the node: the devices its claims would get there are taken.
func (pl *Plugin) AddPod(ctx context.Context, cs fwk.CycleState, _ *v1.Pod, podInfoToAdd fwk.PodInfo, nodeInfo fwk.NodeInfo) *fwk.Status {
	s, d, status := pl.editable(ctx, cs)
	if s == nil {
		return status
	}
	pod := podInfoToAdd.GetPod()
	if _, ok := d.removed[pod.UID]; ok {
		delete(d.removed, pod.UID)
		delete(d.claims, pod.UID)
		d.alloc = nil
		return nil
	}
	results, err := pl.nominatedAllocation(ctx, s, pod, nodeInfo)
	if err != nil {
		return statusError(klog.FromContext(ctx), err, "pod", klog.KObj(pod), "node", klog.KObj(nodeInfo.Node()))
	}
	if results != nil {
		d.nominated[pod.UID] = results
		d.alloc = nil
	}
	return nil
}

// editable returns the state and its edits, or the status to return when
// the pod has nothing to allocate (what other pods use cannot matter).
// DefaultPreemption and the nominated-pod pass edit clones; the preemption
// of pod groups edits states that it made for its simulation by running
// PreFilter, which get their dryRun here.
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
	}
	return s, s.dryRun, nil
}

// nominatedAllocation allocates, on the node and against the edited state,
// the claims of a nominated pod that have no allocation yet; nil if it has
// none or they do not fit (then the pod cannot take anything there).
func (pl *Plugin) nominatedAllocation(ctx context.Context, s *stateData, pod *v1.Pod, nodeInfo fwk.NodeInfo) ([]resourceapi.AllocationResult, error) {
	logger := klog.FromContext(ctx)
	claims, err := pl.podClaims(pod)
	if err != nil {
		return nil, nil
	}
	var pending []*resourceapi.ResourceClaim
	for _, claim := range claims {
		// Allocated or in flight: counted in the cycle's state already.
		if claim.Status.Allocation != nil || pl.tracker.PendingAllocation(claim.UID) != nil {
			continue
		}
		if pl.checkClasses(logger, claim) != nil {
			return nil, nil
		}
		pending = append(pending, claim)
	}
	ns := &stateData{}
	if pl.preFilterExtended(logger, ns, pod) == nil && ns.extended != nil {
		if claim, status := pl.filterExtended(logger, ns, pod, nodeInfo); status == nil && claim != nil {
			pending = append(pending, claim)
		}
	}
	if len(pending) == 0 {
		return nil, nil
	}
	// What the nominated pod will get: the devices free now or about to
	// be, and those of the victims its own preemption chose on the node
	// (whose deletion may not have been seen yet), less what other
	// nominated pods take. Not the devices of the pods this dry run
	// removes: the preemptor evicts those for itself, and counting them
	// for the nominated pod would make it evict more. Nor those of the
	// victims of the other preemptors nominated to the node, freed or
	// being freed: they are theirs. First fit gave a nominated pod the
	// first devices freed, and in the cycle of the preemptor they were
	// freed for, that one found too few and preempted again.
	node := nodeInfo.Node().Name
	beingFreed, err := s.claimsBeingFreed(pl, node)
	if err != nil {
		return nil, err
	}
	edits := pl.edits(&dryRun{nominated: s.dryRun.nominated})
	others := sets.New[types.UID]()
	for _, claim := range pl.promised(node, pod.UID) {
		others.Insert(claim.UID)
		if pl.stillAllocated(claim) == nil {
			// Free already: taken for this pod. (A device given since
			// to a claim that the state counts would be counted twice;
			// that only makes the nominated pod hold less.)
			tracker.AddAllocation(&edits.Added, claim.Status.Allocation, pl.fts.EnableDRAConsumableCapacity)
		}
	}
	freed := sets.New[types.UID]()
	for _, claim := range beingFreed {
		if !others.Has(claim.UID) {
			freed.Insert(claim.UID)
			tracker.AddAllocation(&edits.Freed, claim.Status.Allocation, pl.fts.EnableDRAConsumableCapacity)
		}
	}
	// The pod's own victims' claims, as the dry run recorded them,
	// whether the cache still has them or not: the cycle's state was
	// taken at its start and may still count a claim deallocated since
	// (then the nominated pod held nothing). Freeing a device the state
	// does not count changes nothing; freeing a share of consumable
	// capacity that it no longer counts can only make the nominated pod
	// hold more than it gets, which keeps other pods off, never on.
	for _, claim := range pl.preemptions.victimClaims(pod.UID, node) {
		if !freed.Has(claim.UID) {
			freed.Insert(claim.UID)
			tracker.AddAllocation(&edits.Freed, claim.Status.Allocation, pl.fts.EnableDRAConsumableCapacity)
		}
	}
	a, err := pl.allocatorWith(ctx, s, edits, true)
	if err != nil {
		return nil, err
	}
	results, err := a.Allocate(ctx, nodeInfo.Node(), pending)
	if err != nil || len(results) != len(pending) {
		logger.V(5).Info("Nominated pod's claims do not fit on its node", "pod", klog.KObj(pod), "node", klog.KObj(nodeInfo.Node()), "err", err)
		return nil, nil
	}
	return results, nil
}

// edits turns the dry run into allocator edits.
//
// A removed pod's claim that another preemptor nominated to the node
// evicted the pod for frees nothing: its devices are that preemptor's.
// (DefaultPreemption may choose a victim again while the scheduler has not
// seen it deleted; the two preemptors then each counted its device, and
// neither could hold its devices.)
func (pl *Plugin) edits(d *dryRun) allocator.Edits {
	edits := allocator.Edits{Freed: tracker.NewAllocatedState(), Added: tracker.NewAllocatedState()}
	for _, claim := range d.freedClaims() {
		if !d.promised.Has(claim.UID) {
			tracker.AddAllocation(&edits.Freed, claim.Status.Allocation, pl.fts.EnableDRAConsumableCapacity)
		}
	}
	for _, results := range d.nominated {
		for i := range results {
			tracker.AddAllocation(&edits.Added, &results[i], pl.fts.EnableDRAConsumableCapacity)
		}
	}
	return edits
}

// promised returns the claims that the victims of the preemptors nominated
// to node, other than the pod, free: their devices are those preemptors'
// until they are bound.
func (pl *Plugin) promised(node string, pod types.UID) []*resourceapi.ResourceClaim {
	var claims []*resourceapi.ResourceClaim
	for _, other := range pl.fh.NominatedPodsForNode(node) {
		if uid := other.GetPod().UID; uid != pod {
			claims = append(claims, pl.preemptions.victimClaims(uid, node)...)
		}
	}
	return claims
}

// pendingPod: the pod exists and is not bound to a node.
func (pl *Plugin) pendingPod(namespace, name string, uid types.UID) bool {
	pod, err := pl.fh.SharedInformerFactory().Core().V1().Pods().Lister().Pods(namespace).Get(name)
	return err == nil && pod.UID == uid && pod.Spec.NodeName == ""
}

// claimsOfPod returns the claims a pod on a node holds: those of its spec
// and its claim for extended resources. Claims that cannot be found hold
// nothing the scheduler knows of.
func (pl *Plugin) claimsOfPod(pod *v1.Pod) []*resourceapi.ResourceClaim {
	var claims []*resourceapi.ResourceClaim
	add := func(name string) {
		if claim, err := pl.tracker.Claim(pod.Namespace, name); err == nil {
			claims = append(claims, claim)
		}
	}
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err == nil && name != nil {
			add(*name)
		}
	}
	if status := pod.Status.ExtendedResourceClaimStatus; status != nil {
		add(status.ResourceClaimName)
	}
	return claims
}

// stillAllocated returns the claim as the cache has it now if it is still
// allocated, nil if it was deleted or deallocated since claim was read.
func (pl *Plugin) stillAllocated(claim *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	live, err := pl.tracker.Claim(claim.Namespace, claim.Name)
	if err != nil || live.UID != claim.UID || live.Status.Allocation == nil {
		return nil
	}
	return live
}

// freedBy: the claim is allocated and reserved only for removed pods, so
// the claim controller deallocates (or deletes) it once they are gone.
func freedBy(claim *resourceapi.ResourceClaim, removed map[types.UID]*v1.Pod) bool {
	if claim.Status.Allocation == nil || len(claim.Status.ReservedFor) == 0 {
		return false
	}
	for _, consumer := range claim.Status.ReservedFor {
		if consumer.APIGroup != "" || consumer.Resource != "pods" {
			return false
		}
		if _, ok := removed[consumer.UID]; !ok {
			return false
		}
	}
	return true
}

// claimsBeingFreed is pl.claimsBeingFreed, once per node and cycle.
func (s *stateData) claimsBeingFreed(pl *Plugin, node string) ([]*resourceapi.ResourceClaim, error) {
	r := s.results
	r.beingFreedMutex.Lock()
	defer r.beingFreedMutex.Unlock()
	if freed, ok := r.beingFreed[node]; ok {
		return freed, nil
	}
	freed, err := pl.claimsBeingFreed(node)
	if err != nil {
		return nil, err
	}
	if r.beingFreed == nil {
		r.beingFreed = map[string][]*resourceapi.ResourceClaim{}
	}
	r.beingFreed[node] = freed
	return freed, nil
}

// claimsBeingFreed returns the allocated claims on the node whose consumers
// are all pods that are gone or being deleted: the claim controller is
// about to deallocate or delete them, as after a preemption.
func (pl *Plugin) claimsBeingFreed(node string) ([]*resourceapi.ResourceClaim, error) {
	byNode, err := pl.claimsBeingFreedByNode(func(n string) bool { return n == node })
	return byNode[node], err
}

// claimsBeingFreedByNode returns the claims being freed (see
// claimsBeingFreed) on the nodes that match, by node.
func (pl *Plugin) claimsBeingFreedByNode(match func(node string) bool) (map[string][]*resourceapi.ResourceClaim, error) {
	claims, err := pl.tracker.Claims()
	if err != nil {
		return nil, fmt.Errorf("list resource claims: %w", err)
	}
	pods := pl.fh.SharedInformerFactory().Core().V1().Pods().Lister()
	freed := map[string][]*resourceapi.ResourceClaim{}
	for _, claim := range claims {
		allocation := claim.Status.Allocation
		if allocation == nil || len(claim.Status.ReservedFor) == 0 || allocation.NodeSelector == nil {
			continue
		}
		node, ok := singleNode(allocation.NodeSelector)
		if !ok || !match(node) {
			continue
		}
		gone := true
		for _, consumer := range claim.Status.ReservedFor {
			if consumer.APIGroup != "" || consumer.Resource != "pods" {
				gone = false
				break
			}
			pod, err := pods.Pods(claim.Namespace).Get(consumer.Name)
			if err == nil && pod.UID == consumer.UID && pod.DeletionTimestamp == nil {
				gone = false
				break
			}
		}
		if gone {
			freed[node] = append(freed[node], claim)
		}
	}
	return freed, nil
}

// awaitedDeallocations returns the node the pod is nominated to and how
// many claims are being freed there. The pod's status names the node once
// the scheduler's informer has seen the update that preemption sent; until
// then (it is sent asynchronously, and the preemptor may come back as soon
// as its victims are deleted) the nominator knows.
//
// The claims of the pod's own victims there count as well while the API
// shows their pods gone or being deleted, also when the informer has not
// seen it yet: DefaultPreemption lets the preemptor back once the last
// deletion is sent, and its next cycle may see one victim's claim
// deallocated and another victim still running, which made it evict one
// more pod for a device about to be free. A victim that the API shows
// running (its deletion failed) is not waited for. So does a victim's
// claim deallocated after the cycle took its state (s): Filter found its
// devices taken, the next cycle will not, and the claim's event requeues
// the pod.
func (pl *Plugin) awaitedDeallocations(ctx context.Context, s *stateData, pod *v1.Pod) (string, int, error) {
	node := pod.Status.NominatedNodeName
	var freed []*resourceapi.ResourceClaim
	if node != "" {
		var err error
		if freed, err = pl.claimsBeingFreed(node); err != nil {
			return "", 0, err
		}
	} else {
		byNode, err := pl.claimsBeingFreedByNode(func(string) bool { return true })
		if err != nil {
			return "", 0, err
		}
		// Where the pod may be nominated: where its last preemption
		// dry-ran, or claims are being freed.
		candidates := sets.KeySet(byNode).Insert(pl.preemptions.nodes(pod.UID)...)
		node = pl.nominatedNode(pod, candidates)
		freed = byNode[node]
	}
	if node == "" {
		return "", 0, nil
	}
	counted := sets.New[types.UID]()
	for _, claim := range freed {
		counted.Insert(claim.UID)
	}
	for _, claim := range pl.preemptions.victimClaims(pod.UID, node) {
		if counted.Has(claim.UID) {
			continue
		}
		if pl.stillAllocated(claim) == nil {
			if s.counts(claim.Status.Allocation, pl.fts.EnableDRAConsumableCapacity) {
				counted.Insert(claim.UID)
			}
			continue
		}
		deleted, err := pl.consumersDeleted(ctx, claim)
		if err != nil {
			return "", 0, err
		}
		if deleted {
			counted.Insert(claim.UID)
		}
	}
	return node, counted.Len(), nil
}

// counts reports whether the cycle's allocated state counts a device or
// share of the allocation.
func (s *stateData) counts(allocation *resourceapi.AllocationResult, consumableCapacity bool) bool {
	if s.base == nil {
		return false
	}
	mine := tracker.NewAllocatedState()
	tracker.AddAllocation(&mine, allocation, consumableCapacity)
	return s.base.AllocatedDevices.HasAny(mine.AllocatedDevices.UnsortedList()...) ||
		s.base.AllocatedSharedDeviceIDs.HasAny(mine.AllocatedSharedDeviceIDs.UnsortedList()...)
}

// nominatedNode returns the node among candidates that the nominator has
// the pod nominated to; "" if none. (The nominator is asked per node.)
func (pl *Plugin) nominatedNode(pod *v1.Pod, candidates sets.Set[string]) string {
	for node := range candidates {
		for _, nominated := range pl.fh.NominatedPodsForNode(node) {
			if nominated.GetPod().UID == pod.UID {
				return node
			}
		}
	}
	return ""
}

// consumersDeleted asks the API whether every pod the claim was reserved
// for (when it was recorded) is gone or being deleted.
func (pl *Plugin) consumersDeleted(ctx context.Context, claim *resourceapi.ResourceClaim) (bool, error) {
	for _, consumer := range claim.Status.ReservedFor {
		pod, err := pl.client.CoreV1().Pods(claim.Namespace).Get(ctx, consumer.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return false, fmt.Errorf("get pod %s/%s: %w", claim.Namespace, consumer.Name, err)
		case pod.UID != consumer.UID || pod.DeletionTimestamp != nil:
			continue
		}
		return false, nil
	}
	return true, nil
}

// dryRunAllocator returns the allocator for the clone's edits, built once
// per set of edits.
func (pl *Plugin) dryRunAllocator(ctx context.Context, s *stateData) (nodeAllocator, error) {
	d := s.dryRun
	if d.alloc != nil {
		return d.alloc, nil
	}
	a, err := pl.allocatorWith(ctx, s, pl.edits(d), false)
	if err != nil {
		return nil, err
	}
	d.alloc = a
	return a, nil
}

// allocatorWith returns the cycle's allocator with edits. ours asks for
// drasched's allocator even with allocator: upstream, for nominated pods,
// where only the devices matter and drasched's are upstream's.
func (pl *Plugin) allocatorWith(ctx context.Context, s *stateData, edits allocator.Edits, ours bool) (nodeAllocator, error) {
	var a nodeAllocator
	if base, ok := s.allocator.(*allocator.Allocator); ok {
		a = base.WithEdits(edits)
	} else {
		state := editedState(s.base, edits)
		if ours {
			na, err := allocator.New(ctx, pl.features, state, pl.tracker.DeviceClasses(), s.slices, pl.allocatorOptions())
			if err != nil {
				return nil, err
			}
			return na, nil
		}
		ua, err := structured.NewAllocator(ctx, pl.features, state, pl.tracker.DeviceClasses(), s.slices, pl.celCache())
		if err != nil {
			return nil, err
		}
		a = ua
	}
	return a, nil
}

// editedState applies edits to a copy of state, as upstream's scheduler
// would gather it after the claims were deallocated and allocated; for
// allocator: upstream, which cannot take edits.
func editedState(state *structured.AllocatedState, edits allocator.Edits) structured.AllocatedState {
	out := structured.AllocatedState{
		AllocatedDevices:         state.AllocatedDevices.Clone().Difference(edits.Freed.AllocatedDevices).Union(edits.Added.AllocatedDevices),
		AllocatedSharedDeviceIDs: state.AllocatedSharedDeviceIDs.Clone().Difference(edits.Freed.AllocatedSharedDeviceIDs).Union(edits.Added.AllocatedSharedDeviceIDs),
		AggregatedCapacity:       state.AggregatedCapacity.Clone(),
	}
	for id, c := range edits.Freed.AggregatedCapacity {
		out.AggregatedCapacity.Remove(structured.DeviceConsumedCapacity{DeviceID: id, ConsumedCapacity: c})
	}
	for id, c := range edits.Added.AggregatedCapacity {
		out.AggregatedCapacity.Insert(structured.DeviceConsumedCapacity{DeviceID: id, ConsumedCapacity: c})
	}
	return out
}

// preemptionMayHelp reports whether evicting pods from the node could let
// the claims fit: the pod may preempt, a pod of lower priority runs there,
// and the claims fit the node with none of its devices allocated.
func (pl *Plugin) preemptionMayHelp(ctx context.Context, s *stateData, pod *v1.Pod, nodeInfo fwk.NodeInfo, claims []*resourceapi.ResourceClaim) bool {
	if pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy == v1.PreemptNever {
		return false
	}
	priority := corev1helpers.PodPriority(pod)
	lower := false
	for _, p := range nodeInfo.GetPods() {
		if corev1helpers.PodPriority(p.GetPod()) < priority {
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

// unoccupied returns drasched's allocator for the cycle with nothing
// allocated, built once per cycle.
func (s *stateData) unoccupied(ctx context.Context, pl *Plugin) (*allocator.Allocator, error) {
	r := s.results
	r.unoccupiedOnce.Do(func() {
		a, err := s.explainer(ctx, pl)
		if err != nil {
			r.unoccupiedErr = err
			return
		}
		r.unoccupied = a.WithoutAllocations()
	})
	return r.unoccupied, r.unoccupiedErr
}
