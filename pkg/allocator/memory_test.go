package allocator_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drasched/drasched/internal/kwokcluster"
	"github.com/drasched/drasched/pkg/allocator"
	"github.com/drasched/drasched/pkg/driver/gpu"
)

// BenchmarkCacheAtRest measures the heap that the cache keeps between
// cycles once a pod with a one-GPU claim has been filtered on every node of
// the kwok benchmark's fleet (8 H100 nodes, 1 L40S and 1 A100 MIG node in
// ten, ResourceSlices as the GPU driver publishes them): what a scheduler
// that has seen one DRA pod holds at rest, beyond the informers' objects
// that upstream holds too. It reports retained-B/node.
//
//	go test ./pkg/allocator -run '^$' -bench BenchmarkCacheAtRest -benchtime 1x
func BenchmarkCacheAtRest(b *testing.B) {
	ctx := context.Background()
	for _, size := range []int{500, 2000} {
		classes := allocator.ClassList([]*resourceapi.DeviceClass{{
			ObjectMeta: metav1.ObjectMeta{Name: "gpu"},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf("device.driver == %q", gpu.DefaultDriverName),
			}}}},
		}})
		claims := []*resourceapi.ResourceClaim{{
			ObjectMeta: metav1.ObjectMeta{Name: "claim", Namespace: "default", UID: "claim"},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "gpu",
				Exactly: &resourceapi.ExactDeviceRequest{
					DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
					Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
						Expression: fmt.Sprintf("device.attributes[%q].productName == %q", gpu.DefaultDriverName, "NVIDIA H100 80GB HBM3"),
					}}},
				},
			}}}},
		}}
		// What one filter pass over nodes leaves in a new cache.
		pass := func(b *testing.B, nodes []*v1.Node, slices []*resourceapi.ResourceSlice) *allocator.Cache {
			cache := allocator.NewCache(0)
			a, err := allocator.New(ctx, structured.Features{}, structured.AllocatedState{}, classes, slices, allocator.Options{Cache: cache})
			if err != nil {
				b.Fatal(err)
			}
			fits := 0
			for _, node := range nodes {
				results, err := a.Allocate(ctx, node, claims)
				if err != nil {
					b.Fatal(err)
				}
				if results != nil {
					fits++
				}
			}
			// The H100 nodes, eight in ten, fit the claim.
			if want := len(nodes) * 8 / 10; fits != want {
				b.Fatalf("the claim fits on %d nodes, want %d", fits, want)
			}
			return cache
		}
		b.Run(fmt.Sprintf("nodes=%d", size), func(b *testing.B) {
			// CEL's environment is built once per process: not per node.
			nodes, slices := kwokFleet(b, "warm-up", 10)
			pass(b, nodes, slices)
			var retained uint64
			for i := 0; b.Loop(); i++ {
				// Device names are interned (unique.Make) for as long as
				// a cache refers to them: new names each time.
				nodes, slices := kwokFleet(b, fmt.Sprint(i), size)
				before := heapInUse()
				cache := pass(b, nodes, slices)
				if after := heapInUse(); after > before {
					retained += (after - before) / uint64(len(nodes))
				}
				runtime.KeepAlive(cache)
			}
			b.ReportMetric(float64(retained)/float64(b.N), "retained-B/node")
		})
	}
}

// kwokFleet is the kwok benchmark's mix of nodes and their ResourceSlices.
// Node names start with prefix.
func kwokFleet(b *testing.B, prefix string, size int) ([]*v1.Node, []*resourceapi.ResourceSlice) {
	b.Helper()
	nodes, slices, err := kwokcluster.FleetSlices(context.Background(), "../../config/inventory", prefix, size)
	if err != nil {
		b.Fatal(err)
	}
	return nodes, slices
}

// heapInUse is the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	var stats runtime.MemStats
	runtime.ReadMemStats(&stats)
	return stats.HeapAlloc
}
