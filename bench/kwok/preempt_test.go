package main

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// preemptCounts: evicted are the low-priority pods gone or being deleted;
// wasted are their GPUs beyond those of the high-priority pods bound.
func TestPreemptCounts(t *testing.T) {
	low := []podSpec{{name: "two-a", gpus: 2}, {name: "two-b", gpus: 2}, {name: "one-a", gpus: 1}, {name: "one-b", gpus: 1}, {name: "one-c", gpus: 1}}
	high := []podSpec{{name: "four", gpus: 4}, {name: "eight", gpus: 8}}
	pod := func(name, node string, deleting bool) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: node}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{}
		}
		return p
	}
	for name, tc := range map[string]struct {
		running, bound []corev1.Pod
		preempted      int
		wasted         int
	}{
		"exactly the GPUs of the bound pod": {
			// two-a, two-b gone: 4 GPUs for the 4-GPU pod.
			running:   []corev1.Pod{pod("one-a", "n", false), pod("one-b", "n", false), pod("one-c", "n", false)},
			bound:     []corev1.Pod{pod("four", "n", false), pod("eight", "", false)},
			preempted: 2,
		},
		"one pod too many, being deleted": {
			running:   []corev1.Pod{pod("one-a", "n", true), pod("one-b", "n", false), pod("one-c", "n", false)},
			bound:     []corev1.Pod{pod("four", "n", false), pod("eight", "", false)},
			preempted: 3,
			wasted:    1,
		},
		"evicted for a pod not bound": {
			running:   []corev1.Pod{pod("one-a", "n", false), pod("one-b", "n", false), pod("one-c", "n", false)},
			bound:     []corev1.Pod{pod("four", "", false), pod("eight", "", false)},
			preempted: 2,
			wasted:    4,
		},
		"nothing evicted": {
			running: []corev1.Pod{pod("two-a", "n", false), pod("two-b", "n", false), pod("one-a", "n", false), pod("one-b", "n", false), pod("one-c", "n", false)},
			bound:   []corev1.Pod{pod("four", "", false), pod("eight", "", false)},
		},
	} {
		t.Run(name, func(t *testing.T) {
			preempted, wasted := preemptCounts(low, tc.running, high, tc.bound)
			if preempted != tc.preempted || wasted != tc.wasted {
				t.Errorf("preempted %d, wasted %d GPUs; want %d, %d", preempted, wasted, tc.preempted, tc.wasted)
			}
		})
	}
}

func TestPreemptLowPods(t *testing.T) {
	for _, gpus := range []int{640, 6400, 16, 8, 12, 2, 1} {
		twos, ones := preemptLowPods(gpus)
		sum := 0
		names := sets.New[string]()
		for _, p := range append(slices.Clone(twos), ones...) {
			sum += gpusOf(t, p.template)
			names.Insert(p.name)
			if p.priorityClass != lowPriorityClass {
				t.Errorf("gpus %d: pod %s has PriorityClass %q, want %s", gpus, p.name, p.priorityClass, lowPriorityClass)
			}
		}
		if sum != gpus {
			t.Errorf("gpus %d: low-priority pods take %d GPUs, want all", gpus, sum)
		}
		if names.Len() != len(twos)+len(ones) {
			t.Errorf("gpus %d: pod names not unique", gpus)
		}
		for _, p := range twos {
			if p.template != h100Template(2) {
				t.Errorf("gpus %d: pod %s of the 2-GPU batch has template %s", gpus, p.name, p.template)
			}
		}
		for _, p := range ones {
			if p.template != h100Template(1) {
				t.Errorf("gpus %d: pod %s of the 1-GPU batch has template %s", gpus, p.name, p.template)
			}
		}
		if got, want := 2*len(twos), gpus/4*2; got != want {
			t.Errorf("gpus %d: 2-GPU pods take %d GPUs, want %d (half)", gpus, got, want)
		}
	}

	// On nodes of 8 GPUs, the 2-GPU batch spread round-robin (the worst
	// case for a packing order), then the 1-GPU batch wherever there is
	// room, leaves every node exactly full.
	twos, ones := preemptLowPods(80)
	free := make([]int, 10)
	for i := range free {
		free[i] = 8
	}
	next := 0
	place := func(size int) {
		for range len(free) {
			n := next % len(free)
			next++
			if free[n] >= size {
				free[n] -= size
				return
			}
		}
		t.Fatalf("no node for a %d-GPU pod: free %v", size, free)
	}
	for range twos {
		place(2)
	}
	for range ones {
		place(1)
	}
	for n, f := range free {
		if f != 0 {
			t.Errorf("node %d has %d GPUs free", n, f)
		}
	}
}

func TestPreemptHighPods(t *testing.T) {
	for _, tc := range []struct {
		gpus  int
		share float64
		want  map[int]int // pods by size
	}{
		// 160 GPUs: 13 pairs of 8 and 4 take 156, one more 4 the rest.
		{gpus: 640, share: 0.25, want: map[int]int{8: 13, 4: 14}},
		// 1600 GPUs: 133 pairs take 1596, one more 4.
		{gpus: 6400, share: 0.25, want: map[int]int{8: 133, 4: 134}},
		// Two nodes: one of each size at least.
		{gpus: 16, share: 0.25, want: map[int]int{8: 1, 4: 1}},
		{gpus: 8, share: 0.25, want: map[int]int{4: 1}},
		{gpus: 2, share: 0.25, want: map[int]int{}},
		{gpus: 640, share: 0.1, want: map[int]int{8: 5, 4: 6}},
	} {
		pods := preemptHighPods(tc.gpus, tc.share)
		got := map[int]int{}
		sum := 0
		for i, p := range pods {
			size := gpusOf(t, p.template)
			got[size]++
			sum += size
			if p.priorityClass != highPriorityClass {
				t.Errorf("pod %s has PriorityClass %q, want %s", p.name, p.priorityClass, highPriorityClass)
			}
			if want := preemptHighSizes[i%2]; size != want && i != len(pods)-1 {
				t.Errorf("gpus %d: pod %d has %d GPUs, want %d (alternating)", tc.gpus, i, size, want)
			}
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("preemptHighPods(%d, %v) by size (-want +got):\n%s", tc.gpus, tc.share, diff)
		}
		if sum > tc.gpus {
			t.Errorf("gpus %d: high-priority pods take %d GPUs, more than there are", tc.gpus, sum)
		}
	}
}

func TestPriorityClasses(t *testing.T) {
	classes := priorityClasses()
	if len(classes) != 2 || classes[0].Name != lowPriorityClass || classes[1].Name != highPriorityClass || classes[0].Value >= classes[1].Value {
		t.Errorf("PriorityClasses %+v", classes)
	}
	pod := podObject("bench", "bench", casePreempt, podSpec{name: "preempt-00000", template: h100Template(8), priorityClass: highPriorityClass})
	if pod.Spec.PriorityClassName != highPriorityClass {
		t.Errorf("pod has PriorityClass %q, want %s", pod.Spec.PriorityClassName, highPriorityClass)
	}
}
