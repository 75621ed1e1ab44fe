package main

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestGangGroups(t *testing.T) {
	for name, tc := range map[string]struct {
		gpus     int
		fraction float64
		// want counts the groups by shape, in the order they come.
		want []gangShape
	}{
		// QUICK: 80 H100 nodes, 512 of 640 GPUs: 16 groups of 32.
		"100 nodes": {gpus: 640, fraction: 0.8, want: repeatShapes(8, 8)},
		// 800 H100 nodes: 5120 GPUs, 160 groups.
		"1000 nodes": {gpus: 6400, fraction: 0.8, want: repeatShapes(80, 80)},
		// An odd count: the 8-GPU groups get the extra one.
		"odd": {gpus: 96, fraction: 1, want: repeatShapes(2, 1)},
		"one": {gpus: 40, fraction: 0.8, want: repeatShapes(1, 0)},
		// Less than a group's GPUs: none.
		"too few": {gpus: 30, fraction: 0.8, want: nil},
	} {
		t.Run(name, func(t *testing.T) {
			groups := gangGroups(tc.gpus, tc.fraction)
			var got []gangShape
			names := map[string]bool{}
			gpus := 0
			for _, g := range groups {
				if len(g.pods) == 0 {
					t.Fatalf("group %s has no pods", g.name)
				}
				shape := gangShape{pods: len(g.pods), gpus: g.pods[0].gpus}
				got = append(got, shape)
				if names[g.name] {
					t.Errorf("group name %s twice", g.name)
				}
				names[g.name] = true
				for _, p := range g.pods {
					if p.group != g.name {
						t.Errorf("pod %s names group %q, want %s", p.name, p.group, g.name)
					}
					if p.gpus != shape.gpus || gpusOf(t, p.template) != shape.gpus {
						t.Errorf("pod %s: %d GPUs, template %s, want %d as the group's first", p.name, p.gpus, p.template, shape.gpus)
					}
					if names[p.name] {
						t.Errorf("pod name %s twice", p.name)
					}
					names[p.name] = true
					gpus += p.gpus
				}
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(gangShape{})); diff != "" {
				t.Errorf("shapes of the groups (-want +got):\n%s", diff)
			}
			if budget := int(float64(tc.gpus) * tc.fraction); gpus > budget {
				t.Errorf("groups take %d GPUs, more than %d", gpus, budget)
			}
			want := []string{}
			for _, g := range groups {
				want = append(want, podNames(g.pods)...)
			}
			if diff := cmp.Diff(want, podNames(gangPods(groups))); diff != "" {
				t.Errorf("gangPods: not the groups' pods in order (-want +got):\n%s", diff)
			}
		})
	}
}

func repeatShapes(large, small int) []gangShape {
	var out []gangShape
	for range large {
		out = append(out, gangShapes[0])
	}
	for range small {
		out = append(out, gangShapes[1])
	}
	return out
}

func TestGangObjects(t *testing.T) {
	groups := gangGroups(64, 1)
	g := groups[1]
	pg := podGroupObject("bench", caseGang, g)
	if pg.Name != g.name || pg.Namespace != "bench" || pg.Labels[appLabel] != appValue || pg.Labels[caseLabel] != caseGang {
		t.Errorf("PodGroup %+v", pg.ObjectMeta)
	}
	if pg.Spec.PriorityClassName != "" {
		t.Errorf("gang's PodGroup has PriorityClass %q, want none", pg.Spec.PriorityClassName)
	}
	if gang := pg.Spec.SchedulingPolicy.Gang; gang == nil || int(gang.MinCount) != len(g.pods) || pg.Spec.SchedulingPolicy.Basic != nil {
		t.Errorf("PodGroup policy %+v, want gang with minCount %d", pg.Spec.SchedulingPolicy, len(g.pods))
	}
	pod := podObject("bench", "bench", caseGang, g.pods[0])
	if sg := pod.Spec.SchedulingGroup; sg == nil || sg.PodGroupName == nil || *sg.PodGroupName != g.name {
		t.Errorf("pod's scheduling group %+v, want %s", sg, g.name)
	}
	if pod := podObject("bench", "bench", caseFill, podSpec{name: "fill-00000", template: h100Template(1)}); pod.Spec.SchedulingGroup != nil {
		t.Errorf("pod without a group has scheduling group %+v", pod.Spec.SchedulingGroup)
	}
}

func TestMeasureGroups(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := start
	tr := newTracker(func() time.Time { return now })
	group := func(name string, pods ...string) gangGroup {
		g := gangGroup{name: name}
		for _, p := range pods {
			g.pods = append(g.pods, podSpec{name: p, group: name})
		}
		return g
	}
	groups := []gangGroup{
		group("a", "a-0", "a-1"),
		group("b", "b-0", "b-1"),
		group("c", "c-0"),
		group("never-created", "n-0"),
	}
	tr.creating("a")
	tr.creating("a-0")
	tr.creating("a-1")
	now = start.Add(time.Second)
	tr.creating("b")
	tr.creating("b-0")
	tr.creating("b-1")
	tr.creating("c-0") // its PodGroup's creation was not recorded
	now = start.Add(1500 * time.Millisecond)
	tr.observe(boundPod("a-1", "n"))
	tr.observe(boundPod("b-0", "n"))
	tr.observe(boundPod("c-0", "n"))
	now = start.Add(4 * time.Second)
	tr.observe(boundPod("a-0", "n"))
	// b-1 is never bound: b is incomplete.

	got := tr.measureGroups(groups)
	// a: created at 0, last pod bound at 4 s.
	want := groupSample{latencies: []float64{4}, incomplete: 3}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(groupSample{})); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}
	if got := tr.measureGroups(nil); got.latencies != nil || got.incomplete != 0 {
		t.Errorf("no groups: %+v", got)
	}
}

func TestPartialGroups(t *testing.T) {
	groups := []gangGroup{
		{name: "all", pods: []podSpec{{name: "all-0"}, {name: "all-1"}}},
		{name: "some", pods: []podSpec{{name: "some-0"}, {name: "some-1"}, {name: "some-2"}}},
		{name: "none", pods: []podSpec{{name: "none-0"}, {name: "none-1"}}},
		{name: "deleting", pods: []podSpec{{name: "deleting-0"}, {name: "deleting-1"}}},
		{name: "gone", pods: []podSpec{{name: "gone-0"}, {name: "gone-1"}}},
	}
	deleted := metav1.Now()
	terminating := boundPod("deleting-1", "n")
	terminating.DeletionTimestamp = &deleted
	pods := []corev1.Pod{
		*boundPod("all-0", "n"), *boundPod("all-1", "m"),
		*boundPod("some-0", "n"), *boundPod("some-1", ""), *boundPod("some-2", "m"),
		*boundPod("none-0", ""), *boundPod("none-1", ""),
		// Being deleted counts as not bound: its group is partial.
		*boundPod("deleting-0", "n"), *terminating,
		// gone-0 is not listed: deleted.
		*boundPod("gone-1", "n"),
	}
	partial, complete := partialGroups(groups, pods)
	if partial != 3 || complete != 1 {
		t.Errorf("partial %d, complete %d; want 3 (some, deleting, gone) and 1 (all)", partial, complete)
	}
	if partial, complete := partialGroups(groups, nil); partial != 0 || complete != 0 {
		t.Errorf("no pods: partial %d, complete %d", partial, complete)
	}
}
