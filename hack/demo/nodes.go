package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/pkg/driver/gpu"
	"github.com/drasched/drasched/pkg/driver/gpu/device"
	"github.com/drasched/drasched/pkg/driver/gpu/discovery"
)

// Labels and annotations of the demo's nodes.
const (
	// kwokNodeAnnotation marks a node that kwok's controller manages
	// (kwokctl's clusters manage all nodes; the annotation keeps the nodes
	// fake in clusters that select).
	kwokNodeAnnotation = "kwok.x-k8s.io/node"
	// inventoryLabel names the inventory file a node's GPUs come from.
	inventoryLabel = "gpu.drasched.dev/inventory"
	// publisherLabel says who publishes the node's ResourceSlices:
	// publisherDemo or publisherPlugin.
	publisherLabel  = "gpu.drasched.dev/slices-from"
	publisherDemo   = "demo"
	publisherPlugin = "gpu-kubelet-plugin"
)

// demoNode is one simulated GPU node.
type demoNode struct {
	Name string
	// Inventory is the driver inventory file with the node's GPUs.
	Inventory string
	// ByPlugin means that a gpu-kubelet-plugin process publishes the
	// node's ResourceSlices; otherwise this program does, with the same
	// code (gpu.BuildResourceSlices).
	ByPlugin bool
}

// parseNode parses NAME=INVENTORY.
func parseNode(value string, byPlugin bool) (demoNode, error) {
	name, inventory, ok := strings.Cut(value, "=")
	if !ok || name == "" || inventory == "" {
		return demoNode{}, fmt.Errorf("%q: want NAME=INVENTORY", value)
	}
	return demoNode{Name: name, Inventory: inventory, ByPlugin: byPlugin}, nil
}

// discover reads the node's inventory with the driver's inventory backend,
// as the plugin does.
func (n demoNode) discover(ctx context.Context) ([]device.GPU, error) {
	return (&discovery.Inventory{Path: n.Inventory}).Discover(ctx)
}

// nodeObject is the Node of a demo node. kwok's node stages fill in what a
// kubelet would report (conditions, addresses, node info) and keep it Ready.
func nodeObject(n demoNode) *corev1.Node {
	publisher := publisherDemo
	if n.ByPlugin {
		publisher = publisherPlugin
	}
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("512Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: n.Name,
			Labels: map[string]string{
				corev1.LabelHostname:   n.Name,
				corev1.LabelOSStable:   "linux",
				corev1.LabelArchStable: "amd64",
				"type":                 "kwok",
				inventoryLabel:         strings.TrimSuffix(filepath.Base(n.Inventory), filepath.Ext(n.Inventory)),
				publisherLabel:         publisher,
			},
			Annotations: map[string]string{kwokNodeAnnotation: "fake"},
		},
		Status: corev1.NodeStatus{Capacity: resources, Allocatable: resources},
	}
}

// nodeSlices are the ResourceSlices the GPU driver would publish for the
// node, owned by the Node as the plugin's own slices are, so that deleting
// the node deletes them.
func nodeSlices(gpus []device.GPU, node *corev1.Node) ([]*resourceapi.ResourceSlice, error) {
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

// createNodes creates the nodes and, for those not served by a plugin,
// their ResourceSlices.
func createNodes(ctx context.Context, client kubernetes.Interface, out io.Writer, nodes []demoNode) error {
	for _, n := range nodes {
		gpus, err := n.discover(ctx)
		if err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		node, err := client.CoreV1().Nodes().Create(ctx, nodeObject(n), metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create node %s: %w", n.Name, err)
		}
		if n.ByPlugin {
			_, _ = fmt.Fprintf(out, "    node %-20s %s, slices from gpu-kubelet-plugin\n", n.Name, describeGPUs(gpus))
			continue
		}
		objs, err := nodeSlices(gpus, node)
		if err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		for _, s := range objs {
			if _, err := client.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create ResourceSlice %s: %w", s.Name, err)
			}
		}
		plural := "s"
		if len(objs) == 1 {
			plural = ""
		}
		_, _ = fmt.Fprintf(out, "    node %-20s %s, %d ResourceSlice%s built by pkg/driver/gpu\n", n.Name, describeGPUs(gpus), len(objs), plural)
	}
	return nil
}

// describeGPUs summarises an inventory: "8x NVIDIA H100 80GB HBM3" or
// "8x NVIDIA A100-SXM4-40GB, 25 MIG devices".
func describeGPUs(gpus []device.GPU) string {
	var products []string
	count := map[string]int{}
	migs := 0
	for _, g := range gpus {
		if count[g.ProductName] == 0 {
			products = append(products, g.ProductName)
		}
		count[g.ProductName]++
		migs += len(g.MIG)
	}
	var parts []string
	for _, p := range products {
		parts = append(parts, fmt.Sprintf("%dx %s", count[p], p))
	}
	if migs > 0 {
		parts = append(parts, fmt.Sprintf("%d MIG devices", migs))
	}
	if len(parts) == 0 {
		return "no GPUs"
	}
	return strings.Join(parts, ", ")
}

// nodeState says what a node still lacks before pods may be scheduled.
type nodeState struct {
	ready     bool
	taints    []string
	published bool
}

func (s nodeState) done() bool { return s.ready && len(s.taints) == 0 && s.published }

func (s nodeState) String() string {
	var missing []string
	if !s.ready {
		missing = append(missing, "not Ready")
	}
	if len(s.taints) > 0 {
		missing = append(missing, "taints "+strings.Join(s.taints, ","))
	}
	if !s.published {
		missing = append(missing, "no complete ResourceSlice pool")
	}
	if len(missing) == 0 {
		return "ready"
	}
	return strings.Join(missing, "; ")
}

// stateOf computes a node's state from the node and all ResourceSlices of
// the cluster.
func stateOf(node *corev1.Node, all []resourceapi.ResourceSlice) nodeState {
	var s nodeState
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			s.ready = c.Status == corev1.ConditionTrue
		}
	}
	for _, t := range node.Spec.Taints {
		s.taints = append(s.taints, t.Key)
	}
	s.published = poolComplete(node.Name, all)
	return s
}

// poolComplete reports whether the GPU driver's pool of the node is
// published completely: as many slices of the newest generation as each
// says the pool has. The allocator ignores incomplete pools.
func poolComplete(nodeName string, all []resourceapi.ResourceSlice) bool {
	var generation int64 = -1
	var pool []resourceapi.ResourceSlice
	for _, s := range all {
		if s.Spec.Driver != gpu.DefaultDriverName || s.Spec.Pool.Name != nodeName || ptr.Deref(s.Spec.NodeName, "") != nodeName {
			continue
		}
		switch {
		case s.Spec.Pool.Generation > generation:
			generation, pool = s.Spec.Pool.Generation, []resourceapi.ResourceSlice{s}
		case s.Spec.Pool.Generation == generation:
			pool = append(pool, s)
		}
	}
	return len(pool) > 0 && int64(len(pool)) == pool[0].Spec.Pool.ResourceSliceCount
}

// settleTime is how long nodes must stay ready before wait-nodes returns:
// the node lifecycle controller may still be about to taint a node that
// kwok has just marked Ready.
const settleTime = time.Second

// waitNodes waits until every named node is Ready, untainted (the
// not-ready taints of new nodes are gone) and has its ResourceSlices, and
// stays so for settle. It prints what is missing whenever that changes.
func waitNodes(ctx context.Context, client kubernetes.Interface, out io.Writer, names []string, timeout, settle time.Duration) error {
	var last string
	var readySince time.Time
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		resourceSlices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
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
			if s := stateOf(node, resourceSlices.Items); !s.done() {
				waiting = append(waiting, name+": "+s.String())
			}
		}
		summary := fmt.Sprintf("%d/%d nodes ready", len(names)-len(waiting), len(names))
		if len(waiting) > 0 {
			summary += " (" + strings.Join(waiting, "; ") + ")"
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
		return time.Since(readySince) >= settle, nil
	})
	if err != nil {
		return fmt.Errorf("nodes not ready after %s, last state: %s: %w", timeout, last, err)
	}
	return nil
}

// errNoNodes: the demo needs at least one node.
var errNoNodes = errors.New("no nodes given (--node or --plugin-node)")
