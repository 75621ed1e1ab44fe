package capacity_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2/ktesting"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/pkg/allocator"
	"github.com/drasched/drasched/pkg/capacity"
	"github.com/drasched/drasched/pkg/driver/gpu"
	"github.com/drasched/drasched/pkg/driver/gpu/device"
)

// migSnapshot: node-a with two A100s in MIG mode (two 1g and one 2g
// instance each, published as the GPU driver publishes them), the first 1g
// instance of GPU 0 allocated and GPU 1 allocated whole; node-b with four
// plain GPUs, one tainted, one allocated.
func migSnapshot(t *testing.T) *capacity.Snapshot {
	t.Helper()
	var gpus []device.GPU
	for i := range 2 {
		mig := func(n, start, size int, profile string) device.MIGDevice {
			return device.MIGDevice{UUID: fmt.Sprintf("MIG-%08d-0000-4000-8000-%012d", i, n), Profile: profile, Placement: device.Placement{Start: start, Size: size}}
		}
		gpus = append(gpus, device.GPU{
			Index: i, Minor: i, UUID: fmt.Sprintf("GPU-%08d-0000-4000-8000-000000000000", i),
			ProductName: "A100", PCIBusID: fmt.Sprintf("0000:%02x:00.0", 7+i), PCIeRoot: "pci0000:00", MIGEnabled: true,
			MIG: []device.MIGDevice{mig(1, 0, 1, "1g.5gb"), mig(2, 1, 1, "1g.5gb"), mig(3, 2, 2, "2g.10gb")},
		})
	}
	migSlices, err := gpu.BuildResourceSlices(gpu.SliceOptions{DriverName: "gpu.example.com", NodeName: "node-a"}, gpus)
	if err != nil {
		t.Fatal(err)
	}
	allocated := func(name, pool, dev string) *resourceapi.ResourceClaim {
		c := builder.MakeClaim(name).Request("r", "any", 1).Obj()
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "r", Driver: "gpu.example.com", Pool: pool, Device: dev},
		}}}
		return c
	}
	mig0 := (&gpus[0]).MIGName(&gpus[0].MIG[0])
	return &capacity.Snapshot{
		Nodes: []*v1.Node{builder.MakeNode("node-a", "gpu", "a100"), builder.MakeNode("node-b", "gpu", "plain")},
		Slices: append(migSlices, builder.MakeSlice("node-b").Node("node-b").Devices(builder.Devices("gpu", 4, func(i int, d *builder.DeviceWrapper) {
			d.String("type", "gpu")
			if i == 3 {
				d.Taint("gpu.example.com/unhealthy", resourceapi.DeviceTaintEffectNoSchedule)
			}
		})...).Obj()),
		Claims: []*resourceapi.ResourceClaim{allocated("a", "node-a", mig0), allocated("b", "node-a", "gpu-1"), allocated("c", "node-b", "gpu-0")},
		Classes: []*resourceapi.DeviceClass{
			builder.MakeClass("any"),
			builder.MakeClass("mig", `device.attributes["gpu.example.com"].type == "mig"`),
		},
	}
}

// TestTopViews: counts per node (with MIG counter sets and partitions per
// profile), filtered by class and by node labels, per class, and the
// errors for an unknown class or node.
func TestTopViews(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	snap := migSnapshot(t)
	opts := capacity.Options{PartitionAttribute: "gpu.example.com/profile"}

	report, err := capacity.Top(ctx, snap, opts)
	if err != nil {
		t.Fatal(err)
	}
	// node-a: 2 GPUs and 6 MIG devices, 2 allocated: GPU 0 partly used
	// (one 1g instance left of its two, the 2g instance), GPU 1 full.
	// node-b: 4 GPUs, 1 allocated, 1 tainted.
	profile := "gpu.example.com/profile"
	want := []capacity.Node{
		{Name: "node-a", Pools: []string{"gpu.example.com/node-a"}, Counts: capacity.Counts{Total: 8, Allocated: 2, Available: 6},
			Partitions:  []capacity.Partition{{Attribute: profile, Type: "1g.5gb", Total: 4, Free: 1}, {Attribute: profile, Type: "2g.10gb", Total: 2, Free: 1}},
			CounterSets: &capacity.CounterSets{Total: 2, Partial: 1, Full: 1}},
		{Name: "node-b", Pools: []string{"gpu.example.com/node-b"}, Counts: capacity.Counts{Total: 4, Allocated: 1, Available: 2, Unavailable: 1}},
	}
	if diff := cmp.Diff(want, report.Nodes); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}

	opts.Class = "mig"
	report, err = capacity.Top(ctx, snap, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Nodes) != 2 || report.Nodes[0].Counts != (capacity.Counts{Total: 6, Allocated: 1, Available: 5}) || report.Nodes[1].Total != 0 {
		t.Errorf("nodes, class mig: %+v", report.Nodes)
	}

	opts.View, opts.Class, opts.Selector = capacity.ViewClasses, "", labels.SelectorFromSet(labels.Set{"gpu": "plain"})
	report, err = capacity.Top(ctx, snap, opts)
	if err != nil {
		t.Fatal(err)
	}
	wantClasses := []capacity.Class{{Name: "any", Counts: capacity.Counts{Total: 4, Allocated: 1, Available: 2, Unavailable: 1}}, {Name: "mig"}}
	if diff := cmp.Diff(wantClasses, report.Classes); diff != "" {
		t.Errorf("classes on the plain node (-want +got):\n%s", diff)
	}

	for name, o := range map[string]capacity.Options{
		"unknown class": {Class: "nope"},
		"unknown node":  {Node: "node-x"},
	} {
		if _, err := capacity.Top(ctx, snap, o); !errors.Is(err, capacity.ErrNotFound) {
			t.Errorf("%s: got %v, want ErrNotFound", name, err)
		}
	}
}

// TestTopCancelled: a context that ends before Top is done (Ctrl-C in
// kubectl drasched top) ends it with the context's error, in every view,
// and so does CountByClass; the pools the class matcher did not get to
// have no answers, which must not be read.
func TestTopCancelled(t *testing.T) {
	snap := migSnapshot(t)
	cancelled := func(t *testing.T) context.Context {
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		return ctx
	}
	for name, opts := range map[string]capacity.Options{
		"nodes":            {},
		"nodes of a class": {Class: "mig"},
		"pools":            {View: capacity.ViewPools},
		"pools of a class": {View: capacity.ViewPools, Class: "mig"},
		"classes":          {View: capacity.ViewClasses},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := capacity.Top(cancelled(t), snap, opts); !errors.Is(err, context.Canceled) {
				t.Errorf("got %v, want the context's error", err)
			}
		})
	}
	t.Run("CountByClass", func(t *testing.T) {
		if _, err := capacity.CountByClass(cancelled(t), snap.Slices, snap.Claims, snap.Classes, nil, allocator.NewCache(0), structured.Features{}); !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want the context's error", err)
		}
	})
}

// countdownContext is cancelled by the n-th call of its Err method,
// whichever goroutine makes it: a cancellation that lands at a chosen
// check of the work, with no timing involved.
type countdownContext struct {
	context.Context
	cancel context.CancelFunc
	left   atomic.Int64
}

func newCountdownContext(parent context.Context, n int64) *countdownContext {
	ctx, cancel := context.WithCancel(parent)
	c := &countdownContext{Context: ctx, cancel: cancel}
	c.left.Store(n)
	return c
}

func (c *countdownContext) Err() error {
	if c.left.Add(-1) == 0 {
		c.cancel()
	}
	return c.Context.Err()
}

// TestTopCancelledMidway: cancelled at each of the checks that Top makes
// in turn, while the class matcher is part way through the pools on all
// CPUs, Top returns the context's error; once the countdown outlasts its
// checks, it returns the whole report.
func TestTopCancelledMidway(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	snap := &capacity.Snapshot{Classes: []*resourceapi.DeviceClass{
		builder.MakeClass("even", `device.attributes["gpu.example.com"].index % 2 == 0`),
		builder.MakeClass("any"),
	}}
	for n := range 8 {
		node := fmt.Sprintf("node-%d", n)
		snap.Nodes = append(snap.Nodes, builder.MakeNode(node))
		snap.Slices = append(snap.Slices, builder.MakeSlice(node).Node(node).Devices(builder.Devices("gpu", 8, func(i int, d *builder.DeviceWrapper) { d.Int("index", int64(i)) })...).Obj())
	}
	opts := capacity.Options{View: capacity.ViewClasses}
	want, err := capacity.Top(ctx, snap, opts)
	if err != nil {
		t.Fatal(err)
	}
	const most = 10_000
	for n := int64(1); n <= most; n++ {
		c := newCountdownContext(ctx, n)
		report, err := capacity.Top(c, snap, opts)
		cancelled := c.Context.Err() != nil
		c.cancel()
		switch {
		case err != nil && !errors.Is(err, context.Canceled):
			t.Fatalf("cancelled at check %d: got %v, want the context's error", n, err)
		case err != nil:
			continue
		case cancelled:
			t.Fatalf("cancelled at check %d: got a report, want the context's error", n)
		}
		if diff := cmp.Diff(want, report); diff != "" {
			t.Fatalf("not cancelled (%d checks): report differs (-want +got):\n%s", n-1, diff)
		}
		t.Logf("Top stopped at each of its %d checks of the context", n-1)
		return
	}
	t.Fatalf("Top still stopped at check %d", most)
}
