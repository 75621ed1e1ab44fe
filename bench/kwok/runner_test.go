package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
)

func TestReadDeviceClasses(t *testing.T) {
	classes, err := readDeviceClasses(repoRoot + "/config/gpu-driver/deviceclasses.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range classes {
		names = append(names, c.Name)
	}
	if diff := cmp.Diff([]string{gpuClass, migClass}, names); diff != "" {
		t.Errorf("classes (-want +got):\n%s", diff)
	}
	if _, err := readDeviceClasses(repoRoot + "/config/examples/one-gpu.yaml"); err == nil || !strings.Contains(err.Error(), "not a DeviceClass") {
		t.Errorf("a file with other objects: got error %v", err)
	}
}

// A deletion of the Jobs that fails part way, as a busy API server's does,
// is done again while Jobs are left, and their pods with them: the Job
// controller would make pods again for a Job left behind.
func TestCleanupDeletesJobsAgain(t *testing.T) {
	labels := map[string]string{appLabel: appValue}
	job := func(name string) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench", Labels: labels}}
	}
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench", Labels: labels}}
	}
	client := fake.NewClientset(job("a"), job("b"), pod("a-1"), pod("b-1"))
	// deleteAll deletes what the tracker holds of a resource in the
	// namespace, as DeleteCollection with the benchmark's label would
	// (every object here has it); with fail, only the first and an error.
	deleteAll := func(gvr schema.GroupVersionResource, kind string, fail bool) error {
		list, err := client.Tracker().List(gvr, gvr.GroupVersion().WithKind(kind), "bench")
		if err != nil {
			return err
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return err
		}
		for i, item := range items {
			if fail && i > 0 {
				return errors.New("stream error: INTERNAL_ERROR")
			}
			if err := client.Tracker().Delete(gvr, "bench", item.(metav1.Object).GetName()); err != nil {
				return err
			}
		}
		return nil
	}
	jobDeletions, podDeletions := 0, 0
	client.PrependReactor("delete-collection", "jobs", func(clienttesting.Action) (bool, runtime.Object, error) {
		jobDeletions++
		return true, nil, deleteAll(batchv1.SchemeGroupVersion.WithResource("jobs"), "Job", jobDeletions == 1)
	})
	// The Job controller makes b's pod again once the pods are deleted,
	// as long as b is left.
	client.PrependReactor("delete-collection", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
		podDeletions++
		if err := deleteAll(corev1.SchemeGroupVersion.WithResource("pods"), "Pod", false); err != nil {
			return true, nil, err
		}
		if _, err := client.Tracker().Get(batchv1.SchemeGroupVersion.WithResource("jobs"), "bench", "b"); err == nil {
			return true, nil, client.Tracker().Add(pod("b-2"))
		}
		return true, nil, nil
	})

	r := &runner{client: client, cfg: runConfig{Namespace: "bench"}}
	_, ctx := ktesting.NewTestContext(t)
	if err := r.cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	jobs, _ := client.BatchV1().Jobs("bench").List(ctx, metav1.ListOptions{})
	pods, _ := client.CoreV1().Pods("bench").List(ctx, metav1.ListOptions{})
	if len(jobs.Items) != 0 || len(pods.Items) != 0 {
		t.Errorf("%d Jobs and %d pods left", len(jobs.Items), len(pods.Items))
	}
	if jobDeletions != 2 || podDeletions < 2 {
		t.Errorf("Jobs deleted %d times, pods %d times; want the Jobs twice, the pods again after", jobDeletions, podDeletions)
	}
}
