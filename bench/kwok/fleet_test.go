package main

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestH100Counts counts from slices and claims: H100 GPUs 0-3 are NUMA
// node 0 of their node, 4-7 NUMA node 1.
func TestH100Counts(t *testing.T) {
	fleet := h100FleetOf(append(clusterSlices(t, kindH100, 3), clusterSlices(t, kindA100, 1)...))
	for name, tc := range map[string]struct {
		devices []string
		want    h100Counts
	}{
		"idle": {
			want: h100Counts{GPUs: 24, FreeGPUs: 24, WholeFreeNodes: 3, IdealWholeFreeNodes: 3, Free4GPUNUMA: 6, IdealFree4GPUNUMA: 6, NodesByUse: map[int]int{0: 3}},
		},
		"scattered": {
			// Node 0: one GPU on NUMA node 0. Node 1: NUMA node 0 full
			// and one GPU on NUMA node 1. Node 2 idle. The A100's GPU
			// is no H100.
			devices: []string{"h100-0000/gpu-0", "h100-0001/gpu-0", "h100-0001/gpu-1", "h100-0001/gpu-2", "h100-0001/gpu-3", "h100-0001/gpu-4", "a100-0000/gpu-6"},
			want:    h100Counts{GPUs: 24, FreeGPUs: 18, WholeFreeNodes: 1, IdealWholeFreeNodes: 2, Free4GPUNUMA: 3, IdealFree4GPUNUMA: 4, NodesByUse: map[int]int{0: 1, 1: 1, 5: 1}},
		},
		"one GPU per node": {
			devices: []string{"h100-0000/gpu-7", "h100-0001/gpu-0", "h100-0002/gpu-4"},
			want:    h100Counts{GPUs: 24, FreeGPUs: 21, WholeFreeNodes: 0, IdealWholeFreeNodes: 2, Free4GPUNUMA: 3, IdealFree4GPUNUMA: 5, NodesByUse: map[int]int{1: 3}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := fleet.count(allocatedDevices(allocatedClaims(tc.devices...)))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMIGCounts counts from slices and claims. The A100 inventory's GPUs
// in MIG mode: 0 and 1 seven 1g.5gb each; 2 three 2g.10gb and a 1g.5gb; 3
// two 3g.20gb; 4 a 3g.20gb, a 2g.10gb and two 1g.5gb; 5 a 7g.40gb.
func TestMIGCounts(t *testing.T) {
	all := append(clusterSlices(t, kindA100, 2), clusterSlices(t, kindH100, 1)...)
	fleet := migFleetOf(all)
	if diff := cmp.Diff([]string{"1g.5gb", "2g.10gb", "3g.20gb"}, fleet.churnProfiles()); diff != "" {
		t.Errorf("churn profiles (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"1g.5gb": 1, "2g.10gb": 2, "3g.20gb": 4, "7g.40gb": 8}, fleet.memorySlices); diff != "" {
		t.Errorf("memory slices (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"1g.5gb": 34, "2g.10gb": 8, "3g.20gb": 6, "7g.40gb": 2}, fleet.devices); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
	mig := func(node string, gpuIndex int, profile string, i int) string {
		return migDevice(t, all, node, gpuIndex, profile, i)
	}
	for name, tc := range map[string]struct {
		devices []string
		want    migCounts
	}{
		"idle": {
			want: migCounts{GPUs: 12, WholeFreeGPUs: 12, IdealWholeFreeGPUs: 12, InUse: map[string]int{}, GPUsByUse: map[string]int{"0": 12}},
		},
		"scattered": {
			// Five GPUs touched; three 1g.5gb fit on one GPU, two
			// 3g.20gb on another.
			devices: []string{
				mig("a100-0000", 0, "1g.5gb", 0), mig("a100-0001", 1, "1g.5gb", 3), mig("a100-0001", 2, "1g.5gb", 0),
				mig("a100-0001", 3, "3g.20gb", 1), mig("a100-0001", 4, "3g.20gb", 0),
				// Not in MIG mode, not counted.
				"a100-0000/gpu-6", "h100-0000/gpu-0",
			},
			want: migCounts{GPUs: 12, WholeFreeGPUs: 7, IdealWholeFreeGPUs: 10, InUse: map[string]int{"1g.5gb": 3, "3g.20gb": 2},
				GPUsByUse: map[string]int{"0": 7, "1": 3, "4": 2}},
		},
		"whole GPU in use": {
			// GPU 5 of node 0 whole, and a 2g.10gb and a 1g.5gb, which
			// GPU 2 or 4 holds alone.
			devices: []string{"a100-0000/gpu-5", mig("a100-0000", 2, "2g.10gb", 0), mig("a100-0001", 0, "1g.5gb", 0)},
			want: migCounts{GPUs: 12, WholeFreeGPUs: 9, IdealWholeFreeGPUs: 10, InUse: map[string]int{"1g.5gb": 1, "2g.10gb": 1},
				GPUsByUse: map[string]int{"0": 9, "1": 1, "2": 1, "whole": 1}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := fleet.count(allocatedDevices(allocatedClaims(tc.devices...)))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMinGPUs(t *testing.T) {
	for _, tc := range []struct {
		demand map[string]int
		want   int
	}{
		{map[string]int{}, 0},
		{map[string]int{"1g": 7}, 1},
		{map[string]int{"1g": 8}, 2},
		{map[string]int{"1g": 16}, 3},
		// 14 on the 1g GPUs, the rest on GPUs 2 and 4.
		{map[string]int{"1g": 17}, 4},
		{map[string]int{"2g": 4, "3g": 3}, 3},
		{map[string]int{"3g": 1, "2g": 1, "1g": 2}, 1},
		{map[string]int{"7g": 1, "1g": 1}, 2},
	} {
		if got := minGPUs(a100Layouts(1), tc.demand, 6); got != tc.want {
			t.Errorf("minGPUs(%v) = %d, want %d", tc.demand, got, tc.want)
		}
	}
	// More than the layouts hold: the upper bound given.
	if got := minGPUs(a100Layouts(1), map[string]int{"3g": 4}, 6); got != 6 {
		t.Errorf("minGPUs of too much = %d, want the upper bound 6", got)
	}
}

// TestMinGPUsBruteForce compares minGPUs with trying every set of GPUs.
func TestMinGPUsBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	layouts := a100Layouts(2)[:10]
	profiles := []string{"1g", "2g", "3g"}
	for range 200 {
		// A feasible demand: what a random set of GPUs' devices hold,
		// some of them in use.
		demand := map[string]int{}
		upper := 0
		for _, l := range layouts {
			if rng.IntN(2) == 0 {
				continue
			}
			upper++
			for _, p := range profiles {
				demand[p] += rng.IntN(l[p] + 1)
			}
		}
		want := upper
		for set := range 1 << len(layouts) {
			held := map[string]int{}
			n := 0
			for i, l := range layouts {
				if set&(1<<i) != 0 {
					n++
					for _, p := range profiles {
						held[p] += l[p]
					}
				}
			}
			if n < want && !slices.ContainsFunc(profiles, func(p string) bool { return held[p] < demand[p] }) {
				want = n
			}
		}
		if got := minGPUs(layouts, demand, upper); got != want {
			t.Fatalf("minGPUs(%v) = %d, want %d", demand, got, want)
		}
	}
}
