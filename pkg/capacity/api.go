package capacity

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
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

// ErrNotServed marks a cluster that does not serve
// resource.k8s.io/v1alpha3 ResourcePoolStatusRequests.
var ErrNotServed = errors.New("resource.k8s.io/v1alpha3 ResourcePoolStatusRequest is not served (it needs the DRAResourcePoolStatus feature gate and the API version enabled)")

// APIOptions say how to ask the API.
type APIOptions struct {
	// PartitionAttribute is the request's defaultPartitionTypeAttribute.
	PartitionAttribute string
	// Timeout bounds the wait for each answer; zero means 30s.
	Timeout time.Duration
	// Poll is the interval between reads of a request; zero means 100ms.
	Poll time.Duration
}

// PoolStatusesFromAPI asks kube-controller-manager's
// ResourcePoolStatusRequest controller for the pools of each driver: it
// creates a request per driver (generateName kubectl-drasched-, limit
// 1000), waits for its status and deletes it. These are the only writes of
// kubectl drasched, and only with --source=api. The statuses are sorted by
// driver and pool; notes say where an answer was truncated.
func PoolStatusesFromAPI(ctx context.Context, client kubernetes.Interface, drivers []string, opts APIOptions) ([]resourcev1alpha3.PoolStatus, []string, error) {
	timeout := cmp.Or(opts.Timeout, 30*time.Second)
	poll := cmp.Or(opts.Poll, 100*time.Millisecond)
	var statuses []resourcev1alpha3.PoolStatus
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
	slices.SortFunc(statuses, func(a, b resourcev1alpha3.PoolStatus) int {
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

// TopFromAPI is Top for the pools and nodes views with the pools' counts
// from the API (PoolStatusesFromAPI) instead of its own: the controller's
// answer, for clusters that serve it. It lists the ResourceSlices to know
// the drivers, and the nodes for the selector. Only complete pools bound
// to one node count for the nodes view; partitions and shared capacity are
// the API's summaries.
func TopFromAPI(ctx context.Context, client kubernetes.Interface, opts Options, apiOpts APIOptions) (*Report, error) {
	if opts.View == ViewClasses || opts.Class != "" {
		return nil, errors.New("--source=api answers per pool and node: the API has no counts per DeviceClass")
	}
	nodeList, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, readError("nodes", "", err)
	}
	nodes := make([]*v1.Node, len(nodeList.Items))
	for i := range nodeList.Items {
		nodes[i] = &nodeList.Items[i]
	}
	names, err := selectNodes(nodes, opts)
	if err != nil {
		return nil, err
	}
	sliceList, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, readError("resourceslices", "resource.k8s.io", err)
	}
	var drivers []string
	for _, s := range sliceList.Items {
		drivers = append(drivers, s.Spec.Driver)
	}
	statuses, notes, err := PoolStatusesFromAPI(ctx, client, drivers, apiOpts)
	if err != nil {
		return nil, err
	}
	report := &Report{Notes: notes}
	nodeFilter := opts.Selector != nil && !opts.Selector.Empty() || opts.Node != ""
	byNode := map[string]*Node{}
	for _, st := range statuses {
		node := ptr.Deref(st.NodeName, "")
		if nodeFilter && !names.Has(node) {
			continue
		}
		row := Pool{Name: st.Driver + "/" + st.PoolName, Status: st}
		if st.TotalDevices != nil {
			row.Counts = &Counts{
				Total: *st.TotalDevices, Allocated: ptr.Deref(st.AllocatedDevices, 0),
				Available: ptr.Deref(st.AvailableDevices, 0), Unavailable: ptr.Deref(st.UnavailableDevices, 0),
			}
			for _, p := range minor.PartitionSummary(&st) {
				row.Partitions = append(row.Partitions, Partition{Attribute: p.Attribute, Type: p.Type, Total: ptr.Deref(p.Total, 0), Free: ptr.Deref(p.Allocatable, 0)})
			}
		}
		report.Pools = append(report.Pools, row)
		if node == "" {
			continue
		}
		n := byNode[node]
		if n == nil {
			n = &Node{Name: node}
			byNode[node] = n
		}
		n.Pools = append(n.Pools, row.Name)
		if row.Counts == nil {
			n.Incomplete = append(n.Incomplete, row.Name)
			continue
		}
		n.Counts.add(*row.Counts)
		n.Partitions = mergePartitions(n.Partitions, row.Partitions)
	}
	if opts.View == ViewNodes || opts.View == "" {
		for _, n := range byNode {
			report.Nodes = append(report.Nodes, *n)
		}
		slices.SortFunc(report.Nodes, func(a, b Node) int { return cmp.Compare(a.Name, b.Name) })
		report.Pools = nil
	}
	return report, nil
}
