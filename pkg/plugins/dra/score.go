package dra

import (
	"context"
	"errors"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/helper"

	"github.com/drasched/drasched/apis/config"
	"github.com/drasched/drasched/pkg/allocator"
)

// PreScore skips Score for a pod with nothing to allocate: a pod without
// claims, or one whose claims are all allocated (or whose PreFilter
// skipped it). Score would give every node 0, and normalizing zeros keeps
// them 0; skipping spares the framework a plugin call per feasible node of
// every plain pod. Upstream's DynamicResources, which has no PreScore,
// makes that call.
func (pl *Plugin) PreScore(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	s, err := getState(cs)
	if errors.Is(err, fwk.ErrNotFound) {
		return fwk.NewStatus(fwk.Skip)
	}
	if err != nil {
		return statusError(klog.FromContext(ctx), err)
	}
	if s.allocator == nil {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// Score ranks nodes, first like upstream by the prioritized lists (a
// subrequest earlier in firstAvailable scores more), then, as a tie
// breaker within the same prioritized-list score, by device usage: with
// MostAllocated, nodes whose devices are already in use come first, which
// keeps whole nodes free for large pods; with LeastAllocated the opposite.
// With allocation policy BestFit, the device-aware part also counts how
// much of the node's free capacity the allocation leaves in whole topology
// groups, so that of two nodes equally full the one where the pod fills a
// partly used group wins.
func (pl *Plugin) Score(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	logger := klog.FromContext(ctx)
	s, err := getState(cs)
	if err != nil {
		return 0, statusError(logger, err)
	}
	if s.allocator == nil {
		return 0, nil
	}
	node := nodeInfo.Node()
	results, found := s.results.allocation(node.Name)
	if !found {
		return 0, nil
	}
	var a *allocator.Allocator
	if pl.scoring != config.DeviceScoringNone {
		// Without it the node gets no device-aware score.
		a, _ = s.explainer(ctx, pl)
	}
	return NodeScore(ctx, a, pl.scoreOptions(), s.claims, node, results), nil
}

// ScoreOptions are what of a profile's arguments and features Score
// ranks with.
type ScoreOptions struct {
	// PrioritizedList: DRAPrioritizedList is on.
	PrioritizedList bool
	// Strategy is scoring.deviceStrategy.
	Strategy config.DeviceScoringStrategy
	// BestFit: the allocation policy is BestFit.
	BestFit bool
}

func (pl *Plugin) scoreOptions() ScoreOptions {
	return ScoreOptions{PrioritizedList: pl.fts.EnableDRAPrioritizedList, Strategy: pl.scoring, BestFit: pl.bestFit()}
}

// NodeScore is the score of a node on which the pod's claims (all of them,
// in the pod's order) get results (for those not allocated yet, in order),
// before normalization: the prioritized-list score above the device-aware
// one. a is the cycle's allocator, for the device-aware part; nil gives
// none. kubectl drasched fit ranks nodes with it, so that it places pods
// where this plugin's Score puts them.
func NodeScore(ctx context.Context, a *allocator.Allocator, opts ScoreOptions, claims []*resourceapi.ResourceClaim, node *v1.Node, results []resourceapi.AllocationResult) int64 {
	var score int64
	if opts.PrioritizedList {
		score = prioritizedListScore(claims, results) * (fwk.MaxScore + 1)
	}
	if opts.Strategy != config.DeviceScoringNone && a != nil {
		score += usageScore(ctx, a, opts, node, results)
	}
	return score
}

// prioritizedListScore is upstream's score: for every claim, 8 minus the
// index of each chosen subrequest. Claims allocated earlier count with
// their allocation, as upstream counts them.
func prioritizedListScore(claims []*resourceapi.ResourceClaim, results []resourceapi.AllocationResult) int64 {
	var score int64
	next := 0
	for _, claim := range claims {
		allocation := claim.Status.Allocation
		if allocation == nil {
			if next >= len(results) {
				break
			}
			allocation = &results[next]
			next++
		}
		chosen := sets.New[string]()
		for _, result := range allocation.Devices.Results {
			if resourceclaim.IsSubRequestRef(result.Request) {
				chosen.Insert(result.Request)
			}
		}
		for _, request := range claim.Spec.Devices.Requests {
			for index, sub := range request.FirstAvailable {
				if chosen.Has(resourceclaim.CreateSubRequestRef(request.Name, sub.Name)) {
					score += int64(resourceapi.FirstAvailableDeviceRequestMaxSize - index)
				}
			}
		}
	}
	return score
}

// usageScore is 0..MaxNodeScore: the share of the node's devices in use
// once this pod's devices are allocated (MostAllocated), or free
// (LeastAllocated); with BestFit, averaged with wholeScore.
func usageScore(ctx context.Context, a *allocator.Allocator, opts ScoreOptions, node *v1.Node, results []resourceapi.AllocationResult) int64 {
	total, used := a.DeviceUsage(node)
	if total == 0 {
		return 0
	}
	for _, result := range results {
		used += len(result.Devices.Results)
	}
	used = min(used, total)
	share := int64(used) * fwk.MaxScore / int64(total)
	if opts.Strategy == config.DeviceScoringLeastAllocated {
		share = fwk.MaxScore - share
	}
	if !opts.BestFit {
		return share
	}
	whole, err := wholeScore(a, node, results)
	if err != nil {
		klog.FromContext(ctx).V(4).Info("No topology score", "node", klog.KObj(node), "err", err)
		return share
	}
	return (share + whole) / 2
}

// wholeScore is 0..MaxNodeScore: the share of the node's free units that
// are in whole topology groups once this pod's devices are allocated;
// MaxNodeScore where none is free, as nothing is stranded.
func wholeScore(a *allocator.Allocator, node *v1.Node, results []resourceapi.AllocationResult) (int64, error) {
	whole, free, err := a.WholeFree(node, results)
	if err != nil || free == 0 {
		return fwk.MaxScore, err
	}
	return int64(whole) * fwk.MaxScore / int64(free), nil
}

// ScoreExtensions normalizes scores to 0..MaxNodeScore.
func (pl *Plugin) ScoreExtensions() fwk.ScoreExtensions { return pl }

// NormalizeScore scales the scores to 0..MaxNodeScore.
func (pl *Plugin) NormalizeScore(_ context.Context, _ fwk.CycleState, _ *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	return helper.DefaultNormalizeScore(fwk.MaxScore, false, scores)
}
