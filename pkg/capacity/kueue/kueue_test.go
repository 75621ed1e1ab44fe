package kueue_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/pkg/capacity"
	"github.com/drasched/drasched/pkg/capacity/kueue"
	"github.com/drasched/drasched/pkg/capacity/kueue/kueuetest"
)

func TestAdmission(t *testing.T) {
	jobPod := kueuetest.OfJob(builder.MakePod("train-0").Obj(), "train")
	admitted := kueuetest.MakeWorkload("job-train-1").Job("train").Queue("team-a").
		Admitted("team-a", kueuetest.PodSet{Name: "main", Count: 6, Flavor: "gpus", Usage: map[string]string{"drasched.dev/gpu": "6"}})
	for name, tc := range map[string]struct {
		served  bool
		pod     *v1.Pod
		objects []runtime.Object
		want    *kueue.Admission
	}{
		"Kueue absent": {
			pod: jobPod, objects: []runtime.Object{admitted.Obj()},
		},
		"not a Job's pod": {
			served: true, pod: builder.MakePod("p").Obj(), objects: []runtime.Object{admitted.Obj()},
		},
		"a Job Kueue does not manage": {
			served: true, pod: kueuetest.OfJob(builder.MakePod("other-0").Obj(), "other"), objects: []runtime.Object{admitted.Obj()},
		},
		"admitted": {
			served: true, pod: jobPod,
			objects: []runtime.Object{
				admitted.Obj(),
				kueuetest.MakeWorkload("job-other-1").Job("other").Queue("team-b").Obj(),
			},
			want: &kueue.Admission{
				Workload: "default/job-train-1", LocalQueue: "team-a", ClusterQueue: "team-a",
				Admitted: true, Reason: "Admitted", Message: "The workload is admitted",
				PodSets: []kueue.PodSetQuota{{Name: "main", Count: 6, Resources: []kueue.ResourceUsage{
					{Name: "drasched.dev/gpu", Quantity: resource.MustParse("6"), Flavor: "gpus"},
				}}},
			},
		},
		"pending": {
			served: true, pod: jobPod,
			objects: []runtime.Object{kueuetest.MakeWorkload("job-train-1").Job("train").Queue("team-a").
				Pending("couldn't assign flavors to pod set main: insufficient quota for drasched.dev/gpu in flavor gpus, previously considered podsets requests (0) + current podset request (6) > maximum capacity (4)").Obj()},
			want: &kueue.Admission{
				Workload: "default/job-train-1", LocalQueue: "team-a", Reason: "Pending",
				Message: "couldn't assign flavors to pod set main: insufficient quota for drasched.dev/gpu in flavor gpus, previously considered podsets requests (0) + current podset request (6) > maximum capacity (4)",
			},
		},
		// Kueue replaced an old workload of the Job with a new one.
		"the newer of two": {
			served: true, pod: jobPod,
			objects: []runtime.Object{
				kueuetest.MakeWorkload("job-train-old").Job("train").Queue("team-a").Created(metav1.NewTime(time.Unix(100, 0))).Obj(),
				kueuetest.MakeWorkload("job-train-new").Job("train").Queue("team-b").Created(metav1.NewTime(time.Unix(200, 0))).Obj(),
			},
			want: &kueue.Admission{Workload: "default/job-train-new", LocalQueue: "team-b"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			r, dynamic := kueuetest.NewReader(tc.served, tc.objects...)
			got, note, err := r.Admission(ctx, tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			if note != "" {
				t.Errorf("note %q, want none", note)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("admission (-want +got):\n%s", diff)
			}
			if !tc.served && len(dynamic.Actions()) > 0 {
				t.Errorf("Kueue not served, yet read its objects: %v", dynamic.Actions())
			}
		})
	}
}

// TestAdmissionForbidden: a refused list of workloads leaves the admission
// out with a note, as a refused DeviceTaintRule list does.
func TestAdmissionForbidden(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	r, dynamic := kueuetest.NewReader(true)
	dynamic.PrependReactor("list", "workloads", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(kueue.Workloads.GroupResource(), "", errors.New("RBAC says no"))
	})
	got, note, err := r.Admission(ctx, kueuetest.OfJob(builder.MakePod("train-0").Obj(), "train"))
	if err != nil || got != nil || !strings.Contains(note, "not shown") || !strings.Contains(note, "forbidden") {
		t.Errorf("got %+v, note %q, error %v; want no admission, a note that says why", got, note, err)
	}
}

func TestReadClusterQueue(t *testing.T) {
	queue := kueuetest.MakeClusterQueue("team-a").Cohort("gpus").
		Group("drasched.dev/gpu").Flavor("gpus", int64(4)).BorrowingLimit("drasched.dev/gpu", "2").
		Usage("gpus", "drasched.dev/gpu", "6", "2").
		// Quota reserved for a workload whose admission checks run.
		Reserved("gpus", "drasched.dev/gpu", "7", "3")
	for name, tc := range map[string]struct {
		served  bool
		name    string
		want    *kueue.ClusterQueue
		wantErr error
	}{
		"Kueue absent":  {name: "team-a", wantErr: kueue.ErrNotServed},
		"no such queue": {served: true, name: "team-b", wantErr: capacity.ErrNotFound},
		"quota and usage": {served: true, name: "team-a", want: &kueue.ClusterQueue{
			Name: "team-a", Cohort: "gpus",
			Groups: []kueue.ResourceGroup{{Covered: []string{"drasched.dev/gpu"}, Flavors: []kueue.FlavorQuota{{Name: "gpus", Resources: []kueue.Quota{{
				Name: "drasched.dev/gpu", Nominal: resource.MustParse("4"), BorrowingLimit: ptr.To(resource.MustParse("2")),
				InUse: resource.MustParse("7"), Borrowed: resource.MustParse("3"),
			}}}}}},
		}},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			r, _ := kueuetest.NewReader(tc.served, queue.Obj())
			got, err := r.ClusterQueue(ctx, tc.name)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tc.name) {
				t.Errorf("error %q does not name the queue", err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
				t.Errorf("ClusterQueue (-want +got):\n%s", diff)
			}
		})
	}
}
