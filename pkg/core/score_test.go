package core_test

import (
	"context"
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drasched/drasched/apis/config"
	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/internal/minor/schedminor"
	"github.com/drasched/drasched/pkg/core"
)

// TestMaxScore: core's MaxScore is the framework's.
func TestMaxScore(t *testing.T) {
	if core.MaxScore != schedminor.MaxScore {
		t.Errorf("core.MaxScore %d, framework's %d", core.MaxScore, schedminor.MaxScore)
	}
}

// usage is a node with total devices, used of them allocated, and
// whole of free units in whole groups once the pod's are allocated.
type usage struct {
	total, used, whole, free int
	err                      error
}

func (u usage) DeviceUsage(*v1.Node) (int, int) { return u.total, u.used }
func (u usage) WholeFree(*v1.Node, []resourceapi.AllocationResult) (int, int, error) {
	return u.whole, u.free, u.err
}

func TestNodeScoreUsage(t *testing.T) {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	claim := builder.MakeClaim("c").Request("gpu", "gpu", 1).Obj()
	one := []resourceapi.AllocationResult{{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: "d", Pool: "n", Device: "gpu-1"}}}}}
	for name, tc := range map[string]struct {
		u    core.Usage
		opts core.ScoreOptions
		want int64
	}{
		// 1 in use plus the pod's 1 of 4.
		"MostAllocated":              {u: usage{total: 4, used: 1}, opts: core.ScoreOptions{Strategy: config.DeviceScoringMostAllocated}, want: 50},
		"LeastAllocated":             {u: usage{total: 4, used: 1}, opts: core.ScoreOptions{Strategy: config.DeviceScoringLeastAllocated}, want: 50},
		"LeastAllocated, empty node": {u: usage{total: 4}, opts: core.ScoreOptions{Strategy: config.DeviceScoringLeastAllocated}, want: 75},
		"None":                       {u: usage{total: 4, used: 3}, opts: core.ScoreOptions{Strategy: config.DeviceScoringNone}, want: 0},
		"no devices":                 {u: usage{}, opts: core.ScoreOptions{Strategy: config.DeviceScoringMostAllocated}, want: 0},
		"no allocator":               {opts: core.ScoreOptions{Strategy: config.DeviceScoringMostAllocated}, want: 0},
		// Usage capped at the node's devices.
		"more used than there are": {u: usage{total: 2, used: 2}, opts: core.ScoreOptions{Strategy: config.DeviceScoringMostAllocated}, want: 100},
		// (50 + 2 of 2 free in whole groups) / 2.
		"BestFit": {u: usage{total: 4, used: 1, whole: 2, free: 2}, opts: core.ScoreOptions{Strategy: config.DeviceScoringMostAllocated, BestFit: true}, want: 75},
		// Nothing free: nothing stranded.
		"BestFit, none free": {u: usage{total: 2, used: 1}, opts: core.ScoreOptions{Strategy: config.DeviceScoringMostAllocated, BestFit: true}, want: 100},
		// Without topology the usage share alone.
		"BestFit, no topology": {u: usage{total: 4, used: 1, err: errors.New("no groups")}, opts: core.ScoreOptions{Strategy: config.DeviceScoringMostAllocated, BestFit: true}, want: 50},
		// No prioritized list in the claim: the list part is 0.
		"PrioritizedList on, plain claim": {u: usage{total: 4, used: 1}, opts: core.ScoreOptions{PrioritizedList: true, Strategy: config.DeviceScoringMostAllocated}, want: 50},
	} {
		t.Run(name, func(t *testing.T) {
			if got := core.NodeScore(context.Background(), tc.u, tc.opts, []*resourceapi.ResourceClaim{claim}, node, one); got != tc.want {
				t.Errorf("score %d, want %d", got, tc.want)
			}
		})
	}
}

// TestNodeScoreListFirst: the prioritized-list score ranks above any
// device usage: a second choice on an empty node loses to a first choice
// on a full one.
func TestNodeScoreListFirst(t *testing.T) {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	claim := builder.MakeClaim("c").FirstAvailable("gpu",
		builder.SubRequest("big", "gpu", 1),
		builder.SubRequest("small", "gpu", 1),
	).Obj()
	result := func(request string) []resourceapi.AllocationResult {
		return []resourceapi.AllocationResult{{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Request: request, Driver: "d", Pool: "n", Device: "x"}}}}}
	}
	opts := core.ScoreOptions{PrioritizedList: true, Strategy: config.DeviceScoringLeastAllocated}
	first := core.NodeScore(context.Background(), usage{total: 1}, opts, []*resourceapi.ResourceClaim{claim}, node, result("gpu/big"))
	second := core.NodeScore(context.Background(), usage{total: 100}, opts, []*resourceapi.ResourceClaim{claim}, node, result("gpu/small"))
	if first <= second {
		t.Errorf("first choice on a full node scores %d, second choice on an empty node %d: the list must rank first", first, second)
	}
}

func TestPrioritizedListScore(t *testing.T) {
	claim := builder.MakeClaim("c").FirstAvailable("gpu",
		builder.SubRequest("big", "gpu", 1),
		builder.SubRequest("medium", "gpu", 1),
		builder.SubRequest("small", "gpu", 1),
	).Obj()
	plain := builder.MakeClaim("plain").Request("gpu", "gpu", 1).Obj()
	result := func(requests ...string) resourceapi.AllocationResult {
		var r resourceapi.AllocationResult
		for _, request := range requests {
			r.Devices.Results = append(r.Devices.Results, resourceapi.DeviceRequestAllocationResult{Request: request, Driver: "d", Pool: "p", Device: "x"})
		}
		return r
	}
	allocatedEarlier := claim.DeepCopy()
	allocatedEarlier.Status.Allocation = &resourceapi.AllocationResult{}
	*allocatedEarlier.Status.Allocation = result("gpu/medium")

	for name, tc := range map[string]struct {
		claims  []*resourceapi.ResourceClaim
		results []resourceapi.AllocationResult
		want    int64
	}{
		"first choice":                 {claims: []*resourceapi.ResourceClaim{claim}, results: []resourceapi.AllocationResult{result("gpu/big")}, want: 8},
		"third choice":                 {claims: []*resourceapi.ResourceClaim{claim}, results: []resourceapi.AllocationResult{result("gpu/small")}, want: 6},
		"no prioritized list":          {claims: []*resourceapi.ResourceClaim{plain}, results: []resourceapi.AllocationResult{result("gpu")}, want: 0},
		"allocated earlier counts too": {claims: []*resourceapi.ResourceClaim{allocatedEarlier, claim}, results: []resourceapi.AllocationResult{result("gpu/big")}, want: 7 + 8},
		"plain then list":              {claims: []*resourceapi.ResourceClaim{plain, claim}, results: []resourceapi.AllocationResult{result("gpu"), result("gpu/medium")}, want: 7},
	} {
		t.Run(name, func(t *testing.T) {
			if got := core.PrioritizedListScore(tc.claims, tc.results); got != tc.want {
				t.Errorf("score %d, want %d", got, tc.want)
			}
		})
	}
}
