package capacity_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/drasched/drasched/internal/randcluster"
	"github.com/drasched/drasched/pkg/capacity"
)

// cpuTime is the CPU time of the process so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU seconds per operation since start: on a busy
// machine, wall time per operation says more about the neighbours.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric((cpuTime()-start).Seconds()/float64(b.N), "cpu-s/op")
}

// BenchmarkTop: kubectl drasched top on 5,000 nodes of 8 GPUs, half of
// them allocated, from a fake clientset: the read (with DeviceTaintRules
// applied by the informer-based tracker) and the counts, for each view;
// the nodes view with the shipped profile's topology attributes. hack/
// bench-allocator.sh runs it (target: 2 s per op).
func BenchmarkTop(b *testing.B) {
	c := randcluster.Uniform(randcluster.UniformOptions{Nodes: 5000, GPUsPerNode: 8, Used: 4})
	client := fake.NewClientset(c.Objects()...)
	for _, view := range []capacity.View{capacity.ViewNodes, capacity.ViewPools, capacity.ViewClasses} {
		b.Run("case=top_"+string(view)+"_5000nodes_8gpus/impl=drasched", func(b *testing.B) {
			ctx := context.Background()
			opts := capacity.Options{View: view}
			if view == capacity.ViewNodes {
				opts.TopologyAttributes = []resourceapi.FullyQualifiedName{"resource.kubernetes.io/pcieRoot", "resource.kubernetes.io/numaNode"}
			}
			b.ReportAllocs()
			cpu := cpuTime()
			for b.Loop() {
				snap, err := capacity.Read(ctx, client, capacity.ReadOptions{})
				if err != nil {
					b.Fatal(err)
				}
				report, err := capacity.Top(ctx, snap, opts)
				if err != nil {
					b.Fatal(err)
				}
				if view == capacity.ViewNodes && (len(report.Nodes) != 5000 || report.Nodes[0].Available != 4) {
					b.Fatalf("got %d nodes, the first with %d available devices; want 5000 with 4", len(report.Nodes), report.Nodes[0].Available)
				}
			}
			reportCPU(b, cpu)
		})
	}
}
