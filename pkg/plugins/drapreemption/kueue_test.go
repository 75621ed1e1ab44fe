package drapreemption

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func TestKueueRule(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	job := func(name string, uid types.UID, labels map[string]string) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name, UID: uid, Labels: labels}}
		if err := indexer.Add(j); err != nil {
			t.Fatal(err)
		}
		return j
	}
	queued := job("queued", "uid-queued", map[string]string{kueueQueueLabel: "team-a"})
	plain := job("plain", "uid-plain", nil)
	rule := kueueRule{jobs: batchlisters.NewJobLister(indexer)}

	ownedBy := func(kind, apiVersion, name string, uid types.UID, controller bool) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "p", OwnerReferences: []metav1.OwnerReference{{
			Kind: kind, APIVersion: apiVersion, Name: name, UID: uid, Controller: ptr.To(controller),
		}}}}
	}
	labelled := func(labels map[string]string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "p", Labels: labels}}
	}
	for name, tc := range map[string]struct {
		pod  *v1.Pod
		want bool
	}{
		"pod of a Job in a queue":                      {ownedBy("Job", "batch/v1", queued.Name, queued.UID, true), true},
		"pod of a Job without a queue":                 {ownedBy("Job", "batch/v1", plain.Name, plain.UID, true), false},
		"pod of an older Job of the same name":         {ownedBy("Job", "batch/v1", queued.Name, "uid-gone", true), false},
		"pod of a Job that is gone":                    {ownedBy("Job", "batch/v1", "gone", "uid-x", true), false},
		"pod owned but not controlled by a queued Job": {ownedBy("Job", "batch/v1", queued.Name, queued.UID, false), false},
		"pod of another kind named like the Job":       {ownedBy("JobSet", "jobset.x-k8s.io/v1alpha2", queued.Name, queued.UID, true), false},
		"plain pod in a queue":                         {labelled(map[string]string{kueueQueueLabel: "team-a"}), true},
		"pod of Kueue's pod integration":               {labelled(map[string]string{kueueManagedLabel: "true"}), true},
		"pod with neither":                             {labelled(map[string]string{"app": "x"}), false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := rule.managed(tc.pod); got != tc.want {
				t.Errorf("managed = %v, want %v", got, tc.want)
			}
		})
	}

	t.Run("victims", func(t *testing.T) {
		if status := rule.victimsStatus([]*v1.Pod{labelled(nil)}); status != nil {
			t.Errorf("victims outside Kueue: %v, want none", status)
		}
		status := rule.victimsStatus([]*v1.Pod{labelled(nil), ownedBy("Job", "batch/v1", queued.Name, queued.UID, true)})
		if status == nil || !strings.Contains(status.Message(), "managed by Kueue") {
			t.Errorf("a victim of Kueue's: %v, want Unschedulable naming Kueue", status)
		}
	})
	t.Run("no informer factory", func(t *testing.T) {
		if (kueueRule{}).managed(ownedBy("Job", "batch/v1", queued.Name, queued.UID, true)) {
			t.Error("without a Job lister, a pod is managed only by its labels")
		}
	})
}
