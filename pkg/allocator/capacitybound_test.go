package allocator

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
)

// share is a request for count shares of the given memory (Gi) each.
type share struct {
	count  int64
	memory int
}

// gpuNode is one node with a shared GPU of 80Gi per entry of left, of
// which left[i] Gi are left after earlier claims, and a claim with the
// requests.
type gpuNode struct {
	features structured.Features
	state    structured.AllocatedState
	classes  ClassList
	slices   []*resourceapi.ResourceSlice
	node     *v1.Node
	claims   []*resourceapi.ResourceClaim
}

func newGPUNode(left []int, requests ...share) gpuNode {
	policy := &resourceapi.CapacityRequestPolicy{
		Default:    ptr.To(resource.MustParse("1Gi")),
		ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(resource.MustParse("1Gi")), Step: ptr.To(resource.MustParse("1Gi"))},
	}
	slice := builder.MakeSlice("node-0").Node("node-0").Devices(builder.Devices("gpu", len(left), func(i int, d *builder.DeviceWrapper) {
		d.Int("index", int64(i)).Capacity("memory", "80Gi").Shareable(policy)
	})...).Obj()
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for i, l := range left {
		id := structured.MakeDeviceID("gpu.example.com", "node-0", fmt.Sprintf("gpu-%d", i))
		shareID := types.UID(fmt.Sprintf("earlier-%d", i))
		state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, &shareID))
		state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, map[resourceapi.QualifiedName]resource.Quantity{
			"memory": resource.MustParse(fmt.Sprintf("%dGi", 80-l)),
		}))
	}
	claim := builder.MakeClaim("claim")
	for i, r := range requests {
		claim.Request(fmt.Sprintf("r%d", i), "gpu", r.count).CapacityRequest("memory", fmt.Sprintf("%dGi", r.memory))
	}
	return gpuNode{
		features: structured.Features{ConsumableCapacity: true},
		state:    state,
		classes:  ClassList{builder.MakeClass("gpu", `device.allowMultipleAllocations == true`)},
		slices:   []*resourceapi.ResourceSlice{slice},
		node:     builder.MakeNode("node-0"),
		claims:   []*resourceapi.ResourceClaim{claim.Obj()},
	}
}

// search builds the allocator of the node with the default options and
// starts a search of its claims, released when the test ends.
func (n gpuNode) search(t *testing.T) (context.Context, *Allocator, *search) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	a, err := New(ctx, n.features, n.state, n.classes, n.slices, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := a.newSearch(ctx, n.node, n.claims, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.release)
	return ctx, a, s
}

// TestCapacityBound checks the capacity bound on the demands of the root of
// the search, and that it is sound: where it proves that the claim cannot
// fit, upstream finds no fit either.
func TestCapacityBound(t *testing.T) {
	type proof int
	const (
		none proof = iota
		byShares
		byVolume
	)
	for name, tc := range map[string]struct {
		left     []int
		requests []share
		want     proof
	}{
		"fits": {
			left:     []int{25, 25, 25, 25},
			requests: []share{{2, 10}, {2, 10}, {2, 10}, {2, 10}},
			want:     none,
		},
		// Two 10Gi shares fit into 25Gi: eight shares, nine needed.
		"shares per device": {
			left:     []int{25, 25, 25, 25},
			requests: []share{{3, 10}, {3, 10}, {3, 10}},
			want:     byShares,
		},
		// A GPU without room for a share serves no request.
		"no room": {
			left:     []int{25, 25, 25, 5},
			requests: []share{{3, 10}, {3, 10}},
			want:     none, // two each on three GPUs: fits
		},
		"no room, one more": {
			left:     []int{25, 25, 25, 5},
			requests: []share{{3, 10}, {3, 10}, {1, 10}},
			want:     byShares,
		},
		// Counting allows two shares per GPU, eight in all, as many as
		// needed; but the four shares of 21Gi need 84Gi and the four of
		// 10Gi another 40Gi: more than the 120Gi left.
		"volume": {
			left:     []int{25, 25, 35, 35},
			requests: []share{{2, 10}, {2, 10}, {4, 21}},
			want:     byVolume,
		},
		// Neither check sees that a 30Gi share leaves no room for a 20Gi
		// one: seven shares of 20Gi take four GPUs, one is left for two
		// of 30Gi. The search has to find out (hard_consumable_competing).
		"competing sizes": {
			left:     []int{45, 45, 45, 45, 45},
			requests: []share{{3, 20}, {3, 20}, {1, 20}, {2, 30}},
			want:     none,
		},
	} {
		t.Run(name, func(t *testing.T) {
			n := newGPUNode(tc.left, tc.requests...)
			ctx, a, s := n.search(t)
			var demands []demand
			for ri := range s.reqs[0] {
				d, trap := s.demandFor(0, s.reqs[0][ri])
				if trap {
					t.Fatalf("request %d: trap", ri)
				}
				demands = append(demands, d)
			}
			got := none
			if table := s.newShareTable(demands); table != nil {
				switch {
				case !table.sharesFit():
					got = byShares
				case table.volumeExceeds():
					got = byVolume
				}
			}
			if got != tc.want {
				t.Errorf("proof %d, want %d", got, tc.want)
			}
			if (got != none) != s.capacityInfeasible(demands) {
				t.Errorf("capacityInfeasible disagrees with its checks")
			}

			upstream, err := structured.NewAllocator(ctx, n.features, n.state, n.classes, n.slices, cel.NewCache(10, cel.Features{EnableConsumableCapacity: true}))
			if err != nil {
				t.Fatal(err)
			}
			results, err := upstream.Allocate(ctx, n.node, n.claims)
			if err != nil {
				t.Fatal(err)
			}
			if got != none && results != nil {
				t.Errorf("the bound proves no fit, but upstream finds one")
			}
			ours, err := a.Allocate(ctx, n.node, n.claims)
			if err != nil {
				t.Fatal(err)
			}
			if (ours == nil) != (results == nil) {
				t.Errorf("fit %t, upstream's %t", ours != nil, results != nil)
			}
		})
	}
}
