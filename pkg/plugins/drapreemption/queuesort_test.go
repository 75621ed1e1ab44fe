package drapreemption

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"
)

// queued is a pod in the queue since at, of the priority, nominated to
// node (none if "").
func queued(t *testing.T, name string, priority int32, node string, at time.Time) *framework.QueuedPodInfo {
	t.Helper()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)}, Spec: v1.PodSpec{Priority: ptr.To(priority)}}
	pod.Status.NominatedNodeName = node
	info, err := framework.NewPodInfo(pod)
	if err != nil {
		t.Fatal(err)
	}
	q := &framework.QueuedPodInfo{PodInfo: info}
	q.Timestamp = at
	return q
}

// The queue sort is PrioritySort but for nominated pods of the same
// priority, which come first; among nominated pods, and among the others,
// the earlier time in the queue first.
func TestQueueSortLess(t *testing.T) {
	early := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	late := early.Add(time.Second)
	for name, tc := range map[string]struct {
		a, b *framework.QueuedPodInfo
		want bool
	}{
		"higher priority first":                      {a: queued(t, "a", 10, "", late), b: queued(t, "b", 5, "", early), want: true},
		"lower priority later":                       {a: queued(t, "a", 5, "", early), b: queued(t, "b", 10, "", late), want: false},
		"nominated lower priority still later":       {a: queued(t, "a", 5, "node-1", early), b: queued(t, "b", 10, "", late), want: false},
		"same priority, earlier first":               {a: queued(t, "a", 10, "", early), b: queued(t, "b", 10, "", late), want: true},
		"same priority, later not first":             {a: queued(t, "a", 10, "", late), b: queued(t, "b", 10, "", early), want: false},
		"same priority, nominated first though late": {a: queued(t, "a", 10, "node-1", late), b: queued(t, "b", 10, "", early), want: true},
		"same priority, not nominated after one":     {a: queued(t, "a", 10, "", early), b: queued(t, "b", 10, "node-1", late), want: false},
		"both nominated, earlier first":              {a: queued(t, "a", 10, "node-1", early), b: queued(t, "b", 10, "node-2", late), want: true},
		"both nominated, later not first":            {a: queued(t, "a", 10, "node-1", late), b: queued(t, "b", 10, "node-2", early), want: false},
		"equal: neither first":                       {a: queued(t, "a", 10, "node-1", early), b: queued(t, "b", 10, "node-1", early), want: false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := (&QueueSort{}).Less(tc.a, tc.b); got != tc.want {
				t.Errorf("Less = %v, want %v", got, tc.want)
			}
		})
	}
}
