package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
)

// PriorityClasses of the preempt workload: low-priority pods fill the
// H100 GPUs, high-priority pods then need some of them.
const (
	lowPriorityClass   = "drasched-bench-low"
	lowPriority        = 100
	highPriorityClass  = "drasched-bench-high"
	highPriority       = 1000000
	preemptLowCaseName = "preempt-low"
)

// priorityClasses are the PriorityClasses of the preempt workload.
func priorityClasses() []*schedulingv1.PriorityClass {
	class := func(name string, value int32, description string) *schedulingv1.PriorityClass {
		return &schedulingv1.PriorityClass{
			ObjectMeta:  metav1.ObjectMeta{Name: name},
			Value:       value,
			Description: description,
		}
	}
	return []*schedulingv1.PriorityClass{
		class(lowPriorityClass, lowPriority, "Low-priority pods of the kwok benchmark's preempt workload, the victims."),
		class(highPriorityClass, highPriority, "High-priority pods of the kwok benchmark's preempt workload, the preemptors."),
	}
}

// preemptLowPods returns low-priority pods of 2 and 1 H100 GPUs that
// together take exactly all gpus: half of them as 2-GPU pods, the rest as
// 1-GPU pods. Created in that order, each batch bound before the next,
// every node ends exactly full whether a scheduler packs or spreads: the
// 2-GPU pods leave every node an even number of free GPUs.
func preemptLowPods(gpus int) (twos, ones []podSpec) {
	pod := func(i, size int) podSpec {
		return podSpec{name: fmt.Sprintf("%s-%05d", preemptLowCaseName, i), template: h100Template(size), priorityClass: lowPriorityClass, gpus: size}
	}
	for range gpus / 4 {
		twos = append(twos, pod(len(twos), 2))
	}
	for range gpus - 2*len(twos) {
		ones = append(ones, pod(len(twos)+len(ones), 1))
	}
	return twos, ones
}

// preemptHighSizes is the cycle of sizes, in H100 GPUs, of the preempt
// workload's high-priority pods.
var preemptHighSizes = []int{8, 4}

// preemptHighPods returns high-priority pods of 8 and 4 H100 GPUs,
// alternating, that take share of gpus (rounded down to 4 GPUs): at least
// one of each size from two nodes' worth of GPUs on, and at least one
// 4-GPU pod from four GPUs on.
func preemptHighPods(gpus int, share float64) []podSpec {
	budget := int(float64(gpus) * share)
	switch {
	case gpus >= 16:
		budget = max(budget, 12)
	case gpus >= 4:
		budget = max(budget, 4)
	}
	budget = min(budget, gpus)
	var pods []podSpec
	for left := budget; left >= 4; {
		size := preemptHighSizes[len(pods)%len(preemptHighSizes)]
		if size > left {
			size = 4
		}
		pods = append(pods, podSpec{name: fmt.Sprintf("preempt-%05d", len(pods)), template: h100Template(size), priorityClass: highPriorityClass, gpus: size})
		left -= size
	}
	return pods
}

// measurePreempt fills all H100 GPUs with low-priority pods of 2 and 1
// GPUs (not measured), then creates high-priority pods of 8 and 4 GPUs at
// once, PreemptShare of the H100 GPUs, which fit only if low-priority pods
// are evicted, and measures creation → bound of those. It waits at most
// PreemptWait for them: high-priority pods left unbound are the result
// (upstream's DynamicResources cannot preempt for devices), not an error.
// It then counts the low-priority pods that are gone or being deleted, and
// their GPUs that no bound high-priority pod got.
func (r *runner) measurePreempt(ctx context.Context, c *caseResult, capa capacity) {
	low, ok := r.fillLowPriority(ctx, c, capa)
	if !ok {
		return
	}
	pods := preemptHighPods(capa.h100, r.cfg.PreemptShare)
	names := podNames(pods)
	c.Pods = len(pods)
	start := time.Now()
	if err := r.createPods(ctx, c.Name, pods); err != nil {
		c.addErrors(err)
	}
	r.waitPreemptors(ctx, c, names, start)
	r.countPreempted(ctx, c, low, pods)
}

// fillLowPriority creates the low-priority pods that take all H100 GPUs,
// the 2-GPU pods and then the 1-GPU pods, each batch bound before the
// next (preemptLowPods), and returns them; false, with the error in the
// case, if they were not all created and bound.
func (r *runner) fillLowPriority(ctx context.Context, c *caseResult, capa capacity) ([]podSpec, bool) {
	twos, ones := preemptLowPods(capa.h100)
	for _, batch := range [][]podSpec{twos, ones} {
		if err := r.createPods(ctx, preemptLowCaseName, batch); err != nil {
			c.addErrors(err)
			return nil, false
		}
		if err := r.waitBound(ctx, preemptLowCaseName, podNames(batch), time.Now(), r.timeout(len(batch))); err != nil {
			c.addErrors(err)
			return nil, false
		}
	}
	return append(slices.Clone(twos), ones...), true
}

// waitPreemptors waits at most PreemptWait (and the case's timeout) for
// the high-priority pods created at start to be bound, and puts their
// measurements into the case: unbound ones are a result, not an error.
func (r *runner) waitPreemptors(ctx context.Context, c *caseResult, names []string, start time.Time) {
	limit := min(r.cfg.PreemptWait, r.timeout(len(names)))
	if err := r.waitBound(ctx, c.Name, names, start, limit); err != nil && ctx.Err() != nil {
		c.addErrors(err)
	}
	r.fill(c, names, start)
	c.HighPriorityBound = len(c.Latencies)
}

// countPreempted waits until no pod is being deleted (victims are deleted
// with no grace period; their deletions must finish before they are
// counted and before the allocations are verified), then counts in the
// case the low-priority pods evicted and their GPUs that no bound
// high-priority pod got. It returns the high-priority pods as the API
// lists them, false (with the error in the case) if it could not list
// them.
func (r *runner) countPreempted(ctx context.Context, c *caseResult, low, high []podSpec) ([]corev1.Pod, bool) {
	var terminating int
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := r.client.CoreV1().Pods(r.cfg.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		terminating = 0
		for _, pod := range list.Items {
			if pod.DeletionTimestamp != nil {
				terminating++
			}
		}
		return terminating == 0, nil
	})
	if err != nil && ctx.Err() == nil {
		_, _ = fmt.Fprintf(r.out, "    %s: %d pods still terminating: %v\n", c.Name, terminating, err)
	}
	list, err := r.client.CoreV1().Pods(r.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: caseLabel + "=" + preemptLowCaseName})
	if err != nil {
		c.addErrors(fmt.Errorf("list low-priority pods: %w", err))
		return nil, false
	}
	bound, err := r.client.CoreV1().Pods(r.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: caseLabel + "=" + c.Name})
	if err != nil {
		c.addErrors(fmt.Errorf("list high-priority pods: %w", err))
		return nil, false
	}
	c.Preempted, c.WastedGPUs = preemptCounts(low, list.Items, high, bound.Items)
	return bound.Items, true
}

// preemptCounts returns how many of the low-priority pods were evicted
// (absent from running, or being deleted) and how many of their GPUs no
// bound high-priority pod got.
func preemptCounts(low []podSpec, running []corev1.Pod, high []podSpec, bound []corev1.Pod) (preempted, wastedGPUs int) {
	alive := sets.New[string]()
	for _, pod := range running {
		if pod.DeletionTimestamp == nil {
			alive.Insert(pod.Name)
		}
	}
	freed := 0
	for _, p := range low {
		if !alive.Has(p.name) {
			preempted++
			freed += p.gpus
		}
	}
	onNode := sets.New[string]()
	for _, pod := range bound {
		if pod.Spec.NodeName != "" {
			onNode.Insert(pod.Name)
		}
	}
	used := 0
	for _, p := range high {
		if onNode.Has(p.name) {
			used += p.gpus
		}
	}
	return preempted, max(freed-used, 0)
}
