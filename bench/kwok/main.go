// Command kwok is the Go half of the kwok end-to-end benchmark
// (hack/bench-kwok.sh runs it, once per scheduler, each time against a
// fresh kwok cluster):
//
//	kwok nodes             creates the GPU nodes (a mix of H100, L40S and
//	                       A100 MIG nodes, 8 GPUs each, ResourceSlices built
//	                       by pkg/driver/gpu) and waits until they are ready
//	kwok warm              grows the API server's pod watch cache to what a
//	                       busy cluster's has, before the scheduler starts
//	                       (warm.go)
//	kwok scheduler-config  writes the configuration of upstream's
//	                       kube-scheduler or of drasched for the cluster,
//	                       both with the same schedulerName and client QPS
//	kwok run               runs the workloads (fill, churn, match, mig,
//	                       preempt, fragmentation, fragmentation_mig, gang,
//	                       preempt_gang, queue; or those of --cases) against the
//	                       scheduler, measures pods/s and creation → bound
//	                       latencies, or what the churns leave whole, checks
//	                       every allocation after each, and writes the
//	                       run's file
//	kwok report            turns the runs of the schedulers into the
//	                       suite file of bench/internal/results
//	kwok cases             lists the cases (--generic-workload: those
//	                       that need the GenericWorkload feature gate)
//	kwok timeline LOG      where the preempt case's preemptors spent their
//	                       time, from the scheduler's log at -v=3
//	                       (timeline.go)
//
// Latencies are measured client-side: from just before the pod's Create
// call to the first watch event with spec.nodeName set.
//
// The gang case (gang.go) creates PodGroups (scheduling.k8s.io/v1beta1)
// with gang policy, minCount the group's size: groups of 4 pods × 8 H100
// GPUs and of 8 pods × 4 GPUs, 80% of the H100 GPUs (--gang-fraction), all
// at once, each PodGroup just before its pods. Besides pods/s and pod
// latencies it measures, per group, creation of the PodGroup → bind of its
// last pod, and counts the groups left partly bound once binds have
// settled. The preempt_gang case (preemptgang.go) is preempt with
// high-priority gangs of 2 pods × 4 GPUs as the preemptors. Their clusters
// need the GenericWorkload feature gate in the control plane and the
// scheduler and the scheduling.k8s.io/v1beta1 API; hack/bench-kwok.sh gives
// the two cases (kwok cases --generic-workload) a cluster of their own with
// them, and the other cases clusters without them.
//
// The queue case (queue.go) runs Kueue (internal/kueue, from its chart with
// hack/kueue/values.yaml) while it runs: batch/v1 Jobs from two teams'
// LocalQueues, whose ClusterQueues share a cohort, admitted by Kueue, their
// pods created by the Job controller. It measures, per Job, its creation
// → the bind of its last pod, and the time until the last Job's pods are
// all bound.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/drasched/drasched/bench/internal/results"
	"github.com/drasched/drasched/internal/kwokcluster"
	"github.com/drasched/drasched/pkg/driver/gpu/device"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := newCommand().ExecuteContext(ctx)
	stop()
	if err != nil {
		_, _ = fmt.Fprintln(os.Stderr, "kwok:", err)
		os.Exit(1)
	}
}

// Defaults shared by the schedulers and the benchmark's own client.
const (
	defaultSchedulerName = "bench"
	defaultNamespace     = "bench"
	// defaultQPS and defaultBurst are the client QPS of both schedulers
	// and of the benchmark: high, so that client-side rate limits do not
	// decide the result.
	defaultQPS   = 5000
	defaultBurst = 5000
)

func newCommand() *cobra.Command {
	var kubeconfig string
	qps, burst := float32(defaultQPS), defaultBurst
	client := func() (kubernetes.Interface, error) {
		return kwokcluster.NewClient(kubeconfig, "drasched-kwok-bench", qps, burst)
	}
	// restConfig is the cluster's configuration as client's, for Kueue.
	restConfig := func() (*rest.Config, error) {
		if kubeconfig == "" {
			return nil, errors.New("--kubeconfig is required")
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, err
		}
		cfg.UserAgent, cfg.QPS, cfg.Burst = "drasched-kwok-bench", qps, burst
		return cfg, nil
	}
	root := &cobra.Command{
		Use:           "kwok",
		Short:         "The kwok end-to-end benchmark: GPU nodes, scheduler configurations, workloads, report",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&kubeconfig, "kubeconfig", "", "Kubeconfig of the kwok cluster.")
	root.PersistentFlags().Float32Var(&qps, "qps", qps, "Client QPS of the benchmark and of both schedulers.")
	root.PersistentFlags().IntVar(&burst, "burst", burst, "Client burst of the benchmark and of both schedulers.")
	root.AddCommand(
		newNodesCommand(client),
		newWarmCommand(client),
		newSchedulerConfigCommand(&kubeconfig, &qps, &burst),
		newRunCommand(client, restConfig),
		newReportCommand(),
		newCasesCommand(),
		newTimelineCommand(),
	)
	return root
}

// newCasesCommand lists the cases, for hack/bench-kwok.sh: it runs the
// cases with PodGroups (--generic-workload) on a cluster of their own.
func newCasesCommand() *cobra.Command {
	workload := false
	cmd := &cobra.Command{
		Use:   "cases",
		Short: "List the cases of kwok run, one a line, in the order in which it runs them",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			names := caseNames
			if workload {
				names = workloadCases
			}
			for _, name := range names {
				_, _ = fmt.Fprintln(cmd.OutOrStdout(), name)
			}
		},
	}
	cmd.Flags().BoolVar(&workload, "generic-workload", workload, "Only the cases with PodGroups, which need the GenericWorkload feature gate and the scheduling.k8s.io/v1beta1 API.")
	return cmd
}

func newNodesCommand(client func() (kubernetes.Interface, error)) *cobra.Command {
	nodes, workers := 1000, 16
	timeout := 5 * time.Minute
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "Create the GPU nodes and wait until they are ready",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			names, err := createNodes(cmd.Context(), c, cmd.OutOrStdout(), nodeMix(nodes), workers)
			if err != nil {
				return err
			}
			return kwokcluster.WaitNodes(cmd.Context(), c, cmd.OutOrStdout(), names, kwokcluster.WaitOptions{
				Timeout: timeout, Settle: time.Second, Interval: time.Second, ShowWaiting: 3,
			})
		},
	}
	cmd.Flags().IntVar(&nodes, "nodes", nodes, "How many nodes (a tenth each L40S and A100 MIG nodes, the rest H100 nodes).")
	cmd.Flags().IntVar(&workers, "workers", workers, "Nodes created in parallel.")
	cmd.Flags().DurationVar(&timeout, "timeout", timeout, "How long to wait for the nodes.")
	return cmd
}

// createNodes creates the nodes of the mix, in parallel, and returns their
// names. Inventories are paths relative to the working directory.
func createNodes(ctx context.Context, client kubernetes.Interface, out io.Writer, mix map[string]int, workers int) ([]string, error) {
	type node struct{ name, kind string }
	var nodes []node
	devices := map[string][]device.GPU{}
	for _, kind := range []string{kindH100, kindL40S, kindA100} {
		if mix[kind] == 0 {
			continue
		}
		gpus, err := kwokcluster.Discover(ctx, inventories[kind])
		if err != nil {
			return nil, err
		}
		devices[kind] = gpus
		for i := range mix[kind] {
			nodes = append(nodes, node{nodeName(kind, i), kind})
		}
	}
	start := time.Now()
	var mutex sync.Mutex
	created := 0 // slices, guarded by mutex
	err := parallelize(ctx, workers, nodes, "nodes not created", func(n node) error {
		obj := kwokcluster.NodeObject(n.name, inventories[n.kind], slicesFrom)
		count, err := kwokcluster.CreateNode(ctx, client, obj, kwokcluster.NodeGPUs(devices[n.kind], n.name))
		mutex.Lock()
		defer mutex.Unlock()
		created += count
		return err
	})
	if err != nil {
		return nil, err
	}
	_, _ = fmt.Fprintf(out, "    %d nodes (%d H100, %d L40S, %d A100 MIG) with %d ResourceSlices created in %.1f s\n",
		len(nodes), mix[kindH100], mix[kindL40S], mix[kindA100], created, time.Since(start).Seconds())
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.name
	}
	return names, nil
}

// slicesFrom is the kwokcluster.SlicesFromLabel of the nodes: this
// program publishes their slices.
const slicesFrom = "drasched-kwok-bench"

// upstreamConfig is the configuration of upstream's kube-scheduler: one
// profile with the default plugins, DynamicResources among them.
const upstreamConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
`

func newSchedulerConfigCommand(kubeconfig *string, qps *float32, burst *int) *cobra.Command {
	scheduler, in, out, schedulerName, policy := "", "config/scheduler-config.yaml", "", defaultSchedulerName, ""
	defaultSpreading := true
	cmd := &cobra.Command{
		Use:   "scheduler-config",
		Short: "Write the configuration of upstream's kube-scheduler or of drasched for the cluster",
		Long: `scheduler-config writes a KubeSchedulerConfiguration for the cluster: for
upstream, one profile with kube-scheduler's default plugins; for drasched, the
profile of --in (config/scheduler-config.yaml), with --allocation-policy as
StructuredDRA's allocation policy if given. Both get the same schedulerName,
client QPS and burst, and the cluster's kubeconfig. --default-spreading=false
turns PodTopologySpread's system default constraints off in either
(defaultingType: List), which opportunistic batching needs.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if *kubeconfig == "" || out == "" {
				return errors.New("--kubeconfig and --out are required")
			}
			data, err := schedulerConfig(scheduler, in, policy, !defaultSpreading, *kubeconfig, schedulerName, *qps, int32(*burst))
			if err != nil {
				return err
			}
			return os.WriteFile(out, data, 0o600)
		},
	}
	cmd.Flags().StringVar(&scheduler, "scheduler", scheduler, "upstream or drasched.")
	cmd.Flags().StringVar(&in, "in", in, "drasched's shipped configuration.")
	cmd.Flags().StringVar(&out, "out", out, "Where to write the configuration.")
	cmd.Flags().StringVar(&schedulerName, "scheduler-name", schedulerName, "The schedulerName of the profile, which the pods name.")
	cmd.Flags().StringVar(&policy, "allocation-policy", policy, "drasched only: StructuredDRA's allocation policy (FirstFit or BestFit); the configuration's if empty.")
	cmd.Flags().BoolVar(&defaultSpreading, "default-spreading", defaultSpreading, "Keep PodTopologySpread's system default constraints; false sets its defaultingType to List without constraints, so that pods can be batched.")
	return cmd
}

// schedulerConfig returns the configuration of a scheduler for the
// cluster; for drasched with policy, if not empty, as StructuredDRA's
// allocation policy; with noDefaultSpreading, without PodTopologySpread's
// system default constraints.
func schedulerConfig(scheduler, draschedConfig, policy string, noDefaultSpreading bool, kubeconfig, schedulerName string, qps float32, burst int32) ([]byte, error) {
	var in []byte
	what := scheduler
	switch scheduler {
	case upstream:
		if policy != "" {
			return nil, fmt.Errorf("--allocation-policy %s: upstream has no allocation policy", policy)
		}
		in = []byte(upstreamConfig)
	case drasched:
		var err error
		if in, err = os.ReadFile(draschedConfig); err != nil {
			return nil, err
		}
		if policy != "" {
			if in, err = withAllocationPolicy(in, policy); err != nil {
				return nil, fmt.Errorf("%s: %w", draschedConfig, err)
			}
			what += " with allocation policy " + policy
		}
	default:
		return nil, fmt.Errorf("--scheduler %q: want %s or %s", scheduler, upstream, drasched)
	}
	if noDefaultSpreading {
		var err error
		if in, err = withoutDefaultSpreading(in); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		what += " without PodTopologySpread's default constraints"
	}
	return kwokcluster.SchedulerConfig(in, kwokcluster.SchedulerOverrides{
		Kubeconfig: kubeconfig, SchedulerName: schedulerName, QPS: qps, Burst: burst,
		Header: []string{fmt.Sprintf("Generated by bench/kwok for %s on a kwok benchmark cluster.", what)},
	})
}

// structuredDRA is the name of drasched's plugin in a profile's
// pluginConfig.
const structuredDRA = "StructuredDRA"

// withAllocationPolicy sets allocation.policy in the StructuredDRA args of
// a configuration's only profile (adding the args if it has none) and
// leaves the rest as it is. The scheduler validates the policy when it
// loads the configuration.
func withAllocationPolicy(in []byte, policy string) ([]byte, error) {
	return editPluginArgs(in, structuredDRA, "StructuredDRAArgs", func(args map[string]any) error {
		allocation := map[string]any{}
		if existing, ok := args["allocation"]; ok {
			if allocation, ok = existing.(map[string]any); !ok {
				return fmt.Errorf("StructuredDRA allocation is a %T, not a mapping", existing)
			}
		}
		allocation["policy"] = policy
		args["allocation"] = allocation
		return nil
	})
}

// podTopologySpread is the name of kube-scheduler's PodTopologySpread
// plugin in a profile's pluginConfig.
const podTopologySpread = "PodTopologySpread"

// withoutDefaultSpreading sets PodTopologySpread's defaultingType to List,
// without default constraints, in a configuration's only profile. With
// kube-scheduler's system default constraints, PodTopologySpread refuses to
// sign any pod, so opportunistic batching batches none.
func withoutDefaultSpreading(in []byte) ([]byte, error) {
	return editPluginArgs(in, podTopologySpread, "PodTopologySpreadArgs", func(args map[string]any) error {
		args["defaultingType"] = "List"
		delete(args, "defaultConstraints")
		return nil
	})
}

// editPluginArgs changes the args of one plugin in a configuration's only
// profile, adding a pluginConfig entry with args of the kind if there is
// none, and leaves the rest as it is.
func editPluginArgs(in []byte, plugin, kind string, edit func(args map[string]any) error) ([]byte, error) {
	var cfg map[string]any
	if err := yaml.UnmarshalStrict(in, &cfg); err != nil {
		return nil, err
	}
	profiles, ok := cfg["profiles"].([]any)
	if !ok || len(profiles) != 1 {
		return nil, fmt.Errorf("want exactly one profile, got %v", cfg["profiles"])
	}
	profile, ok := profiles[0].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("profile is a %T, not a mapping", profiles[0])
	}
	var pluginConfig []any
	if existing, ok := profile["pluginConfig"]; ok {
		if pluginConfig, ok = existing.([]any); !ok {
			return nil, fmt.Errorf("pluginConfig is a %T, not a list", existing)
		}
	}
	var args map[string]any
	for _, pc := range pluginConfig {
		if m, ok := pc.(map[string]any); ok && m["name"] == plugin {
			if args, ok = m["args"].(map[string]any); !ok {
				args = map[string]any{}
				m["args"] = args
			}
		}
	}
	if args == nil {
		args = map[string]any{}
		pluginConfig = append(pluginConfig, map[string]any{"name": plugin, "args": args})
		profile["pluginConfig"] = pluginConfig
	}
	if _, ok := args["apiVersion"]; !ok {
		args["apiVersion"], args["kind"] = "kubescheduler.config.k8s.io/v1", kind
	}
	if err := edit(args); err != nil {
		return nil, err
	}
	return yaml.Marshal(cfg)
}

// perPodNodes is the cluster size up to which a run's timeout allows
// PerPod for each pod; on n times as many nodes, n times that.
const perPodNodes = 1000

func newRunCommand(client func() (kubernetes.Interface, error), restConfig func() (*rest.Config, error)) *cobra.Command {
	cfg := runConfig{
		Namespace:     defaultNamespace,
		SchedulerName: defaultSchedulerName,
		DeviceClasses: "config/gpu-driver/deviceclasses.yaml",
		Fraction:      0.9,
		ChurnBase:     0.3,
		ChurnRate:     10,
		ChurnDuration: time.Minute,
		ChurnLifetime: 5 * time.Second,
		PreemptShare:  0.25,
		PreemptWait:   time.Minute,
		GangFraction:  0.8,
		FragSeed:      1,
		FragUse:       0.7,
		FragSteps:     24,
		FragLifetime:  8,
		FragInterval:  500 * time.Millisecond,
		FragStall:     5 * time.Second,
		FragLargeWait: 30 * time.Second,
		KueueDir:      "_output/bench/kwok/kueue",
		Workers:       16,
		Timeout:       time.Minute,
		PerPod:        200 * time.Millisecond,
	}
	scheduler, variant, out := "", "", ""
	run := 1
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the workloads against the cluster's scheduler and write the measurements",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if scheduler == "" || out == "" {
				return errors.New("--scheduler and --out are required")
			}
			if err := checkVariant(variant); err != nil {
				return err
			}
			c, err := client()
			if err != nil {
				return err
			}
			rc, err := restConfig()
			if err != nil {
				return err
			}
			mix, err := countNodes(cmd.Context(), c)
			if err != nil {
				return err
			}
			// Upstream schedules pods more slowly on a larger cluster:
			// a pod's share of the timeout grows with the nodes.
			nodes := 0
			for _, n := range mix {
				nodes += n
			}
			cfg.PerPod *= time.Duration(max(1, nodes/perPodNodes))
			r := &runner{client: c, restConfig: rc, cfg: cfg, out: cmd.OutOrStdout(), tracker: newTracker(time.Now)}
			if cfg.SchedulerPID != 0 {
				r.cost = &costMeter{pid: cfg.SchedulerPID, procRoot: "/proc"}
			}
			cases, runErr := r.run(cmd.Context())
			result := runResult{
				Scheduler: scheduler, Variant: variant, Run: run, NodeMix: mix, FillPods: cfg.FillPods,
				Fraction: cfg.Fraction, ChurnBase: cfg.ChurnBase, ChurnRate: cfg.ChurnRate, ChurnLifetimeSeconds: cfg.ChurnLifetime.Seconds(),
				PreemptShare: cfg.PreemptShare, PreemptWaitSeconds: cfg.PreemptWait.Seconds(),
				Cases: cases,
			}
			if slices.ContainsFunc(cases, func(c caseResult) bool { return c.Name == caseGang }) {
				result.GangFraction = cfg.GangFraction
			}
			if slices.ContainsFunc(cases, func(c caseResult) bool { return fragmentationCase(c.Name) }) {
				result.FragSeed, result.FragUse, result.FragSteps, result.FragLifetimeSteps = cfg.FragSeed, cfg.FragUse, cfg.FragSteps, cfg.FragLifetime
				result.FragIntervalSeconds, result.FragLargeWaitSeconds = cfg.FragInterval.Seconds(), cfg.FragLargeWait.Seconds()
			}
			result.Nodes = nodes
			if len(cases) > 0 {
				if err := writeJSON(out, result); err != nil {
					return errors.Join(runErr, err)
				}
			}
			return runErr
		},
	}
	cmd.Flags().StringVar(&scheduler, "scheduler", scheduler, "Which scheduler runs (upstream, drasched or drasched-bestfit), for the results.")
	cmd.Flags().IntVar(&run, "run", run, "Which run this is, for the results.")
	cmd.Flags().StringVar(&variant, "variant", variant, "How the scheduler differs from its defaults, for the results: "+variantPQH+" (feature gate SchedulerPreQueueingHints on), "+variantBatch+" (no default topology spreading), both joined by +, or empty.")
	cmd.Flags().IntVar(&cfg.SchedulerPID, "scheduler-pid", cfg.SchedulerPID, "The scheduler's process: the cost cases measure its CPU time and peak RSS (0: none).")
	cmd.Flags().IntVar(&cfg.FillPods, "fill-pods", cfg.FillPods, "The most pods of fill, noclaims and churn's base (0: as many as their fraction gives).")
	cmd.Flags().StringVar(&out, "out", out, "Where to write the measurements (JSON).")
	cmd.Flags().StringVar(&cfg.SchedulerName, "scheduler-name", cfg.SchedulerName, "The schedulerName of the pods.")
	cmd.Flags().StringVar(&cfg.DeviceClasses, "device-classes", cfg.DeviceClasses, "YAML file with the GPU driver's DeviceClasses.")
	cmd.Flags().Float64Var(&cfg.Fraction, "fraction", cfg.Fraction, "Fraction of the devices that fill, match and mig take.")
	cmd.Flags().Float64Var(&cfg.ChurnBase, "churn-base", cfg.ChurnBase, "Fraction of the H100 GPUs taken before churn starts.")
	cmd.Flags().Float64Var(&cfg.ChurnRate, "churn-rate", cfg.ChurnRate, "Pods per second that churn creates.")
	cmd.Flags().DurationVar(&cfg.ChurnDuration, "churn-duration", cfg.ChurnDuration, "How long churn creates pods.")
	cmd.Flags().DurationVar(&cfg.ChurnLifetime, "churn-lifetime", cfg.ChurnLifetime, "How long after binding churn deletes a pod.")
	cmd.Flags().Float64Var(&cfg.PreemptShare, "preempt-share", cfg.PreemptShare, "Share of the H100 GPUs that preempt's high-priority pods ask for.")
	cmd.Flags().DurationVar(&cfg.PreemptWait, "preempt-wait", cfg.PreemptWait, "The longest preempt waits for its high-priority pods to be bound.")
	cmd.Flags().Float64Var(&cfg.GangFraction, "gang-fraction", cfg.GangFraction, "Share of the H100 GPUs that the gang case's groups take.")
	cmd.Flags().StringSliceVar(&cfg.Cases, "cases", cfg.Cases, "The cases to run (default all: "+strings.Join(caseNames, ", ")+").")
	cmd.Flags().Uint64Var(&cfg.FragSeed, "frag-seed", cfg.FragSeed, "Seed of the fragmentation churns' sequence of pods.")
	cmd.Flags().Float64Var(&cfg.FragUse, "frag-use", cfg.FragUse, "Share of the devices that the fragmentation churns keep requested.")
	cmd.Flags().IntVar(&cfg.FragSteps, "frag-steps", cfg.FragSteps, "Steps of the fragmentation churns after the initial fill.")
	cmd.Flags().IntVar(&cfg.FragLifetime, "frag-lifetime", cfg.FragLifetime, "Average lifetime of a fragmentation churn pod, in steps.")
	cmd.Flags().DurationVar(&cfg.FragInterval, "frag-interval", cfg.FragInterval, "Shortest time between the starts of two fragmentation steps.")
	cmd.Flags().DurationVar(&cfg.FragLargeWait, "frag-large-wait", cfg.FragLargeWait, "The longest the fragmentation cases wait for their large pods.")
	cmd.Flags().StringVar(&cfg.KueueDir, "kueue-dir", cfg.KueueDir, "Where the queue case puts the files of Kueue's manager (configuration, certificates, log).")
	cmd.Flags().IntVar(&cfg.Workers, "workers", cfg.Workers, "Pods (Jobs) created in parallel.")
	return cmd
}

// countNodes counts the cluster's nodes by kind, from their inventory
// label.
func countNodes(ctx context.Context, client kubernetes.Interface) (map[string]int, error) {
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	kindOf := map[string]string{}
	for kind, inventory := range inventories {
		kindOf[kwokcluster.InventoryName(inventory)] = kind
	}
	mix := map[string]int{}
	for _, n := range list.Items {
		if kind, ok := kindOf[n.Labels[kwokcluster.InventoryLabel]]; ok {
			mix[kind]++
		}
	}
	return mix, nil
}

func newReportCommand() *cobra.Command {
	out, command := "", ""
	var seconds float64
	cmd := &cobra.Command{
		Use:   "report RUN.json...",
		Short: "Write the suite file of the results format from the runs of both schedulers",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(_ *cobra.Command, args []string) error {
			if out == "" {
				return errors.New("--out is required")
			}
			var runs []runResult
			for _, path := range args {
				r, err := readRun(path)
				if err != nil {
					return err
				}
				runs = append(runs, r)
			}
			f, err := suiteFile(runs, command, seconds)
			if err != nil {
				return err
			}
			return results.Write(out, f)
		},
	}
	cmd.Flags().StringVar(&out, "out", out, "The suite file to write.")
	cmd.Flags().StringVar(&command, "command", command, "The command that reproduces the figures.")
	cmd.Flags().Float64Var(&seconds, "seconds", seconds, "How long the suite ran.")
	return cmd
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
