package allocator_test

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/internal/minor"
	"github.com/drasched/drasched/pkg/allocator"
)

// benchCase is one allocation problem: what the scheduler gives the
// allocator for one pod, and the nodes Filter tries.
type benchCase struct {
	features structured.Features
	state    structured.AllocatedState
	classes  []*resourceapi.DeviceClass
	slices   []*resourceapi.ResourceSlice
	nodes    []*v1.Node
	claims   []*resourceapi.ResourceClaim
	// fits says whether the claims fit on the nodes, checked once.
	fits bool
	// opts are drasched's options, without the cache.
	opts allocator.Options
}

// benchTopology are the BestFit cases' topology attributes: the default
// ones and the PCI root attribute of scheduler_perf's devices.
var benchTopology = []resourceapi.FullyQualifiedName{"resource.kubernetes.io/pciRoot", "resource.kubernetes.io/pcieRoot", "gpu.drasched.dev/nvlinkDomain", "resource.kubernetes.io/numaNode"}

// withBestFit adds a case <shape>_bestfit for each 500-node shape: the same
// input with drasched's allocator on BestFit (upstream has only first fit),
// and, where the shape's devices have a PCI root, the first device of each
// node in use, so that the roots are unequally full and BestFit's order is
// not upstream's. BenchmarkAllocate also runs drasched's FirstFit on these
// inputs (impl=firstfit), for BestFit's cost over FirstFit.
func withBestFit(cases map[string]func() benchCase) map[string]func() benchCase {
	for _, shape := range []string{"empty_500nodes", "selector_500nodes", "match_500nodes", "partitionable_500nodes", "consumable_500nodes"} {
		newCase := cases[shape]
		cases[shape+"_bestfit"] = func() benchCase {
			bc := newCase()
			bc.opts = allocator.Options{Policy: allocator.PolicyBestFit, TopologyAttributes: benchTopology}
			bc.state.AllocatedDevices = sets.New[structured.DeviceID]()
			for _, slice := range bc.slices {
				if len(slice.Spec.Devices) > 0 && slice.Spec.Devices[0].Name == "basic-device-0" {
					bc.state.AllocatedDevices.Insert(structured.MakeDeviceID(slice.Spec.Driver, slice.Spec.Pool.Name, "basic-device-0"))
				}
			}
			return bc
		}
	}
	return cases
}

const perfDriver = "test-driver.cdi.k8s.io"

var perfClass = builder.MakeClass("test-class", `device.driver == "test-driver.cdi.k8s.io"`)

// basicDevices mirrors scheduler_perf's resourceslice-basic-devices.yaml: an
// Intel-GPU-like device with a realistic number of attributes, PCI roots
// alternating.
func basicDevices(n, pciRoots int) []*builder.DeviceWrapper {
	return builder.Devices("basic-device", n, func(i int, d *builder.DeviceWrapper) {
		d.String("driver", "xe").Version("driverVersion", "1.2.3").
			String("resource.k8s.io/pciRoot", fmt.Sprint(i%pciRoots)).
			String("family", "Arc Pro B-Series").String("health", "Healthy").String("model", "B60").
			String("pciAddress", fmt.Sprintf("0000:0%d:00.0", i)).String("pciId", "0xe211").
			String("pciRoot", fmt.Sprintf("0%d", i%pciRoots)).
			String("resource.kubernetes.io/pciBusID", fmt.Sprintf("0000:0%d:00.0", i)).
			String("resource.kubernetes.io/pciRoot", fmt.Sprintf("pci0000:0%d", i%pciRoots)).
			String("type", "gpu").
			Capacity("memory", "24480Mi").Capacity("millicores", "1k")
		d.Attributes["sriov"] = resourceapi.DeviceAttribute{BoolValue: ptr.To(true)}
	})
}

func perfNodes(n int, slice func(node string) []*resourceapi.ResourceSlice) ([]*v1.Node, []*resourceapi.ResourceSlice) {
	var nodes []*v1.Node
	var slices []*resourceapi.ResourceSlice
	for i := range n {
		name := fmt.Sprintf("scheduler-perf-dra-%d", i)
		nodes = append(nodes, builder.MakeNode(name))
		slices = append(slices, slice(name)...)
	}
	return nodes, slices
}

func basicSlice(node string) []*resourceapi.ResourceSlice {
	return []*resourceapi.ResourceSlice{builder.MakeSlice(node).Driver(perfDriver).Node(node).Devices(basicDevices(10, 2)...).Obj()}
}

// schedulerFeatures are the allocator features kube-scheduler v1.37 runs
// with by default, derived from its feature gates as the plugin does: most
// DRA features are on, consumable capacity among them.
var schedulerFeatures = dynamicresources.AllocatorFeatures(feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate))

// benchCases are modelled on scheduler_perf's DRA workloads (500 nodes) and
// on inputs that are hard for an exhaustive search. The scheduler_perf
// cases use the scheduler's default features.
func benchCases() map[string]func() benchCase {
	return withBestFit(map[string]func() benchCase{
		// SchedulingWithResourceClaimTemplate/empty_500nodes: one device
		// out of ten on each of 500 nodes.
		"empty_500nodes": func() benchCase {
			nodes, slices := perfNodes(500, basicSlice)
			return benchCase{
				features: schedulerFeatures,
				classes:  []*resourceapi.DeviceClass{perfClass}, slices: slices, nodes: nodes,
				claims: []*resourceapi.ResourceClaim{builder.MakeClaim("claim").Request("req-0", "test-class", 1).Obj()},
				fits:   true,
			}
		},
		// selector_empty_500nodes: the same with a CEL selector that every
		// device matches.
		"selector_500nodes": func() benchCase {
			nodes, slices := perfNodes(500, basicSlice)
			return benchCase{
				features: schedulerFeatures,
				classes:  []*resourceapi.DeviceClass{perfClass}, slices: slices, nodes: nodes,
				claims: []*resourceapi.ResourceClaim{builder.MakeClaim("claim").Request("req-0", "test-class", 1,
					`device.attributes["test-driver.cdi.k8s.io"].driverVersion.major() >= 1 && device.capacity["test-driver.cdi.k8s.io"].memory.isGreaterThan(quantity("1Mi"))`).Obj()},
				fits: true,
			}
		},
		// match_empty_500nodes: five requests whose devices share a PCI
		// root; roots alternate, so every other device is skipped.
		"match_500nodes": func() benchCase {
			nodes, slices := perfNodes(500, basicSlice)
			claim := builder.MakeClaim("claim")
			for i := range 5 {
				claim.Request(fmt.Sprintf("req-%d", i), "test-class", 1)
			}
			claim.MatchAttribute("resource.kubernetes.io/pciRoot")
			return benchCase{
				features: schedulerFeatures,
				classes:  []*resourceapi.DeviceClass{perfClass}, slices: slices, nodes: nodes,
				claims: []*resourceapi.ResourceClaim{claim.Obj()},
				fits:   true,
			}
		},
		// PartitionableBacktracking: seven of eight devices; the first one
		// needs twice the memory, so the search must backtrack past it.
		"partitionable_500nodes": func() benchCase {
			nodes, slices := perfNodes(500, func(node string) []*resourceapi.ResourceSlice {
				cpu := map[string]string{}
				for i := 1; i <= 8; i++ {
					cpu[fmt.Sprintf("cpu%d", i)] = "1"
				}
				counters := builder.MakeSlice("counters-"+node).Driver(perfDriver).Node(node).Pool(node, 1, 2).
					Counters(builder.CounterSet("counter-set-for-cpu", cpu), builder.CounterSet("counter-set-for-mem", map[string]string{"mem": "70Gi"})).Obj()
				devices := builder.Devices("device", 8, func(i int, d *builder.DeviceWrapper) {
					mem := "10Gi"
					if i == 0 {
						mem = "20Gi"
					}
					d.Consumes("counter-set-for-cpu", map[string]string{fmt.Sprintf("cpu%d", i+1): "1"}).
						Consumes("counter-set-for-mem", map[string]string{"mem": mem})
				})
				return []*resourceapi.ResourceSlice{counters, builder.MakeSlice("devices-"+node).Driver(perfDriver).Node(node).Pool(node, 1, 2).Devices(devices...).Obj()}
			})
			return benchCase{
				features: structured.Features{PartitionableDevices: true},
				classes:  []*resourceapi.DeviceClass{perfClass}, slices: slices, nodes: nodes,
				claims: []*resourceapi.ResourceClaim{builder.MakeClaim("claim").Request("req-0", "test-class", 7).Obj()},
				fits:   true,
			}
		},
		// ConsumableCapacity: two distinct shareable devices with 2500M of
		// bandwidth each, out of four per node.
		"consumable_500nodes": func() benchCase {
			nodes, slices := perfNodes(500, func(node string) []*resourceapi.ResourceSlice {
				policy := &resourceapi.CapacityRequestPolicy{
					Default:    ptr.To(resource.MustParse("1M")),
					ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(resource.MustParse("1M")), Step: ptr.To(resource.MustParse("8"))},
				}
				devices := builder.Devices("shareable-device", 4, func(i int, d *builder.DeviceWrapper) {
					d.Int("dra.example.com/index", int64(i)).Capacity("bandwidth", "10G").Shareable(policy)
				})
				return []*resourceapi.ResourceSlice{builder.MakeSlice(node).Driver(perfDriver).Node(node).Devices(devices...).Obj()}
			})
			class := builder.MakeClass("test-class", `device.driver == "test-driver.cdi.k8s.io" && device.allowMultipleAllocations == true`)
			return benchCase{
				features: structured.Features{ConsumableCapacity: true},
				classes:  []*resourceapi.DeviceClass{class}, slices: slices, nodes: nodes,
				claims: []*resourceapi.ResourceClaim{builder.MakeClaim("claim").Request("req-0", "test-class", 2).
					CapacityRequest("bandwidth", "2500M").DistinctAttribute("dra.example.com/index", "req-0").Obj()},
				fits: true,
			}
		},

		// Hard cases, one node each.

		// Two requests under one matchAttribute need 17 devices with the
		// same PCIe root; 64 devices have four roots of 16 each.
		"hard_unsatisfiable_match_64": func() benchCase {
			slice := builder.MakeSlice("node-0").Driver(perfDriver).Node("node-0").Devices(builder.Devices("gpu", 64, func(i int, d *builder.DeviceWrapper) {
				d.String("resource.kubernetes.io/pcieRoot", fmt.Sprintf("pci%d", i%4))
			})...).Obj()
			return benchCase{
				classes: []*resourceapi.DeviceClass{perfClass}, slices: []*resourceapi.ResourceSlice{slice}, nodes: []*v1.Node{builder.MakeNode("node-0")},
				claims: []*resourceapi.ResourceClaim{builder.MakeClaim("claim").Request("a", "test-class", 11).Request("b", "test-class", 6).
					MatchAttribute("resource.kubernetes.io/pcieRoot").Obj()},
			}
		},
		// One more than there are: 21 of 20 identical devices.
		"hard_count_n_plus_1": func() benchCase {
			slice := builder.MakeSlice("node-0").Driver(perfDriver).Node("node-0").Devices(builder.Devices("gpu", 20, nil)...).Obj()
			return benchCase{
				classes: []*resourceapi.DeviceClass{perfClass}, slices: []*resourceapi.ResourceSlice{slice}, nodes: []*v1.Node{builder.MakeNode("node-0")},
				claims: []*resourceapi.ResourceClaim{builder.MakeClaim("claim").Request("gpu", "test-class", 21).Obj()},
			}
		},
		// Four requests of three devices each compete for the same 11
		// devices, which carry distinct serial numbers (no two identical).
		"hard_overlapping_requests": func() benchCase {
			slice := builder.MakeSlice("node-0").Driver(perfDriver).Node("node-0").Devices(builder.Devices("gpu", 11, func(i int, d *builder.DeviceWrapper) {
				d.String("serial", fmt.Sprintf("sn-%d", i))
			})...).Obj()
			claim := builder.MakeClaim("claim")
			for i := range 4 {
				claim.Request(fmt.Sprintf("req-%d", i), "test-class", 3)
			}
			return benchCase{
				classes: []*resourceapi.DeviceClass{perfClass}, slices: []*resourceapi.ResourceSlice{slice}, nodes: []*v1.Node{builder.MakeNode("node-0")},
				claims: []*resourceapi.ResourceClaim{claim.Obj()},
			}
		},
		// A pod with two claims: the second needs more H100s than the node
		// has, which upstream finds out again for each of the first
		// claim's choices.
		"hard_second_claim_impossible": func() benchCase {
			slice := builder.MakeSlice("node-0").Driver(perfDriver).Node("node-0").Devices(builder.Devices("gpu", 18, func(i int, d *builder.DeviceWrapper) {
				d.String("model", []string{"a100", "h100"}[i%2])
			})...).Obj()
			return benchCase{
				classes: []*resourceapi.DeviceClass{perfClass}, slices: []*resourceapi.ResourceSlice{slice}, nodes: []*v1.Node{builder.MakeNode("node-0")},
				claims: []*resourceapi.ResourceClaim{
					builder.MakeClaim("first").Request("gpu", "test-class", 5).Obj(),
					builder.MakeClaim("second").Request("gpu", "test-class", 10, `device.attributes["test-driver.cdi.k8s.io"].model == "h100"`).Obj(),
				},
			}
		},

		// Consumable capacity, one node of shared GPUs that earlier claims
		// use already. Requests that each fit on their own do not fit
		// together, which upstream only finds out by trying every way of
		// sharing the GPUs among them.

		// Four requests of 10Gi shares; what earlier claims left holds 12
		// shares, and the last request needs the thirteenth: it gets
		// N-1 of its N GPUs at best.
		"hard_consumable_n_minus_1": func() benchCase {
			return sharedGPUCase(7, []earlierClaim{{memory: "40Gi"}, {memory: "15Gi"}, {gpus: []int{5, 6}, memory: "10Gi"}},
				builder.MakeClaim("claim").
					Request("r0", "shared-gpu", 3).CapacityRequest("memory", "10Gi").
					Request("r1", "shared-gpu", 3).CapacityRequest("memory", "10Gi").
					Request("r2", "shared-gpu", 3).CapacityRequest("memory", "10Gi").
					Request("r3", "shared-gpu", 4).CapacityRequest("memory", "10Gi").Obj())
		},
		// The same, with the last request's GPUs on distinct NUMA nodes.
		"hard_consumable_distinct": func() benchCase {
			return sharedGPUCase(7, []earlierClaim{{memory: "40Gi"}, {memory: "15Gi"}, {gpus: []int{5, 6}, memory: "10Gi"}},
				builder.MakeClaim("claim").
					Request("r0", "shared-gpu", 3).CapacityRequest("memory", "10Gi").
					Request("r1", "shared-gpu", 3).CapacityRequest("memory", "10Gi").
					Request("r2", "shared-gpu", 3).CapacityRequest("memory", "10Gi").
					Request("r3", "shared-gpu", 4).CapacityRequest("memory", "10Gi").
					DistinctAttribute(sharedGPUDriver+"/numa", "r3").Obj())
		},
		// Requests of two sizes compete: 45Gi is left of each GPU, ten
		// shares of 20Gi go two to a GPU, and the 30Gi shares of the last
		// request need three GPUs that none of them uses, of which there
		// are two at most. Counting shares or memory does not show it.
		"hard_consumable_competing": func() benchCase {
			return sharedGPUCase(7, []earlierClaim{{memory: "24Gi"}, {memory: "11Gi"}},
				builder.MakeClaim("claim").
					Request("r0", "shared-gpu", 4).CapacityRequest("memory", "20Gi").
					Request("r1", "shared-gpu", 3).CapacityRequest("memory", "20Gi").
					Request("r2", "shared-gpu", 3).CapacityRequest("memory", "20Gi").
					Request("large", "shared-gpu", 3).CapacityRequest("memory", "30Gi").Obj())
		},
	})
}

const sharedGPUDriver = "gpu.example.com"

// earlierClaim is a claim of an earlier cycle: a share of the given memory
// on each of the listed GPUs, all GPUs if none are listed.
type earlierClaim struct {
	gpus   []int
	memory string
}

// sharedGPUCase is one node with n shared GPUs of 80Gi, what the earlier
// claims left of them, and the claim to allocate. The GPUs carry attributes
// of their own, as real ones do (an index, a UUID), and a NUMA node for two
// each.
func sharedGPUCase(n int, earlier []earlierClaim, claim *resourceapi.ResourceClaim) benchCase {
	policy := &resourceapi.CapacityRequestPolicy{
		Default:    ptr.To(resource.MustParse("1Gi")),
		ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(resource.MustParse("1Gi")), Step: ptr.To(resource.MustParse("1Gi"))},
	}
	slice := builder.MakeSlice("node-0").Driver(sharedGPUDriver).Node("node-0").Devices(builder.Devices("gpu", n, func(i int, d *builder.DeviceWrapper) {
		d.Int("index", int64(i)).String("uuid", fmt.Sprintf("GPU-%08x", 0x5eed0000+i)).Int("numa", int64(i/2)).
			Capacity("memory", "80Gi").Shareable(policy)
	})...).Obj()
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for k, c := range earlier {
		gpus := c.gpus
		if gpus == nil {
			for i := range n {
				gpus = append(gpus, i)
			}
		}
		for _, i := range gpus {
			id := structured.MakeDeviceID(sharedGPUDriver, "node-0", fmt.Sprintf("gpu-%d", i))
			share := types.UID(fmt.Sprintf("earlier-%d-%d", k, i))
			state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, &share))
			state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(c.memory)}))
		}
	}
	class := builder.MakeClass("shared-gpu", fmt.Sprintf("device.driver == %q && device.allowMultipleAllocations == true", sharedGPUDriver))
	return benchCase{
		features: structured.Features{ConsumableCapacity: true},
		state:    state,
		classes:  []*resourceapi.DeviceClass{class}, slices: []*resourceapi.ResourceSlice{slice}, nodes: []*v1.Node{builder.MakeNode("node-0")},
		claims: []*resourceapi.ResourceClaim{claim},
	}
}

// runAllocator performs one op: New, then Allocate on every node, like one
// scheduling cycle of one pod.
type runAllocator func(ctx context.Context, bc *benchCase) (fits int, err error)

func upstreamRunner(bc *benchCase) runAllocator {
	// The scheduler plugin keeps one compile cache across cycles.
	celCache := cel.NewCache(10, minor.CELFeatures(bc.features.ConsumableCapacity, minor.NewerFeaturesOf(bc.features).ListTypeAttributes))
	return func(ctx context.Context, bc *benchCase) (int, error) {
		a, err := structured.NewAllocator(ctx, bc.features, bc.state, allocator.ClassList(bc.classes), bc.slices, celCache)
		if err != nil {
			return 0, err
		}
		fits := 0
		for _, node := range bc.nodes {
			results, err := a.Allocate(ctx, node, bc.claims)
			if err != nil {
				return 0, err
			}
			if results != nil {
				fits++
			}
		}
		return fits, nil
	}
}

func draschedRunner(cache *allocator.Cache, opts allocator.Options) runAllocator {
	opts.Cache = cache
	return func(ctx context.Context, bc *benchCase) (int, error) {
		a, err := allocator.New(ctx, bc.features, bc.state, allocator.ClassList(bc.classes), bc.slices, opts)
		if err != nil {
			return 0, err
		}
		fits := 0
		for _, node := range bc.nodes {
			results, err := a.Allocate(ctx, node, bc.claims)
			if err != nil {
				return 0, err
			}
			if results != nil {
				fits++
			}
		}
		return fits, nil
	}
}

// BenchmarkAllocate runs every case with upstream's allocator and ours on
// the same inputs; hack/bench-allocator.sh turns the output into ratios.
//
//	go test ./pkg/allocator -run '^$' -bench BenchmarkAllocate -benchmem
func BenchmarkAllocate(b *testing.B) {
	for name, newCase := range benchCases() {
		bc := newCase()
		if bc.state.AllocatedDevices == nil {
			bc.state.AllocatedDevices = sets.New[structured.DeviceID]()
		}
		impls := []string{"upstream", "drasched"}
		if bc.opts.Policy == allocator.PolicyBestFit {
			impls = append(impls, "firstfit")
		}
		for _, impl := range impls {
			b.Run(fmt.Sprintf("case=%s/impl=%s", name, impl), func(b *testing.B) {
				ctx := context.Background()
				var run runAllocator
				var cache *allocator.Cache
				switch impl {
				case "upstream":
					run = upstreamRunner(&bc)
				case "firstfit":
					cache = allocator.NewCache(0)
					run = draschedRunner(cache, allocator.Options{})
				default:
					cache = allocator.NewCache(0)
					run = draschedRunner(cache, bc.opts)
				}
				// A warm-up op outside the timer, as in a running scheduler,
				// also checks the outcome.
				fits, err := run(ctx, &bc)
				if err != nil {
					b.Fatal(err)
				}
				if want := map[bool]int{true: len(bc.nodes), false: 0}[bc.fits]; fits != want {
					b.Fatalf("claims fit on %d of %d nodes, want %d", fits, len(bc.nodes), want)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if _, err := run(ctx, &bc); err != nil {
						b.Fatal(err)
					}
				}
				if cache != nil {
					b.ReportMetric(cache.Stats().MatchHitRatio(), "cel-hit-ratio")
				}
			})
		}
	}
}

// explainCases are the 500-node shapes of benchCases changed so that the pod
// fits on no node, and Filter would explain every node: each changes the
// claims only.
func explainCases() map[string]func() benchCase {
	misfit := func(shape string, claims ...*resourceapi.ResourceClaim) func() benchCase {
		return func() benchCase {
			bc := benchCases()[shape]()
			bc.claims, bc.fits = claims, false
			return bc
		}
	}
	// Six devices with one PCI root, where each root has five.
	match := builder.MakeClaim("claim")
	for i := range 6 {
		match.Request(fmt.Sprintf("req-%d", i), "test-class", 1)
	}
	match.MatchAttribute("resource.kubernetes.io/pciRoot")
	return map[string]func() benchCase{
		// One device more than a node has: the request fails on its own.
		"empty_500nodes": misfit("empty_500nodes", builder.MakeClaim("claim").Request("req-0", "test-class", 11).Obj()),
		"selector_500nodes": misfit("selector_500nodes", builder.MakeClaim("claim").Request("req-0", "test-class", 11,
			`device.attributes["test-driver.cdi.k8s.io"].driverVersion.major() >= 1 && device.capacity["test-driver.cdi.k8s.io"].memory.isGreaterThan(quantity("1Mi"))`).Obj()),
		// The requests fit, their constraint does not: three searches.
		"match_500nodes": misfit("match_500nodes", match.Obj()),
		// All eight partitions: each fits alone, not all together.
		"partitionable_500nodes": misfit("partitionable_500nodes", builder.MakeClaim("claim").Request("req-0", "test-class", 8).Obj()),
		// Five distinct shareable devices of four.
		"consumable_500nodes": misfit("consumable_500nodes", builder.MakeClaim("claim").Request("req-0", "test-class", 5).
			CapacityRequest("bandwidth", "2500M").DistinctAttribute("dra.example.com/index", "req-0").Obj()),
	}
}

// BenchmarkExplain compares what Filter spends on a pod that fits nowhere:
// op=allocate is Allocate on every node, op=explain Explain on every node,
// each with a new Allocator per op and a warm cache, as in
// BenchmarkAllocate.
//
//	go test ./pkg/allocator -run '^$' -bench BenchmarkExplain -benchmem
func BenchmarkExplain(b *testing.B) {
	for name, newCase := range explainCases() {
		bc := newCase()
		if bc.state.AllocatedDevices == nil {
			bc.state.AllocatedDevices = sets.New[structured.DeviceID]()
		}
		for _, op := range []string{"allocate", "explain"} {
			b.Run(fmt.Sprintf("case=%s/op=%s", name, op), func(b *testing.B) {
				ctx := context.Background()
				cache := allocator.NewCache(0)
				run := func() error {
					a, err := allocator.New(ctx, bc.features, bc.state, allocator.ClassList(bc.classes), bc.slices, allocator.Options{Cache: cache})
					if err != nil {
						return err
					}
					for _, node := range bc.nodes {
						if op == "allocate" {
							results, err := a.Allocate(ctx, node, bc.claims)
							if err != nil || results != nil {
								return fmt.Errorf("node %s: Allocate returned %d results and error %w, want neither", node.Name, len(results), err)
							}
							continue
						}
						failures, err := a.Explain(ctx, node, bc.claims)
						if err != nil || len(failures) == 0 {
							return fmt.Errorf("node %s: Explain returned failures %v and error %w, want failures", node.Name, failures, err)
						}
					}
					return nil
				}
				// The warm-up op checks the outcome.
				if err := run(); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if err := run(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
