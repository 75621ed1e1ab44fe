package dra

import (
	"context"
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
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
}

// Clone returns the same pointer: the data is shared by all clones of the
// CycleState, as it is in upstream's plugin.
func (s *stateData) Clone() fwk.StateData { return s }

type claimInfo struct {
	// availableOnNodes is the node selector of an allocated claim.
	availableOnNodes *nodeaffinity.NodeSelector
	// allocation is set by Reserve for claims allocated in this cycle.
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

// statusUnschedulable builds the status of a rejection and logs where it
// came from. Like the in-tree plugin, the plugin rejects with
// UnschedulableAndUnresolvable: it has no PreFilterExtensions, so
// DefaultPreemption's dry run cannot see devices freed by evicting pods,
// and a plain Unschedulable would only make it try every node for nothing.
func statusUnschedulable(logger klog.Logger, reasons []string, kv ...any) *fwk.Status {
	if loggerV := logger.V(5); loggerV.Enabled() {
		helper, loggerV := loggerV.WithCallStackHelper()
		helper()
		loggerV.Info("Pod unschedulable", append(kv, "reasons", reasons)...)
	}
	return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reasons...)
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
