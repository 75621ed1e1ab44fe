package capacity

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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
