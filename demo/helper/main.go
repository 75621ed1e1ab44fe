// Command demo is the Go half of `make demo` (demo/demo.sh runs it): it
// creates kwok nodes whose GPUs come from the GPU driver's inventory files,
// publishes their ResourceSlices with the driver's own slice building
// (pkg/driver/gpu), waits for the nodes, derives the scheduler's
// configuration for the demo cluster from config/scheduler-config.yaml,
// and reports where drasched put the example pods and why it left others
// pending.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"

	"github.com/drasched/drasched/internal/kwokcluster"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := newCommand().ExecuteContext(ctx)
	stop()
	if err != nil {
		_, _ = fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	var kubeconfig string
	client := func() (kubernetes.Interface, error) {
		return kwokcluster.NewClient(kubeconfig, "drasched-demo", 0, 0)
	}
	root := &cobra.Command{
		Use:           "demo",
		Short:         "Helpers of make demo: GPU nodes for kwok, scheduler configuration, report",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&kubeconfig, "kubeconfig", "", "Kubeconfig of the demo cluster.")
	root.AddCommand(
		newNodesCommand(client),
		newWaitNodesCommand(client),
		newSchedulerConfigCommand(&kubeconfig),
		newReportCommand(client),
		newKueueCommand(&kubeconfig),
	)
	return root
}

func newNodesCommand(client func() (kubernetes.Interface, error)) *cobra.Command {
	var own, plugin []string
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "Create kwok nodes with GPUs from inventory files",
		Long: `nodes creates one kwok Node per --node and --plugin-node. For --node it also
publishes the node's ResourceSlices, built from the inventory by the GPU
driver's code; a --plugin-node gets its slices from a gpu-kubelet-plugin
process started for it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			nodes, err := parseNodes(own, plugin)
			if err != nil {
				return err
			}
			c, err := client()
			if err != nil {
				return err
			}
			return createNodes(cmd.Context(), c, cmd.OutOrStdout(), nodes)
		},
	}
	cmd.Flags().StringArrayVar(&own, "node", nil, "NAME=INVENTORY: a node whose slices this command publishes (repeatable).")
	cmd.Flags().StringArrayVar(&plugin, "plugin-node", nil, "NAME=INVENTORY: a node whose slices a gpu-kubelet-plugin publishes (repeatable).")
	return cmd
}

func parseNodes(own, plugin []string) ([]demoNode, error) {
	var nodes []demoNode
	seen := sets.New[string]()
	for i, values := range [][]string{own, plugin} {
		for _, v := range values {
			n, err := parseNode(v, i == 1)
			if err != nil {
				return nil, err
			}
			if seen.Has(n.Name) {
				return nil, fmt.Errorf("node %s given twice", n.Name)
			}
			seen.Insert(n.Name)
			nodes = append(nodes, n)
		}
	}
	if len(nodes) == 0 {
		return nil, errNoNodes
	}
	return nodes, nil
}

func newWaitNodesCommand(client func() (kubernetes.Interface, error)) *cobra.Command {
	timeout := 3 * time.Minute
	cmd := &cobra.Command{
		Use:   "wait-nodes NAME...",
		Short: "Wait until nodes are Ready, untainted and have their GPU ResourceSlices",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			return kwokcluster.WaitNodes(cmd.Context(), c, cmd.OutOrStdout(), args, kwokcluster.WaitOptions{Timeout: timeout, Settle: settleTime})
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", timeout, "How long to wait.")
	return cmd
}

func newSchedulerConfigCommand(kubeconfig *string) *cobra.Command {
	in, out := "config/scheduler-config.yaml", ""
	cmd := &cobra.Command{
		Use:   "scheduler-config",
		Short: "Write the scheduler configuration for the demo cluster",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if *kubeconfig == "" || out == "" {
				return errors.New("--kubeconfig and --out are required")
			}
			return writeSchedulerConfig(in, *kubeconfig, out)
		},
	}
	cmd.Flags().StringVar(&in, "in", in, "The shipped configuration.")
	cmd.Flags().StringVar(&out, "out", out, "Where to write the demo's configuration.")
	return cmd
}

func newReportCommand(client func() (kubernetes.Interface, error)) *cobra.Command {
	namespace, schedulerName, selector := "default", "drasched", ""
	timeout := 3 * time.Minute
	var expected, expectedGroups []string
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Wait for the scheduler, then print pod -> node -> devices and why pods are pending",
		Long: `report waits until no pod of the scheduler is pending (bound, or
unschedulable according to its PodScheduled condition), prints one row per
allocated device and the scheduler's message for each unschedulable pod, and
checks the allocations. With --expect-unschedulable, exactly those pods must
end up unschedulable; --expect-unschedulable-group adds the pods of those
PodGroups. For pods of PodGroups it also prints what each group got and
checks that every gang got all or nothing: at least minCount pods bound, or
none bound and none of their claims allocated.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			q := query{namespace: namespace, schedulerName: schedulerName}
			if selector != "" {
				if q.selector, err = labels.Parse(selector); err != nil {
					return fmt.Errorf("--selector: %w", err)
				}
			}
			var want, wantGroups sets.Set[string]
			if cmd.Flags().Changed("expect-unschedulable") {
				want = sets.New(expected...)
			}
			if cmd.Flags().Changed("expect-unschedulable-group") {
				wantGroups = sets.New(expectedGroups...)
			}
			return report(cmd.Context(), c, cmd.OutOrStdout(), q, want, wantGroups, timeout)
		},
	}
	cmd.Flags().StringVar(&namespace, "namespace", namespace, "Namespace of the pods.")
	cmd.Flags().StringVar(&schedulerName, "scheduler-name", schedulerName, "Report the pods with this spec.schedulerName.")
	cmd.Flags().DurationVar(&timeout, "timeout", timeout, "How long to wait for the scheduler.")
	cmd.Flags().StringVarP(&selector, "selector", "l", selector, "Report only the pods of this label selector.")
	cmd.Flags().StringSliceVar(&expected, "expect-unschedulable", nil, "Pods that must end up unschedulable; all others must be bound.")
	cmd.Flags().StringSliceVar(&expectedGroups, "expect-unschedulable-group", nil, "PodGroups whose pods must all end up unschedulable (with --expect-unschedulable: as well as those pods).")
	return cmd
}
