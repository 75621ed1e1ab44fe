package dra

import (
	"context"
	"errors"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/helper"

	"github.com/drasched/drasched/apis/config"
	"github.com/drasched/drasched/internal/minor/schedminor"
	"github.com/drasched/drasched/pkg/core"
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

// Score ranks nodes by core.NodeScore: the prioritized lists first, as
// upstream does, then device usage as a tie breaker (MostAllocated,
// LeastAllocated, and with BestFit the free capacity left in whole
// topology groups).
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
	// Without the cycle's allocator the node gets no device-aware score.
	// u stays a nil interface then, not one holding a nil *Allocator.
	var u core.Usage
	if pl.scoring != config.DeviceScoringNone {
		if a, _ := s.explainer(ctx, pl); a != nil {
			u = a
		}
	}
	return core.NodeScore(ctx, u, pl.scoreOptions(), s.claims, node, results), nil
}

func (pl *Plugin) scoreOptions() core.ScoreOptions {
	return core.ScoreOptions{PrioritizedList: pl.fts.EnableDRAPrioritizedList, Strategy: pl.scoring, BestFit: pl.bestFit()}
}

// ScoreExtensions normalizes scores to 0..MaxNodeScore.
func (pl *Plugin) ScoreExtensions() fwk.ScoreExtensions { return pl }

// NormalizeScore scales the scores to 0..MaxNodeScore.
func (pl *Plugin) NormalizeScore(_ context.Context, _ fwk.CycleState, _ *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	return helper.DefaultNormalizeScore(schedminor.MaxScore, false, scores)
}
