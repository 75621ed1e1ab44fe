//go:build !kube1.35 && !kube1.36

package drapreemption

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
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
