package dra

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	policy "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	configv1 "k8s.io/kube-scheduler/config/v1"
	fwk "k8s.io/kube-scheduler/framework"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedconfigv1 "k8s.io/kubernetes/pkg/scheduler/apis/config/v1"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"

	draschedv1 "github.com/drasched/drasched/apis/config/v1"
)

// PreemptionName is the name in profiles of the plugin that runs in place
// of DefaultPreemption.
const PreemptionName = "StructuredDRAPreemption"

// Preemption is upstream's DefaultPreemption (the same evaluator, executor,
// victim order, PodDisruptionBudget handling, PreEnqueue gate and events)
// with claim nomination (nomination.go) for the StructuredDRA plugin of
// the same profile:
//
//   - each dry run knows the node it is for, and what the pod gets there
//     once the victims are gone is kept per node (SelectVictimsOnNode);
//   - PostFilter: a nominee whose victims' claims are still being freed
//     waits for them instead of preempting again; when DefaultPreemption
//     nominates the pod, the dry run's allocation on that node becomes its
//     claim nomination, and the message says what the victims free for it
//     ("preempting 4 victims to free 4 devices of request gpus");
//   - upstream's wait for the pods it preempted to terminate on the
//     nominated node ends once they are stuck (PodEligibleToPreemptOthers);
//   - PodGroupPostFilter: pod-group preemption's simulation sees the
//     devices of the victims it removed as free, and the group's pods get
//     nominations that are held as one.
//
// The plugin also works without StructuredDRA in the profile: then it is
// DefaultPreemption.
type Preemption struct {
	*defaultpreemption.DefaultPreemption
	fh fwk.Handle
}

var (
	_ fwk.PostFilterPlugin         = &Preemption{}
	_ fwk.PodGroupPostFilterPlugin = &Preemption{}
	_ fwk.PreEnqueuePlugin         = &Preemption{}
	_ fwk.EnqueueExtensions        = &Preemption{}
	_ preemption.Interface         = &preemptionHooks{}
)

// NewPreemption builds the plugin from DefaultPreemptionArgs (the profile
// may give them under this plugin's name), or with DefaultPreemption's
// defaults when the profile gives none: kube-scheduler defaults the args of
// in-tree plugins only.
func NewPreemption(ctx context.Context, obj runtime.Object, fh fwk.Handle) (fwk.Plugin, error) {
	if obj == nil {
		defaults := &configv1.DefaultPreemptionArgs{}
		scheme := schedconfigv1.GetPluginArgConversionScheme()
		scheme.Default(defaults)
		args := &schedconfig.DefaultPreemptionArgs{}
		if err := scheme.Convert(defaults, args, nil); err != nil {
			return nil, fmt.Errorf("default DefaultPreemptionArgs: %w", err)
		}
		obj = args
	}
	if _, ok := obj.(*schedconfig.DefaultPreemptionArgs); !ok {
		return nil, fmt.Errorf("plugin %s: got args of type %T, want DefaultPreemptionArgs", PreemptionName, obj)
	}
	dp, err := defaultpreemption.New(ctx, obj, fh, feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate))
	if err != nil {
		return nil, fmt.Errorf("plugin %s: %w", PreemptionName, err)
	}
	// The evaluator calls these through its Interface, which
	// defaultpreemption.New leaves open to change.
	dp.Evaluator.Interface = &preemptionHooks{DefaultPreemption: dp, fh: fh}
	return &Preemption{DefaultPreemption: dp, fh: fh}, nil
}

// Name returns the plugin's name.
func (p *Preemption) Name() string { return PreemptionName }

// PostFilter lets a nominee wait for its victims, or runs DefaultPreemption
// and turns its nomination into a claim nomination.
func (p *Preemption) PostFilter(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, m fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	pl := pluginOf(p.fh)
	if pl == nil {
		return p.DefaultPreemption.PostFilter(ctx, cs, pod, m)
	}
	var base *structured.AllocatedState
	if s, err := getState(cs); err == nil {
		base = s.base
	}
	if n, msg := pl.nominationWait(ctx, base, pod); n != nil {
		// The result repeats the nomination: with none, the scheduler
		// nominates the pod anew from its informer copy, which may not
		// show the nomination yet (preemption sets it asynchronously),
		// and the pod would lose it.
		return framework.NewPostFilterResultWithNominatedNode(n.Node), fwk.NewStatus(fwk.Unschedulable, "preemption: "+msg)
	}
	result, status := p.DefaultPreemption.PostFilter(ctx, cs, pod, m)
	if !status.IsSuccess() || result == nil || result.NominatingInfo == nil || result.NominatedNodeName == "" {
		return result, status
	}
	s, err := getState(cs)
	if err != nil || s.allocator == nil {
		return result, status
	}
	node := result.NominatedNodeName
	fit := s.results.fit(node)
	if fit == nil {
		return result, status
	}
	logger := klog.FromContext(ctx)
	pl.nominate(logger, pod, node, "", fit.results, fit.victims, fit.freed)
	freed, err := pl.freedForPreemptor(node, fit)
	if err != nil {
		logger.V(4).Info("Devices freed by preemption unknown", "pod", klog.KObj(pod), "node", node, "err", err)
		return result, status
	}
	if freed == "" {
		return result, status
	}
	return result, fwk.NewStatus(fwk.Success, status.Message()+" to free "+freed)
}

// PodGroupPostFilter runs pod-group preemption with a simulation that sees
// the devices of the victims it removes as free, and turns its nominations
// into claim nominations held as one; a group whose victims' claims are
// still being freed waits for them instead.
func (p *Preemption) PodGroupPostFilter(ctx context.Context, state fwk.PodGroupCycleState, group fwk.PodGroupInfo, pgSchedulingFunc fwk.PodGroupSchedulingFunc) (*fwk.PodGroupPostFilterResult, *fwk.Status) {
	pl := pluginOf(p.fh)
	if pl == nil {
		return p.DefaultPreemption.PodGroupPostFilter(ctx, state, group, pgSchedulingFunc)
	}
	if infos, msg := pl.groupNominationWait(ctx, state, group); infos != nil {
		// As upstream answers for a preemption still under way: the
		// pods keep their nominations and come back when it is done.
		return &fwk.PodGroupPostFilterResult{NominatingInfos: infos}, fwk.NewStatus(fwk.Success, "pod group preemption: "+msg)
	}
	group = withoutStuckNominations(p.fh, group)
	sim := newSimulation(p.fh)
	var assignments []fwk.ProposedAssignment
	simulate := func(ctx context.Context) (*fwk.PodGroupAssignments, *fwk.Status) {
		result, status := pgSchedulingFunc(withSimulation(ctx, sim))
		if result != nil {
			assignments = result.ProposedAssignments
		}
		return result, status
	}
	result, status := p.DefaultPreemption.PodGroupPostFilter(ctx, state, group, simulate)
	if !status.IsSuccess() || result == nil {
		return result, status
	}
	key := ""
	if pg := group.GetPodGroup(); pg != nil {
		key = pg.Namespace + "/" + pg.Name
	}
	pl.nominateGroup(ctx, key, assignments, result.NominatingInfos)
	return result, status
}

// preemptionHooks are the evaluator's calls that claim nomination needs to
// see, around DefaultPreemption's own.
type preemptionHooks struct {
	*defaultpreemption.DefaultPreemption
	fh fwk.Handle
}

// SelectVictimsOnNode names the node in the dry run's state, so that
// Filter keeps its fit rather than an allocation for Reserve, and keeps
// what the pod gets on the node with the victims chosen. The state is a
// clone of the cycle's, one per node, and the dry runs of several nodes
// run in parallel: nothing here is shared between them but the cycle's
// results, which have a lock.
func (h *preemptionHooks) SelectVictimsOnNode(ctx context.Context, cs fwk.CycleState, preemptor *v1.Pod, nodeInfo fwk.NodeInfo, allPossibleVictims []*preemption.DomainVictim, pdbs []*policy.PodDisruptionBudget) ([]*v1.Pod, int, *fwk.Status) {
	pl := pluginOf(h.fh)
	var s *stateData
	if pl != nil {
		if state, err := getState(cs); err == nil && state.allocator != nil && state.dryRun != nil {
			s = state
			s.dryRun.node = nodeInfo.Node().Name
		}
	}
	victims, violations, status := h.DefaultPreemption.SelectVictimsOnNode(ctx, cs, preemptor, nodeInfo, allPossibleVictims, pdbs)
	if s != nil && status.IsSuccess() {
		s.results.storeFit(s.dryRun.node, &preemptionFit{results: s.dryRun.fit.get(), victims: victims, freed: pl.freedClaims(s.dryRun)})
	}
	return victims, violations, status
}

// PodEligibleToPreemptOthers is DefaultPreemption's, with a bound: it does
// not let a pod preempt while a pod it preempted is still terminating on
// its nominated node, and a pod stuck there (a kubelet that is gone, a
// finalizer) would keep it from preempting forever. Once every such pod
// has been terminating for longer than its grace period and the
// nomination margin, the pod may preempt again; until then the message
// says until when it waits.
func (h *preemptionHooks) PodEligibleToPreemptOthers(ctx context.Context, pod *v1.Pod, nominatedNodeStatus *fwk.Status) (bool, string) {
	ok, msg := h.DefaultPreemption.PodEligibleToPreemptOthers(ctx, pod, nominatedNodeStatus)
	node := pod.Status.NominatedNodeName
	if ok || node == "" || pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy == v1.PreemptNever {
		return ok, msg
	}
	until := preemptedUntil(h.fh, node)
	if until.IsZero() {
		return ok, msg
	}
	if time.Now().After(until) {
		klog.FromContext(ctx).V(4).Info("Pods preempted for the pod are stuck terminating on its nominated node; it may preempt again", "pod", klog.KObj(pod), "node", node)
		return true, ""
	}
	return false, fmt.Sprintf("%s It waits until %s at the latest.", msg, until.UTC().Format(time.RFC3339))
}

// preemptedUntil returns how long the pods that preemption evicted on the
// node may still take to terminate: the latest end of their grace period
// plus the nomination margin; zero if none is terminating there. Once it
// has passed, all of them are stuck.
func preemptedUntil(fh fwk.Handle, node string) time.Time {
	nodeInfo, err := fh.SnapshotSharedLister().NodeInfos().Get(node)
	if err != nil || nodeInfo == nil {
		return time.Time{}
	}
	margin := draschedv1.DefaultNominationMargin
	if pl := pluginOf(fh); pl != nil {
		margin = pl.nominationMargin
	}
	var until time.Time
	for _, p := range nodeInfo.GetPods() {
		victim := p.GetPod()
		if preemption.PodTerminatingByPreemption(victim) {
			until = latest(until, victim.DeletionTimestamp.Add(margin))
		}
	}
	return until
}

// withoutStuckNominations returns the group with its pods' nominations
// cleared where every pod preempted on the nominated node is stuck: upstream's
// pod-group preemption does not preempt while such a pod terminates there,
// without a bound (its isOngoingPreemption). A group none of whose pods is
// affected is returned as it is.
func withoutStuckNominations(fh fwk.Handle, group fwk.PodGroupInfo) fwk.PodGroupInfo {
	pods := group.GetUnscheduledPods()
	var out []*v1.Pod
	now := time.Now()
	for i, pod := range pods {
		node := pod.Status.NominatedNodeName
		if node == "" {
			continue
		}
		if until := preemptedUntil(fh, node); until.IsZero() || now.Before(until) {
			continue
		}
		if out == nil {
			out = slices.Clone(pods)
		}
		cleared := pod.DeepCopy()
		cleared.Status.NominatedNodeName = ""
		out[i] = cleared
	}
	if out == nil {
		return group
	}
	return groupWithPods{PodGroupInfo: group, pods: out}
}

// groupWithPods is a pod group whose unscheduled pods are the given ones.
type groupWithPods struct {
	fwk.PodGroupInfo
	pods []*v1.Pod
}

func (g groupWithPods) GetUnscheduledPods() []*v1.Pod { return g.pods }

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// plugins are the StructuredDRA plugins by framework handle (one per
// profile), for the Preemption plugin of the same profile: the framework
// builds the plugins of a profile in no fixed order and gives none of them
// a way to find another.
var plugins sync.Map

// registerPlugin makes the plugin findable from its profile's handle until
// ctx, the scheduler's, ends.
func registerPlugin(ctx context.Context, fh fwk.Handle, pl *Plugin) {
	plugins.Store(fh, pl)
	context.AfterFunc(ctx, func() { plugins.CompareAndDelete(fh, pl) })
}

// pluginOf returns the StructuredDRA plugin of the profile; nil if the
// profile does not run it.
func pluginOf(fh fwk.Handle) *Plugin {
	if pl, ok := plugins.Load(fh); ok {
		return pl.(*Plugin)
	}
	return nil
}

// freedForPreemptor says which devices, per request, the pod gets on node
// that its victims there free: "4 devices of request gpus"; "" if its
// victims free none of them (it preempted for other resources). A device
// is freed if a victim's claim held it, or shared counters with one that
// a victim's claim held (a whole GPU whose partitions the victims used).
func (pl *Plugin) freedForPreemptor(node string, fit *preemptionFit) (string, error) {
	freed := sets.New[structured.DeviceID]()
	for _, claim := range fit.freed {
		for _, r := range claim.Status.Allocation.Devices.Results {
			freed.Insert(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
		}
	}
	var counters map[structured.DeviceID]sets.Set[string]
	var err error
	counts := map[string]int{}
	var requests []string
	for _, result := range fit.results {
		for _, r := range result.Devices.Results {
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			if !freed.Has(id) {
				if counters == nil {
					if counters, err = pl.counterSets(node); err != nil {
						return "", err
					}
				}
				if !sharesCounters(id, freed, counters) {
					continue
				}
			}
			if counts[r.Request] == 0 {
				requests = append(requests, r.Request)
			}
			counts[r.Request]++
		}
	}
	sort.Strings(requests)
	var parts []string
	for i, request := range requests {
		n := counts[request]
		switch {
		case i > 0:
			parts = append(parts, fmt.Sprintf("%d of request %s", n, request))
		case n == 1:
			parts = append(parts, "1 device of request "+request)
		default:
			parts = append(parts, fmt.Sprintf("%d devices of request %s", n, request))
		}
	}
	return strings.Join(parts, " and "), nil
}

// counterSets returns, for the devices that the node's ResourceSlices
// publish, the counter sets they consume, as "driver/pool/counterSet".
func (pl *Plugin) counterSets(node string) (map[structured.DeviceID]sets.Set[string], error) {
	slices, err := pl.tracker.Slices()
	if err != nil {
		return nil, fmt.Errorf("list resource slices: %w", err)
	}
	out := map[structured.DeviceID]sets.Set[string]{}
	for _, slice := range slices {
		if slice.Spec.NodeName == nil || *slice.Spec.NodeName != node {
			continue
		}
		for _, device := range slice.Spec.Devices {
			for _, c := range device.ConsumesCounters {
				id := structured.MakeDeviceID(slice.Spec.Driver, slice.Spec.Pool.Name, device.Name)
				if out[id] == nil {
					out[id] = sets.New[string]()
				}
				out[id].Insert(slice.Spec.Driver + "/" + slice.Spec.Pool.Name + "/" + c.CounterSet)
			}
		}
	}
	return out, nil
}

// sharesCounters: the device consumes a counter set that one of the freed
// devices consumes.
func sharesCounters(id structured.DeviceID, freed sets.Set[structured.DeviceID], counters map[structured.DeviceID]sets.Set[string]) bool {
	mine := counters[id]
	if mine.Len() == 0 {
		return false
	}
	for other := range freed {
		if mine.HasAny(sets.List(counters[other])...) {
			return true
		}
	}
	return false
}

// groupNominationWait decides, for a pod group whose cycle found no
// placement, whether it waits for the victims of its pods' nominations:
// while one of them waits (nominationWait) and none has ended. It returns
// the pods' nominations to keep, and what they wait for.
func (pl *Plugin) groupNominationWait(ctx context.Context, pcs fwk.PodGroupCycleState, group fwk.PodGroupInfo) (map[types.NamespacedName]*fwk.NominatingInfo, string) {
	g, _ := groupStateIn(pcs, false)
	infos := map[types.NamespacedName]*fwk.NominatingInfo{}
	var messages []string
	for _, pod := range group.GetUnscheduledPods() {
		key := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
		if pl.tracker.Nominations().Get(pod.UID) == nil {
			continue
		}
		var base *structured.AllocatedState
		if g != nil && g.pods[key] != nil {
			base = g.pods[key].base
		}
		n, msg := pl.nominationWait(ctx, base, pod)
		if n == nil {
			// Ended, and with it the group's: the group preempts again.
			return nil, ""
		}
		infos[key] = &fwk.NominatingInfo{NominatingMode: fwk.ModeOverride, NominatedNodeName: n.Node}
		messages = append(messages, pod.Name+": "+msg)
	}
	if len(infos) == 0 {
		return nil, ""
	}
	slices.Sort(messages)
	return infos, strings.Join(messages, "; ")
}

// simulationKey marks the context of pod-group preemption's simulation.
type simulationKey struct{}

// simulation is what PreFilter needs to know in pod-group preemption's
// simulation: which pods with claims were on the nodes before the
// evaluator removed its candidate victims from the snapshot.
type simulation struct {
	fh     fwk.Handle
	before map[string][]*v1.Pod

	once    sync.Once
	removed map[types.UID]*v1.Pod

	// live is the allocated state that the states of the simulation
	// allocate on.
	live liveState
}

// newSimulation notes the pods with claims on every node, before pod-group
// preemption changes the snapshot.
func newSimulation(fh fwk.Handle) *simulation {
	sim := &simulation{fh: fh, before: map[string][]*v1.Pod{}}
	nodes, err := fh.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return sim
	}
	for _, nodeInfo := range nodes {
		for _, p := range nodeInfo.GetPods() {
			pod := p.GetPod()
			if len(pod.Spec.ResourceClaims) > 0 || pod.Status.ExtendedResourceClaimStatus != nil {
				sim.before[nodeInfo.Node().Name] = append(sim.before[nodeInfo.Node().Name], pod)
			}
		}
	}
	return sim
}

func withSimulation(ctx context.Context, sim *simulation) context.Context {
	return context.WithValue(ctx, simulationKey{}, sim)
}

func simulationOf(ctx context.Context) *simulation {
	sim, _ := ctx.Value(simulationKey{}).(*simulation)
	return sim
}

// removedPods returns the pods with claims that the simulation removed
// from the snapshot: its candidate victims. The evaluator removes them all
// before it runs the group's scheduling algorithm, once.
func (sim *simulation) removedPods() map[types.UID]*v1.Pod {
	sim.once.Do(func() {
		sim.removed = map[types.UID]*v1.Pod{}
		for node, pods := range sim.before {
			present := sets.New[types.UID]()
			if nodeInfo, err := sim.fh.SnapshotSharedLister().NodeInfos().Get(node); err == nil {
				for _, p := range nodeInfo.GetPods() {
					present.Insert(p.GetPod().UID)
				}
			}
			for _, pod := range pods {
				if !present.Has(pod.UID) {
					sim.removed[pod.UID] = pod
				}
			}
		}
	})
	return sim.removed
}

// dryRun is the edits of a state of the simulation: the candidate victims
// removed, with their claims.
func (sim *simulation) dryRun(pl *Plugin) *dryRun {
	d := (*dryRun)(nil).clone()
	d.simulation = true
	d.live = &sim.live
	pl.remove(d, sim.removedPods())
	return d
}
