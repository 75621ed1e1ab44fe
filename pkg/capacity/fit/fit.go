// Package fit answers "how many more pods like this one fit now, and
// where": it places copies of a workload's pods one after another on the
// cluster of a capacity.Snapshot, as drasched would, with drasched's
// allocator (pkg/allocator, with the profile's allocation policy) for
// their ResourceClaims and StructuredDRA's ranking of nodes
// (core.NodeScore), and says for the first copy that does not fit why not,
// node by node, with the allocator's reasons (the reasons kubectl drasched
// explain gives). It only reads. With a Kueue ClusterQueue
// (Options.ClusterQueue) it also says how many more fit in the queue's
// quota, with the pods' devices counted as Kueue counts them
// (pkg/capacity/kueue).
//
// What it approximates is in Result.Approximations: the checks of other
// scheduler plugins are reduced to resources, node selection and taints;
// allocations in flight are not in the API; and the scheduler breaks ties
// between equally ranked nodes at random and, on 100 or more nodes, ranks
// a sample of them.
package fit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/apis/config"
	"github.com/drasched/drasched/pkg/allocator"
	"github.com/drasched/drasched/pkg/capacity"
	"github.com/drasched/drasched/pkg/capacity/kueue"
	"github.com/drasched/drasched/pkg/core"
	"github.com/drasched/drasched/pkg/explain"
)

// MaxCount bounds how many units Fit places when it is asked for as many
// as fit.
const MaxCount = 10000

// Options say what Fit places and where.
type Options struct {
	// Count is how many units (pods, or gangs) to place; 0 means the
	// workload's replicas if it has any, or else as many as fit (at most
	// MaxCount).
	Count int
	// Selector and Node limit the nodes the pods may go to.
	Selector labels.Selector
	Node     string
	// Args are StructuredDRA's arguments (ProfileArgs); nil means the
	// defaults.
	Args *config.StructuredDRAArgs
	// Features are the allocator's; nil means core.DefaultFeatures.
	Features *structured.Features
	// Cache is the allocator cache; nil means a new one.
	Cache *allocator.Cache
	// Template reads a ResourceClaimTemplate that the workload lacks;
	// nil means there are none to read.
	Template func(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaimTemplate, error)
	// ClusterQueue, when set, is Kueue's queue for the pods: Fit also
	// says how many more units fit in its quota (Result.Quota), counting
	// their devices as Kueue does with Mapping.
	ClusterQueue *kueue.ClusterQueue
	Mapping      kueue.Mapping
}

// Result is what Fit found.
type Result struct {
	Workload string `json:"workload"`
	// PodsPerUnit is 1, or the pods of a gang.
	PodsPerUnit int `json:"podsPerUnit"`
	// Requested is how many units were asked for; 0 for as many as fit.
	Requested int `json:"requested"`
	// Fits is how many units fit now.
	Fits int `json:"fits"`
	// Placements are the pods placed, in order, with their devices.
	Placements []Placement `json:"placements,omitempty"`
	// Nodes count the pods placed per node, most first.
	Nodes []NodeCount `json:"nodes,omitempty"`
	// Unplaced says why the next pod does not fit; nil when all fit.
	Unplaced *Unplaced `json:"unplaced,omitempty"`
	// Policy is the allocation policy placed with.
	Policy string `json:"policy"`
	// Approximations say what the answer does not take into account.
	Approximations []string `json:"approximations"`
	// Quota is how many more units fit in the quota of
	// Options.ClusterQueue; nil without one.
	Quota *kueue.QuotaFit `json:"quota,omitempty"`
	// Answer is the fewer of Fits and Quota.Fits: how many more units fit
	// both on the nodes and in the queue's nominal quota; nil without a
	// queue.
	Answer *int `json:"answer,omitempty"`
}

// Placement is one pod placed.
type Placement struct {
	Unit    int                       `json:"unit"`
	Pod     string                    `json:"pod"`
	Node    string                    `json:"node"`
	Devices []explain.DevicePlacement `json:"devices,omitempty"`
}

// NodeCount counts the pods placed on a node.
type NodeCount struct {
	Node string `json:"node"`
	Pods int    `json:"pods"`
}

// Unplaced is why the next pod fits on no node.
type Unplaced struct {
	Pod string `json:"pod"`
	// Reasons are the nodes' reasons, the most frequent first.
	Reasons []Reason `json:"reasons"`
}

// Reason is a reason and the nodes that gave it.
type Reason struct {
	Message string `json:"message"`
	Nodes   int    `json:"nodes"`
	// Examples name a few of the nodes.
	Examples []string `json:"examples"`
}

// The approximations every answer has.
var approximations = []string{
	"in-flight allocations (between the scheduler's Reserve and its write) and pods waiting to be scheduled are not in the API: they may take devices first",
	"of the checks of other scheduler plugins, only resource requests against allocatable, node selectors and required node affinity, taints and unschedulable nodes are made; pod (anti-)affinity, topology spread, ports and volumes are not",
	"nodes are ranked by StructuredDRA's score alone, ties by name; the scheduler adds other plugins' scores, breaks ties at random and, on 100 nodes or more, ranks a sample of the nodes: it may choose another node where several fit",
}

// quotaApproximation is what the ClusterQueue's answer leaves out.
const quotaApproximation = "the ClusterQueue's answer is its nominal quota less what its status says is in use, with the pods' devices counted as Kueue counts them; Kueue also weighs the quota other queues of the cohort leave unused, fair sharing and preemption, and admits the pods of a workload together"

// ErrFatal marks an error that the scheduler would also report for the
// pod (a CEL selector that fails, a claim that cannot be allocated at all).
var ErrFatal = errors.New("the scheduler would report an error for this pod")

// Fit places up to opts.Count units of the workload, one after another.
func Fit(ctx context.Context, snap *capacity.Snapshot, w *Workload, opts Options) (*Result, error) {
	args := opts.Args
	if args == nil {
		var err error
		if args, err = ProfileArgs("", ""); err != nil {
			return nil, err
		}
	}
	features := core.DefaultFeatures()
	if opts.Features != nil {
		features = *opts.Features
	}
	p := &placer{
		snap: snap, w: w, features: features, opts: opts,
		score: core.ScoreOptions{
			PrioritizedList: features.PrioritizedList,
			Strategy:        args.Scoring.DeviceStrategy,
			BestFit:         args.Allocation.Policy == config.AllocationPolicyBestFit && args.Allocator != config.AllocatorUpstream,
		},
		used:      map[string]*nodeUse{},
		poolNode:  map[string]string{},
		named:     map[string]*resourceapi.ResourceClaim{},
		templates: map[string]*resourceapi.ResourceClaimTemplate{},
		answers:   map[string]*answer{},
	}
	res := &Result{Workload: w.Name, PodsPerUnit: len(w.Pods), Policy: string(args.Allocation.Policy),
		Approximations: append(slices.Clone(approximations), snap.Notes...)}
	count := opts.Count
	if count == 0 {
		count = w.Replicas
	}
	res.Requested = count
	if count == 0 {
		count = MaxCount
	}
	if err := p.setup(ctx, args); err != nil {
		return nil, err
	}
	if args.Allocator == config.AllocatorUpstream {
		res.Approximations = append(res.Approximations, "the profile runs upstream's allocator; fit allocates with drasched's, whose default policy gives the same devices")
	}
	res.Approximations = append(res.Approximations, extendedResources(w, snap.Classes)...)
	for _, pod := range w.Pods {
		if pod.Spec.SchedulerName != "" && pod.Spec.SchedulerName != DefaultProfile {
			res.Approximations = append(res.Approximations, fmt.Sprintf("pod %s names scheduler %s; this is where drasched would place it", pod.Name, pod.Spec.SchedulerName))
			break
		}
	}

	for unit := range count {
		placed, unplaced, err := p.placeUnit(ctx, unit)
		if err != nil {
			return nil, err
		}
		if unplaced != nil {
			res.Unplaced = unplaced
			break
		}
		res.Fits++
		res.Placements = append(res.Placements, placed...)
	}
	if opts.ClusterQueue != nil {
		usage := opts.Mapping.Usage(w.Pods, func(namespace, name string) *resourceapi.ResourceClaimTemplate {
			return p.templates[namespace+"/"+name]
		})
		res.Quota = opts.ClusterQueue.Fit(usage)
		res.Approximations = append(res.Approximations, quotaApproximation)
		answer := res.Fits
		if res.Quota.Fits != nil {
			answer = min(answer, *res.Quota.Fits)
		}
		res.Answer = &answer
	}
	perNode := map[string]int{}
	for _, pl := range res.Placements {
		perNode[pl.Node]++
	}
	for node, n := range perNode {
		res.Nodes = append(res.Nodes, NodeCount{Node: node, Pods: n})
	}
	slices.SortFunc(res.Nodes, func(a, b NodeCount) int { return cmp.Or(cmp.Compare(b.Pods, a.Pods), cmp.Compare(a.Node, b.Node)) })
	return res, nil
}

// extendedResources says which extended resources the pods request that a
// DeviceClass backs with DRA devices: fit counts those against the nodes'
// allocatable resources, not as claims for the class's devices.
func extendedResources(w *Workload, classes []*resourceapi.DeviceClass) []string {
	var notes []string
	for _, class := range classes {
		name := ptr.Deref(class.Spec.ExtendedResourceName, "")
		if name == "" {
			continue
		}
		for _, pod := range w.Pods {
			if _, ok := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})[v1.ResourceName(name)]; ok {
				notes = append(notes, fmt.Sprintf("extended resource %s is backed by DeviceClass %s: fit counts it against the nodes' allocatable resources, not as a claim for the class's devices", name, class.Name))
				break
			}
		}
	}
	return notes
}

// nodeUse is what pods take of a node's allocatable resources.
type nodeUse struct {
	requests v1.ResourceList
	pods     int
}

// answer is whether a pod of the workload fits a node, as last computed.
type answer struct {
	// reason is why the node does not take the pod before its claims
	// are looked at; empty if it does.
	reason string
	// fits: the claims fit, with results; score ranks the node.
	fits    bool
	results []resourceapi.AllocationResult
	score   int64
}

type placer struct {
	snap     *capacity.Snapshot
	w        *Workload
	features structured.Features
	opts     Options
	score    core.ScoreOptions

	base *allocator.Allocator
	// cur sees what the pods placed so far take; added is that.
	cur   *allocator.Allocator
	added structured.AllocatedState
	nodes []*v1.Node
	used  map[string]*nodeUse
	// poolNode is the node of each pool bound to one, by driver/pool.
	poolNode map[string]string
	// named are the claims pods share by name (namespace/name), copies
	// that get the allocation of the first pod placed.
	named     map[string]*resourceapi.ResourceClaim
	templates map[string]*resourceapi.ResourceClaimTemplate
	// answers are kept per node while only the same pod is placed and
	// nothing it could see changes elsewhere: identical pods on other
	// nodes get the same answer.
	answers map[string]*answer
	serial  int
}

func (p *placer) setup(ctx context.Context, args *config.StructuredDRAArgs) error {
	classes := allocator.ClassList(p.snap.Classes)
	for _, pod := range p.w.Pods {
		for _, entry := range pod.Spec.ResourceClaims {
			switch {
			case entry.ResourceClaimName != nil:
				key := pod.Namespace + "/" + *entry.ResourceClaimName
				if _, ok := p.named[key]; ok {
					continue
				}
				i := slices.IndexFunc(p.snap.Claims, func(c *resourceapi.ResourceClaim) bool { return c.Namespace+"/"+c.Name == key })
				if i < 0 {
					return fmt.Errorf("pod %s, claim %s: ResourceClaim %s: %w", pod.Name, entry.Name, key, capacity.ErrNotFound)
				}
				p.named[key] = p.snap.Claims[i].DeepCopy()
				if err := checkClasses(classes, &p.named[key].Spec); err != nil {
					return fmt.Errorf("ResourceClaim %s: %w", key, err)
				}
			case entry.ResourceClaimTemplateName != nil:
				if _, err := p.template(ctx, pod.Namespace, *entry.ResourceClaimTemplateName); err != nil {
					return fmt.Errorf("pod %s, claim %s: %w", pod.Name, entry.Name, err)
				}
			}
		}
	}
	if g := p.w.Group; g != nil {
		for _, c := range g.Spec.ResourceClaims {
			if c.ResourceClaimTemplateName != nil {
				if _, err := p.template(ctx, g.Namespace, *c.ResourceClaimTemplateName); err != nil {
					return fmt.Errorf("PodGroup %s, claim %s: %w", g.Name, c.Name, err)
				}
			}
		}
	}
	for _, t := range p.templates {
		if err := checkClasses(classes, &t.Spec.Spec); err != nil {
			return fmt.Errorf("ResourceClaimTemplate %s/%s: %w", t.Namespace, t.Name, err)
		}
	}

	state := core.NewAllocatedState()
	for _, c := range p.snap.Claims {
		core.AddAllocation(&state, c.Status.Allocation, p.features.ConsumableCapacity)
	}
	var err error
	p.base, err = allocator.New(ctx, p.features, state, classes, p.snap.Slices, allocator.Options{
		Cache: p.opts.Cache, Policy: allocator.Policy(args.Allocation.Policy), TopologyAttributes: args.Allocation.TopologyAttributes,
	})
	if err != nil {
		return fmt.Errorf("allocator: %w", err)
	}
	p.cur, p.added = p.base, core.NewAllocatedState()

	for _, s := range p.snap.Slices {
		key := s.Spec.Driver + "/" + s.Spec.Pool.Name
		if node := ptr.Deref(s.Spec.NodeName, ""); node != "" && !ptr.Deref(s.Spec.PerDeviceNodeSelection, false) {
			if prev, ok := p.poolNode[key]; !ok || prev == node {
				p.poolNode[key] = node
				continue
			}
		}
		p.poolNode[key] = ""
	}
	found := false
	for _, n := range p.snap.Nodes {
		if n.Name == p.opts.Node {
			found = true
		}
		if p.opts.Node != "" && n.Name != p.opts.Node || p.opts.Selector != nil && !p.opts.Selector.Matches(labels.Set(n.Labels)) {
			continue
		}
		p.nodes = append(p.nodes, n)
		p.used[n.Name] = &nodeUse{requests: v1.ResourceList{}}
	}
	if p.opts.Node != "" && !found {
		return fmt.Errorf("node %s: %w", p.opts.Node, capacity.ErrNotFound)
	}
	slices.SortFunc(p.nodes, func(a, b *v1.Node) int { return cmp.Compare(a.Name, b.Name) })
	for _, pod := range p.snap.Pods {
		u := p.used[pod.Spec.NodeName]
		if u == nil || pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
			continue
		}
		u.add(pod)
	}
	return nil
}

func (u *nodeUse) add(pod *v1.Pod) {
	for name, q := range resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}) {
		sum := u.requests[name].DeepCopy()
		sum.Add(q)
		u.requests[name] = sum
	}
	u.pods++
}

// template returns a ResourceClaimTemplate of the workload or the
// cluster.
func (p *placer) template(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaimTemplate, error) {
	key := namespace + "/" + name
	if t, ok := p.templates[key]; ok {
		return t, nil
	}
	t := p.w.Templates[name]
	if t == nil || t.Namespace != namespace {
		if p.opts.Template == nil {
			return nil, fmt.Errorf("ResourceClaimTemplate %s: %w", key, capacity.ErrNotFound)
		}
		var err error
		if t, err = p.opts.Template(ctx, namespace, name); err != nil {
			return nil, fmt.Errorf("ResourceClaimTemplate %s: %w", key, err)
		}
	}
	p.templates[key] = t
	return t, nil
}

// checkClasses finds the DeviceClass of every request.
func checkClasses(classes allocator.ClassList, spec *resourceapi.ResourceClaimSpec) error {
	for _, r := range spec.Devices.Requests {
		var names []string
		if r.Exactly != nil {
			names = append(names, r.Exactly.DeviceClassName)
		}
		for _, sub := range r.FirstAvailable {
			names = append(names, sub.DeviceClassName)
		}
		for _, name := range names {
			if _, err := classes.Get(name); err != nil {
				return fmt.Errorf("request %s: DeviceClass %s: %w", r.Name, name, capacity.ErrNotFound)
			}
		}
	}
	return nil
}

// instance is one pod of a unit and its claims, in the pod's order.
type instance struct {
	pod    *v1.Pod
	claims []*resourceapi.ResourceClaim
	// shared marks the claims other pods use too.
	shared []bool
}

// instances makes the pods of a unit with new claims from templates.
func (p *placer) instances(ctx context.Context, unit int) ([]*instance, error) {
	groupClaims := map[string]*resourceapi.ResourceClaim{}
	if g := p.w.Group; g != nil {
		for _, c := range g.Spec.ResourceClaims {
			if c.ResourceClaimTemplateName == nil {
				continue
			}
			t, err := p.template(ctx, g.Namespace, *c.ResourceClaimTemplateName)
			if err != nil {
				return nil, err
			}
			groupClaims[c.Name] = p.newClaim(fmt.Sprintf("%s-%d-%s", g.Name, unit, c.Name), g.Namespace, t)
		}
	}
	var out []*instance
	for _, pod := range p.w.Pods {
		p.serial++
		in := &instance{pod: pod.DeepCopy()}
		in.pod.Name = fmt.Sprintf("%s-%d", pod.Name, unit)
		in.pod.UID = types.UID(fmt.Sprintf("fit-pod-%d", p.serial))
		for _, entry := range pod.Spec.ResourceClaims {
			var claim *resourceapi.ResourceClaim
			shared := true
			switch {
			case p.inGroup(entry):
				claim = groupClaims[entry.Name]
			case entry.ResourceClaimName != nil:
				claim = p.named[pod.Namespace+"/"+*entry.ResourceClaimName]
			case entry.ResourceClaimTemplateName != nil:
				t, err := p.template(ctx, pod.Namespace, *entry.ResourceClaimTemplateName)
				if err != nil {
					return nil, err
				}
				claim, shared = p.newClaim(in.pod.Name+"-"+entry.Name, pod.Namespace, t), false
			}
			if claim == nil {
				continue
			}
			in.claims = append(in.claims, claim)
			in.shared = append(in.shared, shared)
		}
		out = append(out, in)
	}
	return out, nil
}

// inGroup: the pod's claim is one its PodGroup makes from a template for
// the whole group (the same name and template, as the API matches them).
func (p *placer) inGroup(entry v1.PodResourceClaim) bool {
	if p.w.Group == nil || entry.ResourceClaimTemplateName == nil {
		return false
	}
	for _, c := range p.w.Group.Spec.ResourceClaims {
		if c.Name == entry.Name && c.ResourceClaimName == nil && ptr.Equal(c.ResourceClaimTemplateName, entry.ResourceClaimTemplateName) {
			return true
		}
	}
	return false
}

func (p *placer) newClaim(name, namespace string, t *resourceapi.ResourceClaimTemplate) *resourceapi.ResourceClaim {
	p.serial++
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: types.UID(fmt.Sprintf("fit-claim-%d", p.serial))},
		Spec:       *t.Spec.Spec.DeepCopy(),
	}
}

// placeUnit places the pods of one unit, all or none. If they do not all
// fit, it says why the first that does not fit fits nowhere, with the
// pods before it placed.
func (p *placer) placeUnit(ctx context.Context, unit int) ([]Placement, *Unplaced, error) {
	instances, err := p.instances(ctx, unit)
	if err != nil {
		return nil, nil, err
	}
	savedCur, savedAdded := p.cur, cloneState(p.added)
	var placed []Placement
	var undo []func()
	for _, in := range instances {
		node, results, err := p.best(ctx, in)
		if err != nil {
			return nil, nil, err
		}
		if node == nil {
			unplaced, err := p.why(ctx, in)
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
			p.cur, p.added = savedCur, savedAdded
			p.answers = map[string]*answer{}
			return nil, unplaced, err
		}
		placed = append(placed, p.commit(in, node, results, &undo))
	}
	return placed, nil, nil
}

// best finds the node the scheduler would put the pod on: the highest
// score among the nodes where it fits, the first by name of equals.
func (p *placer) best(ctx context.Context, in *instance) (*v1.Node, []resourceapi.AllocationResult, error) {
	cacheable := len(p.w.Pods) == 1 && !slices.ContainsFunc(in.claims, func(c *resourceapi.ResourceClaim) bool { return c.Status.Allocation == nil && isShared(in, c) })
	var best *v1.Node
	var bestAnswer *answer
	for _, node := range p.nodes {
		a := p.answers[node.Name]
		if a == nil || !cacheable {
			var err error
			if a, err = p.evaluate(ctx, node, in); err != nil {
				return nil, nil, err
			}
			if cacheable {
				p.answers[node.Name] = a
			}
		}
		if a.fits && (bestAnswer == nil || a.score > bestAnswer.score) {
			best, bestAnswer = node, a
		}
	}
	if best == nil {
		return nil, nil, nil
	}
	return best, bestAnswer.results, nil
}

func isShared(in *instance, c *resourceapi.ResourceClaim) bool {
	i := slices.Index(in.claims, c)
	return i >= 0 && in.shared[i]
}

// evaluate says whether the pod fits the node now.
func (p *placer) evaluate(ctx context.Context, node *v1.Node, in *instance) (*answer, error) {
	if reason := p.nodeReason(klog.FromContext(ctx), node, in.pod); reason != "" {
		return &answer{reason: reason}, nil
	}
	for _, c := range in.claims {
		if reason := allocatedElsewhere(node, c); reason != "" {
			return &answer{reason: reason}, nil
		}
	}
	pending := pendingClaims(in)
	var results []resourceapi.AllocationResult
	if len(pending) > 0 {
		var err error
		results, err = p.cur.Allocate(ctx, node, pending)
		if err != nil && !errors.Is(err, structured.ErrFailedAllocationOnNode) {
			return nil, fmt.Errorf("pod %s on node %s: %w: %w", in.pod.Name, node.Name, ErrFatal, err)
		}
		if results == nil {
			return &answer{}, nil
		}
	}
	return &answer{fits: true, results: results, score: core.NodeScore(ctx, p.cur, p.score, in.claims, node, results)}, nil
}

func pendingClaims(in *instance) []*resourceapi.ResourceClaim {
	var pending []*resourceapi.ResourceClaim
	for _, c := range in.claims {
		if c.Status.Allocation == nil {
			pending = append(pending, c)
		}
	}
	return pending
}

// allocatedElsewhere says why an allocated claim keeps the pod off the
// node, as explain says it.
func allocatedElsewhere(node *v1.Node, c *resourceapi.ResourceClaim) string {
	if c.Status.Allocation == nil || c.Status.Allocation.NodeSelector == nil {
		return ""
	}
	matches, err := nodeaffinity.NewLazyErrorNodeSelector(c.Status.Allocation.NodeSelector).Match(node)
	if err != nil || !matches {
		return fmt.Sprintf("claim %s/%s is allocated devices of other nodes", c.Namespace, c.Name)
	}
	return ""
}

// nodeReason is why the node does not take the pod regardless of its
// claims, in kube-scheduler's words; "" if it does.
func (p *placer) nodeReason(logger klog.Logger, node *v1.Node, pod *v1.Pod) string {
	unschedulable := v1.Taint{Key: v1.TaintNodeUnschedulable, Effect: v1.TaintEffectNoSchedule}
	if node.Spec.Unschedulable && !corev1helpers.TolerationsTolerateTaint(logger, pod.Spec.Tolerations, &unschedulable, false) {
		return "node(s) were unschedulable"
	}
	taint, untolerated := corev1helpers.FindMatchingUntoleratedTaint(logger, node.Spec.Taints, pod.Spec.Tolerations, func(t *v1.Taint) bool {
		return t.Effect == v1.TaintEffectNoSchedule || t.Effect == v1.TaintEffectNoExecute
	}, false)
	if untolerated {
		return fmt.Sprintf("node(s) had untolerated taint {%s: %s}", taint.Key, taint.Value)
	}
	if ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); err != nil || !ok {
		return "node(s) didn't match Pod's node affinity/selector"
	}
	u := p.used[node.Name]
	if allocatable, ok := node.Status.Allocatable[v1.ResourcePods]; ok && int64(u.pods) >= allocatable.Value() {
		return "Too many pods"
	}
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	var short []string
	for name, q := range requests {
		if q.IsZero() {
			continue
		}
		free := node.Status.Allocatable[name].DeepCopy()
		free.Sub(u.requests[name])
		if free.Cmp(q) < 0 {
			short = append(short, "Insufficient "+string(name))
		}
	}
	sort.Strings(short)
	return strings.Join(short, ", ")
}

// commit places the pod on the node: its claims get the results, the
// allocator sees them taken, the node's resources are used.
func (p *placer) commit(in *instance, node *v1.Node, results []resourceapi.AllocationResult, undo *[]func()) Placement {
	pl := Placement{Pod: in.pod.Namespace + "/" + in.pod.Name, Node: node.Name}
	next := 0
	everywhere := false
	for _, c := range in.claims {
		if c.Status.Allocation != nil {
			continue
		}
		allocation := results[next]
		next++
		c.Status.Allocation = &allocation
		if isShared(in, c) {
			everywhere = true
			*undo = append(*undo, func() { c.Status.Allocation = nil })
		}
		core.AddAllocation(&p.added, &allocation, p.features.ConsumableCapacity)
		for _, r := range allocation.Devices.Results {
			pl.Devices = append(pl.Devices, explain.DevicePlacement{Claim: c.Namespace + "/" + c.Name, Request: r.Request, Driver: r.Driver, Pool: r.Pool, Device: r.Device})
			if p.poolNode[r.Driver+"/"+r.Pool] != node.Name {
				everywhere = true
			}
		}
	}
	p.cur = p.base.WithEdits(allocator.Edits{Added: p.added})
	u := p.used[node.Name]
	saved := nodeUse{requests: u.requests.DeepCopy(), pods: u.pods}
	*undo = append(*undo, func() { *u = saved })
	u.add(in.pod)
	// Only this node changed, unless the devices can serve other nodes
	// or a claim other pods share got its allocation.
	if everywhere {
		p.answers = map[string]*answer{}
	} else {
		delete(p.answers, node.Name)
	}
	return pl
}

// why says, node by node, why the pod fits nowhere, with the allocator's
// reasons.
func (p *placer) why(ctx context.Context, in *instance) (*Unplaced, error) {
	type tally struct {
		nodes    int
		examples []string
	}
	byMessage := map[string]*tally{}
	var order []string
	add := func(message, node string) {
		t := byMessage[message]
		if t == nil {
			t = &tally{}
			byMessage[message] = t
			order = append(order, message)
		}
		t.nodes++
		if len(t.examples) < 3 {
			t.examples = append(t.examples, node)
		}
	}
	pending := pendingClaims(in)
	for _, node := range p.nodes {
		a, err := p.evaluate(ctx, node, in)
		if err != nil {
			return nil, err
		}
		if a.reason != "" {
			add(a.reason, node.Name)
			continue
		}
		failures, err := p.cur.Explain(ctx, node, pending)
		if err != nil {
			return nil, fmt.Errorf("explain pod %s on node %s: %w", in.pod.Name, node.Name, err)
		}
		if len(failures) == 0 {
			add("the claims do not fit", node.Name)
		}
		for _, f := range failures {
			add(f.Message(), node.Name)
		}
	}
	if len(p.nodes) == 0 {
		add("no node matches the selection", "")
	}
	u := &Unplaced{Pod: in.pod.Namespace + "/" + in.pod.Name}
	for _, m := range order {
		u.Reasons = append(u.Reasons, Reason{Message: m, Nodes: byMessage[m].nodes, Examples: byMessage[m].examples})
	}
	slices.SortStableFunc(u.Reasons, func(a, b Reason) int { return cmp.Compare(b.Nodes, a.Nodes) })
	return u, nil
}

func cloneState(s structured.AllocatedState) structured.AllocatedState {
	c := core.NewAllocatedState()
	c.AllocatedDevices = s.AllocatedDevices.Clone()
	c.AllocatedSharedDeviceIDs = s.AllocatedSharedDeviceIDs.Clone()
	for id, capacity := range s.AggregatedCapacity {
		c.AggregatedCapacity[id] = capacity.Clone()
	}
	return c
}
