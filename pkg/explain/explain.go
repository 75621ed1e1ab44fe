// Package explain says, from a cluster's API objects alone, why a pod's
// ResourceClaims do not fit on each node and what smallest change would
// make them fit, or where a bound pod's devices are. It runs drasched's
// allocator (pkg/allocator) on what it reads, read-only; kubectl drasched
// explain (cmd/kubectl-drasched) prints its Report.
//
// The answer is the allocator's, on the API's state at the moment of the
// read: allocations that the scheduler holds in flight (Reserve to PreBind)
// are not visible here, the scheduler's own cycle may see a newer or older
// state. It reads the cluster with capacity.Read, as kubectl drasched top
// and fit do: DeviceTaintRules are applied to the slices with the library
// kube-scheduler applies them with, so that the three agree on a drained
// device (test/integration/agreement_test.go).
//
// For a pod of a Job that Kueue manages, Options.Kueue adds Kueue's
// admission of the Job's Workload (pkg/capacity/kueue). Kueue admits by
// counts of devices, drasched places the devices themselves: a pod that
// Kueue admitted may fit on no node, and the report says both.
package explain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drasched/drasched/pkg/allocator"
	"github.com/drasched/drasched/pkg/capacity"
	"github.com/drasched/drasched/pkg/capacity/kueue"
	"github.com/drasched/drasched/pkg/core"
)

// Options change what Explain looks at.
type Options struct {
	// Node limits the report to one node; empty means all nodes.
	Node string
	// Features are the allocator's features; core.DefaultFeatures when nil.
	Features *structured.Features
	// MaxHolders bounds how many pods per node are tried as "frees if
	// deleted" (each is one more allocation); 0 means 50.
	MaxHolders int
	// Kueue, when set, reads Kueue's admission of the pod's workload
	// (Report.Kueue); nil means Kueue is not looked at.
	Kueue *kueue.Reader
}

// Report is what Explain found.
type Report struct {
	// Pod is "namespace/name".
	Pod string `json:"pod"`
	// Kueue is what Kueue did with the Workload of the pod's Job: admitted
	// into a ClusterQueue, with what quota, or why not yet. Nil for a pod
	// Kueue does not manage, or where Kueue is not installed. Kueue
	// admits by counts of devices, so an admitted pod may still fit on no
	// node: Nodes say why.
	Kueue *kueue.Admission `json:"kueue,omitempty"`
	// Node is the node of a bound pod; Placement its devices.
	Node      string            `json:"node,omitempty"`
	Placement []DevicePlacement `json:"placement,omitempty"`
	// Notes say what the read left out (DeviceTaintRules it was not
	// allowed to read), as top's and fit's do.
	Notes []string `json:"notes,omitempty"`
	// Problems keep the pod off every node before any device is looked
	// at: a claim not created yet, a missing DeviceClass.
	Problems []string `json:"problems,omitempty"`
	// Nodes are the nodes looked at, those where the claims fit first.
	Nodes []NodeReport `json:"nodes,omitempty"`
}

// DevicePlacement is one device of a claim.
type DevicePlacement struct {
	Claim   string `json:"claim"`
	Request string `json:"request"`
	Driver  string `json:"driver"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
}

// NodeReport is the answer for one node.
type NodeReport struct {
	Node string `json:"node"`
	// Fits: the claims fit on the node now; Devices are what the
	// allocator would give them.
	Fits    bool              `json:"fits"`
	Devices []DevicePlacement `json:"devices,omitempty"`
	// Reasons say why they do not.
	Reasons []Reason `json:"reasons,omitempty"`
	// Suggestions are the smallest changes found that would make the
	// claims fit on this node.
	Suggestions []string `json:"suggestions,omitempty"`
}

// Reason is one reason of a node, with what holds the devices.
type Reason struct {
	allocator.Failure
	// Message is the allocator's short form, as in the pod's condition.
	Message string `json:"message"`
	// HeldBy are the consumers (pods, or claims reserved for no pod) whose
	// claims hold matching devices of the request on the node, with how
	// many of them each would free.
	HeldBy []Holder `json:"heldBy,omitempty"`
}

// Holder is a consumer holding devices on a node.
type Holder struct {
	// Pod is "namespace/name" of the pod the claims are reserved for;
	// empty for claims reserved for no pod.
	Pod string `json:"pod,omitempty"`
	// Claims are the claims, "namespace/name".
	Claims []string `json:"claims"`
	// Frees is how many more of the request's devices would be free
	// without them. Where freeing them alone makes the claims fit, the
	// allocator gives no count after, and it is the holder's devices on
	// the node, at most as many as the request has in use.
	Frees int `json:"frees"`
}

// Explain reads the pod and the cluster, with capacity.Read (the reader
// kubectl drasched top and fit use, DeviceTaintRules applied), and explains
// the pod's placement; with Options.Kueue, it adds Kueue's admission of the
// pod's workload.
func Explain(ctx context.Context, client kubernetes.Interface, namespace, name string, opts Options) (*Report, error) {
	pod, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get pod %s/%s: %w", namespace, name, err)
	}
	var admission *kueue.Admission
	var note string
	if opts.Kueue != nil {
		if admission, note, err = opts.Kueue.Admission(ctx, pod); err != nil {
			return nil, err
		}
	}
	snap, err := capacity.Read(ctx, client, capacity.ReadOptions{Pods: true})
	if err != nil {
		return nil, err
	}
	report, err := ExplainSnapshot(ctx, pod, snap, opts)
	if report != nil {
		report.Kueue = admission
		if note != "" {
			report.Notes = append(report.Notes, note)
		}
	}
	return report, err
}

// ExplainSnapshot explains the pod's placement on a snapshot that
// capacity.Read took with ReadOptions.Pods (its pods name the consumers
// that hold devices). The snapshot is only read.
func ExplainSnapshot(ctx context.Context, pod *v1.Pod, snap *capacity.Snapshot, opts Options) (*Report, error) {
	in := &inputs{Snapshot: snap, nodes: snap.Nodes, pods: map[string]*v1.Pod{}}
	if opts.Node != "" {
		i := slices.IndexFunc(snap.Nodes, func(n *v1.Node) bool { return n.Name == opts.Node })
		if i < 0 {
			return nil, fmt.Errorf("node %s: not found", opts.Node)
		}
		in.nodes = snap.Nodes[i : i+1]
	}
	for _, p := range snap.Pods {
		in.pods[string(p.UID)] = p
	}
	report, err := explain(ctx, pod, in, opts)
	if report != nil {
		report.Notes = slices.Clone(snap.Notes)
	}
	return report, err
}

// inputs are the snapshot Explain works on, with the nodes to look at and
// the pods by UID, for naming consumers.
type inputs struct {
	*capacity.Snapshot
	nodes []*v1.Node
	pods  map[string]*v1.Pod
}

func explain(ctx context.Context, pod *v1.Pod, in *inputs, opts Options) (*Report, error) {
	report := &Report{Pod: pod.Namespace + "/" + pod.Name}
	byName := map[string]*resourceapi.ResourceClaim{}
	for _, c := range in.Claims {
		byName[c.Namespace+"/"+c.Name] = c
	}
	// The pod's claims, in the order of its spec.
	var own []*resourceapi.ResourceClaim
	for i := range pod.Spec.ResourceClaims {
		entry := &pod.Spec.ResourceClaims[i]
		claimName, _, err := resourceclaim.Name(pod, entry)
		switch {
		case err != nil:
			report.Problems = append(report.Problems, fmt.Sprintf("claim %s: %v (the ResourceClaim controller has not created it yet)", entry.Name, err))
			continue
		case claimName == nil:
			continue
		}
		claim := byName[pod.Namespace+"/"+*claimName]
		if claim == nil {
			report.Problems = append(report.Problems, fmt.Sprintf("claim %s: ResourceClaim %s/%s does not exist", entry.Name, pod.Namespace, *claimName))
			continue
		}
		own = append(own, claim)
	}

	if pod.Spec.NodeName != "" {
		report.Node = pod.Spec.NodeName
		for _, claim := range own {
			report.Placement = append(report.Placement, placements(claim, claim.Status.Allocation)...)
		}
		return report, nil
	}
	for _, claim := range own {
		if claim.Status.Allocation != nil {
			continue
		}
		for _, class := range requestClasses(claim) {
			if _, err := allocator.ClassList(in.Classes).Get(class); err != nil {
				report.Problems = append(report.Problems, fmt.Sprintf("claim %s: DeviceClass %s does not exist", claim.Name, class))
			}
		}
	}
	if len(report.Problems) > 0 {
		return report, nil
	}

	features := core.DefaultFeatures()
	if opts.Features != nil {
		features = *opts.Features
	}
	ownNames := sets.New[string]()
	for _, claim := range own {
		ownNames.Insert(claim.Namespace + "/" + claim.Name)
	}
	state := core.NewAllocatedState()
	for _, c := range in.Claims {
		if !ownNames.Has(c.Namespace + "/" + c.Name) {
			core.AddAllocation(&state, c.Status.Allocation, features.ConsumableCapacity)
		}
	}
	a, err := allocator.New(ctx, features, state, allocator.ClassList(in.Classes), in.Slices, allocator.Options{})
	if err != nil {
		return nil, fmt.Errorf("allocator: %w", err)
	}
	e := &explainer{in: in, features: features, alloc: a, own: own, maxHolders: opts.MaxHolders}
	if e.maxHolders == 0 {
		e.maxHolders = 50
	}
	for _, node := range in.nodes {
		nr, err := e.node(ctx, node)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", node.Name, err)
		}
		report.Nodes = append(report.Nodes, nr)
	}
	sort.SliceStable(report.Nodes, func(i, j int) bool {
		if report.Nodes[i].Fits != report.Nodes[j].Fits {
			return report.Nodes[i].Fits
		}
		return report.Nodes[i].Node < report.Nodes[j].Node
	})
	return report, nil
}

// explainer explains one pod, node by node.
type explainer struct {
	in         *inputs
	features   structured.Features
	alloc      *allocator.Allocator
	own        []*resourceapi.ResourceClaim
	maxHolders int
}

// pending are the pod's claims without an allocation.
func (e *explainer) pending() []*resourceapi.ResourceClaim {
	var pending []*resourceapi.ResourceClaim
	for _, claim := range e.own {
		if claim.Status.Allocation == nil {
			pending = append(pending, claim)
		}
	}
	return pending
}

func (e *explainer) node(ctx context.Context, node *v1.Node) (NodeReport, error) {
	nr := NodeReport{Node: node.Name}
	// Allocated claims must be usable on the node.
	for _, claim := range e.own {
		allocation := claim.Status.Allocation
		if allocation == nil || allocation.NodeSelector == nil {
			continue
		}
		matches, err := nodeaffinity.NewLazyErrorNodeSelector(allocation.NodeSelector).Match(node)
		if err != nil || !matches {
			nr.Reasons = append(nr.Reasons, Reason{
				Failure: allocator.Failure{Claim: claim.Namespace + "/" + claim.Name},
				Message: fmt.Sprintf("claim %s/%s is allocated devices of other nodes", claim.Namespace, claim.Name),
			})
		}
	}
	if len(nr.Reasons) > 0 {
		return nr, nil
	}
	pending := e.pending()
	if len(pending) == 0 {
		nr.Fits = true
		return nr, nil
	}
	results, err := e.alloc.Allocate(ctx, node, pending)
	if err != nil && !errors.Is(err, structured.ErrFailedAllocationOnNode) {
		return nr, err
	}
	if results != nil {
		nr.Fits = true
		for i, claim := range pending {
			nr.Devices = append(nr.Devices, placements(claim, &results[i])...)
		}
		return nr, nil
	}
	failures, err := e.alloc.Explain(ctx, node, pending)
	if err != nil {
		return nr, err
	}
	for _, f := range failures {
		nr.Reasons = append(nr.Reasons, Reason{Failure: f, Message: f.Message()})
	}
	if err := e.holders(ctx, node, &nr, pending); err != nil {
		return nr, err
	}
	if err := e.tolerations(ctx, node, &nr, pending); err != nil {
		return nr, err
	}
	if err := e.constraints(ctx, node, &nr, pending); err != nil {
		return nr, err
	}
	return nr, nil
}

// holder is a consumer of devices on a node and what its claims take.
type holder struct {
	Holder
	// devices counts the holder's devices in the node's pools.
	devices     int
	allocations []*resourceapi.AllocationResult
	state       structured.AllocatedState
}

// nodeHolders groups the allocated claims with devices on the node's pools
// by the pod they are reserved for.
func (e *explainer) nodeHolders(node *v1.Node) []*holder {
	pools := sets.New[string]() // driver/pool of the node's own slices
	for _, s := range e.in.Slices {
		if s.Spec.NodeName != nil && *s.Spec.NodeName == node.Name {
			pools.Insert(s.Spec.Driver + "/" + s.Spec.Pool.Name)
		}
	}
	byKey := map[string]*holder{}
	var keys []string
	for _, c := range e.in.Claims {
		if c.Status.Allocation == nil || !slices.ContainsFunc(c.Status.Allocation.Devices.Results, func(r resourceapi.DeviceRequestAllocationResult) bool {
			return pools.Has(r.Driver + "/" + r.Pool)
		}) {
			continue
		}
		key, podName := "claim "+c.Namespace+"/"+c.Name, ""
		for _, r := range c.Status.ReservedFor {
			if r.Resource == "pods" {
				if p := e.in.pods[string(r.UID)]; p != nil {
					podName = p.Namespace + "/" + p.Name
				} else {
					podName = c.Namespace + "/" + r.Name
				}
				key = "pod " + podName
				break
			}
		}
		h := byKey[key]
		if h == nil {
			h = &holder{Holder: Holder{Pod: podName}, state: core.NewAllocatedState()}
			byKey[key] = h
			keys = append(keys, key)
		}
		h.Claims = append(h.Claims, c.Namespace+"/"+c.Name)
		h.allocations = append(h.allocations, c.Status.Allocation)
		for _, r := range c.Status.Allocation.Devices.Results {
			if pools.Has(r.Driver + "/" + r.Pool) {
				h.devices++
			}
		}
		core.AddAllocation(&h.state, c.Status.Allocation, e.features.ConsumableCapacity)
	}
	sort.Strings(keys)
	holders := make([]*holder, 0, len(keys))
	for _, k := range keys {
		holders = append(holders, byKey[k])
	}
	return holders
}

// holders names, per reason, what holds its devices, and suggests the
// fewest deletions found that make the claims fit: one holder, or else the
// holders that free the most, added one at a time.
func (e *explainer) holders(ctx context.Context, node *v1.Node, nr *NodeReport, pending []*resourceapi.ResourceClaim) error {
	inUse := false
	for _, r := range nr.Reasons {
		inUse = inUse || r.InUse > 0
	}
	if !inUse {
		return nil
	}
	holders := e.nodeHolders(node)
	if len(holders) > e.maxHolders {
		holders = holders[:e.maxHolders]
	}
	type freed struct {
		h     *holder
		total int
		fits  bool
	}
	var tried []freed
	for _, h := range holders {
		a := e.alloc.WithEdits(allocator.Edits{Freed: h.state})
		results, err := a.Allocate(ctx, node, pending)
		if err != nil && !errors.Is(err, structured.ErrFailedAllocationOnNode) {
			return err
		}
		failures := []allocator.Failure(nil)
		if results == nil {
			if failures, err = a.Explain(ctx, node, pending); err != nil {
				return err
			}
		}
		total := 0
		for i := range nr.Reasons {
			r := &nr.Reasons[i]
			if r.InUse == 0 {
				continue
			}
			var frees int
			if results == nil {
				// Still failing: the request's free devices, after.
				after := r.Free
				for _, f := range failures {
					if f.Claim == r.Claim && f.Request == r.Request {
						after = f.Free
					}
				}
				frees = after - r.Free
			} else {
				// Fits: no count after; the holder's devices on the
				// node, as many as the request has in use at most.
				frees = min(h.devices, r.InUse)
			}
			if frees > 0 {
				r.HeldBy = append(r.HeldBy, Holder{Pod: h.Pod, Claims: h.Claims, Frees: frees})
				total += frees
			}
		}
		if total > 0 || results != nil {
			tried = append(tried, freed{h: h, total: total, fits: results != nil})
		}
	}
	for _, t := range tried {
		if t.fits {
			nr.Suggestions = append(nr.Suggestions, "fits if "+t.h.describe()+" is deleted")
		}
	}
	if len(nr.Suggestions) > 0 || len(tried) < 2 {
		return nil
	}
	// No one holder is enough: the ones that free the most, together.
	sort.SliceStable(tried, func(i, j int) bool { return tried[i].total > tried[j].total })
	together := core.NewAllocatedState()
	var names []string
	for _, t := range tried {
		for _, allocation := range t.h.allocations {
			core.AddAllocation(&together, allocation, e.features.ConsumableCapacity)
		}
		names = append(names, t.h.describe())
		results, err := e.alloc.WithEdits(allocator.Edits{Freed: together}).Allocate(ctx, node, pending)
		if err != nil && !errors.Is(err, structured.ErrFailedAllocationOnNode) {
			return err
		}
		if results != nil {
			nr.Suggestions = append(nr.Suggestions, "fits if "+strings.Join(names, ", ")+" are deleted")
			return nil
		}
	}
	return nil
}

func (h *holder) describe() string {
	if h.Pod != "" {
		return "pod " + h.Pod
	}
	return "the claims " + strings.Join(h.Claims, ", ") + " (reserved for no pod)"
}

// tolerations suggests the toleration that would let the claims use
// tainted devices of the node, for each taint of the node's devices with
// which they fit.
func (e *explainer) tolerations(ctx context.Context, node *v1.Node, nr *NodeReport, pending []*resourceapi.ResourceClaim) error {
	tainted := false
	for _, r := range nr.Reasons {
		tainted = tainted || r.Tainted > 0
	}
	if !tainted {
		return nil
	}
	seen := sets.New[string]()
	for _, s := range e.in.Slices {
		if s.Spec.NodeName == nil || *s.Spec.NodeName != node.Name {
			continue
		}
		for _, d := range s.Spec.Devices {
			for _, taint := range d.Taints {
				key := taint.Key + "=" + taint.Value + ":" + string(taint.Effect)
				if seen.Has(key) {
					continue
				}
				seen.Insert(key)
				toleration := resourceapi.DeviceToleration{Key: taint.Key, Operator: resourceapi.DeviceTolerationOpEqual, Value: taint.Value, Effect: taint.Effect}
				if taint.Value == "" {
					toleration.Operator, toleration.Value = resourceapi.DeviceTolerationOpExists, ""
				}
				changed := withToleration(pending, toleration)
				results, err := e.alloc.Allocate(ctx, node, changed)
				if err != nil && !errors.Is(err, structured.ErrFailedAllocationOnNode) {
					return err
				}
				if results != nil {
					nr.Suggestions = append(nr.Suggestions, fmt.Sprintf("fits with a toleration for the device taint %s", key))
				}
			}
		}
	}
	return nil
}

// constraints suggests dropping a claim's constraints where the claims
// then fit.
func (e *explainer) constraints(ctx context.Context, node *v1.Node, nr *NodeReport, pending []*resourceapi.ResourceClaim) error {
	for _, r := range nr.Reasons {
		if r.Reason != allocator.ReasonConstraintUnsatisfiable {
			continue
		}
		changed := make([]*resourceapi.ResourceClaim, len(pending))
		dropped := ""
		for i, claim := range pending {
			changed[i] = claim
			if claim.Namespace+"/"+claim.Name == r.Claim && len(claim.Spec.Devices.Constraints) > 0 {
				c := claim.DeepCopy()
				c.Spec.Devices.Constraints = nil
				changed[i] = c
				dropped = r.Constraint
			}
		}
		if dropped == "" {
			continue
		}
		results, err := e.alloc.Allocate(ctx, node, changed)
		if err != nil && !errors.Is(err, structured.ErrFailedAllocationOnNode) {
			return err
		}
		if results != nil {
			nr.Suggestions = append(nr.Suggestions, fmt.Sprintf("fits if claim %s drops its constraint %s", r.Claim, dropped))
		}
	}
	return nil
}

// withToleration returns copies of the claims whose requests all tolerate
// the taint.
func withToleration(claims []*resourceapi.ResourceClaim, toleration resourceapi.DeviceToleration) []*resourceapi.ResourceClaim {
	out := make([]*resourceapi.ResourceClaim, len(claims))
	for i, claim := range claims {
		c := claim.DeepCopy()
		for j := range c.Spec.Devices.Requests {
			r := &c.Spec.Devices.Requests[j]
			if r.Exactly != nil {
				r.Exactly.Tolerations = append(r.Exactly.Tolerations, toleration)
			}
			for k := range r.FirstAvailable {
				r.FirstAvailable[k].Tolerations = append(r.FirstAvailable[k].Tolerations, toleration)
			}
		}
		out[i] = c
	}
	return out
}

// requestClasses lists the DeviceClasses a claim's requests name.
func requestClasses(claim *resourceapi.ResourceClaim) []string {
	var classes []string
	for _, r := range claim.Spec.Devices.Requests {
		if r.Exactly != nil {
			classes = append(classes, r.Exactly.DeviceClassName)
		}
		for _, sub := range r.FirstAvailable {
			classes = append(classes, sub.DeviceClassName)
		}
	}
	return classes
}

// placements lists an allocation's devices.
func placements(claim *resourceapi.ResourceClaim, allocation *resourceapi.AllocationResult) []DevicePlacement {
	if allocation == nil {
		return nil
	}
	var out []DevicePlacement
	for _, r := range allocation.Devices.Results {
		out = append(out, DevicePlacement{Claim: claim.Namespace + "/" + claim.Name, Request: r.Request, Driver: r.Driver, Pool: r.Pool, Device: r.Device})
	}
	return out
}
