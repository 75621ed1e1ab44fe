package main

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPercentile(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		// 100, 99, ..., 1: order must not matter.
		hundred[i] = float64(100 - i)
	}
	for name, tc := range map[string]struct {
		values []float64
		p      float64
		want   float64
	}{
		"none":        {p: 0.5, want: 0},
		"one":         {values: []float64{3}, p: 0.99, want: 3},
		"p50 of 100":  {values: hundred, p: 0.5, want: 50},
		"p90 of 100":  {values: hundred, p: 0.9, want: 90},
		"p99 of 100":  {values: hundred, p: 0.99, want: 99},
		"p100 of 100": {values: hundred, p: 1, want: 100},
		"p50 of 4":    {values: []float64{4, 1, 3, 2}, p: 0.5, want: 2},
		"p99 of 4":    {values: []float64{4, 1, 3, 2}, p: 0.99, want: 4},
	} {
		t.Run(name, func(t *testing.T) {
			if got := percentile(tc.values, tc.p); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	if hundred[0] != 100 {
		t.Error("percentile sorted its input")
	}
}

func TestThroughputSeries(t *testing.T) {
	got := throughputSeries([]float64{0.1, 0.5, 0.9, 2.5, 2.7, 3.0})
	want := [][2]float64{{1, 3}, {2, 0}, {3, 2}, {4, 1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := throughputSeries(nil); got != nil {
		t.Errorf("no binds: got %v", got)
	}
}

func TestCDFSeries(t *testing.T) {
	got := cdfSeries([]float64{0.4, 0.1, 0.3, 0.2}, 10)
	want := [][2]float64{{0.1, 0}, {0.1, 0.25}, {0.2, 0.5}, {0.3, 0.75}, {0.4, 1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("all points (-want +got):\n%s", diff)
	}

	many := make([]float64, 1001)
	for i := range many {
		many[i] = float64(i)
	}
	got = cdfSeries(many, 100)
	if len(got) > 102 {
		t.Errorf("%d points, want at most 100 and the ends", len(got))
	}
	if last := got[len(got)-1]; last != [2]float64{1000, 1} {
		t.Errorf("last point %v, want the largest latency at 1", last)
	}
	for i := 1; i < len(got); i++ {
		if got[i][0] < got[i-1][0] || got[i][1] < got[i-1][1] {
			t.Fatalf("not monotonic at %d: %v after %v", i, got[i], got[i-1])
		}
	}
	if got := cdfSeries(nil, 10); got != nil {
		t.Errorf("no latencies: got %v", got)
	}
}

func boundPod(name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: node}}
}

func TestTracker(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := start
	tr := newTracker(func() time.Time { return now })

	tr.creating("a")
	tr.creating("b")
	tr.creating("c")
	now = start.Add(100 * time.Millisecond)
	tr.observe(boundPod("a", ""))  // not bound yet
	tr.observe(boundPod("x", "n")) // not created by the benchmark
	now = start.Add(300 * time.Millisecond)
	tr.observe(boundPod("a", "n"))
	now = start.Add(2 * time.Second)
	tr.observe(boundPod("a", "n")) // a later update does not count
	tr.observe(boundPod("b", "n"))

	if got := tr.countBound([]string{"a", "b", "c", "x"}); got != 2 {
		t.Errorf("countBound: %d, want 2", got)
	}
	s := tr.measure([]string{"a", "b", "c"}, start)
	want := sample{latencies: []float64{0.3, 2}, boundAt: []float64{0.3, 2}, seconds: 2, unbound: 1}
	if diff := cmp.Diff(want, s, cmp.AllowUnexported(sample{})); diff != "" {
		t.Errorf("sample (-want +got):\n%s", diff)
	}
	if got := s.podsPerSecond(); got != 1 {
		t.Errorf("pods/s %v, want 1", got)
	}
	if got := (sample{}).podsPerSecond(); got != 0 {
		t.Errorf("pods/s of nothing: %v", got)
	}
}
