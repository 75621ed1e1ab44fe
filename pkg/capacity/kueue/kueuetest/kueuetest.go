// Package kueuetest helps test code that reads Kueue's objects with
// pkg/capacity/kueue: NewReader is a kueue.Reader on fake clients, and the
// builders make Kueue's Workloads and ClusterQueues as unstructured, as the
// dynamic client returns them from an API server.
package kueuetest

import (
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/pkg/capacity/kueue"
)

// NewReader returns a Reader whose API server serves Kueue's workloads and
// clusterqueues, with the objects, or (served false) does not serve
// Kueue's API at all. The dynamic client is returned for reactors.
func NewReader(served bool, objects ...runtime.Object) (*kueue.Reader, *dynamicfake.FakeDynamicClient) {
	dynamic := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		kueue.Workloads:     "WorkloadList",
		kueue.ClusterQueues: "ClusterQueueList",
	}, objects...)
	fake := &k8stesting.Fake{}
	if served {
		fake.Resources = []*metav1.APIResourceList{{
			GroupVersion: kueue.GroupVersion.String(),
			APIResources: []metav1.APIResource{
				{Name: kueue.Workloads.Resource, Kind: "Workload", Namespaced: true},
				{Name: kueue.ClusterQueues.Resource, Kind: "ClusterQueue"},
			},
		}}
	}
	return &kueue.Reader{Dynamic: dynamic, Discovery: &fakediscovery.FakeDiscovery{Fake: fake}}, dynamic
}

// JobUID is the UID of the Job of that name, in the pods and Workloads
// these helpers make.
func JobUID(job string) types.UID { return types.UID("uid-job-" + job) }

// OfJob makes the Job of that name the pod's controller, as the Job
// controller does.
func OfJob(pod *v1.Pod, job string) *v1.Pod {
	pod.OwnerReferences = append(pod.OwnerReferences, metav1.OwnerReference{
		APIVersion: "batch/v1", Kind: "Job", Name: job, UID: JobUID(job), Controller: ptr.To(true),
	})
	return pod
}

// WorkloadWrapper builds a Workload.
type WorkloadWrapper struct{ unstructured.Unstructured }

// MakeWorkload starts a Workload in namespace default.
func MakeWorkload(name string) *WorkloadWrapper {
	w := &WorkloadWrapper{}
	w.SetAPIVersion(kueue.GroupVersion.String())
	w.SetKind("Workload")
	w.SetName(name)
	w.SetNamespace("default")
	w.SetUID(types.UID("uid-" + name))
	return w
}

func (w *WorkloadWrapper) Obj() *unstructured.Unstructured { return &w.Unstructured }

// Job makes the workload the Job's, as Kueue makes it.
func (w *WorkloadWrapper) Job(job string) *WorkloadWrapper {
	w.SetOwnerReferences(append(w.GetOwnerReferences(), metav1.OwnerReference{
		APIVersion: "batch/v1", Kind: "Job", Name: job, UID: JobUID(job), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}))
	return w
}

// Queue sets the workload's LocalQueue.
func (w *WorkloadWrapper) Queue(name string) *WorkloadWrapper {
	must(unstructured.SetNestedField(w.Object, name, "spec", "queueName"))
	return w
}

// PodSet is the quota of one pod set: resource name to quantity, all from
// one flavor.
type PodSet struct {
	Name   string
	Count  int64
	Flavor string
	Usage  map[string]string
}

// Admitted records Kueue's admission into the ClusterQueue with the pod
// sets' quota, and the conditions QuotaReserved and Admitted True.
func (w *WorkloadWrapper) Admitted(clusterQueue string, podSets ...PodSet) *WorkloadWrapper {
	var assignments []any
	for _, ps := range podSets {
		flavors, usage := map[string]any{}, map[string]any{}
		for name, q := range ps.Usage {
			flavors[name], usage[name] = ps.Flavor, q
		}
		assignments = append(assignments, map[string]any{"name": ps.Name, "count": ps.Count, "flavors": flavors, "resourceUsage": usage})
	}
	must(unstructured.SetNestedField(w.Object, map[string]any{"clusterQueue": clusterQueue, "podSetAssignments": assignments}, "status", "admission"))
	return w.condition("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue "+clusterQueue).
		condition("Admitted", "True", "Admitted", "The workload is admitted")
}

// Pending records what Kueue says of a workload it has never admitted:
// QuotaReserved False with the message, no Admitted condition.
func (w *WorkloadWrapper) Pending(message string) *WorkloadWrapper {
	return w.condition("QuotaReserved", "False", "Pending", message)
}

// condition adds a condition.
func (w *WorkloadWrapper) condition(conditionType, status, reason, message string) *WorkloadWrapper {
	conditions, _, _ := unstructured.NestedSlice(w.Object, "status", "conditions")
	conditions = append(conditions, map[string]any{"type": conditionType, "status": status, "reason": reason, "message": message})
	must(unstructured.SetNestedSlice(w.Object, conditions, "status", "conditions"))
	return w
}

// Created sets the creation time.
func (w *WorkloadWrapper) Created(t metav1.Time) *WorkloadWrapper {
	w.SetCreationTimestamp(t)
	return w
}

// ClusterQueueWrapper builds a ClusterQueue.
type ClusterQueueWrapper struct{ unstructured.Unstructured }

// MakeClusterQueue starts a ClusterQueue with no quota.
func MakeClusterQueue(name string) *ClusterQueueWrapper {
	w := &ClusterQueueWrapper{}
	w.SetAPIVersion(kueue.GroupVersion.String())
	w.SetKind("ClusterQueue")
	w.SetName(name)
	w.SetUID(types.UID("uid-" + name))
	return w
}

func (w *ClusterQueueWrapper) Obj() *unstructured.Unstructured { return &w.Unstructured }

// Cohort puts the queue in a cohort.
func (w *ClusterQueueWrapper) Cohort(name string) *ClusterQueueWrapper {
	must(unstructured.SetNestedField(w.Object, name, "spec", "cohortName"))
	return w
}

// Group adds a resource group covering the resources.
func (w *ClusterQueueWrapper) Group(resources ...string) *ClusterQueueWrapper {
	groups, _, _ := unstructured.NestedSlice(w.Object, "spec", "resourceGroups")
	covered := make([]any, len(resources))
	for i, r := range resources {
		covered[i] = r
	}
	groups = append(groups, map[string]any{"coveredResources": covered})
	must(unstructured.SetNestedSlice(w.Object, groups, "spec", "resourceGroups"))
	return w
}

// Flavor adds a flavor to the last resource group, with the nominal quota
// of each resource the group covers, in order: a string ("4") or, as the
// API server keeps an integer in YAML, an int64.
func (w *ClusterQueueWrapper) Flavor(name string, nominal ...any) *ClusterQueueWrapper {
	groups, _, _ := unstructured.NestedSlice(w.Object, "spec", "resourceGroups")
	group := groups[len(groups)-1].(map[string]any)
	covered, _, _ := unstructured.NestedStringSlice(group, "coveredResources")
	var resources []any
	for i, r := range covered {
		resources = append(resources, map[string]any{"name": r, "nominalQuota": nominal[i]})
	}
	flavors, _, _ := unstructured.NestedSlice(group, "flavors")
	group["flavors"] = append(flavors, map[string]any{"name": name, "resources": resources})
	must(unstructured.SetNestedSlice(w.Object, groups, "spec", "resourceGroups"))
	return w
}

// BorrowingLimit sets the borrowing limit of a resource in the last flavor.
func (w *ClusterQueueWrapper) BorrowingLimit(resource string, limit any) *ClusterQueueWrapper {
	groups, _, _ := unstructured.NestedSlice(w.Object, "spec", "resourceGroups")
	flavors := groups[len(groups)-1].(map[string]any)["flavors"].([]any)
	for _, r := range flavors[len(flavors)-1].(map[string]any)["resources"].([]any) {
		if r := r.(map[string]any); r["name"] == resource {
			r["borrowingLimit"] = limit
		}
	}
	must(unstructured.SetNestedSlice(w.Object, groups, "spec", "resourceGroups"))
	return w
}

// Usage records in status.flavorsUsage what the queue's admitted
// workloads use of a resource in a flavor, and how much of it is borrowed.
func (w *ClusterQueueWrapper) Usage(flavor, resource, total, borrowed string) *ClusterQueueWrapper {
	return w.use("flavorsUsage", flavor, resource, total, borrowed)
}

// Reserved records the same in status.flavorsReservation.
func (w *ClusterQueueWrapper) Reserved(flavor, resource, total, borrowed string) *ClusterQueueWrapper {
	return w.use("flavorsReservation", flavor, resource, total, borrowed)
}

func (w *ClusterQueueWrapper) use(field, flavor, resource, total, borrowed string) *ClusterQueueWrapper {
	flavors, _, _ := unstructured.NestedSlice(w.Object, "status", field)
	var f map[string]any
	for _, item := range flavors {
		if item.(map[string]any)["name"] == flavor {
			f = item.(map[string]any)
		}
	}
	if f == nil {
		f = map[string]any{"name": flavor}
		flavors = append(flavors, f)
	}
	resources, _ := f["resources"].([]any)
	f["resources"] = append(resources, map[string]any{"name": resource, "total": total, "borrowed": borrowed})
	must(unstructured.SetNestedSlice(w.Object, flavors, "status", field))
	return w
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
