package core_test

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/pkg/core"
)

func slice(name, driver, pool string, generation, count int64, devices ...string) *resourceapi.ResourceSlice {
	s := builder.MakeSlice(name).Driver(driver).Obj()
	s.Spec.Pool = resourceapi.ResourcePool{Name: pool, Generation: generation, ResourceSliceCount: count}
	for _, d := range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: d})
	}
	return s
}

// TestNewestPools: each pool keeps the slices of its newest generation,
// whatever the order they come in; pools of the same name of two drivers
// are two pools; a pool with fewer slices than it says is incomplete.
func TestNewestPools(t *testing.T) {
	a := core.PoolID{Driver: "a.example.com", Pool: "p"}
	b := core.PoolID{Driver: "b.example.com", Pool: "p"}
	old := slice("old", a.Driver, a.Pool, 1, 1, "gpu-0")
	new1 := slice("new-1", a.Driver, a.Pool, 2, 2, "gpu-0")
	new2 := slice("new-2", a.Driver, a.Pool, 2, 2, "gpu-1")
	other := slice("other", b.Driver, b.Pool, 5, 2, "gpu-9")
	for name, order := range map[string][]*resourceapi.ResourceSlice{
		"old first": {old, new1, other, new2},
		"old last":  {new1, new2, other, old},
		"between":   {new1, old, new2, other},
	} {
		t.Run(name, func(t *testing.T) {
			pools := core.NewestPools(order)
			if len(pools) != 2 {
				t.Fatalf("got %d pools, want 2: %v", len(pools), pools)
			}
			pa, pb := pools[a], pools[b]
			if pa == nil || pa.Generation != 2 || len(pa.Slices) != 2 || pa.Slices[0] != new1 || pa.Slices[1] != new2 || !pa.Complete() {
				t.Errorf("pool %s: %+v, want generation 2's two slices in order, complete", a, pa)
			}
			if d, s := pa.Device("gpu-1"); d == nil || s != new2 {
				t.Errorf("pool %s: device gpu-1 in %v, want in new-2", a, s)
			}
			if d, _ := pa.Device("gpu-9"); d != nil {
				t.Errorf("pool %s has another driver's device gpu-9", a)
			}
			if pb == nil || pb.Generation != 5 || len(pb.Slices) != 1 || pb.Complete() {
				t.Errorf("pool %s: %+v, want one slice of generation 5, incomplete (1 of 2)", b, pb)
			}
		})
	}
	if pools := core.NewestPools(nil); len(pools) != 0 {
		t.Errorf("no slices: %v", pools)
	}
}
