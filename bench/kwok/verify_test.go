package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Only pods bound in both lists, the same pod on the same node, not being
// deleted and not ended, are checked: one bound between the lists may have
// had its claims allocated after the claims were listed, one evicted
// meanwhile may have lost them, and the claims of one that has ended are
// the claim controller's to release.
func TestStablyBound(t *testing.T) {
	pod := func(name, uid, node string, deleting bool) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid)}, Spec: corev1.PodSpec{NodeName: node}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{}
		}
		return p
	}
	phase := func(p corev1.Pod, phase corev1.PodPhase) corev1.Pod {
		p.Status.Phase = phase
		return p
	}
	before := []corev1.Pod{
		pod("stays", "1", "n1", false),
		pod("bound-later", "2", "", false),
		pod("evicted", "3", "n1", false),
		pod("gone", "4", "n2", false),
		pod("recreated", "5", "n2", false),
		pod("terminating", "6", "n3", false),
		phase(pod("running", "7", "n3", false), corev1.PodRunning),
		phase(pod("succeeded", "8", "n3", false), corev1.PodSucceeded),
		phase(pod("ends", "9", "n3", false), corev1.PodRunning),
		phase(pod("failed", "10", "n3", false), corev1.PodFailed),
	}
	after := []corev1.Pod{
		pod("stays", "1", "n1", false),
		pod("bound-later", "2", "n1", false),
		pod("evicted", "3", "n1", true),
		pod("recreated", "55", "n2", false),
		pod("terminating", "6", "n3", true),
		phase(pod("running", "7", "n3", false), corev1.PodRunning),
		phase(pod("succeeded", "8", "n3", false), corev1.PodSucceeded),
		phase(pod("ends", "9", "n3", false), corev1.PodSucceeded),
		phase(pod("failed", "10", "n3", false), corev1.PodFailed),
	}
	var got []string
	for _, p := range stablyBound(before, after) {
		got = append(got, p.Name)
	}
	if diff := cmp.Diff([]string{"stays", "running"}, got); diff != "" {
		t.Errorf("pods checked (-want +got):\n%s", diff)
	}
}
