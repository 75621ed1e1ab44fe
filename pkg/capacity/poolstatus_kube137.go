//go:build !kube1.35

package capacity

// ResourcePoolStatusRequest (resource.k8s.io/v1alpha3, KEP-5677) is served
// from Kubernetes 1.36 on; poolstatus_kube135.go stands for it in 1.35.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	resourcev1alpha3 "k8s.io/api/resource/v1alpha3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/minor"
)

// PoolStatusesFromAPI asks kube-controller-manager's
// ResourcePoolStatusRequest controller for the pools of each driver: it
// creates a request per driver (generateName kubectl-drasched-, limit
// 1000), waits for its status and deletes it. These are the only writes of
// kubectl drasched, and only with --source=api. The statuses are sorted by
// driver and pool; notes say where an answer was truncated.
func PoolStatusesFromAPI(ctx context.Context, client kubernetes.Interface, drivers []string, opts APIOptions) ([]minor.PoolStatus, []string, error) {
	timeout := cmp.Or(opts.Timeout, 30*time.Second)
	poll := cmp.Or(opts.Poll, 100*time.Millisecond)
	var statuses []minor.PoolStatus
	var notes []string
	for _, driver := range sets.List(sets.New(drivers...)) {
		request := &resourcev1alpha3.ResourcePoolStatusRequest{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "kubectl-drasched-"},
			Spec:       resourcev1alpha3.ResourcePoolStatusRequestSpec{Driver: driver, Limit: ptr.To(resourcev1alpha3.ResourcePoolStatusRequestLimitMax)},
		}
		if opts.PartitionAttribute != "" {
			if err := minor.SetDefaultPartitionTypeAttribute(&request.Spec, opts.PartitionAttribute); err != nil {
				return nil, nil, err
			}
		}
		status, err := ask(ctx, client, request, timeout, poll)
		if err != nil {
			return nil, nil, fmt.Errorf("driver %s: %w", driver, err)
		}
		if n := ptr.Deref(status.PoolCount, 0); int(n) > len(status.Pools) {
			notes = append(notes, fmt.Sprintf("driver %s: the API reported %d of %d pools", driver, len(status.Pools), n))
		}
		statuses = append(statuses, status.Pools...)
	}
	slices.SortFunc(statuses, func(a, b minor.PoolStatus) int {
		return cmp.Or(cmp.Compare(a.Driver, b.Driver), cmp.Compare(a.PoolName, b.PoolName))
	})
	return statuses, notes, nil
}

// ask creates the request, waits for its status, and deletes it.
func ask(ctx context.Context, client kubernetes.Interface, request *resourcev1alpha3.ResourcePoolStatusRequest, timeout, poll time.Duration) (*resourcev1alpha3.ResourcePoolStatusRequestStatus, error) {
	requests := client.ResourceV1alpha3().ResourcePoolStatusRequests()
	created, err := requests.Create(ctx, request, metav1.CreateOptions{})
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return nil, ErrNotServed
	case apierrors.IsForbidden(err):
		return nil, fmt.Errorf("create resourcepoolstatusrequests.resource.k8s.io: %w (--source=api needs create, get and delete on them)", err)
	case err != nil:
		return nil, fmt.Errorf("create ResourcePoolStatusRequest: %w", err)
	}
	defer func() {
		// The controller deletes answered requests after an hour; this one
		// is of no use to anyone else.
		if err := requests.Delete(context.WithoutCancel(ctx), created.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			klog.FromContext(ctx).V(2).Info("Could not delete the ResourcePoolStatusRequest", "request", created.Name, "err", err)
		}
	}()
	var status *resourcev1alpha3.ResourcePoolStatusRequestStatus
	err = wait.PollUntilContextTimeout(ctx, poll, timeout, true, func(ctx context.Context) (bool, error) {
		got, err := requests.Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		status = got.Status
		return status != nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("no answer to ResourcePoolStatusRequest %s within %s (kube-controller-manager runs the resourcepoolstatusrequest-controller with DRAResourcePoolStatus on; it does not answer while a pool is incomplete, nor, in Kubernetes 1.37, for a driver with a pool at generation 0, whose status the API server refuses): %w", created.Name, timeout, err)
	}
	for _, c := range status.Conditions {
		if c.Type == resourcev1alpha3.ResourcePoolStatusRequestConditionFailed && c.Status == metav1.ConditionTrue {
			return nil, fmt.Errorf("ResourcePoolStatusRequest %s failed: %s", created.Name, c.Message)
		}
	}
	return status, nil
}
