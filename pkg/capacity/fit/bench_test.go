package fit_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/drasched/drasched/internal/randcluster"
	"github.com/drasched/drasched/pkg/capacity"
	"github.com/drasched/drasched/pkg/capacity/fit"
)

// cpuTime is the CPU time of the process so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkFit: kubectl drasched fit --count 1000 of a one-GPU pod on 5,000
// nodes of 8 GPUs, half of them allocated to bound pods, from a fake
// clientset: the read (pods included) and the placement. hack/
// bench-allocator.sh runs it (target: 5 s per op).
func BenchmarkFit(b *testing.B) {
	c := randcluster.Uniform(randcluster.UniformOptions{Nodes: 5000, GPUsPerNode: 8, Used: 4})
	client := fake.NewClientset(c.Objects()...)
	w, err := fit.Load([]byte(fmt.Sprintf(oneGPUPod, 1)), "default")
	if err != nil {
		b.Fatal(err)
	}
	args, err := fit.ProfileArgs("", "")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("case=fit_5000nodes_8gpus_count1000/impl=drasched", func(b *testing.B) {
		ctx := context.Background()
		b.ReportAllocs()
		cpu := cpuTime()
		for b.Loop() {
			snap, err := capacity.Read(ctx, client, capacity.ReadOptions{Pods: true})
			if err != nil {
				b.Fatal(err)
			}
			res, err := fit.Fit(ctx, snap, w, fit.Options{Count: 1000, Args: args})
			if err != nil {
				b.Fatal(err)
			}
			if res.Fits != 1000 {
				b.Fatalf("%d fit, want 1000", res.Fits)
			}
		}
		// On a busy machine, wall time per operation says more about the
		// neighbours than CPU time does.
		b.ReportMetric((cpuTime()-cpu).Seconds()/float64(b.N), "cpu-s/op")
	})
}
