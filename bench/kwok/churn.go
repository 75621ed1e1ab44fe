package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// churnSizes is the cycle of pod sizes, in H100 GPUs, of the churn
// workload's steady stream: two GPUs on average, and at most four so that
// the partly full cluster always has room.
var churnSizes = []int{1, 2, 1, 4}

// churnPod is the i-th pod of the churn workload's stream.
func churnPod(i int) podSpec {
	return podSpec{name: fmt.Sprintf("churn-%05d", i), template: h100Template(churnSizes[i%len(churnSizes)])}
}

// measureChurn fills ChurnBase of the H100 GPUs (not measured), then
// creates ChurnRate pods/s for ChurnDuration and deletes each
// ChurnLifetime after it was bound, oldest first, and measures the pods of
// that stream.
func (r *runner) measureChurn(ctx context.Context, c *caseResult, capa capacity) {
	base, share := boundedFillPods("churn-base", capa.h100, r.cfg.ChurnBase, r.cfg.FillPods)
	c.Share = share
	if err := r.createPods(ctx, "churn-base", base); err != nil {
		c.addErrors(err)
		return
	}
	if err := r.waitBound(ctx, "churn-base", podNames(base), time.Now(), r.timeout(len(base))); err != nil {
		c.addErrors(err)
		return
	}
	// The scheduler's cost is that of the stream, not of the base.
	r.markCost()

	count := int(r.cfg.ChurnRate * r.cfg.ChurnDuration.Seconds())
	pods := make([]podSpec, count)
	for i := range pods {
		pods[i] = churnPod(i)
	}
	names := podNames(pods)
	c.Pods = count
	start := time.Now()
	interval := time.Duration(float64(time.Second) / r.cfg.ChurnRate)

	var creates sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	created := 0 // guarded by mu
	record := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	}
	deleterCtx, stopDeleter := context.WithCancel(ctx)
	var deleter sync.WaitGroup
	deleter.Go(func() {
		deleted := 0
		ticker := time.NewTicker(100 * time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case <-deleterCtx.Done():
				return
			case <-ticker.C:
			}
			mu.Lock()
			limit := created
			mu.Unlock()
			for ; deleted < limit; deleted++ {
				at, ok := r.tracker.boundAt(names[deleted])
				if !ok || time.Since(at) < r.cfg.ChurnLifetime {
					break
				}
				err := r.client.CoreV1().Pods(r.cfg.Namespace).Delete(ctx, names[deleted], metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
				if err != nil && !apierrors.IsNotFound(err) {
					record(fmt.Errorf("delete pod %s: %w", names[deleted], err))
				}
			}
		}
	})
	progress := newProgress(r.out, c.Name, count, start)
	for i, p := range pods {
		// A steady rate: the i-th pod at start + i*interval, each created
		// by its own goroutine so that a slow call delays no other.
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		mu.Lock()
		created = i + 1
		mu.Unlock()
		creates.Go(func() {
			if err := r.createPod(ctx, c.Name, p); err != nil {
				record(err)
			}
		})
		progress.update(r.tracker.countBound(names[:i+1]))
	}
	creates.Wait()
	if err := r.waitBound(ctx, c.Name, names, start, r.timeout(count)); err != nil {
		c.addErrors(err)
	}
	stopDeleter()
	deleter.Wait()
	c.addErrors(errs...)
	r.fill(c, names, start)
}
