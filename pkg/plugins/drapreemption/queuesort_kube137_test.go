//go:build !kube1.35 && !kube1.36

package drapreemption

import (
	"fmt"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	internalqueue "k8s.io/kubernetes/pkg/scheduler/backend/queue"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	"k8s.io/utils/ptr"
)

// In kube-scheduler's own queue, a pod of the active queue that gets
// nominated (a pod update) moves ahead of the pods of its priority that
// came before it, and not ahead of a pod of higher priority: the key of the
// order changes only through the queue's Update, which re-sorts.
func TestQueueSortInTheQueue(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	// The queue records its sizes in the scheduler's metrics.
	metrics.Register()
	pod := func(name string, priority int32) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name)}, Spec: v1.PodSpec{Priority: ptr.To(priority)}}
	}
	q := internalqueue.NewTestQueue(ctx, (&QueueSort{}).Less)
	first, second, nominee, high := pod("first", 10), pod("second", 10), pod("nominee", 10), pod("high", 20)
	for _, p := range []*v1.Pod{first, second, nominee, high} {
		q.Add(ctx, p)
	}
	nominated := nominee.DeepCopy()
	nominated.Status.NominatedNodeName = "node-1"
	q.Update(ctx, nominee, nominated)

	var order []string
	for range 4 {
		entity, err := q.Pop(logger)
		if err != nil {
			t.Fatal(err)
		}
		order = append(order, entity.(*framework.QueuedPodInfo).Pod.Name)
	}
	want := []string{"high", "nominee", "first", "second"}
	if !slices.Equal(order, want) {
		t.Errorf("popped %v, want %v", order, want)
	}
}

// A pod group comes first among entries of its priority when all its
// queued pods are nominated, as pod-group preemption nominates them; one
// pod without a nomination (a preemptor of higher priority cleared it)
// leaves the group in PrioritySort's place, and so does a group with no
// queued pod.
func TestQueueSortGroups(t *testing.T) {
	early := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	late := early.Add(time.Second)
	group := func(at time.Time, nodes ...string) *framework.QueuedPodGroupInfo {
		g := &framework.QueuedPodGroupInfo{
			PodGroupInfo: &framework.PodGroupInfo{Namespace: "default", Name: "gang", Type: fwk.PodGroupKeyType,
				PodGroup: &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "gang", Namespace: "default"}}},
		}
		g.Timestamp = at
		key := fwk.PodGroupKey("default", "gang")
		g.QueuedPodInfos = map[fwk.EntityKey][]*framework.QueuedPodInfo{key: nil}
		for i, node := range nodes {
			g.QueuedPodInfos[key] = append(g.QueuedPodInfos[key], queued(t, fmt.Sprintf("gang-%d", i), 0, node, at))
		}
		return g
	}
	for name, tc := range map[string]struct {
		a, b fwk.QueuedEntityInfo
		want bool
	}{
		"nominated group before an earlier pod":        {a: group(late, "node-1", "node-2"), b: queued(t, "a", 0, "", early), want: true},
		"partly nominated group after an earlier pod":  {a: group(late, "node-1", ""), b: queued(t, "a", 0, "", early), want: false},
		"empty group after an earlier pod":             {a: group(late), b: queued(t, "a", 0, "", early), want: false},
		"nominated pod before a group not nominated":   {a: queued(t, "a", 0, "node-1", late), b: group(early, "", ""), want: true},
		"nominated group after an earlier nominee":     {a: group(late, "node-1", "node-2"), b: queued(t, "a", 0, "node-3", early), want: false},
		"group not nominated before a later pod":       {a: group(early, "", ""), b: queued(t, "a", 0, "", late), want: true},
		"nominated group before a group not nominated": {a: group(late, "node-1"), b: group(early, ""), want: true},
	} {
		t.Run(name, func(t *testing.T) {
			if got := (&QueueSort{}).Less(tc.a, tc.b); got != tc.want {
				t.Errorf("Less = %v, want %v", got, tc.want)
			}
		})
	}
}
