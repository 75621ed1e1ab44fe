package main

import (
	"math"
	"slices"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// tracker records, per pod name, when the benchmark created the pod (just
// before its Create call) and when a watch first saw it bound
// (spec.nodeName set). Conditions' lastTransitionTime has only a second's
// resolution, too coarse for latencies of milliseconds. The pods of a Job
// whose creation it recorded (the queue case: the Job controller creates
// them, under names the benchmark does not know) are recorded too, by the
// Job's label, with when a watch first saw each. It is safe for concurrent
// use.
type tracker struct {
	now func() time.Time

	mu sync.Mutex
	// created and bound by pod name (created also by PodGroup and Job
	// name); guarded by mu.
	created map[string]time.Time
	bound   map[string]time.Time
	// jobPods are the pods of each Job in created, in the order first
	// seen, and seen when each was; guarded by mu.
	jobPods map[string][]string
	seen    map[string]time.Time
}

func newTracker(now func() time.Time) *tracker {
	return &tracker{now: now, created: map[string]time.Time{}, bound: map[string]time.Time{},
		jobPods: map[string][]string{}, seen: map[string]time.Time{}}
}

// creating records that the pod is about to be created.
func (t *tracker) creating(name string) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.created[name] = now
}

// observe is the handler of pod events: the first event with a node name
// counts. Pods that the benchmark did not create (or not yet record) are
// ignored, but for the pods of a Job it created: the first event of such a
// pod records it as the Job's.
func (t *tracker) observe(pod *corev1.Pod) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.created[pod.Name]; !ok {
		job := pod.Labels[batchv1.JobNameLabel]
		if _, ok := t.created[job]; job == "" || !ok {
			return
		}
		if _, ok := t.seen[pod.Name]; !ok {
			t.seen[pod.Name] = now
			t.jobPods[job] = append(t.jobPods[job], pod.Name)
		}
	}
	if pod.Spec.NodeName == "" {
		return
	}
	if _, ok := t.bound[pod.Name]; !ok {
		t.bound[pod.Name] = now
	}
}

// boundAt returns when the pod was seen bound.
func (t *tracker) boundAt(name string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.bound[name]
	return at, ok
}

// countBound returns how many of the pods are bound.
func (t *tracker) countBound(names []string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, name := range names {
		if _, ok := t.bound[name]; ok {
			n++
		}
	}
	return n
}

// sample is what a case measured.
type sample struct {
	// latencies are creation → bound of the bound pods, in seconds.
	latencies []float64
	// boundAt are the times the pods were bound, in seconds since start.
	boundAt []float64
	// seconds is from start to the last bind.
	seconds float64
	// unbound counts pods that were never seen bound.
	unbound int
}

// measure computes the sample of the pods, with times relative to start.
func (t *tracker) measure(names []string, start time.Time) sample {
	t.mu.Lock()
	defer t.mu.Unlock()
	var s sample
	for _, name := range names {
		created, okCreated := t.created[name]
		bound, okBound := t.bound[name]
		if !okCreated || !okBound {
			s.unbound++
			continue
		}
		s.latencies = append(s.latencies, bound.Sub(created).Seconds())
		at := bound.Sub(start).Seconds()
		s.boundAt = append(s.boundAt, at)
		s.seconds = max(s.seconds, at)
	}
	return s
}

// podsPerSecond is the throughput of the sample: bound pods over the time
// from the start to the last bind.
func (s sample) podsPerSecond() float64 {
	if s.seconds <= 0 {
		return 0
	}
	return float64(len(s.latencies)) / s.seconds
}

// percentile returns the p-th percentile (0 < p ≤ 1) of values by the
// nearest-rank method: the smallest value that at least p of the values
// do not exceed. 0 for no values.
func percentile(values []float64, p float64) float64 {
	if len(values) == 0 {
		return 0
	}
	s := slices.Clone(values)
	slices.Sort(s)
	rank := int(math.Ceil(p*float64(len(s)))) - 1
	return s[min(max(rank, 0), len(s)-1)]
}

// throughputSeries counts binds per whole second since the start: point
// (i+1, n) means n pods were bound in the second [i, i+1). Seconds without
// binds up to the last bind count as 0.
func throughputSeries(boundAt []float64) [][2]float64 {
	if len(boundAt) == 0 {
		return nil
	}
	last := slices.Max(boundAt)
	counts := make([]float64, int(last)+1)
	for _, at := range boundAt {
		counts[int(max(at, 0))]++
	}
	points := make([][2]float64, len(counts))
	for i, n := range counts {
		points[i] = [2]float64{float64(i + 1), n}
	}
	return points
}

// cdfSeries is the empirical distribution of the latencies, as points
// (latency, fraction of pods bound within it), at most maxPoints of them
// (evenly spaced ranks, always including the largest latency).
func cdfSeries(latencies []float64, maxPoints int) [][2]float64 {
	n := len(latencies)
	if n == 0 || maxPoints < 1 {
		return nil
	}
	s := slices.Clone(latencies)
	slices.Sort(s)
	step := max(1, (n+maxPoints-1)/maxPoints)
	points := [][2]float64{{s[0], 0}}
	for i := step - 1; i < n; i += step {
		points = append(points, [2]float64{s[i], float64(i+1) / float64(n)})
	}
	if points[len(points)-1][1] < 1 {
		points = append(points, [2]float64{s[n-1], 1})
	}
	return points
}
