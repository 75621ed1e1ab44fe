package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

func TestPreemptGangGroups(t *testing.T) {
	for name, tc := range map[string]struct {
		gpus   int
		share  float64
		groups int
	}{
		// QUICK: 80 H100 nodes, 160 of 640 GPUs, as preempt's pods take.
		"100 nodes":  {gpus: 640, share: 0.25, groups: 20},
		"1000 nodes": {gpus: 6400, share: 0.25, groups: 200},
		// 64 GPUs, 25%: 16, two groups.
		"rounded": {gpus: 70, share: 0.25, groups: 2},
		// One group where the GPUs hold one, however small the share.
		"at least one": {gpus: 16, share: 0.1, groups: 1},
		"one node":     {gpus: 8, share: 0.25, groups: 1},
		"too few":      {gpus: 6, share: 1, groups: 0},
	} {
		t.Run(name, func(t *testing.T) {
			groups := preemptGangGroups(tc.gpus, tc.share)
			if len(groups) != tc.groups {
				t.Fatalf("%d groups, want %d", len(groups), tc.groups)
			}
			names := sets.New[string]()
			gpus := 0
			for _, g := range groups {
				if g.priorityClass != highPriorityClass {
					t.Errorf("group %s has PriorityClass %q, want %s", g.name, g.priorityClass, highPriorityClass)
				}
				if len(g.pods) != preemptGangShape.pods {
					t.Errorf("group %s has %d pods, want %d", g.name, len(g.pods), preemptGangShape.pods)
				}
				if names.Has(g.name) {
					t.Errorf("name %s twice", g.name)
				}
				names.Insert(g.name)
				for _, p := range g.pods {
					if p.group != g.name || p.priorityClass != highPriorityClass {
						t.Errorf("pod %s: group %q, PriorityClass %q; want %s, %s", p.name, p.group, p.priorityClass, g.name, highPriorityClass)
					}
					if p.gpus != preemptGangShape.gpus || gpusOf(t, p.template) != preemptGangShape.gpus {
						t.Errorf("pod %s: %d GPUs, template %s; want %d", p.name, p.gpus, p.template, preemptGangShape.gpus)
					}
					if names.Has(p.name) {
						t.Errorf("name %s twice", p.name)
					}
					names.Insert(p.name)
					gpus += p.gpus
				}
			}
			if gpus > tc.gpus {
				t.Errorf("groups take %d GPUs, more than there are", gpus)
			}
		})
	}
}

// The PodGroup and the pods of a preempt_gang group carry the high
// PriorityClass and the case's label: kube-scheduler requires the pods of a
// group to have the group's priority, and cleanup and the counts select
// by the label.
func TestPreemptGangObjects(t *testing.T) {
	g := preemptGangGroups(64, 0.25)[1]
	pg := podGroupObject("bench", casePreemptGang, g)
	if pg.Name != g.name || pg.Labels[caseLabel] != casePreemptGang || pg.Labels[appLabel] != appValue {
		t.Errorf("PodGroup %+v", pg.ObjectMeta)
	}
	if pg.Spec.PriorityClassName != highPriorityClass {
		t.Errorf("PodGroup has PriorityClass %q, want %s", pg.Spec.PriorityClassName, highPriorityClass)
	}
	if gang := pg.Spec.SchedulingPolicy.Gang; gang == nil || int(gang.MinCount) != preemptGangShape.pods {
		t.Errorf("PodGroup policy %+v, want gang with minCount %d", pg.Spec.SchedulingPolicy, preemptGangShape.pods)
	}
	for _, p := range g.pods {
		pod := podObject("bench", "bench", casePreemptGang, p)
		if pod.Spec.PriorityClassName != pg.Spec.PriorityClassName {
			t.Errorf("pod %s has PriorityClass %q, its group %q", pod.Name, pod.Spec.PriorityClassName, pg.Spec.PriorityClassName)
		}
		if sg := pod.Spec.SchedulingGroup; sg == nil || sg.PodGroupName == nil || *sg.PodGroupName != g.name {
			t.Errorf("pod %s: scheduling group %+v, want %s", pod.Name, sg, g.name)
		}
		if pod.Labels[caseLabel] != casePreemptGang {
			t.Errorf("pod %s has case label %q", pod.Name, pod.Labels[caseLabel])
		}
	}
}

// The counts of preempt_gang: the same preemptCounts and partialGroups as
// preempt and gang, over the pods of the groups.
func TestPreemptGangCounts(t *testing.T) {
	low := []podSpec{{name: "low-0", gpus: 2}, {name: "low-1", gpus: 2}, {name: "low-2", gpus: 2}, {name: "low-3", gpus: 2}, {name: "low-4", gpus: 1}}
	groups := []gangGroup{
		newGangGroup("g0", preemptGangShape, highPriorityClass),
		newGangGroup("g1", preemptGangShape, highPriorityClass),
	}
	pod := func(name, node string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: node}}
	}
	for name, tc := range map[string]struct {
		running, high     []corev1.Pod
		preempted, wasted int
		partial, complete int
	}{
		// g0 bound on the 8 GPUs of four 2-GPU pods; g1 pending, nothing
		// evicted for it.
		"one group, exactly its GPUs": {
			running:   []corev1.Pod{pod("low-4", "n")},
			high:      []corev1.Pod{pod("g0-0", "n"), pod("g0-1", "m"), pod("g1-0", ""), pod("g1-1", "")},
			preempted: 4, complete: 1,
		},
		// Upstream: nothing evicted, nothing bound.
		"none": {
			running: []corev1.Pod{pod("low-0", "n"), pod("low-1", "n"), pod("low-2", "n"), pod("low-3", "n"), pod("low-4", "n")},
			high:    []corev1.Pod{pod("g0-0", ""), pod("g0-1", ""), pod("g1-0", ""), pod("g1-1", "")},
		},
		// 8 GPUs evicted for g1, which got one pod of 4 GPUs only: the
		// other 4 are wasted, and g1 is partly bound.
		"partly bound": {
			running:   []corev1.Pod{pod("low-4", "n")},
			high:      []corev1.Pod{pod("g0-0", ""), pod("g0-1", ""), pod("g1-0", "n"), pod("g1-1", "")},
			preempted: 4, wasted: 4, partial: 1,
		},
	} {
		t.Run(name, func(t *testing.T) {
			preempted, wasted := preemptCounts(low, tc.running, gangPods(groups), tc.high)
			partial, complete := partialGroups(groups, tc.high)
			got := []int{preempted, wasted, partial, complete}
			if diff := cmp.Diff([]int{tc.preempted, tc.wasted, tc.partial, tc.complete}, got); diff != "" {
				t.Errorf("preempted, wasted, partial, complete (-want +got):\n%s", diff)
			}
		})
	}
}
