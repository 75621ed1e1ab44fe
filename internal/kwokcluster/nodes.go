package kwokcluster

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/pkg/core"
	"github.com/drasched/drasched/pkg/driver/gpu"
	"github.com/drasched/drasched/pkg/driver/gpu/device"
	"github.com/drasched/drasched/pkg/driver/gpu/discovery"
)

// Labels and annotations of the GPU nodes.
const (
	// KwokNodeAnnotation marks a node that kwok's controller manages
	// (kwokctl's clusters manage all nodes; the annotation keeps the nodes
	// fake in clusters that select).
	KwokNodeAnnotation = "kwok.x-k8s.io/node"
	// InventoryLabel names the inventory file a node's GPUs come from,
	// without folder and extension ("h100-hgx-8").
	InventoryLabel = "gpu.drasched.dev/inventory"
	// SlicesFromLabel says who publishes the node's ResourceSlices.
	SlicesFromLabel = "gpu.drasched.dev/slices-from"
)

// Discover reads an inventory file with the driver's inventory backend, as
// the plugin does.
func Discover(ctx context.Context, inventory string) ([]device.GPU, error) {
	return (&discovery.Inventory{Path: inventory}).Discover(ctx)
}

// InventoryName is the value of InventoryLabel for an inventory file.
func InventoryName(inventory string) string {
	return strings.TrimSuffix(filepath.Base(inventory), filepath.Ext(inventory))
}

// NodeObject is the Node of a simulated GPU node whose GPUs come from the
// inventory file and whose slices slicesFrom publishes. kwok's node stages
// fill in what a kubelet would report (conditions, addresses, node info)
// and keep it Ready.
func NodeObject(name, inventory, slicesFrom string) *corev1.Node {
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("512Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				corev1.LabelHostname:   name,
				corev1.LabelOSStable:   "linux",
				corev1.LabelArchStable: "amd64",
				"type":                 "kwok",
				InventoryLabel:         InventoryName(inventory),
				SlicesFromLabel:        slicesFrom,
			},
			Annotations: map[string]string{KwokNodeAnnotation: "fake"},
		},
		Status: corev1.NodeStatus{Capacity: resources, Allocatable: resources},
	}
}

// NodeSlices are the ResourceSlices the GPU driver would publish for the
// node, owned by the Node as the plugin's own slices are, so that deleting
// the node deletes them.
func NodeSlices(gpus []device.GPU, node *corev1.Node) ([]*resourceapi.ResourceSlice, error) {
	objs, err := gpu.BuildResourceSlices(gpu.SliceOptions{NodeName: node.Name}, gpus)
	if err != nil {
		return nil, err
	}
	for _, s := range objs {
		s.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "v1",
			Kind:       "Node",
			Name:       node.Name,
			UID:        node.UID,
			Controller: ptr.To(true),
		}}
	}
	return objs, nil
}

// NodeGPUs returns gpus with UUIDs of the node's own, derived from the
// node's name and the inventory's UUIDs (name-based, so the same in every
// run). Nodes built from one inventory file would otherwise all have the
// same GPUs, which real nodes never do; a scheduler that keeps equal
// strings once would then hold less of a simulated fleet than of a real
// one. MIG devices' names carry their UUIDs, so they change too.
func NodeGPUs(gpus []device.GPU, node string) []device.GPU {
	nodeUUID := func(prefix, inventoryUUID string) string {
		return prefix + uuid.NewSHA1(uuid.NameSpaceOID, []byte(node+"/"+inventoryUUID)).String()
	}
	out := make([]device.GPU, len(gpus))
	for i, g := range gpus {
		g.UUID = nodeUUID("GPU-", g.UUID)
		g.MIG = slices.Clone(g.MIG)
		for j := range g.MIG {
			g.MIG[j].UUID = nodeUUID("MIG-", g.MIG[j].UUID)
		}
		out[i] = g
	}
	return out
}

// FleetSlices returns the kwok benchmark's mix of size nodes, eight H100
// nodes and one each of L40S and A100 MIG in ten (at least one of each
// kind), named prefix-kind-i, with the ResourceSlices the GPU driver
// publishes for them: the fleet of the allocator's and the plugin's memory
// benchmarks. inventoryDir is config/inventory.
func FleetSlices(ctx context.Context, inventoryDir, prefix string, size int) ([]*corev1.Node, []*resourceapi.ResourceSlice, error) {
	var nodes []*corev1.Node
	var slices []*resourceapi.ResourceSlice
	for _, kind := range []struct {
		file   string
		tenths int
	}{
		{"h100-hgx-8.yaml", 8},
		{"l40s-8-pcie-switch.yaml", 1},
		{"a100-mig-8.yaml", 1},
	} {
		inventory := filepath.Join(inventoryDir, kind.file)
		gpus, err := Discover(ctx, inventory)
		if err != nil {
			return nil, nil, err
		}
		for i := range max(size*kind.tenths/10, 1) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", prefix, InventoryName(inventory), i)}}
			objs, err := NodeSlices(NodeGPUs(gpus, node.Name), node)
			if err != nil {
				return nil, nil, err
			}
			nodes = append(nodes, node)
			slices = append(slices, objs...)
		}
	}
	return nodes, slices, nil
}

// CreateNode creates the node and publishes the slices that the driver
// would publish for its GPUs; it returns how many slices it created.
func CreateNode(ctx context.Context, client kubernetes.Interface, node *corev1.Node, gpus []device.GPU) (int, error) {
	created, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return 0, fmt.Errorf("create node %s: %w", node.Name, err)
	}
	objs, err := NodeSlices(gpus, created)
	if err != nil {
		return 0, fmt.Errorf("node %s: %w", node.Name, err)
	}
	for _, s := range objs {
		if _, err := client.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return 0, fmt.Errorf("create ResourceSlice %s: %w", s.Name, err)
		}
	}
	return len(objs), nil
}

// NodeState says what a node still lacks before pods may be scheduled.
type NodeState struct {
	Ready     bool
	Taints    []string
	Published bool
}

// Done reports whether the node is Ready, untainted, and has its GPU pool
// published completely.
func (s NodeState) Done() bool { return s.Ready && len(s.Taints) == 0 && s.Published }

func (s NodeState) String() string {
	var missing []string
	if !s.Ready {
		missing = append(missing, "not Ready")
	}
	if len(s.Taints) > 0 {
		missing = append(missing, "taints "+strings.Join(s.Taints, ","))
	}
	if !s.Published {
		missing = append(missing, "no complete ResourceSlice pool")
	}
	if len(missing) == 0 {
		return "ready"
	}
	return strings.Join(missing, "; ")
}

// StateOf computes a node's state from the node and the GPU driver's
// ResourceSlices of the cluster, grouped by pool (PoolsByName).
func StateOf(node *corev1.Node, pools map[string][]resourceapi.ResourceSlice) NodeState {
	var s NodeState
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			s.Ready = c.Status == corev1.ConditionTrue
		}
	}
	for _, t := range node.Spec.Taints {
		s.Taints = append(s.Taints, t.Key)
	}
	s.Published = PoolComplete(node.Name, pools[node.Name])
	return s
}

// PoolsByName groups the GPU driver's slices by pool name, which is the
// node name for its node-local pools.
func PoolsByName(all []resourceapi.ResourceSlice) map[string][]resourceapi.ResourceSlice {
	pools := map[string][]resourceapi.ResourceSlice{}
	for _, s := range all {
		if s.Spec.Driver == gpu.DefaultDriverName {
			pools[s.Spec.Pool.Name] = append(pools[s.Spec.Pool.Name], s)
		}
	}
	return pools
}

// PoolComplete reports whether the GPU driver's pool of the node is
// published completely: as many slices of the newest generation as each
// says the pool has. The allocator ignores incomplete pools.
func PoolComplete(nodeName string, all []resourceapi.ResourceSlice) bool {
	var list []*resourceapi.ResourceSlice
	for i := range all {
		if s := &all[i]; ptr.Deref(s.Spec.NodeName, "") == nodeName {
			list = append(list, s)
		}
	}
	p := core.NewestPools(list)[core.PoolID{Driver: gpu.DefaultDriverName, Pool: nodeName}]
	return p != nil && p.Complete()
}

// WaitOptions tune WaitNodes.
type WaitOptions struct {
	// Timeout is how long to wait in all.
	Timeout time.Duration
	// Settle is how long the nodes must stay ready: the node lifecycle
	// controller may still be about to taint a node that kwok has just
	// marked Ready.
	Settle time.Duration
	// Interval between two looks at the cluster; 250ms when zero. Each look
	// lists all nodes and slices, which costs with a thousand nodes.
	Interval time.Duration
	// ShowWaiting is how many waiting nodes a progress line names; the
	// rest are counted. All when zero.
	ShowWaiting int
}

// WaitNodes waits until every named node is Ready, untainted (the
// not-ready taints of new nodes are gone) and has its ResourceSlices, and
// stays so for opts.Settle. It prints what is missing whenever that
// changes.
func WaitNodes(ctx context.Context, client kubernetes.Interface, out io.Writer, names []string, opts WaitOptions) error {
	interval := opts.Interval
	if interval == 0 {
		interval = 250 * time.Millisecond
	}
	var last string
	var readySince time.Time
	err := wait.PollUntilContextTimeout(ctx, interval, opts.Timeout, true, func(ctx context.Context) (bool, error) {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		resourceSlices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		pools := PoolsByName(resourceSlices.Items)
		byName := map[string]*corev1.Node{}
		for i := range nodes.Items {
			byName[nodes.Items[i].Name] = &nodes.Items[i]
		}
		var waiting []string
		for _, name := range names {
			node, ok := byName[name]
			if !ok {
				waiting = append(waiting, name+": missing")
				continue
			}
			if s := StateOf(node, pools); !s.Done() {
				waiting = append(waiting, name+": "+s.String())
			}
		}
		summary := fmt.Sprintf("%d/%d nodes ready", len(names)-len(waiting), len(names))
		if len(waiting) > 0 {
			shown := waiting
			if opts.ShowWaiting > 0 && len(shown) > opts.ShowWaiting {
				shown = append(shown[:opts.ShowWaiting:opts.ShowWaiting], fmt.Sprintf("%d more", len(waiting)-opts.ShowWaiting))
			}
			summary += " (" + strings.Join(shown, "; ") + ")"
		}
		if summary != last {
			_, _ = fmt.Fprintf(out, "    %s\n", summary)
			last = summary
		}
		if len(waiting) > 0 {
			readySince = time.Time{}
			return false, nil
		}
		if readySince.IsZero() {
			readySince = time.Now()
		}
		return time.Since(readySince) >= opts.Settle, nil
	})
	if err != nil {
		return fmt.Errorf("nodes not ready after %s, last state: %s: %w", opts.Timeout, last, err)
	}
	return nil
}
