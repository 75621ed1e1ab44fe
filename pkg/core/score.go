package core

import (
	"context"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"

	"github.com/drasched/drasched/apis/config"
)

// MaxScore is the highest score a Score plugin gives a node
// (k8s.io/kube-scheduler/framework.MaxScore; the plugin's tests check that
// the two agree).
const MaxScore int64 = 100

// Usage is what the device-aware part of the score asks of a cycle's
// allocator (*allocator.Allocator has these methods).
type Usage interface {
	// DeviceUsage is how many devices the node has and how many of them
	// are allocated.
	DeviceUsage(node *v1.Node) (total, used int)
	// WholeFree is how many of the node's free units are in whole
	// topology groups, and how many are free, once results are allocated.
	WholeFree(node *v1.Node, results []resourceapi.AllocationResult) (whole, free int, err error)
}

// ScoreOptions are what of a profile's arguments and features the score
// ranks with.
type ScoreOptions struct {
	// PrioritizedList: DRAPrioritizedList is on.
	PrioritizedList bool
	// Strategy is scoring.deviceStrategy.
	Strategy config.DeviceScoringStrategy
	// BestFit: the allocation policy is BestFit.
	BestFit bool
}

// NodeScore is the score of a node on which the pod's claims (all of them,
// in the pod's order) get results (for those not allocated yet, in order),
// before normalization: first like upstream by the prioritized lists (a
// subrequest earlier in firstAvailable scores more), then, as a tie breaker
// within the same prioritized-list score, by device usage. With
// MostAllocated, nodes whose devices are already in use come first, which
// keeps whole nodes free for large pods; with LeastAllocated the opposite.
// With BestFit, the device-aware part also counts how much of the node's
// free capacity the allocation leaves in whole topology groups, so that of
// two nodes equally full the one where the pod fills a partly used group
// wins.
//
// u is the cycle's allocator, for the device-aware part; nil gives none.
// The scheduler plugin's Score and kubectl drasched fit both rank with it,
// so that fit places pods where Score puts them.
func NodeScore(ctx context.Context, u Usage, opts ScoreOptions, claims []*resourceapi.ResourceClaim, node *v1.Node, results []resourceapi.AllocationResult) int64 {
	var score int64
	if opts.PrioritizedList {
		score = PrioritizedListScore(claims, results) * (MaxScore + 1)
	}
	if opts.Strategy != config.DeviceScoringNone && u != nil {
		score += usageScore(ctx, u, opts, node, results)
	}
	return score
}

// PrioritizedListScore is upstream's score: for every claim, 8 minus the
// index of each chosen subrequest. Claims allocated earlier count with
// their allocation, as upstream counts them.
func PrioritizedListScore(claims []*resourceapi.ResourceClaim, results []resourceapi.AllocationResult) int64 {
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

// usageScore is 0..MaxScore: the share of the node's devices in use once
// this pod's devices are allocated (MostAllocated), or free
// (LeastAllocated); with BestFit, averaged with wholeScore.
func usageScore(ctx context.Context, u Usage, opts ScoreOptions, node *v1.Node, results []resourceapi.AllocationResult) int64 {
	total, used := u.DeviceUsage(node)
	if total == 0 {
		return 0
	}
	for _, result := range results {
		used += len(result.Devices.Results)
	}
	used = min(used, total)
	share := int64(used) * MaxScore / int64(total)
	if opts.Strategy == config.DeviceScoringLeastAllocated {
		share = MaxScore - share
	}
	if !opts.BestFit {
		return share
	}
	whole, err := wholeScore(u, node, results)
	if err != nil {
		klog.FromContext(ctx).V(4).Info("No topology score", "node", klog.KObj(node), "err", err)
		return share
	}
	return (share + whole) / 2
}

// wholeScore is 0..MaxScore: the share of the node's free units that are
// in whole topology groups once this pod's devices are allocated; MaxScore
// where none is free, as nothing is stranded.
func wholeScore(u Usage, node *v1.Node, results []resourceapi.AllocationResult) (int64, error) {
	whole, free, err := u.WholeFree(node, results)
	if err != nil || free == 0 {
		return MaxScore, err
	}
	return int64(whole) * MaxScore / int64(free), nil
}
