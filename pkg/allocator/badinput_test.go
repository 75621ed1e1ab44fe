package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2/ktesting"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/internal/minor"
	"github.com/drasched/drasched/pkg/allocator"
)

// TestBadInput: every kind of bad input gets a clear error or a clean
// "does not fit", never a panic.
func TestBadInput(t *testing.T) {
	node := builder.MakeNode("node-0")
	gpus := func(n int) *resourceapi.ResourceSlice {
		return builder.MakeSlice("node-0").Node("node-0").Devices(builder.Devices("gpu", n, nil)...).Obj()
	}
	for name, tc := range map[string]struct {
		classes []*resourceapi.DeviceClass
		slices  []*resourceapi.ResourceSlice
		claim   *resourceapi.ResourceClaim
		// wantErr is a substring of the expected error; "" means no error.
		wantErr string
		// nodeErr: the error only fails this node.
		nodeErr bool
		// wantDevices are the devices allocated, if no error.
		wantDevices []string
	}{
		"CEL runtime error in a class": {
			classes: []*resourceapi.DeviceClass{builder.MakeClass("gpu", `device.attributes["gpu.example.com"].model == "h100"`)},
			slices:  []*resourceapi.ResourceSlice{gpus(2)},
			claim:   builder.MakeClaim("c").Request("gpu", "gpu", 1).Obj(),
			wantErr: minor.SelectorRuntimeError("class gpu", 0, "gpu.example.com/node-0/gpu-0", errors.New("no such key: model")).Error(),
		},
		"CEL runtime error in a claim": {
			classes: []*resourceapi.DeviceClass{gpuClass},
			slices:  []*resourceapi.ResourceSlice{gpus(2)},
			claim:   builder.MakeClaim("c").Request("gpu", "gpu", 1, `device.attributes["gpu.example.com"].memory > 1`).Obj(),
			wantErr: minor.SelectorRuntimeError("claim default/c", 0, "gpu.example.com/node-0/gpu-0", errors.New("no such key: memory")).Error(),
		},
		"CEL compile error": {
			classes: []*resourceapi.DeviceClass{gpuClass},
			slices:  []*resourceapi.ResourceSlice{gpus(2)},
			claim:   builder.MakeClaim("c").Request("gpu", "gpu", 1, `device.attributes[`).Obj(),
			wantErr: `claim default/c: selector #0: CEL compile error: compilation failed`,
		},
		"class does not exist": {
			classes: []*resourceapi.DeviceClass{gpuClass},
			slices:  []*resourceapi.ResourceSlice{gpus(2)},
			claim:   builder.MakeClaim("c").Request("gpu", "no-such-class", 1).Obj(),
			wantErr: `claim default/c, request gpu: could not retrieve device class no-such-class: deviceclass.resource.k8s.io "no-such-class" not found`,
		},
		"duplicate device names make the pool invalid": {
			classes: []*resourceapi.DeviceClass{gpuClass},
			slices:  []*resourceapi.ResourceSlice{builder.MakeSlice("node-0").Node("node-0").Devices(builder.MakeDevice("gpu-0"), builder.MakeDevice("gpu-0")).Obj()},
			claim:   builder.MakeClaim("c").Request("gpu", "gpu", 1).Obj(),
			wantErr: "invalid resource pools were encountered",
			nodeErr: true,
		},
		"slices disagreeing on the generation: the newest wins": {
			classes: []*resourceapi.DeviceClass{gpuClass},
			slices: []*resourceapi.ResourceSlice{
				builder.MakeSlice("old").Node("node-0").Pool("node-0", 1, 1).Devices(builder.MakeDevice("old-gpu")).Obj(),
				builder.MakeSlice("new").Node("node-0").Pool("node-0", 2, 1).Devices(builder.MakeDevice("new-gpu")).Obj(),
			},
			claim:       builder.MakeClaim("c").Request("gpu", "gpu", 1).Obj(),
			wantDevices: []string{"new-gpu"},
		},
		"newest generation incomplete: does not fit": {
			classes: []*resourceapi.DeviceClass{gpuClass},
			slices: []*resourceapi.ResourceSlice{
				builder.MakeSlice("old").Node("node-0").Pool("node-0", 1, 1).Devices(builder.MakeDevice("old-gpu")).Obj(),
				builder.MakeSlice("new").Node("node-0").Pool("node-0", 2, 2).Devices(builder.MakeDevice("new-gpu")).Obj(),
			},
			claim: builder.MakeClaim("c").Request("gpu", "gpu", 1).Obj(),
		},
		"10,000 devices in one pool, all of them": {
			classes:     []*resourceapi.DeviceClass{gpuClass},
			slices:      []*resourceapi.ResourceSlice{gpus(10000)},
			claim:       builder.MakeClaim("c").RequestAll("gpu", "gpu").Obj(),
			wantErr:     claimLimitError(10000),
			wantDevices: nil,
		},
		"10,000 devices in one pool, 32 of them": {
			classes:     []*resourceapi.DeviceClass{gpuClass},
			slices:      []*resourceapi.ResourceSlice{gpus(10000)},
			claim:       builder.MakeClaim("c").Request("gpu", "gpu", 32).Obj(),
			wantDevices: deviceNames("gpu", 32),
		},
		"10,000 devices in one pool, 33 of them": {
			classes: []*resourceapi.DeviceClass{gpuClass},
			slices:  []*resourceapi.ResourceSlice{gpus(10000)},
			claim:   builder.MakeClaim("c").Request("gpu", "gpu", 33).Obj(),
			wantErr: claimLimitError(33),
		},
		"request without exactly or firstAvailable": {
			classes: []*resourceapi.DeviceClass{gpuClass},
			slices:  []*resourceapi.ResourceSlice{gpus(1)},
			claim: func() *resourceapi.ResourceClaim {
				c := builder.MakeClaim("c").Obj()
				c.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "empty"}}
				return c
			}(),
			wantErr: "neither exactly nor firstAvailable is set",
		},
		"selector of unknown type": {
			classes: []*resourceapi.DeviceClass{gpuClass},
			slices:  []*resourceapi.ResourceSlice{gpus(1)},
			claim: func() *resourceapi.ResourceClaim {
				c := builder.MakeClaim("c").Request("gpu", "gpu", 1).Obj()
				c.Spec.Devices.Requests[0].Exactly.Selectors = []resourceapi.DeviceSelector{{}}
				return c
			}(),
			wantErr: "CEL expression empty (unsupported selector type?)",
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			a, err := allocator.New(ctx, structured.Features{PrioritizedList: true}, structured.AllocatedState{}, allocator.ClassList(tc.classes), tc.slices, allocator.Options{})
			if err != nil {
				t.Fatal(err)
			}
			results, err := a.Allocate(ctx, node, []*resourceapi.ResourceClaim{tc.claim})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("expected error containing %q, got results %v", tc.wantErr, results)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("error %q does not contain %q", err, tc.wantErr)
			case tc.wantErr != "" && errors.Is(err, structured.ErrFailedAllocationOnNode) != tc.nodeErr:
				t.Fatalf("error %q: node-only error is %v, want %v", err, !tc.nodeErr, tc.nodeErr)
			}
			var got []string
			for _, result := range results {
				for _, d := range result.Devices.Results {
					got = append(got, d.Device)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.wantDevices, ",") {
				t.Errorf("allocated %v, want %v", got, tc.wantDevices)
			}
		})
	}
}

func deviceNames(prefix string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return names
}

// TestNoNode: without a node, as upstream, only the slices for all nodes
// serve the claim; a node's own slice does not (upstream 1.35's suite
// allocates so).
func TestNoNode(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	local := builder.MakeSlice("local").Pool("node-0", 1, 1).Node("node-0").Devices(builder.Devices("gpu", 2, nil)...).Obj()
	shared := builder.MakeSlice("shared").Pool("network", 1, 1).AllNodes().Devices(builder.Devices("gpu", 1, nil)...).Obj()
	for name, tc := range map[string]struct {
		slices []*resourceapi.ResourceSlice
		count  int64
		want   string // the pool, or "" for no allocation
	}{
		"node's own slice only":    {slices: []*resourceapi.ResourceSlice{local}, count: 1},
		"slice for all nodes":      {slices: []*resourceapi.ResourceSlice{local, shared}, count: 1, want: "network"},
		"more than all nodes have": {slices: []*resourceapi.ResourceSlice{local, shared}, count: 2},
	} {
		t.Run(name, func(t *testing.T) {
			a, err := allocator.New(ctx, structured.Features{}, structured.AllocatedState{}, allocator.ClassList{gpuClass}, tc.slices, allocator.Options{})
			if err != nil {
				t.Fatal(err)
			}
			results, err := a.Allocate(ctx, nil, []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", tc.count).Obj()})
			switch {
			case err != nil:
				t.Fatalf("Allocate without a node: %v", err)
			case tc.want == "" && len(results) != 0:
				t.Fatalf("Allocate without a node: got %v, want no allocation", results)
			case tc.want != "" && len(results) != 1:
				t.Fatalf("Allocate without a node: got %d results, want 1", len(results))
			case tc.want != "":
				for _, r := range results[0].Devices.Results {
					if r.Pool != tc.want {
						t.Errorf("got a device of pool %s, want %s", r.Pool, tc.want)
					}
				}
			}
		})
	}
}

func TestNoClassLister(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	if _, err := allocator.New(ctx, structured.Features{}, structured.AllocatedState{}, nil, nil, allocator.Options{}); err == nil {
		t.Fatal("New without a class lister succeeded")
	}
}

// TestCancel: a search that would take very long returns the context's
// error once the context is cancelled, here before it starts.
func TestCancel(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	slices := []*resourceapi.ResourceSlice{builder.MakeSlice("node-0").Node("node-0").Devices(builder.Devices("gpu", 64, nil)...).Obj()}
	a, err := allocator.New(ctx, structured.Features{}, structured.AllocatedState{}, allocator.ClassList{gpuClass}, slices, allocator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancelCause(ctx)
	cause := errors.New("scheduler shutting down")
	cancel(cause)
	_, err = a.Allocate(cancelled, builder.MakeNode("node-0"), []*resourceapi.ResourceClaim{builder.MakeClaim("c").Request("gpu", "gpu", 8).Obj()})
	if !errors.Is(err, cause) {
		t.Fatalf("expected an error wrapping the cancellation cause, got %v", err)
	}
}

// TestDeadlineInSelector: a deadline that passes while the allocator
// evaluates a slow CEL selector (builder.SlowSelector, on 2,048 devices:
// minutes of evaluation) ends Allocate and Explain with the context's
// error, as Filter's timeout and the kubectl plugin's --timeout need: the
// evaluation itself is interrupted (cel-go checks the context within
// comprehensions), not only the search between devices.
func TestDeadlineInSelector(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	node := builder.MakeNode("node-0")
	var slices []*resourceapi.ResourceSlice
	for i := range 16 {
		slices = append(slices, builder.MakeSlice(fmt.Sprintf("node-0-%d", i)).Node("node-0").Pool("node-0", 1, 16).
			Devices(builder.Devices(fmt.Sprintf("gpu-%d", i), resourceapi.ResourceSliceMaxDevices, func(_ int, d *builder.DeviceWrapper) {
				d.Int("index", -1)
			})...).Obj())
	}
	claim := builder.MakeClaim("slow").Request("gpu", "gpu", 1, builder.SlowSelector("gpu.example.com", "index")).Obj()
	a, err := allocator.New(ctx, structured.Features{}, structured.AllocatedState{}, allocator.ClassList{gpuClass}, slices, allocator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func(context.Context) error{
		"Allocate": func(ctx context.Context) error {
			_, err := a.Allocate(ctx, node, []*resourceapi.ResourceClaim{claim})
			return err
		},
		"Explain": func(ctx context.Context) error {
			_, err := a.Explain(ctx, node, []*resourceapi.ResourceClaim{claim})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			if err := call(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("got %v, want the context's deadline", err)
			}
		})
	}
}

// TestConcurrentNodes: one allocator, Allocate on many nodes at once (as
// Filter does), sharing slices across nodes. Run with -race.
func TestConcurrentNodes(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	var slices []*resourceapi.ResourceSlice
	for n := range 32 {
		name := fmt.Sprintf("node-%d", n)
		slices = append(slices, builder.MakeSlice(name).Node(name).Devices(builder.Devices("gpu", 8, func(i int, d *builder.DeviceWrapper) {
			d.String("resource.kubernetes.io/pcieRoot", fmt.Sprintf("pci%d", i%2))
		})...).Obj())
	}
	// A network-attached pool that every node sees.
	slices = append(slices, builder.MakeSlice("shared").AllNodes().Devices(builder.Devices("nic", 4, nil)...).Obj())
	claim := builder.MakeClaim("c").Request("gpu", "gpu", 4, `device.driver == "gpu.example.com"`).
		MatchAttribute("resource.kubernetes.io/pcieRoot").Obj()
	cache := allocator.NewCache(0)
	a, err := allocator.New(ctx, structured.Features{}, structured.AllocatedState{}, allocator.ClassList{gpuClass}, slices, allocator.Options{Cache: cache})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 32)
	for n := range 32 {
		wg.Go(func() {
			name := fmt.Sprintf("node-%d", n)
			results, err := a.Allocate(ctx, builder.MakeNode(name), []*resourceapi.ResourceClaim{claim})
			switch {
			case err != nil:
				errs[n] = err
			case len(results) != 1 || len(results[0].Devices.Results) != 4:
				errs[n] = fmt.Errorf("node %s: unexpected results %v", name, results)
			case results[0].Devices.Results[0].Pool != name:
				errs[n] = fmt.Errorf("node %s: got devices of pool %s", name, results[0].Devices.Results[0].Pool)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// TestConcurrentSharedDevices is TestConcurrentNodes for what the search
// keeps across nodes about shared and partitionable devices: what requests
// consume of shared GPUs, the counters of a pool that every node sees, the
// random bytes of share IDs. Claims that fit and claims that do not (whose
// searches backtrack into the bounds) run at once. Run with -race.
func TestConcurrentSharedDevices(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	const nodes = 16
	var slices []*resourceapi.ResourceSlice
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for n := range nodes {
		name := fmt.Sprintf("node-%d", n)
		slices = append(slices, builder.MakeSlice(name).Node(name).Devices(builder.Devices("gpu", 4, func(i int, d *builder.DeviceWrapper) {
			d.Int("index", int64(i)).Capacity("memory", "40Gi").Shareable(nil)
		})...).Obj())
		// Earlier claims use two of the GPUs alike.
		for i := range 2 {
			id := structured.MakeDeviceID("gpu.example.com", name, fmt.Sprintf("gpu-%d", i))
			share := types.UID(fmt.Sprintf("earlier-%d", i))
			state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, &share))
			state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("15Gi")}))
		}
	}
	// A partitionable pool that every node sees.
	slices = append(slices,
		builder.MakeSlice("counters").Driver("part.example.com").AllNodes().Pool("parts", 1, 2).Counters(builder.CounterSet("set", map[string]string{"mem": "4"})).Obj(),
		builder.MakeSlice("parts").Driver("part.example.com").AllNodes().Pool("parts", 1, 2).Devices(builder.Devices("part", 4, func(i int, d *builder.DeviceWrapper) {
			d.Consumes("set", map[string]string{"mem": "1"})
		})...).Obj())
	classes := allocator.ClassList{
		builder.MakeClass("gpu", `device.driver == "gpu.example.com"`),
		builder.MakeClass("part", `device.driver == "part.example.com"`),
	}
	fits := builder.MakeClaim("fits").Request("gpu", "gpu", 2).CapacityRequest("memory", "10Gi").Request("part", "part", 1).Obj()
	// Four shares of 20Gi on GPUs with 25Gi and 40Gi left: two fit on the
	// first two, four on the others, and two requests need six.
	misfit := builder.MakeClaim("misfit").
		Request("a", "gpu", 3).CapacityRequest("memory", "20Gi").
		Request("b", "gpu", 3).CapacityRequest("memory", "20Gi").
		Request("c", "gpu", 2).CapacityRequest("memory", "20Gi").Obj()
	a, err := allocator.New(ctx, structured.Features{ConsumableCapacity: true, PartitionableDevices: true}, state, classes, slices, allocator.Options{Cache: allocator.NewCache(0)})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2*nodes)
	for n := range 2 * nodes {
		wg.Go(func() {
			node := builder.MakeNode(fmt.Sprintf("node-%d", n/2))
			if n%2 == 1 {
				results, err := a.Allocate(ctx, node, []*resourceapi.ResourceClaim{misfit})
				if err != nil || results != nil {
					errs[n] = fmt.Errorf("node %s: misfit got results %v and error %w, want neither", node.Name, results, err)
				}
				return
			}
			results, err := a.Allocate(ctx, node, []*resourceapi.ResourceClaim{fits})
			switch {
			case err != nil:
				errs[n] = err
			case len(results) != 1 || len(results[0].Devices.Results) != 3:
				errs[n] = fmt.Errorf("node %s: unexpected results %v", node.Name, results)
			case results[0].Devices.Results[0].ShareID == nil || *results[0].Devices.Results[0].ShareID == *results[0].Devices.Results[1].ShareID:
				errs[n] = fmt.Errorf("node %s: shares without distinct IDs: %v", node.Name, results[0].Devices.Results)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// claimLimitError is how the minor's upstream words a claim whose only
// request asks for more than 32 devices.
func claimLimitError(devices int) string {
	if minor.ClaimLimitPerRequest {
		return fmt.Sprintf("adding %d devices exceeds the claim limit of 32", devices)
	}
	return fmt.Sprintf("number of requested devices %d exceeds the claim limit of 32", devices)
}
