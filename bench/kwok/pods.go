package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// watchPods feeds the tracker from a pod informer of the namespace.
func (r *runner) watchPods(ctx context.Context) (func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(r.client, 0, informers.WithNamespace(r.cfg.Namespace))
	informer := factory.Core().V1().Pods().Informer()
	handle := func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok {
			r.tracker.observe(pod)
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, obj any) { handle(obj) },
	}); err != nil {
		cancel()
		return nil, err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		cancel()
		return nil, errors.New("pod informer did not sync")
	}
	return func() {
		cancel()
		factory.Shutdown()
	}, nil
}

// createPods creates the pods with cfg.Workers in parallel, as fast as the
// client allows, recording each creation in the tracker.
func (r *runner) createPods(ctx context.Context, caseName string, pods []podSpec) error {
	return parallelize(ctx, r.cfg.Workers, pods, "pods not created", func(p podSpec) error {
		return r.createPod(ctx, caseName, p)
	})
}

func (r *runner) createPod(ctx context.Context, caseName string, p podSpec) error {
	pod := podObject(r.cfg.Namespace, r.cfg.SchedulerName, caseName, p)
	r.tracker.creating(p.name)
	if _, err := r.client.CoreV1().Pods(r.cfg.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create pod %s: %w", p.name, err)
	}
	return nil
}

func podNames(pods []podSpec) []string {
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.name
	}
	return names
}

// waitBound waits until the tracker has seen all pods bound, showing
// progress.
func (r *runner) waitBound(ctx context.Context, caseName string, names []string, start time.Time, timeout time.Duration) error {
	progress := newProgress(r.out, caseName, len(names), start)
	var bound int
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		bound = r.tracker.countBound(names)
		progress.update(bound)
		return bound == len(names), nil
	})
	progress.done(bound)
	if err != nil {
		return fmt.Errorf("%d of %d pods not bound after %s: %w", len(names)-bound, len(names), time.Since(start).Round(time.Second), err)
	}
	return nil
}

// watchClaims returns the store of a claim informer of the namespace.
func (r *runner) watchClaims(ctx context.Context) (cache.Store, func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(r.client, 0, informers.WithNamespace(r.cfg.Namespace))
	informer := factory.Resource().V1().ResourceClaims().Informer()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		cancel()
		factory.Shutdown()
		return nil, nil, errors.New("claim informer did not sync")
	}
	return informer.GetStore(), func() {
		cancel()
		factory.Shutdown()
	}, nil
}

// waitClaimsGone waits until no claim owned by one of the pods is left.
func waitClaimsGone(ctx context.Context, claims func() []*resourceapi.ResourceClaim, pods []string, limit time.Duration) error {
	if len(pods) == 0 {
		return nil
	}
	gone := sets.New(pods...)
	deadline := time.Now().Add(limit)
	for {
		left := 0
		for _, c := range claims() {
			for _, o := range c.OwnerReferences {
				if o.Kind == "Pod" && gone.Has(o.Name) {
					left++
					break
				}
			}
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d claims of %d deleted pods left after %s", left, len(pods), limit)
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// deletePods deletes the pods at once, with no grace period.
func (r *runner) deletePods(ctx context.Context, names []string) error {
	return parallelize(ctx, r.cfg.Workers, names, "pods not deleted", func(name string) error {
		err := r.client.CoreV1().Pods(r.cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete pod %s: %w", name, err)
		}
		return nil
	})
}

// waitSettled waits until the tracker has seen all pods bound, or none of
// them has been bound for stall, or limit has passed, and returns how many
// are bound. Here pods that do not fit are a result, not an error.
func (r *runner) waitSettled(ctx context.Context, names []string, stall, limit time.Duration) int {
	start := time.Now()
	last, lastBound := start, -1
	for {
		bound := r.tracker.countBound(names)
		if bound != lastBound {
			last, lastBound = time.Now(), bound
		}
		if bound == len(names) || time.Since(last) >= stall || time.Since(start) >= limit {
			return bound
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return bound
		}
	}
}
