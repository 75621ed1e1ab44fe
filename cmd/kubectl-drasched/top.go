package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/pkg/capacity"
	"github.com/drasched/drasched/pkg/capacity/fit"
)

// profileFlags name the scheduler configuration whose StructuredDRA
// arguments top and fit use.
type profileFlags struct {
	config, profile string
}

func (f *profileFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.config, "scheduler-config", "", "drasched's KubeSchedulerConfiguration file (such as config/scheduler-config.yaml): its allocation policy, topology attributes and scoring")
	cmd.Flags().StringVar(&f.profile, "profile", "", "the profile (schedulerName) of --scheduler-config; default drasched or the only one")
}

func newTopCommand(flags *genericclioptions.ConfigFlags, out io.Writer) *cobra.Command {
	var (
		selector, node, class, sortBy, output, source, partitionAttr string
		topology                                                     []string
		profile                                                      profileFlags
	)
	cmd := &cobra.Command{
		Use:   "top [nodes|pools|classes]",
		Short: "DRA devices per node, pool or DeviceClass: total, allocated, available, unavailable (read-only)",
		Long: `top counts the DRA devices of each node (the default), resource pool or
DeviceClass: total, allocated, available and unavailable (tainted
NoSchedule or NoExecute: failing or drained), with the definitions of
KEP-5677's ResourcePoolStatusRequest. -o wide adds partitionable devices
(counter sets, such as MIG GPUs, wholly free, partly used or full; free
partitions per type), shared devices (their free capacity) and, for nodes,
topology groups wholly free (--topology-attribute, or the profile's
allocation.topologyAttributes from --scheduler-config).

--source=api asks kube-controller-manager instead (resource.k8s.io/v1alpha3
ResourcePoolStatusRequest, feature gate DRAResourcePoolStatus): it creates
one request per driver, reads the answer and deletes it.`,
		Example: `  kubectl drasched top
  kubectl drasched top nodes -l gpu.drasched.dev/inventory=h100-hgx-8 --sort-by available -o wide
  kubectl drasched top pools --class mig.gpu.drasched.dev --partition-attribute gpu.drasched.dev/profile
  kubectl drasched top classes -o json
  kubectl drasched top pools --source api`,
		Args:      cobra.MaximumNArgs(1),
		ValidArgs: []string{"nodes", "pools", "classes"},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := capacity.Options{View: capacity.ViewNodes, Node: node, Class: class, PartitionAttribute: partitionAttr}
			if len(args) == 1 {
				switch v := capacity.View(args[0]); v {
				case capacity.ViewNodes, capacity.ViewPools, capacity.ViewClasses:
					opts.View = v
				default:
					return fmt.Errorf("top %s: want nodes, pools or classes", args[0])
				}
			}
			if err := checkOutput(output, "wide", "json"); err != nil {
				return err
			}
			if !slices.Contains([]string{"", "name", "total", "allocated", "available", "unavailable"}, sortBy) {
				return fmt.Errorf("--sort-by %q: want name, total, allocated, available or unavailable", sortBy)
			}
			if selector != "" {
				sel, err := labels.Parse(selector)
				if err != nil {
					return fmt.Errorf("--selector: %w", err)
				}
				opts.Selector = sel
			}
			if profile.config != "" {
				profileArgs, err := fit.ProfileArgs(profile.config, profile.profile)
				if err != nil {
					return err
				}
				opts.TopologyAttributes = profileArgs.Allocation.TopologyAttributes
			}
			for _, t := range topology {
				opts.TopologyAttributes = append(opts.TopologyAttributes, resourceapi.FullyQualifiedName(t))
			}
			client, err := newClient(flags)
			if err != nil {
				return err
			}
			var report *capacity.Report
			switch source {
			case "cluster":
				snap, err := capacity.Read(cmd.Context(), client, capacity.ReadOptions{})
				if err != nil {
					return err
				}
				report, err = capacity.Top(cmd.Context(), snap, opts)
				if err != nil {
					return err
				}
			case "api":
				report, err = capacity.TopFromAPI(cmd.Context(), client, opts, capacity.APIOptions{PartitionAttribute: partitionAttr})
				if err != nil {
					return err
				}
			default:
				return fmt.Errorf("--source %q: want cluster or api", source)
			}
			sortReport(report, sortBy)
			if output == "json" {
				return writeJSON(out, report)
			}
			if err := printTop(out, report, opts.View, output == "wide"); err != nil {
				return err
			}
			for _, n := range report.Notes {
				_, _ = fmt.Fprintln(cmd.ErrOrStderr(), "Note:", n)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "only nodes with these labels (and their devices and pools), e.g. -l gpu.drasched.dev/inventory=h100-hgx-8")
	cmd.Flags().StringVar(&node, "node", "", "only this node, its devices and pools")
	cmd.Flags().StringVar(&class, "class", "", "only the devices this DeviceClass matches")
	cmd.Flags().StringVar(&sortBy, "sort-by", "", "sort rows by name (default), total, allocated, available or unavailable (numbers: most first)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: wide or json")
	cmd.Flags().StringVar(&source, "source", "cluster", "cluster: count from the objects (needs only read access); api: ask kube-controller-manager's ResourcePoolStatusRequest controller")
	cmd.Flags().StringVar(&partitionAttr, "partition-attribute", "", "the attribute whose value is a partitionable device's partition type where its slice names none (defaultPartitionTypeAttribute), e.g. gpu.drasched.dev/profile")
	cmd.Flags().StringArrayVar(&topology, "topology-attribute", nil, "a device attribute that groups devices (repeatable, most important first), e.g. resource.kubernetes.io/pcieRoot")
	profile.add(cmd)
	return cmd
}

func newClient(flags *genericclioptions.ConfigFlags) (kubernetes.Interface, error) {
	config, err := flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(config)
}

func checkOutput(output string, allowed ...string) error {
	if output == "" || slices.Contains(allowed, output) {
		return nil
	}
	return fmt.Errorf("--output %q: want %s", output, strings.Join(allowed, " or "))
}

func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// sortReport orders the rows by a column, numbers most first, then by
// name.
func sortReport(r *capacity.Report, by string) {
	key := func(c capacity.Counts) int32 {
		switch by {
		case "total":
			return c.Total
		case "allocated":
			return c.Allocated
		case "available":
			return c.Available
		case "unavailable":
			return c.Unavailable
		}
		return 0
	}
	slices.SortStableFunc(r.Nodes, func(a, b capacity.Node) int {
		return cmp.Or(cmp.Compare(key(b.Counts), key(a.Counts)), cmp.Compare(a.Name, b.Name))
	})
	slices.SortStableFunc(r.Classes, func(a, b capacity.Class) int {
		return cmp.Or(cmp.Compare(key(b.Counts), key(a.Counts)), cmp.Compare(a.Name, b.Name))
	})
	poolKey := func(p capacity.Pool) int32 {
		if p.Counts == nil {
			return -1
		}
		return key(*p.Counts)
	}
	slices.SortStableFunc(r.Pools, func(a, b capacity.Pool) int {
		return cmp.Or(cmp.Compare(poolKey(b), poolKey(a)), cmp.Compare(a.Name, b.Name))
	})
}

// printTop writes the report as a table.
func printTop(out io.Writer, r *capacity.Report, view capacity.View, wide bool) error {
	w := printers.GetNewTabWriter(out)
	row := func(cells ...string) { _, _ = fmt.Fprintln(w, strings.Join(cells, "\t")) }
	counts := func(c *capacity.Counts) []string {
		if c == nil {
			return []string{"-", "-", "-", "-"}
		}
		return []string{fmt.Sprint(c.Total), fmt.Sprint(c.Allocated), fmt.Sprint(c.Available), fmt.Sprint(c.Unavailable)}
	}
	header := []string{"TOTAL", "ALLOCATED", "AVAILABLE", "UNAVAILABLE"}
	switch view {
	case capacity.ViewPools:
		h := append([]string{"POOL", "NODE"}, header...)
		if wide {
			h = append(h, "SLICES", "GENERATION", "GPUS(FREE/PARTIAL/FULL)", "PARTITIONS(FREE/TOTAL)", "SHARED(FREE/TOTAL)", "ERROR")
		}
		row(h...)
		for _, p := range r.Pools {
			cells := append([]string{p.Name, dash(ptr.Deref(p.Status.NodeName, ""))}, counts(p.Counts)...)
			if wide {
				cells = append(cells, fmt.Sprint(ptr.Deref(p.Status.ResourceSliceCount, 0)), fmt.Sprint(p.Status.Generation),
					counterSets(p.CounterSets), partitions(p.Partitions), shared(p.SharedDevices), dash(ptr.Deref(p.Status.ValidationError, "")))
			}
			row(cells...)
		}
	case capacity.ViewClasses:
		h := append([]string{"CLASS"}, header...)
		if wide {
			h = append(h, "PARTITIONS(FREE/TOTAL)", "SHARED(FREE/TOTAL)", "ERRORS")
		}
		row(h...)
		for _, c := range r.Classes {
			cells := append([]string{c.Name}, counts(&c.Counts)...)
			if wide {
				cells = append(cells, partitions(c.Partitions), shared(c.SharedDevices), dash(strings.Join(c.Errors, "; ")))
			}
			row(cells...)
		}
	default:
		h := append([]string{"NODE"}, header...)
		if wide {
			h = append(h, "GPUS(FREE/PARTIAL/FULL)", "PARTITIONS(FREE/TOTAL)", "SHARED(FREE/TOTAL)", "WHOLE GROUPS", "POOLS")
		}
		row(h...)
		for _, n := range r.Nodes {
			c := n.Counts
			cells := append([]string{n.Name}, counts(&c)...)
			if wide {
				pools := strings.Join(n.Pools, ",")
				if len(n.Incomplete) > 0 {
					pools += " (incomplete: " + strings.Join(n.Incomplete, ",") + ")"
				}
				cells = append(cells, counterSets(n.CounterSets), partitions(n.Partitions), shared(n.SharedDevices), topology(n.Topology), dash(pools))
			}
			row(cells...)
		}
	}
	return w.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func counterSets(c *capacity.CounterSets) string {
	if c == nil {
		return "-"
	}
	return fmt.Sprintf("%d/%d/%d", c.Free, c.Partial, c.Full)
}

func partitions(ps []capacity.Partition) string {
	var parts []string
	for _, p := range ps {
		parts = append(parts, fmt.Sprintf("%s %d/%d", p.Type, p.Free, p.Total))
	}
	return dash(strings.Join(parts, ","))
}

// shared sums the free and total capacity of the shared devices, per
// capacity.
func shared(devices []capacity.SharedDevice) string {
	var names []string
	free := map[string]*capacity.SharedCapacity{}
	for _, d := range devices {
		for _, c := range d.Capacity {
			s := free[c.Name]
			if s == nil {
				s = &capacity.SharedCapacity{Name: c.Name}
				free[c.Name] = s
				names = append(names, c.Name)
			}
			s.Free.Add(c.Free)
			s.Total.Add(c.Total)
		}
	}
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %s/%s", n, free[n].Free.String(), free[n].Total.String()))
	}
	if len(devices) == 0 {
		return "-"
	}
	return fmt.Sprintf("%d devices: %s", len(devices), strings.Join(parts, ","))
}

// topology shows, per level, the wholly free groups of all.
func topology(levels []capacity.Topology) string {
	var parts []string
	for _, t := range levels {
		parts = append(parts, fmt.Sprintf("%s %d/%d", path.Base(string(t.Attribute)), t.Whole, t.Groups))
	}
	return dash(strings.Join(parts, ","))
}
