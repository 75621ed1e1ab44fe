package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/drasched/drasched/internal/kwokcluster"
	"github.com/drasched/drasched/pkg/driver/gpu/device"
)

// Who publishes a demo node's ResourceSlices (kwokcluster.SlicesFromLabel).
const (
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
	return kwokcluster.Discover(ctx, n.Inventory)
}

// nodeObject is the Node of a demo node.
func nodeObject(n demoNode) *corev1.Node {
	publisher := publisherDemo
	if n.ByPlugin {
		publisher = publisherPlugin
	}
	return kwokcluster.NodeObject(n.Name, n.Inventory, publisher)
}

// createNodes creates the nodes and, for those not served by a plugin,
// their ResourceSlices.
func createNodes(ctx context.Context, client kubernetes.Interface, out io.Writer, nodes []demoNode) error {
	for _, n := range nodes {
		gpus, err := n.discover(ctx)
		if err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		if n.ByPlugin {
			if _, err := client.CoreV1().Nodes().Create(ctx, nodeObject(n), metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create node %s: %w", n.Name, err)
			}
			_, _ = fmt.Fprintf(out, "    node %-20s %s, slices from gpu-kubelet-plugin\n", n.Name, describeGPUs(gpus))
			continue
		}
		count, err := kwokcluster.CreateNode(ctx, client, nodeObject(n), gpus)
		if err != nil {
			return err
		}
		plural := "s"
		if count == 1 {
			plural = ""
		}
		_, _ = fmt.Fprintf(out, "    node %-20s %s, %d ResourceSlice%s built by pkg/driver/gpu\n", n.Name, describeGPUs(gpus), count, plural)
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

// settleTime is how long nodes must stay ready before wait-nodes returns:
// the node lifecycle controller may still be about to taint a node that
// kwok has just marked Ready.
const settleTime = time.Second

// errNoNodes: the demo needs at least one node.
var errNoNodes = errors.New("no nodes given (--node or --plugin-node)")
