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
// that the change can help, Score can also rank by device usage, and
// allocation state comes from pkg/tracker.
//
// One file per extension point: prefilter.go, filter.go, postfilter.go,
// score.go, reserve.go, prebind.go, hints.go; extended resources backed by
// DRA, which hook into several of them, in extended.go.
package dra

import (
	"context"
	"fmt"
	"time"

	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"

	"github.com/drasched/drasched/apis/config"
	"github.com/drasched/drasched/apis/config/validation"
	"github.com/drasched/drasched/pkg/allocator"
	"github.com/drasched/drasched/pkg/tracker"
)

// Name is the plugin's name in profiles.
const Name = "StructuredDRA"

// Plugin is the StructuredDRA plugin.
type Plugin struct {
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

	tracker *tracker.Tracker
	// cache keeps compiled CEL, prepared slices and selector results
	// across scheduling cycles.
	cache *allocator.Cache

	// podsByClaim indexes pods by the claims they reference, so that a
	// claim event only evaluates the pods that use it.
	podsByClaim    cache.Indexer
	claimIndexName string

	// extendedResources maps extended resources to DeviceClasses and
	// finds pods' claims for them (extended.go).
	extendedResources extendedResources

	// upstreamCEL is the compile cache of allocator: upstream.
	upstreamCELOnce sync.Once
	upstreamCEL     *cel.Cache
}

var (
	_ fwk.PreEnqueuePlugin  = &Plugin{}
	_ fwk.PreFilterPlugin   = &Plugin{}
	_ fwk.FilterPlugin      = &Plugin{}
	_ fwk.PostFilterPlugin  = &Plugin{}
	_ fwk.ScorePlugin       = &Plugin{}
	_ fwk.ReservePlugin     = &Plugin{}
	_ fwk.PreBindPlugin     = &Plugin{}
	_ fwk.EnqueueExtensions = &Plugin{}
	_ fwk.SignPlugin        = &Plugin{}
)

// New builds the plugin from its StructuredDRAArgs.
func New(ctx context.Context, obj runtime.Object, fh fwk.Handle) (fwk.Plugin, error) {
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
	if err := unsupportedFeatures(fts); err != nil {
		return nil, err
	}
	t, err := sharedTracker(ctx, fh, fts)
	if err != nil {
		return nil, err
	}
	pl := &Plugin{
		fh:             fh,
		client:         fh.ClientSet(),
		fts:            fts,
		features:       dynamicresources.AllocatorFeatures(fts),
		bindingTimeout: args.BindingTimeout.Duration,
		upstream:       args.Allocator == config.AllocatorUpstream,
		scoring:        args.Scoring.DeviceStrategy,
		tracker:        t,
		cache:          sharedCache,
	}
	if fts.EnableDRASchedulerFilterTimeout {
		pl.filterTimeout = args.FilterTimeout.Duration
	}
	if err := pl.indexPodsByClaim(fh.ProfileName()); err != nil {
		return nil, err
	}
	if err := pl.setupExtendedResources(ctx, fh.SharedInformerFactory(), fh.SharedDRAManager(), fh.ProfileName()); err != nil {
		return nil, err
	}
	registerMetrics()
	return pl, nil
}

// Name returns the plugin's name.
func (pl *Plugin) Name() string { return Name }

// unsupportedFeatures rejects alpha features, off by default in 1.37, that
// the plugin does not implement yet, instead of scheduling their pods
// wrongly: claims of pod groups (and pod group scheduling, which needs
// PodGroupPostFilter) and node-allocatable resources backed by devices.
func unsupportedFeatures(fts feature.Features) error {
	var names []string
	if fts.EnableGenericWorkload {
		names = append(names, string(features.GenericWorkload))
	}
	if fts.EnableDRAWorkloadResourceClaims {
		names = append(names, string(features.DRAWorkloadResourceClaims))
	}
	if fts.EnableDRANodeAllocatableResources {
		names = append(names, string(features.DRANodeAllocatableResources))
	}
	if len(names) > 0 {
		return fmt.Errorf("plugin %s does not support the feature gates %v yet; disable them for drasched or use the in-tree %s plugin", Name, names, "DynamicResources")
	}
	return nil
}

// trackers holds one tracker per informer factory: all profiles of a
// scheduler share the factory, and they must share in-flight allocations
// too, or two profiles could give the same device to two claims.
var (
	trackersMutex sync.Mutex
	trackers      = map[informers.SharedInformerFactory]*tracker.Tracker{}
)

// TrackerFor returns the tracker that the plugin instances built on the
// informer factory share, or nil: for tests that check its state against
// the API at quiescence.
func TrackerFor(factory informers.SharedInformerFactory) *tracker.Tracker {
	trackersMutex.Lock()
	defer trackersMutex.Unlock()
	return trackers[factory]
}

// sharedTracker returns the tracker of the handle's informer factory,
// creating it on first use.
func sharedTracker(ctx context.Context, fh fwk.Handle, fts feature.Features) (*tracker.Tracker, error) {
	trackersMutex.Lock()
	defer trackersMutex.Unlock()
	factory := fh.SharedInformerFactory()
	if t, ok := trackers[factory]; ok {
		return t, nil
	}
	opts := tracker.Options{
		InformerFactory:    factory,
		KubeClient:         fh.ClientSet(),
		DeviceTaintRules:   utilfeature.DefaultFeatureGate.Enabled(features.DRADeviceTaintRules),
		ConsumableCapacity: fts.EnableDRAConsumableCapacity,
	}
	if manager := fh.SharedDRAManager(); manager != nil {
		// kube-scheduler runs a slice tracker for its DRA manager; a
		// second one on the same informer cannot add its index.
		opts.SliceLister = manager.ResourceSlices()
		// Its claim cache drives the scheduler's claim events.
		opts.ClaimFallback = manager.ResourceClaims()
	}
	t, err := tracker.New(ctx, opts)
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
		t.Stop()
	}()
	return t, nil
}
