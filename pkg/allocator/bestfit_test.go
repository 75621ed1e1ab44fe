package allocator_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/pkg/allocator"
)

const (
	pcieRoot = "resource.kubernetes.io/pcieRoot"
	numaNode = "resource.kubernetes.io/numaNode"
)

var topologyAttributes = []resourceapi.FullyQualifiedName{pcieRoot, "gpu.example.com/nvlinkDomain", numaNode}

// hgx is an HGX-like node: 8 GPUs, two per PCIe root, four per NUMA node,
// one NVLink domain.
func hgx() *resourceapi.ResourceSlice {
	return builder.MakeSlice("node-0").Node("node-0").Devices(builder.Devices("gpu", 8, func(i int, d *builder.DeviceWrapper) {
		d.String(pcieRoot, fmt.Sprintf("pci%d", i/2)).Int(numaNode, int64(i/4)).String("nvlinkDomain", "nvl-0")
	})...).Obj()
}

// migNode has two GPUs with a counter set each, partitionable into a whole
// GPU or two halves, on one PCIe root.
func migNode() []*resourceapi.ResourceSlice {
	var devices []*builder.DeviceWrapper
	for g := range 2 {
		set := fmt.Sprintf("gpu-%d-memory", g)
		devices = append(devices,
			builder.MakeDevice(fmt.Sprintf("gpu-%d", g)).String("type", "gpu").String(pcieRoot, "pci0").Consumes(set, map[string]string{"memory": "40Gi"}),
			builder.MakeDevice(fmt.Sprintf("gpu-%d-half-0", g)).String("type", "mig").String(pcieRoot, "pci0").Consumes(set, map[string]string{"memory": "20Gi"}),
			builder.MakeDevice(fmt.Sprintf("gpu-%d-half-1", g)).String("type", "mig").String(pcieRoot, "pci0").Consumes(set, map[string]string{"memory": "20Gi"}))
	}
	return []*resourceapi.ResourceSlice{
		builder.MakeSlice("counters").Node("node-0").Pool("node-0", 1, 2).Counters(
			builder.CounterSet("gpu-0-memory", map[string]string{"memory": "40Gi"}),
			builder.CounterSet("gpu-1-memory", map[string]string{"memory": "40Gi"})).Obj(),
		builder.MakeSlice("devices").Node("node-0").Pool("node-0", 1, 2).Devices(devices...).Obj(),
	}
}

func allocatedOn(pool string, names ...string) structured.AllocatedState {
	state := structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID]()}
	for _, name := range names {
		state.AllocatedDevices.Insert(structured.MakeDeviceID(gpuDriver, pool, name))
	}
	return state
}

// TestBestFit checks the devices BestFit chooses, and that FirstFit, on the
// same input, still chooses upstream's.
func TestBestFit(t *testing.T) {
	features := structured.Features{PartitionableDevices: true, ConsumableCapacity: true, PrioritizedList: true}
	migClass := builder.MakeClass("mig", `device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].type == "mig"`)
	shared := builder.MakeSlice("node-0").Node("node-0").Devices(builder.Devices("gpu", 3, func(_ int, d *builder.DeviceWrapper) {
		d.Capacity("memory", "80Gi").Shareable(nil)
	})...).Obj()
	sharedState := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New(structured.MakeSharedDeviceID(structured.MakeDeviceID(gpuDriver, "node-0", "gpu-2"), ptr.To(types.UID("share-0")))),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	sharedState.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(structured.MakeDeviceID(gpuDriver, "node-0", "gpu-2"),
		map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("20Gi")}))

	for name, tc := range map[string]struct {
		slices   []*resourceapi.ResourceSlice
		state    structured.AllocatedState
		classes  []*resourceapi.DeviceClass
		claims   []*resourceapi.ResourceClaim
		attrs    []resourceapi.FullyQualifiedName
		firstFit []string
		bestFit  []string
	}{
		"one GPU fills a half-used PCIe root": {
			slices:   []*resourceapi.ResourceSlice{hgx()},
			state:    allocatedOn("node-0", "gpu-2"),
			claims:   []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", 1).Obj()},
			firstFit: []string{"gpu-0"},
			bestFit:  []string{"gpu-3"},
		},
		"two GPUs on a whole root, not one each on two half-used roots": {
			slices:   []*resourceapi.ResourceSlice{hgx()},
			state:    allocatedOn("node-0", "gpu-0", "gpu-2"),
			claims:   []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", 2).Obj()},
			firstFit: []string{"gpu-1", "gpu-3"},
			bestFit:  []string{"gpu-4", "gpu-5"},
		},
		"four GPUs without matchAttribute stay on one NUMA node": {
			slices:   []*resourceapi.ResourceSlice{hgx()},
			state:    allocatedOn("node-0", "gpu-0"),
			claims:   []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", 4).Obj()},
			firstFit: []string{"gpu-1", "gpu-2", "gpu-3", "gpu-4"},
			bestFit:  []string{"gpu-4", "gpu-5", "gpu-6", "gpu-7"},
		},
		"a request that no group holds breaks the smallest groups": {
			slices:   []*resourceapi.ResourceSlice{hgx()},
			state:    allocatedOn("node-0", "gpu-0", "gpu-5"),
			claims:   []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", 5).Obj()},
			firstFit: []string{"gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-6"},
			bestFit:  []string{"gpu-1", "gpu-4", "gpu-2", "gpu-3", "gpu-6"},
		},
		"with matchAttribute": {
			slices: []*resourceapi.ResourceSlice{hgx()},
			state:  allocatedOn("node-0", "gpu-0", "gpu-2", "gpu-5"),
			claims: []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", 2).
				MatchAttribute(numaNode).Obj()},
			firstFit: []string{"gpu-1", "gpu-3"},
			bestFit:  []string{"gpu-6", "gpu-7"},
		},
		"a partition of a GPU already partitioned": {
			slices:   migNode(),
			state:    allocatedOn("node-0", "gpu-1-half-0"),
			classes:  []*resourceapi.DeviceClass{migClass},
			claims:   []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("mig", "mig", 1).Obj()},
			firstFit: []string{"gpu-0-half-0"},
			bestFit:  []string{"gpu-1-half-1"},
		},
		"a share of a device already shared": {
			slices:   []*resourceapi.ResourceSlice{shared},
			state:    sharedState,
			claims:   []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", 1).CapacityRequest("memory", "10Gi").Obj()},
			firstFit: []string{"gpu-0"},
			bestFit:  []string{"gpu-2"},
		},
		"without topology attributes only units in use count": {
			slices:   []*resourceapi.ResourceSlice{hgx()},
			state:    allocatedOn("node-0", "gpu-2"),
			attrs:    []resourceapi.FullyQualifiedName{},
			claims:   []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", 1).Obj()},
			firstFit: []string{"gpu-0"},
			bestFit:  []string{"gpu-0"},
		},
		"two claims of a pod on one root": {
			slices: []*resourceapi.ResourceSlice{hgx()},
			state:  allocatedOn("node-0", "gpu-0", "gpu-2", "gpu-4"),
			claims: []*resourceapi.ResourceClaim{
				builder.MakeClaim("a").Request("gpu", "gpu", 1).Obj(),
				builder.MakeClaim("b").Request("gpu", "gpu", 1).Obj(),
			},
			firstFit: []string{"gpu-1", "gpu-3"},
			bestFit:  []string{"gpu-6", "gpu-7"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			classes := tc.classes
			if classes == nil {
				classes = []*resourceapi.DeviceClass{gpuClass}
			}
			attrs := tc.attrs
			if attrs == nil {
				attrs = topologyAttributes
			}
			run := func(policy allocator.Policy) []string {
				t.Helper()
				a, err := allocator.New(context.Background(), features, tc.state, allocator.ClassList(classes), tc.slices,
					allocator.Options{Policy: policy, TopologyAttributes: attrs})
				if err != nil {
					t.Fatal(err)
				}
				results, err := a.Allocate(context.Background(), builder.MakeNode("node-0"), tc.claims)
				if err != nil {
					t.Fatalf("%s: %v", policy, err)
				}
				if results == nil {
					t.Fatalf("%s: no fit", policy)
				}
				var devices []string
				for _, r := range results {
					for _, d := range r.Devices.Results {
						devices = append(devices, d.Device)
					}
				}
				return devices
			}
			if diff := cmp.Diff(tc.firstFit, run(allocator.PolicyFirstFit)); diff != "" {
				t.Errorf("FirstFit (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.bestFit, run(allocator.PolicyBestFit)); diff != "" {
				t.Errorf("BestFit (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBestFitKeepsErrors: when a device's evaluation fails where FirstFit
// meets it before its fit, BestFit reports the same error, although its
// own order would find a fit first.
func TestBestFitKeepsErrors(t *testing.T) {
	slice := builder.MakeSlice("node-0").Node("node-0").Devices(builder.Devices("gpu", 4, func(i int, d *builder.DeviceWrapper) {
		d.String(pcieRoot, fmt.Sprintf("pci%d", i/2))
		if i != 0 {
			d.Int("memory", 80)
		}
	})...).Obj()
	// gpu-0 has no "memory": the selector fails at runtime on it.
	claims := []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", 1, `device.attributes["gpu.example.com"].memory >= 80`).Obj()}
	state := allocatedOn("node-0", "gpu-2")
	var errs []string
	for _, policy := range []allocator.Policy{allocator.PolicyFirstFit, allocator.PolicyBestFit} {
		a, err := allocator.New(context.Background(), structured.Features{}, state, allocator.ClassList{gpuClass}, []*resourceapi.ResourceSlice{slice},
			allocator.Options{Policy: policy, TopologyAttributes: topologyAttributes})
		if err != nil {
			t.Fatal(err)
		}
		results, err := a.Allocate(context.Background(), builder.MakeNode("node-0"), claims)
		if err == nil {
			t.Fatalf("%s: got %v, want an error", policy, results)
		}
		errs = append(errs, err.Error())
	}
	if errs[0] != errs[1] {
		t.Errorf("errors differ:\nFirstFit: %s\nBestFit:  %s", errs[0], errs[1])
	}
}

func TestUnknownPolicy(t *testing.T) {
	_, err := allocator.New(context.Background(), structured.Features{}, structured.AllocatedState{}, allocator.ClassList{gpuClass}, nil, allocator.Options{Policy: "Random"})
	if err == nil || err.Error() != `unknown allocation policy "Random"` {
		t.Errorf("got %v, want an unknown policy error", err)
	}
}

func TestWholeFree(t *testing.T) {
	for name, tc := range map[string]struct {
		state       structured.AllocatedState
		devices     []string
		whole, free int
	}{
		// Levels: 4 roots of 2, 1 NVLink domain of 8, 2 NUMA nodes of 4.
		// 7 free per level: 6 in whole roots, 0 in the broken domain, 4
		// in the whole NUMA node.
		"empty node, one GPU": {state: allocatedOn("node-0"), devices: []string{"gpu-0"}, whole: 6 + 0 + 4, free: 3 * 7},
		// 6 free per level: all 6 in whole roots, 4 in NUMA node 1.
		"the other GPU of a used root": {state: allocatedOn("node-0", "gpu-0"), devices: []string{"gpu-1"}, whole: 6 + 0 + 4, free: 3 * 6},
		// 5 free per level: gpu-1 stranded on root 0, 4 in whole roots.
		"a whole root of a used NUMA node": {state: allocatedOn("node-0", "gpu-0"), devices: []string{"gpu-2", "gpu-3"}, whole: 4 + 0 + 4, free: 3 * 5},
		"the last free GPU":                {state: allocatedOn("node-0", "gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5", "gpu-6"), devices: []string{"gpu-7"}, whole: 0, free: 0},
	} {
		t.Run(name, func(t *testing.T) {
			a, err := allocator.New(context.Background(), structured.Features{}, tc.state, allocator.ClassList{gpuClass}, []*resourceapi.ResourceSlice{hgx()},
				allocator.Options{Policy: allocator.PolicyBestFit, TopologyAttributes: topologyAttributes})
			if err != nil {
				t.Fatal(err)
			}
			var results resourceapi.AllocationResult
			for _, d := range tc.devices {
				results.Devices.Results = append(results.Devices.Results, resourceapi.DeviceRequestAllocationResult{Driver: gpuDriver, Pool: "node-0", Device: d})
			}
			whole, free, err := a.WholeFree(builder.MakeNode("node-0"), []resourceapi.AllocationResult{results})
			if err != nil {
				t.Fatal(err)
			}
			if whole != tc.whole || free != tc.free {
				t.Errorf("got %d of %d free units whole; want %d of %d", whole, free, tc.whole, tc.free)
			}
		})
	}
}

// TestTopologyGroups: the groups of each level with their units and free
// units, with either policy; a MIG GPU is one unit however many of its
// partitions are allocated.
func TestTopologyGroups(t *testing.T) {
	for name, tc := range map[string]struct {
		slices []*resourceapi.ResourceSlice
		state  structured.AllocatedState
		attrs  []resourceapi.FullyQualifiedName
		want   []allocator.TopologyGroup
	}{
		"HGX, one GPU of root 0 and one of root 3 in use": {
			slices: []*resourceapi.ResourceSlice{hgx()},
			state:  allocatedOn("node-0", "gpu-0", "gpu-7"),
			attrs:  topologyAttributes,
			want: []allocator.TopologyGroup{
				{Attribute: pcieRoot, Value: "pci0", Units: 2, Free: 1},
				{Attribute: pcieRoot, Value: "pci1", Units: 2, Free: 2},
				{Attribute: pcieRoot, Value: "pci2", Units: 2, Free: 2},
				{Attribute: pcieRoot, Value: "pci3", Units: 2, Free: 1},
				{Attribute: "gpu.example.com/nvlinkDomain", Value: "nvl-0", Units: 8, Free: 6},
				{Attribute: numaNode, Value: "0", Units: 4, Free: 3},
				{Attribute: numaNode, Value: "1", Units: 4, Free: 3},
			},
		},
		"MIG: a half of GPU 1 in use": {
			slices: migNode(),
			state:  allocatedOn("node-0", "gpu-1-half-0"),
			attrs:  []resourceapi.FullyQualifiedName{pcieRoot, "gpu.example.com/missing"},
			want: []allocator.TopologyGroup{
				{Attribute: pcieRoot, Value: "pci0", Units: 2, Free: 1},
				{Attribute: "gpu.example.com/missing", Units: 1, Free: 1},
				{Attribute: "gpu.example.com/missing", Units: 1},
			},
		},
		"no attributes": {slices: []*resourceapi.ResourceSlice{hgx()}, state: allocatedOn("node-0")},
	} {
		t.Run(name, func(t *testing.T) {
			for _, policy := range []allocator.Policy{allocator.PolicyFirstFit, allocator.PolicyBestFit} {
				a, err := allocator.New(context.Background(), structured.Features{PartitionableDevices: true}, tc.state, allocator.ClassList{gpuClass}, tc.slices,
					allocator.Options{Policy: policy, TopologyAttributes: tc.attrs})
				if err != nil {
					t.Fatal(err)
				}
				got, err := a.TopologyGroups(builder.MakeNode("node-0"))
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("%s: groups (-want +got):\n%s", policy, diff)
				}
			}
		})
	}
}

// TestUnavailable: the taints that keep a device from requests without
// tolerations.
func TestUnavailable(t *testing.T) {
	for effect, want := range map[resourceapi.DeviceTaintEffect]bool{
		resourceapi.DeviceTaintEffectNoSchedule: true,
		resourceapi.DeviceTaintEffectNoExecute:  true,
		resourceapi.DeviceTaintEffectNone:       false,
	} {
		d := builder.MakeDevice("gpu-0").Taint("example.com/unhealthy", effect)
		if got := allocator.Unavailable(&d.Device); got != want {
			t.Errorf("taint effect %s: got %t, want %t", effect, got, want)
		}
	}
	if allocator.Unavailable(&builder.MakeDevice("gpu-0").Device) {
		t.Error("a device without taints is unavailable")
	}
}

// TestBestFitWithEdits: an allocator with edits (preemption's dry run, the
// devices held for nominated pods) chooses as its base's policy does.
func TestBestFitWithEdits(t *testing.T) {
	a, err := allocator.New(context.Background(), structured.Features{}, allocatedOn("node-0"), allocator.ClassList{gpuClass}, []*resourceapi.ResourceSlice{hgx()},
		allocator.Options{Policy: allocator.PolicyBestFit, TopologyAttributes: topologyAttributes})
	if err != nil {
		t.Fatal(err)
	}
	edited := a.WithEdits(allocator.Edits{Added: allocatedOn("node-0", "gpu-2")})
	results, err := edited.Allocate(context.Background(), builder.MakeNode("node-0"), []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", 1).Obj()})
	if err != nil || len(results) != 1 {
		t.Fatalf("got %v, %v; want one result", results, err)
	}
	if got := results[0].Devices.Results[0].Device; got != "gpu-3" {
		t.Errorf("got %s, want gpu-3, the other GPU of the root the edits use", got)
	}
}
