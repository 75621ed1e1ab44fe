package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
