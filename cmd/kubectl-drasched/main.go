// Command kubectl-drasched is a kubectl plugin (kubectl drasched ...) for
// drasched's operators. Read-only: it reads the cluster and never writes
// (except top --source=api, which asks the API with a
// ResourcePoolStatusRequest and deletes it).
//
//	kubectl drasched explain POD [-n NAMESPACE] [--node NODE] [-o text|json] [--timeout 30s]
//	kubectl drasched top [nodes|pools|classes] [-l SELECTOR] [--class CLASS] [--node NODE] [-o wide|json]
//	kubectl drasched fit -f FILE [--count N] [--cluster-queue NAME] [-o wide|json] [--timeout 30s]
//
// explain says why a pending pod's ResourceClaims do not fit on each node
// (the reasons of drasched's allocator, what holds the devices, the
// smallest change found that would make them fit), or where a bound pod's
// devices are (pkg/explain), and for a pod of a Job that Kueue manages,
// Kueue's admission of its workload. top counts the devices per node, pool
// and DeviceClass: total, allocated, available, unavailable
// (pkg/capacity). fit says how many more pods like these fit now, and
// where (pkg/capacity/fit), and with --cluster-queue how many fit in a
// Kueue ClusterQueue's quota (pkg/capacity/kueue).
//
// Errors exit with status 1, as kubectl's do: an unknown node or
// DeviceClass, a manifest that does not decode or has no claims, a refused
// read (the message names the permission), an explain or fit that did not
// finish within --timeout (the message names the flag).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/drasched/drasched/pkg/explain"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := newCommand(os.Stdout).ExecuteContext(ctx)
	stop()
	if err != nil {
		_, _ = fmt.Fprintln(os.Stderr, "kubectl-drasched:", err)
		os.Exit(1)
	}
}

func newCommand(out io.Writer) *cobra.Command {
	flags := genericclioptions.NewConfigFlags(true)
	root := &cobra.Command{
		Use:           "kubectl-drasched",
		Short:         "drasched's kubectl plugin: why a GPU pod is pending, what is free where, whether more pods fit",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	flags.AddFlags(root.PersistentFlags())
	// The allocator's features follow the feature gates, as the
	// scheduler's do: a cluster that sets gates other than the defaults of
	// its minor (an alpha DRA feature turned on) gives the scheduler's
	// here, or the tool's answers differ from the scheduler's.
	utilfeature.DefaultMutableFeatureGate.AddFlag(root.PersistentFlags())
	var (
		node, output string
		limit        deadline
	)
	explainCmd := &cobra.Command{
		Use:   "explain POD",
		Short: "Why the pod's ResourceClaims do not fit on each node, and what would make them fit (read-only)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("--output %q: want text or json", output)
			}
			if err := limit.validate(); err != nil {
				return err
			}
			client, reader, err := newClients(flags)
			if err != nil {
				return err
			}
			namespace, _, err := flags.ToRawKubeConfigLoader().Namespace()
			if err != nil {
				return err
			}
			var report *explain.Report
			if err := limit.run(cmd.Context(), "explain", func(ctx context.Context) (err error) {
				report, err = explain.Explain(ctx, client, namespace, args[0], explain.Options{Node: node, Kueue: reader})
				return err
			}); err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(report)
			}
			if err := printText(out, report); err != nil {
				return err
			}
			for _, n := range report.Notes {
				_, _ = fmt.Fprintln(cmd.ErrOrStderr(), "Note:", n)
			}
			return nil
		},
	}
	explainCmd.Flags().StringVar(&node, "node", "", "explain this node only")
	explainCmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	limit.add(explainCmd)
	root.AddCommand(explainCmd, newTopCommand(flags, out), newFitCommand(flags, out))
	return root
}

// defaultTimeout is --timeout's default: kubectl wait's, and 50 times what
// fit --count 1000 takes on 5,000 nodes (docs/capacity.md, "Speed"), so
// that only a pathological input (selectors that take minutes to
// evaluate) or an API server that does not answer reaches it.
const defaultTimeout = 30 * time.Second

// errTimeout is the cause of a deadline's expiry: the allocator's CEL
// evaluation and the API reads end with it.
var errTimeout = errors.New("--timeout expired")

// deadline is the --timeout of a command that runs the allocator: without
// one, a pod whose claims' selectors take minutes to evaluate keeps the
// command running for as long.
type deadline struct {
	timeout time.Duration
}

func (d *deadline) add(cmd *cobra.Command) {
	cmd.Flags().DurationVar(&d.timeout, "timeout", defaultTimeout, "give up after this long, API reads and allocation together; 0: no limit")
}

func (d *deadline) validate() error {
	if d.timeout < 0 {
		return fmt.Errorf("--timeout %s: want 0 (no limit) or more", d.timeout)
	}
	return nil
}

// run runs f with the deadline, and says so when the deadline ended it.
func (d *deadline) run(ctx context.Context, what string, f func(context.Context) error) error {
	if d.timeout == 0 {
		return f(ctx)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, d.timeout, errTimeout)
	defer cancel()
	err := f(ctx)
	// Any error once the deadline has passed: not every error that the
	// deadline causes wraps the context's (client-go's rate limiter's
	// does not).
	if err != nil && errors.Is(context.Cause(ctx), errTimeout) {
		return fmt.Errorf("%s did not finish within --timeout=%s; raise it, or --timeout=0 for no limit (a pod whose claims' selectors are slow to evaluate takes longer). Stopped at: %w", what, d.timeout, err)
	}
	return err
}

// printText writes the report for people.
func printText(out io.Writer, r *explain.Report) error {
	var b strings.Builder
	if r.Kueue != nil {
		b.WriteString(admissionText(r.Kueue) + "\n")
	}
	switch {
	case r.Node != "":
		fmt.Fprintf(&b, "Pod %s is bound to node %s.\n", r.Pod, r.Node)
		for _, p := range r.Placement {
			fmt.Fprintf(&b, "  claim %s, request %s: %s/%s/%s\n", p.Claim, p.Request, p.Driver, p.Pool, p.Device)
		}
	case len(r.Problems) > 0:
		fmt.Fprintf(&b, "Pod %s cannot be placed on any node:\n", r.Pod)
		for _, p := range r.Problems {
			fmt.Fprintf(&b, "  %s\n", p)
		}
	default:
		fits := 0
		for _, n := range r.Nodes {
			if n.Fits {
				fits++
			}
		}
		fmt.Fprintf(&b, "Pod %s is not bound; its claims fit on %d of %d nodes now.\n", r.Pod, fits, len(r.Nodes))
		for _, n := range r.Nodes {
			if n.Fits {
				var devices []string
				for _, d := range n.Devices {
					devices = append(devices, d.Device)
				}
				fmt.Fprintf(&b, "%s: fits (%s)\n", n.Node, strings.Join(devices, ", "))
				continue
			}
			fmt.Fprintf(&b, "%s:\n", n.Node)
			for _, reason := range n.Reasons {
				fmt.Fprintf(&b, "  %s\n", reason.Message)
				for _, h := range reason.HeldBy {
					who := "pod " + h.Pod
					if h.Pod == "" {
						who = "no pod"
					}
					fmt.Fprintf(&b, "    %d held by %s (claims %s)\n", h.Frees, who, strings.Join(h.Claims, ", "))
				}
			}
			for _, s := range n.Suggestions {
				fmt.Fprintf(&b, "  -> %s\n", s)
			}
		}
	}
	_, err := io.WriteString(out, b.String())
	return err
}
