// Package dra is the StructuredDRA scheduler plugin. It replaces the
// in-tree DynamicResources plugin with the same API effects: it checks a
// pod's ResourceClaims in PreEnqueue and PreFilter, allocates devices per
// node with pkg/allocator in Filter, frees a claim that blocks the pod
// everywhere in PostFilter, ranks nodes in Score, marks allocations in
// flight in Reserve, rolls them back in Unreserve, and writes them in
// PreBind (finalizer, allocation, reservedFor, allocation timestamp).
//
// Differences from upstream, all additive: unschedulable pods get a message
// that says why per request (aggregated over nodes by the scheduler),
// queueing hints for ResourceSlice and DeviceClass events requeue only pods
// that the change can help, Score can also rank by device usage,
// allocation state comes from pkg/tracker, pods whose claims come from one
// template can be batched (sign.go), and preemption can evict pods for
// their devices: the StructuredDRAPreemption plugin (pkg/plugins/drapreemption),
// with claim nomination (nomination.go), which it reaches through
// Nominator.
//
// A claim's selectors can be valid and still slow to evaluate, and each
// place that evaluates them in the scheduler's path has a bound: Filter
// and claim nomination's searches filterTimeout per pod and node
// (allocationContext), the slice hint a budget of CEL cost per pod and
// event (hintCostBudget), after which it queues the pod for Filter to
// decide.
//
// Files:
//   - plugin.go: Plugin, New, Factory, the tracker and allocator cache
//     shared by all profiles of the process;
//   - state.go: the cycle state, per-node filter results and the status
//     helpers;
//   - one file per extension point: hints.go (EventsToRegister, queueing
//     hints), sign.go (SignPod, for opportunistic batching), prefilter.go
//     (PreEnqueue, PreFilter), filter.go, postfilter.go, score.go,
//     reserve.go (Reserve, Unreserve), prebind.go;
//   - features that hook into several of them: podgroup.go and
//     podgroupcycle_kube137.go (gang scheduling: claims shared within a pod
//     group cycle; none in 1.35, podgroupcycle_kube135.go), with the
//     group's claims freed by PodGroupPostFilter in podgroup_kube137.go
//     (by each pod's PostFilter in 1.36, podgroup_kube136.go), extended.go (extended resources backed by DRA),
//     nodeallocatable_kube137.go (devices that stand for node CPU and
//     memory, DRANodeAllocatableResources; refused by the builds for
//     older minors, nodeallocatable_kube136.go);
//   - dryrun.go: PreFilterExtensions (AddPod, RemovePod), which follow
//     preemption's dry runs and pod-group preemption's simulation;
//     memo.go: the simulation's Filter answers, kept per node until an
//     edit touches that node's devices;
//   - nomination.go: claim nomination, what a preemptor holds while its
//     victims go, for whom, and until when;
//   - preemption.go: Nominator, what the StructuredDRAPreemption plugin of
//     the profile calls: nominations from its dry runs, the waits for
//     victims, and the message that says which devices the victims free;
//     simulation.go: pod-group preemption's simulation, and
//     preemption_kube137.go its nominations (1.37 only;
//     preemption_kube136.go);
//   - compact.go: the ResourceSlice informer's transform, which keeps the
//     scheduler's copies smaller;
//   - metrics.go: the plugin's metrics and the observation of upstream's
//     DRA metrics.
//
// README.md maps each file to its counterpart in upstream's
// dynamicresources package.
package dra

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/drasched/drasched/apis/config"
	"github.com/drasched/drasched/apis/config/validation"
	"github.com/drasched/drasched/internal/minor/schedminor"
	"github.com/drasched/drasched/pkg/allocator"
	"github.com/drasched/drasched/pkg/leaderfence"
	"github.com/drasched/drasched/pkg/tracker"
)

// Name is the plugin's name in profiles.
const Name = config.PluginName

// Plugin is the StructuredDRA plugin.
type Plugin struct {
	// PreFlight is PreBindPreFlight, in the signature of this minor's
	// framework (prebind.go).
	schedminor.PreFlight

	fh     fwk.Handle
	client kubernetes.Interface
	fts    feature.Features
	// features selects the allocator's behaviour, exactly as upstream's
	// plugin derives it from the feature gates.
	features structured.Features

	filterTimeout  time.Duration
	bindingTimeout time.Duration
	upstream       bool // run structured.NewAllocator instead of ours
	scoring        config.DeviceScoringStrategy

	tracker tracker.Interface
	// fence stops claim writes once this process may have lost its leader
	// lease; nil without leader election.
	fence *leaderfence.Fence
	// cache keeps compiled CEL, prepared slices and selector results
	// across scheduling cycles.
	cache *allocator.Cache
	// policy and topology are the allocation policy (allocation.policy)
	// and its topology attributes.
	policy   allocator.Policy
	topology []resourceapi.FullyQualifiedName

	// podsByClaim indexes pods by the claims they reference, so that a
	// claim event only evaluates the pods that use it.
	podsByClaim    cache.Indexer
	claimIndexName string

	// nominationMargin is how long past its victims' grace period a
	// claim nomination lasts (nomination.go).
	nominationMargin time.Duration
	// rebuildOnce rebuilds the nominations of an earlier leader before
	// the first cycle (nomination.go).
	rebuildOnce sync.Once

	// extendedResources maps extended resources to DeviceClasses and
	// finds pods' claims for them (extended.go).
	extendedResources extendedResources

	// nodeLocal counts the slices whose devices more than one node can
	// use, for SignPod (sign.go).
	nodeLocal nodeLocality

	// uncounted are pods whose devices' CPU and memory the scheduler's
	// cache does not count yet (nodeallocatable_kube137.go).
	uncounted uncountedPods

	// upstreamCEL is the compile cache of allocator: upstream.
	upstreamCELOnce sync.Once
	upstreamCEL     *cel.Cache
}

var (
	_ fwk.PreEnqueuePlugin  = &Plugin{}
	_ fwk.PreFilterPlugin   = &Plugin{}
	_ fwk.FilterPlugin      = &Plugin{}
	_ fwk.PostFilterPlugin  = &Plugin{}
	_ fwk.PreScorePlugin    = &Plugin{}
	_ fwk.ScorePlugin       = &Plugin{}
	_ fwk.ReservePlugin     = &Plugin{}
	_ fwk.PreBindPlugin     = &Plugin{}
	_ fwk.EnqueueExtensions = &Plugin{}
	_ fwk.SignPlugin        = &Plugin{}
)

// ProcessOptions carry what the scheduler command knows about the process
// and a profile's arguments cannot say.
type ProcessOptions struct {
	// Fence tracks the process's leader lease (cmd/scheduler with leader
	// election on).
	Fence *leaderfence.Fence
}

// Factory returns the plugin factory with process options, for
// cmd/scheduler (through plugins.Registry).
func Factory(opts ProcessOptions) frameworkruntime.PluginFactory {
	return func(ctx context.Context, obj runtime.Object, fh fwk.Handle) (fwk.Plugin, error) {
		return newPlugin(ctx, obj, fh, opts)
	}
}

// New builds the plugin from its StructuredDRAArgs, for a scheduler without
// leader election.
func New(ctx context.Context, obj runtime.Object, fh fwk.Handle) (fwk.Plugin, error) {
	return newPlugin(ctx, obj, fh, ProcessOptions{})
}

func newPlugin(ctx context.Context, obj runtime.Object, fh fwk.Handle, opts ProcessOptions) (fwk.Plugin, error) {
	args, ok := obj.(*config.StructuredDRAArgs)
	if !ok {
		return nil, fmt.Errorf("got args of type %T, want *StructuredDRAArgs", obj)
	}
	if err := validation.ValidateStructuredDRAArgs(nil, args); err != nil {
		return nil, err
	}
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	if !fts.EnableDynamicResourceAllocation {
		return nil, fmt.Errorf("plugin %s needs the DynamicResourceAllocation feature", Name)
	}
	if err := supportNodeAllocatable(fts); err != nil {
		return nil, err
	}
	if fh.SharedDRAManager() == nil {
		return nil, fmt.Errorf("plugin %s needs the scheduler's DRA manager, which kube-scheduler creates when DynamicResourceAllocation is enabled", Name)
	}
	t, err := sharedTracker(ctx, fh)
	if err != nil {
		return nil, err
	}
	client, err := fencedClient(fh, opts.Fence)
	if err != nil {
		return nil, err
	}
	pl := &Plugin{
		PreFlight:      preFlight,
		fh:             fh,
		client:         client,
		fts:            fts,
		features:       dynamicresources.AllocatorFeatures(fts),
		bindingTimeout: args.BindingTimeout.Duration,
		upstream:       args.Allocator == config.AllocatorUpstream,
		scoring:        args.Scoring.DeviceStrategy,
		tracker:        t,
		fence:          opts.Fence,
		cache:          sharedCache,
		policy:         allocator.Policy(args.Allocation.Policy),
		topology:       args.Allocation.TopologyAttributes,

		nominationMargin: args.Preemption.NominationMargin.Duration,
	}
	if fts.EnableDRASchedulerFilterTimeout {
		pl.filterTimeout = args.FilterTimeout.Duration
	}
	warnUnboundedFilter(klog.FromContext(ctx), fh.ProfileName(), args, fts.EnableDRASchedulerFilterTimeout)
	if err := pl.indexPodsByClaim(fh.ProfileName()); err != nil {
		return nil, err
	}
	slices := fh.SharedInformerFactory().Resource().V1().ResourceSlices().Informer()
	if err := compactSlices(slices); err != nil {
		// Only memory: the slices are the same, as decoded.
		klog.FromContext(ctx).Info("ResourceSlices are cached as decoded", "err", err)
	}
	if err := pl.nodeLocal.start(slices); err != nil {
		return nil, err
	}
	if err := pl.setupExtendedResources(ctx, fh.SharedInformerFactory(), fh.SharedDRAManager(), fh.ProfileName()); err != nil {
		return nil, err
	}
	registerMetrics()
	registerPlugin(ctx, fh, pl)
	return pl, nil
}

// warnUnboundedFilter warns at start, once per profile, when Filter runs
// without a time limit. The limit is what bounds a pod whose claims'
// selectors are slow to evaluate: the API server admits any selector within
// its CEL cost limit, and on a few thousand devices such a claim keeps the
// allocator busy for minutes, in a scheduling cycle that no other pod gets
// past. filterTimeout 0 stays valid, as in upstream's DynamicResourcesArgs,
// so this is a warning and not an error.
func warnUnboundedFilter(logger klog.Logger, profile string, args *config.StructuredDRAArgs, gate bool) {
	var reason string
	switch {
	case !gate:
		reason = "feature gate DRASchedulerFilterTimeout is off"
	case args.FilterTimeout.Duration == 0:
		reason = "filterTimeout is 0"
	default:
		return
	}
	logger.Info("Warning: StructuredDRA's Filter has no time limit: a pod whose claims have selectors that are slow to evaluate holds the scheduler for as long as they take, and no other pod is scheduled meanwhile; set a filterTimeout (default 10s) with the feature gate DRASchedulerFilterTimeout on",
		"profile", profile, "reason", reason)
}

// allocatorOptions are the options of every drasched allocator the plugin
// builds: the shared cache and the configured policy.
func (pl *Plugin) allocatorOptions() allocator.Options {
	return allocator.Options{Cache: pl.cache, Policy: pl.policy, TopologyAttributes: pl.topology}
}

// bestFit: the plugin's allocators take BestFit.
func (pl *Plugin) bestFit() bool { return pl.policy == allocator.PolicyBestFit && !pl.upstream }

// fencedClient returns the client the plugin writes with. Under leader
// election it is a client of its own whose transport refuses writes once
// the process may have lost its lease (leaderfence), so that no code path
// of the plugin (PreBind, Unreserve, PostFilter, the claims for extended
// resources) can write from a deposed leader.
func fencedClient(fh fwk.Handle, fence *leaderfence.Fence) (kubernetes.Interface, error) {
	if fence == nil || fh.KubeConfig() == nil {
		return fh.ClientSet(), nil
	}
	config := rest.CopyConfig(fh.KubeConfig())
	config.Wrap(fence.WrapTransport)
	client, err := kubernetes.NewForConfig(rest.AddUserAgent(config, "drasched-claim-writer"))
	if err != nil {
		return nil, fmt.Errorf("client for claim writes: %w", err)
	}
	return client, nil
}

// Name returns the plugin's name.
func (pl *Plugin) Name() string { return Name }

// sharedCache is the allocator cache of the process, shared by all
// profiles that run the plugin: the slices and expressions are the same.
// Its statistics are metrics (metrics.go).
var sharedCache = allocator.NewCache(0)

// trackers holds one tracker per informer factory: all profiles of a
// scheduler share the factory and its SharedDRAManager, and they share the
// tracker's in-flight allocations too.
var (
	trackersMutex sync.Mutex
	trackers      = map[informers.SharedInformerFactory]*tracker.Tracker{}
)

// TrackerFor returns the tracker that the plugin instances built on the
// informer factory share, or nil: for tests that check its state against
// the API at quiescence.
func TrackerFor(factory informers.SharedInformerFactory) tracker.Interface {
	trackersMutex.Lock()
	defer trackersMutex.Unlock()
	if t, ok := trackers[factory]; ok {
		return t
	}
	return nil
}

// inFlightCount counts the allocations in flight of all trackers.
func inFlightCount() float64 {
	trackersMutex.Lock()
	defer trackersMutex.Unlock()
	n := 0
	for _, t := range trackers {
		n += len(t.InFlight())
	}
	return float64(n)
}

// anyTracker returns a tracker of the process, nil if none: the device
// metrics (metrics.go) count what a scheduler sees, and a scheduler process
// has one.
func anyTracker() tracker.Interface {
	trackersMutex.Lock()
	defer trackersMutex.Unlock()
	for _, t := range trackers {
		return t
	}
	return nil
}

// sharedTracker returns the tracker of the handle's informer factory,
// creating it on first use.
func sharedTracker(ctx context.Context, fh fwk.Handle) (*tracker.Tracker, error) {
	trackersMutex.Lock()
	defer trackersMutex.Unlock()
	factory := fh.SharedInformerFactory()
	if t, ok := trackers[factory]; ok {
		return t, nil
	}
	pods := factory.Core().V1().Pods().Lister()
	activate := func(logger klog.Logger) { activatePendingPods(logger, fh, pods) }
	logger := klog.FromContext(ctx)
	t, err := tracker.New(ctx, tracker.Options{
		Manager: fh.SharedDRAManager(),
		Client:  fh.ClientSet(),
		// All profiles share one scheduling queue: any handle can
		// activate the pods.
		Activate:        activate,
		NominationEnded: nominationEnded(logger, activate),
	})
	if err != nil {
		return nil, err
	}
	trackers[factory] = t
	// The scheduler's context ends with the scheduler.
	go func() {
		<-ctx.Done()
		trackersMutex.Lock()
		defer trackersMutex.Unlock()
		delete(trackers, factory)
	}()
	return t, nil
}

// activatePendingPods moves pods that wait for devices back into the
// active queue: the tracker freed devices without a claim event that would
// requeue them (a write with an unknown outcome that did not land). Pods
// that are not in the scheduler's queues are ignored by Activate.
func activatePendingPods(logger klog.Logger, fh fwk.Handle, pods corelisters.PodLister) {
	all, err := pods.List(labels.Everything())
	if err != nil {
		logger.Error(err, "List pods to requeue after devices were freed")
		return
	}
	waiting := make(map[string]*v1.Pod)
	for _, pod := range all {
		if pod.Spec.NodeName == "" && (len(pod.Spec.ResourceClaims) > 0 || len(extendedResourceNames(pod)) > 0) {
			waiting[pod.Namespace+"/"+pod.Name] = pod
		}
	}
	if len(waiting) > 0 {
		logger.V(4).Info("Requeueing pods after devices were freed", "pods", len(waiting))
		fh.Activate(logger, waiting)
	}
}
