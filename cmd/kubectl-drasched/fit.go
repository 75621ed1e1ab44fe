package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/drasched/drasched/pkg/capacity"
	"github.com/drasched/drasched/pkg/capacity/fit"
)

func newFitCommand(flags *genericclioptions.ConfigFlags, out io.Writer) *cobra.Command {
	var (
		file, selector, node, output string
		count                        int
		profile                      profileFlags
		queue                        kueueFlags
		limit                        deadline
	)
	cmd := &cobra.Command{
		Use:   "fit -f FILE [--count N]",
		Short: "How many more pods like these fit now, and where, as drasched would place them (read-only)",
		Long: `fit places copies of the pod of FILE one after another on the cluster as it
is now, as drasched would: the claims of each copy are allocated with
drasched's allocator (the profile's allocation policy, from
--scheduler-config, FirstFit by default), and nodes are ranked by
StructuredDRA's score. It prints how many fit and where, and why the next
does not, node by node, with the allocator's reasons.

FILE (- for stdin) holds a Pod, a PodTemplate, a Deployment, ReplicaSet,
StatefulSet or Job (its pod template), a PodGroup with its pods or with a
workload whose pods are in it (a gang: all of its pods or none), or a
ResourceClaimTemplate alone (a pod with one claim from it), and the
ResourceClaimTemplates they use (others are read from the cluster).
--count defaults to a workload's replicas (a Job's parallelism), or else to
as many as fit. Nothing is created. --timeout bounds the whole command (30s;
0 for no limit): selectors that are slow to evaluate would otherwise keep it
running for as long as they take.

--cluster-queue also says how many more fit in a Kueue ClusterQueue's
nominal quota: the devices of the pods' claims counted as Kueue counts them,
per quota resource by --kueue-mapping, against the quota less what the
queue's status says is in use. The fewer of the two is the answer.`,
		Example: `  kubectl drasched fit -f config/examples/one-gpu.yaml
  kubectl drasched fit -f training-job.yaml --count 16 -o wide
  kubectl drasched fit -f gpu-template.yaml -l gpu.drasched.dev/inventory=h100-hgx-8 --scheduler-config config/scheduler-config.yaml
  kubectl drasched fit -f training-job.yaml --cluster-queue team-a`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return fmt.Errorf("-f FILE is required")
			}
			if count < 0 {
				return fmt.Errorf("--count %d: want 1 or more", count)
			}
			if err := checkOutput(output, "wide", "json"); err != nil {
				return err
			}
			if err := limit.validate(); err != nil {
				return err
			}
			mapping, err := queue.parse(cmd)
			if err != nil {
				return err
			}
			data, err := readFile(file, cmd.InOrStdin())
			if err != nil {
				return err
			}
			// The manifest and the configuration first: their errors do
			// not depend on the cluster.
			if _, err := fit.Load(data, ""); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			args, err := fit.ProfileArgs(profile.config, profile.profile)
			if err != nil {
				return err
			}
			namespace, _, err := flags.ToRawKubeConfigLoader().Namespace()
			if err != nil {
				return err
			}
			w, err := fit.Load(data, namespace)
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			opts := fit.Options{Count: count, Node: node, Args: args, Mapping: mapping}
			if selector != "" {
				if opts.Selector, err = labels.Parse(selector); err != nil {
					return fmt.Errorf("--selector: %w", err)
				}
			}
			client, reader, err := newClients(flags)
			if err != nil {
				return err
			}
			opts.Template = func(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaimTemplate, error) {
				t, err := client.ResourceV1().ResourceClaimTemplates(namespace).Get(ctx, name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return nil, capacity.ErrNotFound
				}
				return t, err
			}
			var res *fit.Result
			if err := limit.run(cmd.Context(), "fit", func(ctx context.Context) error {
				if queue.clusterQueue != "" {
					cq, err := reader.ClusterQueue(ctx, queue.clusterQueue)
					if err != nil {
						return fmt.Errorf("--cluster-queue: %w", err)
					}
					opts.ClusterQueue = cq
				}
				snap, err := capacity.Read(ctx, client, capacity.ReadOptions{Pods: true})
				if err != nil {
					return err
				}
				res, err = fit.Fit(ctx, snap, w, opts)
				return err
			}); err != nil {
				return err
			}
			if output == "json" {
				return writeJSON(out, res)
			}
			return printFit(out, res, output == "wide")
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "the manifest of the pods (- for stdin)")
	cmd.Flags().IntVar(&count, "count", 0, "how many pods (gangs, for a PodGroup) to place; default: a workload's replicas, else as many as fit")
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "only nodes with these labels")
	cmd.Flags().StringVar(&node, "node", "", "only this node")
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: wide (with each pod's devices) or json")
	profile.add(cmd)
	queue.add(cmd)
	limit.add(cmd)
	return cmd
}

func readFile(name string, stdin io.Reader) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(name)
}

// printFit writes the result for people.
func printFit(out io.Writer, r *fit.Result, wide bool) error {
	var b strings.Builder
	unit, units := "pod", "pods"
	if r.PodsPerUnit > 1 {
		unit, units = fmt.Sprintf("gang of %d pods", r.PodsPerUnit), fmt.Sprintf("gangs of %d pods", r.PodsPerUnit)
	}
	switch {
	case r.Requested > 0:
		fmt.Fprintf(&b, "%s: %d of %d %s fit now (allocation policy %s).\n", r.Workload, r.Fits, r.Requested, units, r.Policy)
	case r.Fits == 1:
		fmt.Fprintf(&b, "%s: 1 more %s fits now (allocation policy %s).\n", r.Workload, unit, r.Policy)
	default:
		fmt.Fprintf(&b, "%s: %d more %s fit now (allocation policy %s).\n", r.Workload, r.Fits, units, r.Policy)
	}
	if r.Quota != nil {
		b.WriteString(quotaText(r, unit, units))
	}
	if _, err := io.WriteString(out, b.String()); err != nil {
		return err
	}
	w := printers.GetNewTabWriter(out)
	if wide && len(r.Placements) > 0 {
		_, _ = fmt.Fprintln(w, "POD\tNODE\tDEVICES")
		for _, p := range r.Placements {
			var devices []string
			for _, d := range p.Devices {
				devices = append(devices, d.Pool+"/"+d.Device)
			}
			_, _ = fmt.Fprintf(w, "%s\t%s\t%s\n", p.Pod, p.Node, dash(strings.Join(devices, ",")))
		}
	} else if len(r.Nodes) > 0 {
		_, _ = fmt.Fprintln(w, "NODE\tPODS")
		for _, n := range r.Nodes {
			_, _ = fmt.Fprintf(w, "%s\t%d\n", n.Node, n.Pods)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	b.Reset()
	if u := r.Unplaced; u != nil {
		fmt.Fprintf(&b, "The next %s (%s) fits on no node:\n", unit, u.Pod)
		for _, reason := range u.Reasons {
			nodes := "nodes"
			if reason.Nodes == 1 {
				nodes = "node"
			}
			examples := strings.Join(reason.Examples, ", ")
			if reason.Nodes > len(reason.Examples) {
				examples += ", ..."
			}
			fmt.Fprintf(&b, "  %d %s: %s (%s)\n", reason.Nodes, nodes, reason.Message, examples)
		}
	}
	b.WriteString("Approximations:\n")
	for _, a := range r.Approximations {
		fmt.Fprintf(&b, "  - %s\n", a)
	}
	_, err := io.WriteString(out, b.String())
	return err
}
