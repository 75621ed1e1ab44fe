package dra

import (
	"context"
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drasched/drasched/pkg/allocator"
)

const stateKey fwk.StateKey = Name

// stateData is what PreFilter learns about a pod, used by the later
// extension points of the same cycle. It is stored by pointer in the
// CycleState, so later points see updates without Write.
type stateData struct {
	// claims are the pod's ResourceClaims, in the order of
	// pod.Spec.ResourceClaims, as of the start of the cycle. PreBind
	// replaces entries it updated so that Unreserve sees them.
	claims []*resourceapi.ResourceClaim
	// info has one entry per claim.
	info []claimInfo
	// bindTo names, per claim, the consumer that PreBind reserves it
	// for: the pod, or its PodGroup (podgroup.go). Nil: the pod for all.
	bindTo []resourceapi.ResourceClaimConsumerReference
	// shared are the indices of the claims whose allocation another pod
	// of the same pod group cycle put in flight; this pod takes a share
	// of it in Reserve (podgroup.go).
	shared []int
	// held are the claims whose allocation in flight this pod holds a
	// share of, from Reserve until Unreserve.
	held []types.UID
	// toAllocate are the indices of the claims without an allocation, in
	// order; nil if there are none.
	toAllocate []int
	// pending are the claims of toAllocate, built once in PreFilter for
	// Filter, which runs once per node. Read-only.
	pending []*resourceapi.ResourceClaim
	// allocator allocates the claims in toAllocate on a node; nil if there
	// is nothing to allocate.
	allocator nodeAllocator
	// extended is the claim for the pod's extended resources backed by
	// DRA, nil without such resources; see extended.go.
	extended *extendedClaim
	// nodeAllocatable: devices that stand for CPU or memory
	// (nodeallocatable_kube137.go); nil with DRANodeAllocatableResources off.
	nodeAllocatable *nodeAllocatable

	// results are what Filter found, shared by all clones of the state.
	results *filterResults
	// base is the allocated state the cycle's allocator was built from:
	// with allocator: upstream, preemption's dry run copies and edits it
	// for structured.NewAllocator, and slices are its slices; the
	// preemption plugin asks it what the cycle saw allocated.
	base   *structured.AllocatedState
	slices []*resourceapi.ResourceSlice
	// nominated is what the claim nominations of the pods that this pod
	// yields to hold (nomination.go): the cycle's allocator counts it as
	// allocated, and so does every dry run. Empty if there are none.
	nominated structured.AllocatedState
	// dryRun edits the allocated state as preemption's dry run asks
	// (dryrun.go). Each clone has its own; nil in the cycle's own state,
	// which is never edited.
	dryRun *dryRun
}

// filterResults are what Filter found, per node, for PostFilter, Score and
// Reserve.
type filterResults struct {
	// mutex guards the fields below: Filter runs in parallel for many
	// nodes.
	mutex sync.Mutex
	// unavailable are the indices of allocated claims that could not be
	// used on at least one node; PostFilter may deallocate one of them.
	unavailable sets.Set[int]
	// allocations are the results of Filter per node name, matching
	// toAllocate, followed by the allocation of the claim for extended
	// resources if the node needs one.
	allocations map[string][]resourceapi.AllocationResult
	// fits are what preemption's dry runs found, by node: what the pod
	// gets there once the victims are gone (dryrun.go).
	fits map[string]*preemptionFit

	// unoccupied is the cycle's allocator with nothing allocated but the
	// nominations, for preemptionMayHelp; built once.
	unoccupiedOnce sync.Once
	unoccupied     *allocator.Allocator
	unoccupiedErr  error

	// failuresMutex guards failures and failuresCounted.
	failuresMutex sync.Mutex
	// failures are the DeviceClasses and reasons that Filter's
	// explanations gave on some node in this cycle; PostFilter counts them
	// in allocationFailures once the attempt has failed.
	failures        sets.Set[classFailure]
	failuresCounted bool
}

// classFailure is a DeviceClass and a reason why it could not be allocated.
type classFailure struct {
	class  string
	reason allocator.Reason
}

// recordFailures remembers why Filter could not allocate on a node.
func (r *filterResults) recordFailures(failures []classFailure) {
	if r == nil || len(failures) == 0 {
		return
	}
	r.failuresMutex.Lock()
	defer r.failuresMutex.Unlock()
	if r.failures == nil {
		r.failures = sets.New[classFailure]()
	}
	r.failures.Insert(failures...)
}

// countFailures counts the cycle's recorded failures in
// allocationFailures, once per cycle however often it is called, so that a
// counter increase is an attempt that failed, not a node that did.
func (r *filterResults) countFailures() {
	if r == nil {
		return
	}
	r.failuresMutex.Lock()
	defer r.failuresMutex.Unlock()
	if r.failuresCounted {
		return
	}
	r.failuresCounted = true
	for f := range r.failures {
		allocationFailures.WithLabelValues(f.class, string(f.reason)).Inc()
	}
}

// store keeps an allocation Filter found on a node.
func (r *filterResults) store(node string, results []resourceapi.AllocationResult) {
	r.mutex.Lock()
	defer r.mutex.Unlock()
	r.allocations[node] = results
}

// storeFit keeps what a dry run of preemption found on a node.
func (r *filterResults) storeFit(node string, fit *preemptionFit) {
	r.mutex.Lock()
	defer r.mutex.Unlock()
	if r.fits == nil {
		r.fits = map[string]*preemptionFit{}
	}
	r.fits[node] = fit
}

// fit returns what the dry run of preemption found on node; nil if none
// fit there.
func (r *filterResults) fit(node string) *preemptionFit {
	r.mutex.Lock()
	defer r.mutex.Unlock()
	return r.fits[node]
}

// keepOnly drops what Filter found on every node but the chosen one.
func (r *filterResults) keepOnly(node string) {
	r.mutex.Lock()
	defer r.mutex.Unlock()
	if results, ok := r.allocations[node]; ok {
		r.allocations = map[string][]resourceapi.AllocationResult{node: results}
	} else {
		r.allocations = map[string][]resourceapi.AllocationResult{}
	}
	r.fits = nil
	r.unoccupied, r.unoccupiedErr = nil, nil
}

// unavailableClaims returns the indices of the allocated claims that some
// node could not use, lowest first.
func (r *filterResults) unavailableClaims() []int {
	r.mutex.Lock()
	defer r.mutex.Unlock()
	return sets.List(r.unavailable)
}

// allocation returns what Filter found on the node.
func (r *filterResults) allocation(node string) ([]resourceapi.AllocationResult, bool) {
	r.mutex.Lock()
	defer r.mutex.Unlock()
	results, found := r.allocations[node]
	return results, found
}

// Clone returns a state that shares the cycle's data and Filter's results,
// with its own copy of the dry run's edits: the framework clones the state
// for each node it dry-runs preemption on, and for each node with
// nominated pods, in parallel.
func (s *stateData) Clone() fwk.StateData {
	c := &stateData{
		claims:     s.claims,
		info:       s.info,
		bindTo:     s.bindTo,
		shared:     s.shared,
		toAllocate: s.toAllocate,
		pending:    s.pending,
		allocator:  s.allocator,
		extended:   s.extended,
		results:    s.results,
		base:       s.base,
		slices:     s.slices,
		nominated:  s.nominated,
		dryRun:     s.dryRun.clone(),
	}
	c.nodeAllocatable = s.nodeAllocatable
	return c
}

// releaseCycle drops what only the scheduling cycle needs once the pod
// has its node: the snapshot of allocated devices, the allocator with its
// per-cycle lookups, the nominations, and what Filter found on the other
// nodes. The binding cycle needs only the claims and the allocations
// chosen for them, and it can last long (API writes, binding conditions):
// a scheduler that binds many pods at once kept one allocated-device set
// and one allocator per pod alive until its binding ended.
func (s *stateData) releaseCycle(node string) {
	s.base, s.slices, s.allocator, s.pending, s.dryRun = nil, nil, nil, nil, nil
	s.nominated = structured.AllocatedState{}
	if s.results != nil {
		s.results.keepOnly(node)
	}
}

type claimInfo struct {
	// availableOnNodes is the node selector of an allocated claim.
	availableOnNodes *nodeaffinity.NodeSelector
	// allocation is set by Reserve for claims allocated in this cycle,
	// and by PreFilter for a claim of shared.
	allocation *resourceapi.AllocationResult
}

func getState(cs fwk.CycleState) (*stateData, error) {
	data, err := cs.Read(stateKey)
	if err != nil {
		return nil, err
	}
	s, ok := data.(*stateData)
	if !ok {
		return nil, fmt.Errorf("unexpected state of type %T", data)
	}
	return s, nil
}

// nodeAllocator is what Filter needs from an allocator: drasched's own or,
// with allocator: upstream, structured.NewAllocator's.
type nodeAllocator interface {
	Allocate(ctx context.Context, node *v1.Node, claims []*resourceapi.ResourceClaim) ([]resourceapi.AllocationResult, error)
}

// statusUnschedulable builds the status of a rejection that evicting pods
// cannot resolve, and logs where it came from. DefaultPreemption does not
// dry-run nodes with such a status; statusPreemptible is for the
// rejections where evicting pods could free devices.
func statusUnschedulable(logger klog.Logger, reasons []string, kv ...any) *fwk.Status {
	if loggerV := logger.V(5); loggerV.Enabled() {
		helper, loggerV := loggerV.WithCallStackHelper()
		helper()
		loggerV.Info("Pod unschedulable", append(kv, "reasons", reasons)...)
	}
	return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reasons...)
}

// statusPreemptible builds the status of a rejection on a node where
// evicting pods could free devices that the pod's claims can use, so that
// DefaultPreemption dry-runs the node.
func statusPreemptible(logger klog.Logger, reasons []string, kv ...any) *fwk.Status {
	if loggerV := logger.V(5); loggerV.Enabled() {
		helper, loggerV := loggerV.WithCallStackHelper()
		helper()
		loggerV.Info("Pod unschedulable, preemption may help", append(kv, "reasons", reasons)...)
	}
	return fwk.NewStatus(fwk.Unschedulable, reasons...)
}

// statusError builds an Error status and logs where it came from.
func statusError(logger klog.Logger, err error, kv ...any) *fwk.Status {
	if loggerV := logger.V(5); loggerV.Enabled() {
		helper, loggerV := loggerV.WithCallStackHelper()
		helper()
		loggerV.Error(err, "Plugin error", kv...)
	}
	return fwk.AsStatus(err)
}
