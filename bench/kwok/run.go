package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/kwokcluster"
	"github.com/drasched/drasched/internal/manifest"
)

// Case names, in the order in which a run measures them.
const (
	caseFill    = "fill"
	caseChurn   = "churn"
	caseMatch   = "match"
	caseMIG     = "mig"
	casePreempt = "preempt"
	// caseNoClaims is fill's pods without their claims, on the same
	// cluster: what a plain pod costs the scheduler, beside a DRA pod.
	caseNoClaims = "noclaims"
	// caseFragmentation and caseFragmentationMIG: see fragmentation.go;
	// caseGang: see gang.go.
)

var caseNames = []string{caseFill, caseNoClaims, caseChurn, caseMatch, caseMIG, casePreempt, caseFragmentation, caseFragmentationMIG, caseGang}

// costCases are the cases whose scheduler cost (CPU seconds per pod bound,
// peak RSS) a run measures: each runs alone and measures every pod the
// scheduler binds while it runs. The others share their run with pods that
// they do not measure (preempt's low-priority fill) or with another case
// (the fragmentation churns).
var costCases = []string{caseFill, caseNoClaims, caseChurn, caseMatch, caseMIG, caseGang}

// batches groups the cases to run (all if none are named) into what runs
// at once, in the order of caseNames: each case alone, but the
// fragmentation cases together.
func batches(cases []string) ([][]string, error) {
	for _, name := range cases {
		if !slices.Contains(caseNames, name) {
			return nil, fmt.Errorf("unknown case %q (cases: %s)", name, strings.Join(caseNames, ", "))
		}
	}
	var out [][]string
	frag := -1 // the batch of the fragmentation cases
	for _, name := range caseNames {
		if len(cases) > 0 && !slices.Contains(cases, name) {
			continue
		}
		if fragmentationCase(name) && frag >= 0 {
			out[frag] = append(out[frag], name)
			continue
		}
		if fragmentationCase(name) {
			frag = len(out)
		}
		out = append(out, []string{name})
	}
	return out, nil
}

// variantPQH is a run whose scheduler has the feature gate
// SchedulerPreQueueingHints on (alpha in 1.37, off by default): upstream at
// its best. Its cases are reported as <case>+pqh.
const variantPQH = "pqh"

// runConfig says what a run measures and how.
type runConfig struct {
	Namespace     string
	SchedulerName string
	// DeviceClasses is the YAML file with the GPU driver's DeviceClasses.
	DeviceClasses string
	// Fraction of the devices that the fill, match and mig workloads take.
	Fraction float64
	// FillPods, if not 0, bounds the pods of fill (and noclaims): fill
	// then takes a smaller fraction of the H100 GPUs, with the same mix of
	// sizes.
	FillPods int
	// SchedulerPID is the scheduler's process, whose CPU time and peak RSS
	// the cost cases measure; 0 measures none.
	SchedulerPID int
	// ChurnBase is the fraction of the H100 GPUs that the churn workload
	// takes before its stream starts; ChurnRate pods/s are created for
	// ChurnDuration, each deleted ChurnLifetime after it was bound.
	ChurnBase     float64
	ChurnRate     float64
	ChurnDuration time.Duration
	ChurnLifetime time.Duration
	// PreemptShare is the share of the H100 GPUs that the preempt
	// workload's high-priority pods ask for once low-priority pods hold
	// all of them; PreemptWait is the longest the case waits for them to
	// be bound (at most Timeout plus PerPod for each): upstream never binds
	// them.
	PreemptShare float64
	PreemptWait  time.Duration
	// GangFraction is the share of the H100 GPUs that the gang workload's
	// groups take.
	GangFraction float64
	// Cases are the cases to run; all if empty.
	Cases []string
	// FragUse is the share of the devices (H100 GPUs; memory slices of
	// the MIG devices churned) that the fragmentation churns keep
	// requested, for FragSteps steps after the initial fill, at most one
	// step per FragInterval, each pod living FragLifetime steps on average;
	// FragSeed draws the sequence. A step waits for its pods until none
	// has been bound for FragStall; the large pods are waited for at most
	// FragLargeWait.
	FragSeed      uint64
	FragUse       float64
	FragSteps     int
	FragLifetime  int
	FragInterval  time.Duration
	FragStall     time.Duration
	FragLargeWait time.Duration
	// Workers create pods in parallel.
	Workers int
	// Timeout is how long the pods of a case may take to be bound, plus
	// PerPod for each pod.
	Timeout, PerPod time.Duration
}

// runResult is what one run of one scheduler measured, as bench/kwok run
// writes it and bench/kwok report reads it.
type runResult struct {
	Scheduler string `json:"scheduler"`
	// Variant is how the scheduler differed from its defaults: variantPQH,
	// or empty.
	Variant string `json:"variant,omitempty"`
	Run     int    `json:"run"`
	Nodes   int    `json:"nodes"`
	// FillPods is that of the runConfig.
	FillPods int `json:"fill_pods,omitempty"`
	// NodeMix is the number of nodes by kind.
	NodeMix map[string]int `json:"node_mix"`
	// Fraction, ChurnBase, ChurnRate, ChurnLifetimeSeconds, PreemptShare
	// and PreemptWaitSeconds are those of the runConfig.
	Fraction             float64 `json:"fraction"`
	ChurnBase            float64 `json:"churn_base"`
	ChurnRate            float64 `json:"churn_rate"`
	ChurnLifetimeSeconds float64 `json:"churn_lifetime_seconds"`
	PreemptShare         float64 `json:"preempt_share,omitempty"`
	PreemptWaitSeconds   float64 `json:"preempt_wait_seconds,omitempty"`
	// GangFraction is that of the runConfig, if it ran the gang case.
	GangFraction float64 `json:"gang_fraction,omitempty"`
	// FragSeed ... FragLargeWaitSeconds are those of the runConfig, if
	// it ran a fragmentation case.
	FragSeed             uint64       `json:"frag_seed,omitempty"`
	FragUse              float64      `json:"frag_use,omitempty"`
	FragSteps            int          `json:"frag_steps,omitempty"`
	FragLifetimeSteps    int          `json:"frag_lifetime_steps,omitempty"`
	FragIntervalSeconds  float64      `json:"frag_interval_seconds,omitempty"`
	FragLargeWaitSeconds float64      `json:"frag_large_wait_seconds,omitempty"`
	Cases                []caseResult `json:"cases"`
}

// caseResult is what one case measured.
type caseResult struct {
	Name string `json:"name"`
	// Pods is how many pods were measured.
	Pods int `json:"pods"`
	// Latencies are creation → bound of the bound pods, in seconds.
	Latencies []float64 `json:"latencies"`
	// BoundAt are the bind times since the case started, in seconds.
	BoundAt []float64 `json:"bound_at"`
	// Seconds is from the first creation to the last bind.
	Seconds float64 `json:"seconds"`
	// Unbound pods were not bound in time.
	Unbound int `json:"unbound,omitempty"`
	// HighPriorityBound and Preempted are of the preempt case: how many of
	// its high-priority pods (Pods) were bound, and how many of the
	// low-priority pods that filled the GPUs were evicted (gone or being
	// deleted at the end).
	HighPriorityBound int `json:"high_priority_bound,omitempty"`
	Preempted         int `json:"preempted_pods,omitempty"`
	// WastedGPUs are the GPUs of the evicted pods beyond those of the
	// high-priority pods bound: the GPUs were full, so every GPU a
	// high-priority pod got was an evicted pod's, and the rest were
	// evicted for nothing (or for pods not bound in time).
	WastedGPUs int `json:"wasted_gpus,omitempty"`
	// Of the fragmentation cases (Pods are the churn's, Unbound those
	// never seen bound, Seconds the churn's duration), at the end of the
	// churn: WholeFree counts the H100 nodes with all GPUs free
	// (fragmentation) or the GPUs in MIG mode with no device in use
	// (fragmentation_mig), IdealWholeFree what the same devices in use
	// would leave whole if perfectly packed; Free4GPUNUMA and
	// IdealFree4GPUNUMA the places for 4 GPUs on one NUMA node and
	// FreeGPUs the free H100 GPUs (fragmentation); MIGInUse the MIG
	// devices in use by profile (fragmentation_mig). LargePods were
	// then created, as many as IdealWholeFree, and LargePodsPlaced
	// bound. WholeFreeSeries is WholeFree after each step of the churn,
	// points (step, count).
	WholeFree         int            `json:"whole_free,omitempty"`
	IdealWholeFree    int            `json:"ideal_whole_free,omitempty"`
	Free4GPUNUMA      int            `json:"free_4gpu_numa,omitempty"`
	IdealFree4GPUNUMA int            `json:"ideal_free_4gpu_numa,omitempty"`
	FreeGPUs          int            `json:"free_gpus,omitempty"`
	MIGInUse          map[string]int `json:"mig_in_use,omitempty"`
	LargePods         int            `json:"large_pods,omitempty"`
	LargePodsPlaced   int            `json:"large_pods_placed,omitempty"`
	WholeFreeSeries   [][2]float64   `json:"whole_free_series,omitempty"`
	// ByUse says where the pods went at the end of the churn: H100 nodes
	// by GPUs in use (fragmentation), GPUs in MIG mode by memory slices
	// in use, or "whole" (fragmentation_mig).
	ByUse map[string]int `json:"by_use,omitempty"`
	// Of the gang case (Pods are the pods of all its groups): Groups is
	// how many PodGroups it created, GroupsBound how many had all their
	// pods bound at the end and PartialGroups how many some but not all;
	// GroupLatencies are, for each group whose pods were all bound, from
	// the PodGroup's creation to the bind of its last pod, in seconds.
	Groups         int       `json:"groups,omitempty"`
	GroupsBound    int       `json:"groups_bound,omitempty"`
	PartialGroups  int       `json:"partial_groups,omitempty"`
	GroupLatencies []float64 `json:"group_latencies,omitempty"`
	// Share is the fraction of the H100 GPUs that fill's pods took (below
	// the run's Fraction where FillPods bounded them).
	Share float64 `json:"share,omitempty"`
	// CPUSeconds is the CPU time the scheduler process used while the case
	// ran (from the start of its measured pods to the last bind), and
	// PeakRSSBytes its peak resident set size meanwhile; cost cases only.
	CPUSeconds   float64 `json:"cpu_seconds,omitempty"`
	PeakRSSBytes uint64  `json:"peak_rss_bytes,omitempty"`
	// AllocationErrors counts what kwokcluster.Verify found.
	AllocationErrors int `json:"allocation_errors"`
	// Errors are the first errors of the case, for the report.
	Errors []string `json:"errors,omitempty"`
}

// maxErrors is how many errors of a case a result keeps.
const maxErrors = 10

func (c *caseResult) addErrors(errs ...error) {
	for _, err := range errs {
		if len(c.Errors) < maxErrors {
			c.Errors = append(c.Errors, err.Error())
		}
	}
}

// failed says whether the case has errors.
func (c *caseResult) failed() bool { return len(c.Errors) > 0 }

// runner runs the workloads against one cluster.
type runner struct {
	client  kubernetes.Interface
	cfg     runConfig
	out     io.Writer
	tracker *tracker
	// cost reads the scheduler process, if cfg.SchedulerPID is set;
	// costStart is the mark of the case running, costErr why it has none.
	cost      *costMeter
	costStart costMark
	costErr   error
}

// markCost starts measuring the scheduler's cost for the case running.
func (r *runner) markCost() {
	if r.cost == nil {
		return
	}
	r.costStart, r.costErr = r.cost.mark()
}

// recordCost puts the scheduler's cost since the last mark into the case.
func (r *runner) recordCost(c *caseResult) {
	if r.cost == nil || !slices.Contains(costCases, c.Name) {
		return
	}
	if r.costErr != nil {
		c.addErrors(r.costErr)
		return
	}
	cpu, rss, err := r.cost.since(r.costStart)
	if err != nil {
		c.addErrors(err)
		return
	}
	c.CPUSeconds, c.PeakRSSBytes = cpu, rss
}

// run measures every case against the cluster, whose nodes exist and are
// ready, and whose scheduler runs. Cases that fail are recorded and the
// next one runs; the error says which failed.
func (r *runner) run(ctx context.Context) ([]caseResult, error) {
	runBatches, err := batches(r.cfg.Cases)
	if err != nil {
		return nil, err
	}
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	sliceList, err := r.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	capa := capacityOf(sliceList.Items)
	_, _ = fmt.Fprintf(r.out, "    capacity: %d H100 GPUs, %d slots of %d L40S on one PCIe root, MIG devices %v\n", capa.h100, capa.matchSlots, matchSize, capa.mig)
	if err := r.createTemplates(ctx, capa); err != nil {
		return nil, err
	}
	stop, err := r.watchPods(ctx)
	if err != nil {
		return nil, err
	}
	defer stop()

	// The first pod waits for the scheduler's and the claim controller's
	// informers; it is not measured.
	warmup := r.measureBatch(ctx, "warm-up", []podSpec{{name: "warmup", template: h100Template(1)}})
	if warmup.failed() {
		return nil, fmt.Errorf("warm-up pod: %s", strings.Join(warmup.Errors, "; "))
	}
	if err := r.cleanup(ctx); err != nil {
		return nil, err
	}

	var results []caseResult
	var failed []string
	for _, batch := range runBatches {
		var cases []caseResult
		r.markCost()
		switch name := batch[0]; name {
		case caseFill, caseNoClaims:
			pods, share := boundedFillPods(name, capa.h100, r.cfg.Fraction, r.cfg.FillPods)
			if name == caseNoClaims {
				pods = withoutClaims(pods)
			}
			c := r.measureBatch(ctx, name, pods)
			c.Share = share
			cases = []caseResult{c}
		case caseChurn:
			c := caseResult{Name: name}
			r.measureChurn(ctx, &c, capa)
			cases = []caseResult{c}
		case caseMatch:
			cases = []caseResult{r.measureBatch(ctx, name, matchPods(capa.matchSlots, r.cfg.Fraction))}
		case caseMIG:
			cases = []caseResult{r.measureBatch(ctx, name, migPods(capa.mig, r.cfg.Fraction))}
		case casePreempt:
			c := caseResult{Name: name}
			r.measurePreempt(ctx, &c, capa)
			cases = []caseResult{c}
		case caseGang:
			c := caseResult{Name: name}
			r.measureGang(ctx, &c, capa)
			cases = []caseResult{c}
		default:
			cases = r.measureFragmentation(ctx, batch, sliceList.Items)
		}
		if ctx.Err() != nil {
			return results, ctx.Err()
		}
		for i := range cases {
			r.recordCost(&cases[i])
		}
		// The cases of a batch ran at once, on disjoint nodes: one
		// verification of the namespace covers them, and what it finds
		// counts for each.
		errs := r.verify(ctx)
		for _, c := range cases {
			c.AllocationErrors = len(errs)
			c.addErrors(errs...)
			r.report(c)
			results = append(results, c)
			if c.failed() {
				failed = append(failed, c.Name)
			}
		}
		if err := r.cleanup(ctx); err != nil {
			return results, err
		}
	}
	if len(failed) > 0 {
		return results, fmt.Errorf("cases failed: %s", strings.Join(failed, ", "))
	}
	return results, nil
}

// setup creates the namespace, waits for its default ServiceAccount (the
// ServiceAccount admission plugin refuses pods until the controller manager
// has made it) and creates the DeviceClasses and the PriorityClasses.
func (r *runner) setup(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.cfg.Namespace}}
	if _, err := r.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", r.cfg.Namespace, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := r.client.CoreV1().ServiceAccounts(r.cfg.Namespace).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("default ServiceAccount of namespace %s: %w", r.cfg.Namespace, err)
	}
	classes, err := readDeviceClasses(r.cfg.DeviceClasses)
	if err != nil {
		return err
	}
	for _, class := range classes {
		if _, err := r.client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create DeviceClass %s: %w", class.Name, err)
		}
	}
	for _, class := range priorityClasses() {
		if _, err := r.client.SchedulingV1().PriorityClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create PriorityClass %s: %w", class.Name, err)
		}
	}
	return nil
}

// readDeviceClasses decodes the DeviceClasses of a multi-document YAML file
// strictly; other kinds are an error.
func readDeviceClasses(path string) ([]*resourceapi.DeviceClass, error) {
	objects, err := manifest.DecodeFile(path)
	if err != nil {
		return nil, err
	}
	var classes []*resourceapi.DeviceClass
	for _, obj := range objects {
		class, ok := obj.(*resourceapi.DeviceClass)
		if !ok {
			return nil, fmt.Errorf("%s: %s is not a DeviceClass", path, obj.GetObjectKind().GroupVersionKind().Kind)
		}
		classes = append(classes, class)
	}
	if len(classes) == 0 {
		return nil, fmt.Errorf("%s: no DeviceClasses", path)
	}
	return classes, nil
}

func (r *runner) createTemplates(ctx context.Context, capa capacity) error {
	var profiles []string
	for p := range capa.mig {
		profiles = append(profiles, p)
	}
	slices.Sort(profiles)
	for _, t := range claimTemplates(r.cfg.Namespace, profiles) {
		if _, err := r.client.ResourceV1().ResourceClaimTemplates(r.cfg.Namespace).Create(ctx, t, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create ResourceClaimTemplate %s: %w", t.Name, err)
		}
	}
	return nil
}

// watchPods feeds the tracker from a pod informer of the namespace.
func (r *runner) watchPods(ctx context.Context) (func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(r.client, 0, informers.WithNamespace(r.cfg.Namespace))
	informer := factory.Core().V1().Pods().Informer()
	handle := func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok {
			r.tracker.observe(pod)
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, obj any) { handle(obj) },
	}); err != nil {
		cancel()
		return nil, err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		cancel()
		return nil, errors.New("pod informer did not sync")
	}
	return func() {
		cancel()
		factory.Shutdown()
	}, nil
}

// createPods creates the pods with cfg.Workers in parallel, as fast as the
// client allows, recording each creation in the tracker.
func (r *runner) createPods(ctx context.Context, caseName string, pods []podSpec) error {
	work := make(chan podSpec)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range max(1, r.cfg.Workers) {
		wg.Go(func() {
			for p := range work {
				if err := r.createPod(ctx, caseName, p); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, p := range pods {
		select {
		case work <- p:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("%d of %d pods not created: %w", len(errs), len(pods), errs[0])
	}
	return ctx.Err()
}

func (r *runner) createPod(ctx context.Context, caseName string, p podSpec) error {
	pod := podObject(r.cfg.Namespace, r.cfg.SchedulerName, caseName, p)
	r.tracker.creating(p.name)
	if _, err := r.client.CoreV1().Pods(r.cfg.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create pod %s: %w", p.name, err)
	}
	return nil
}

// timeout is how long the pods may take to be bound.
func (r *runner) timeout(pods int) time.Duration {
	return r.cfg.Timeout + time.Duration(pods)*r.cfg.PerPod
}

// measureBatch creates the pods at once and waits until all are bound.
func (r *runner) measureBatch(ctx context.Context, name string, pods []podSpec) caseResult {
	c := &caseResult{Name: name}
	names := podNames(pods)
	c.Pods = len(pods)
	start := time.Now()
	if err := r.createPods(ctx, c.Name, pods); err != nil {
		c.addErrors(err)
	}
	if err := r.waitBound(ctx, c.Name, names, start, r.timeout(len(pods))); err != nil {
		c.addErrors(err)
	}
	r.fill(c, names, start)
	return *c
}

// fill puts the measurements of the pods into the case.
func (r *runner) fill(c *caseResult, names []string, start time.Time) {
	s := r.tracker.measure(names, start)
	c.Latencies, c.BoundAt, c.Seconds, c.Unbound = s.latencies, s.boundAt, s.seconds, s.unbound
}

// measureChurn fills ChurnBase of the H100 GPUs (not measured), then
// creates ChurnRate pods/s for ChurnDuration and deletes each
// ChurnLifetime after it was bound, oldest first, and measures the pods of
// that stream.
func (r *runner) measureChurn(ctx context.Context, c *caseResult, capa capacity) {
	base, share := boundedFillPods("churn-base", capa.h100, r.cfg.ChurnBase, r.cfg.FillPods)
	c.Share = share
	if err := r.createPods(ctx, "churn-base", base); err != nil {
		c.addErrors(err)
		return
	}
	if err := r.waitBound(ctx, "churn-base", podNames(base), time.Now(), r.timeout(len(base))); err != nil {
		c.addErrors(err)
		return
	}
	// The scheduler's cost is that of the stream, not of the base.
	r.markCost()

	count := int(r.cfg.ChurnRate * r.cfg.ChurnDuration.Seconds())
	pods := make([]podSpec, count)
	for i := range pods {
		pods[i] = churnPod(i)
	}
	names := podNames(pods)
	c.Pods = count
	start := time.Now()
	interval := time.Duration(float64(time.Second) / r.cfg.ChurnRate)

	var creates sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	created := 0 // guarded by mu
	record := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	}
	deleterCtx, stopDeleter := context.WithCancel(ctx)
	var deleter sync.WaitGroup
	deleter.Go(func() {
		deleted := 0
		ticker := time.NewTicker(100 * time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case <-deleterCtx.Done():
				return
			case <-ticker.C:
			}
			mu.Lock()
			limit := created
			mu.Unlock()
			for ; deleted < limit; deleted++ {
				at, ok := r.tracker.boundAt(names[deleted])
				if !ok || time.Since(at) < r.cfg.ChurnLifetime {
					break
				}
				err := r.client.CoreV1().Pods(r.cfg.Namespace).Delete(ctx, names[deleted], metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
				if err != nil && !apierrors.IsNotFound(err) {
					record(fmt.Errorf("delete pod %s: %w", names[deleted], err))
				}
			}
		}
	})
	progress := newProgress(r.out, c.Name, count, start)
	for i, p := range pods {
		// A steady rate: the i-th pod at start + i*interval, each created
		// by its own goroutine so that a slow call delays no other.
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		mu.Lock()
		created = i + 1
		mu.Unlock()
		creates.Go(func() {
			if err := r.createPod(ctx, c.Name, p); err != nil {
				record(err)
			}
		})
		progress.update(r.tracker.countBound(names[:i+1]))
	}
	creates.Wait()
	if err := r.waitBound(ctx, c.Name, names, start, r.timeout(count)); err != nil {
		c.addErrors(err)
	}
	stopDeleter()
	deleter.Wait()
	c.addErrors(errs...)
	r.fill(c, names, start)
}

// measurePreempt fills all H100 GPUs with low-priority pods of 2 and 1
// GPUs (not measured), then creates high-priority pods of 8 and 4 GPUs at
// once, PreemptShare of the H100 GPUs, which fit only if low-priority pods
// are evicted, and measures creation → bound of those. It waits at most
// PreemptWait for them: high-priority pods left unbound are the result
// (upstream's DynamicResources cannot preempt for devices), not an error.
// It then counts the low-priority pods that are gone or being deleted, and
// their GPUs that no bound high-priority pod got.
func (r *runner) measurePreempt(ctx context.Context, c *caseResult, capa capacity) {
	twos, ones := preemptLowPods(capa.h100)
	low := append(slices.Clone(twos), ones...)
	for _, batch := range [][]podSpec{twos, ones} {
		if err := r.createPods(ctx, preemptLowCaseName, batch); err != nil {
			c.addErrors(err)
			return
		}
		if err := r.waitBound(ctx, preemptLowCaseName, podNames(batch), time.Now(), r.timeout(len(batch))); err != nil {
			c.addErrors(err)
			return
		}
	}

	pods := preemptHighPods(capa.h100, r.cfg.PreemptShare)
	names := podNames(pods)
	c.Pods = len(pods)
	start := time.Now()
	if err := r.createPods(ctx, c.Name, pods); err != nil {
		c.addErrors(err)
	}
	limit := min(r.cfg.PreemptWait, r.timeout(len(pods)))
	if err := r.waitBound(ctx, c.Name, names, start, limit); err != nil && ctx.Err() != nil {
		c.addErrors(err)
	}
	r.fill(c, names, start)
	c.HighPriorityBound = len(c.Latencies)

	// Victims are deleted with no grace period; let the deletions finish
	// before counting them and before the allocations are verified.
	var terminating int
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := r.client.CoreV1().Pods(r.cfg.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		terminating = 0
		for _, pod := range list.Items {
			if pod.DeletionTimestamp != nil {
				terminating++
			}
		}
		return terminating == 0, nil
	})
	if err != nil && ctx.Err() == nil {
		_, _ = fmt.Fprintf(r.out, "    %s: %d pods still terminating: %v\n", c.Name, terminating, err)
	}
	list, err := r.client.CoreV1().Pods(r.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: caseLabel + "=" + preemptLowCaseName})
	if err != nil {
		c.addErrors(fmt.Errorf("list low-priority pods: %w", err))
		return
	}
	high, err := r.client.CoreV1().Pods(r.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: caseLabel + "=" + c.Name})
	if err != nil {
		c.addErrors(fmt.Errorf("list high-priority pods: %w", err))
		return
	}
	c.Preempted, c.WastedGPUs = preemptCounts(low, list.Items, pods, high.Items)
}

// preemptCounts returns how many of the low-priority pods were evicted
// (absent from running, or being deleted) and how many of their GPUs no
// bound high-priority pod got.
func preemptCounts(low []podSpec, running []corev1.Pod, high []podSpec, bound []corev1.Pod) (preempted, wastedGPUs int) {
	alive := sets.New[string]()
	for _, pod := range running {
		if pod.DeletionTimestamp == nil {
			alive.Insert(pod.Name)
		}
	}
	freed := 0
	for _, p := range low {
		if !alive.Has(p.name) {
			preempted++
			freed += p.gpus
		}
	}
	onNode := sets.New[string]()
	for _, pod := range bound {
		if pod.Spec.NodeName != "" {
			onNode.Insert(pod.Name)
		}
	}
	used := 0
	for _, p := range high {
		if onNode.Has(p.name) {
			used += p.gpus
		}
	}
	return preempted, max(freed-used, 0)
}

func podNames(pods []podSpec) []string {
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.name
	}
	return names
}

// waitBound waits until the tracker has seen all pods bound, showing
// progress.
func (r *runner) waitBound(ctx context.Context, caseName string, names []string, start time.Time, timeout time.Duration) error {
	progress := newProgress(r.out, caseName, len(names), start)
	var bound int
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		bound = r.tracker.countBound(names)
		progress.update(bound)
		return bound == len(names), nil
	})
	progress.done(bound)
	if err != nil {
		return fmt.Errorf("%d of %d pods not bound after %s: %w", len(names)-bound, len(names), time.Since(start).Round(time.Second), err)
	}
	return nil
}

// verify checks the allocations in the namespace with kwokcluster.Verify.
// Claims are listed before pods: while no pod is being bound, a pod in the
// list has had its claims since before the claims were listed.
func (r *runner) verify(ctx context.Context) []error {
	claims, err := r.client.ResourceV1().ResourceClaims(r.cfg.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return []error{fmt.Errorf("list claims: %w", err)}
	}
	resourceSlices, err := r.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return []error{fmt.Errorf("list ResourceSlices: %w", err)}
	}
	nodes, err := r.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return []error{fmt.Errorf("list nodes: %w", err)}
	}
	pods, err := r.client.CoreV1().Pods(r.cfg.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return []error{fmt.Errorf("list pods: %w", err)}
	}
	return kwokcluster.Verify(kwokcluster.Cluster{Pods: pods.Items, Claims: claims.Items, Slices: resourceSlices.Items, Nodes: nodes.Items})
}

// cleanup deletes the pods of the namespace and waits until their claims
// are gone too, so that the next case starts with free devices. It deletes
// the PodGroups of the gang case too, where the cluster serves them.
func (r *runner) cleanup(ctx context.Context) error {
	err := r.client.CoreV1().Pods(r.cfg.Namespace).DeleteCollection(ctx,
		metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)},
		metav1.ListOptions{LabelSelector: appLabel + "=" + appValue})
	if err != nil {
		return fmt.Errorf("delete pods: %w", err)
	}
	// NotFound: the cluster does not serve scheduling.k8s.io/v1beta1,
	// so there are none.
	err = r.client.SchedulingV1beta1().PodGroups(r.cfg.Namespace).DeleteCollection(ctx,
		metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: appLabel + "=" + appValue})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete PodGroups: %w", err)
	}
	var pods, claims int
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		podList, err := r.client.CoreV1().Pods(r.cfg.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		claimList, err := r.client.ResourceV1().ResourceClaims(r.cfg.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		pods, claims = len(podList.Items), len(claimList.Items)
		return pods == 0 && claims == 0, nil
	})
	if err != nil {
		return fmt.Errorf("cleanup: %d pods and %d claims left: %w", pods, claims, err)
	}
	return nil
}

// report prints a case's result.
func (r *runner) report(c caseResult) {
	if fragmentationCase(c.Name) {
		r.reportFragmentation(c)
		return
	}
	s := sample{latencies: c.Latencies, seconds: c.Seconds}
	_, _ = fmt.Fprintf(r.out, "    %-6s %d pods, %.1f pods/s, latency p50 %s p90 %s p99 %s, %d allocation errors\n",
		c.Name, c.Pods, s.podsPerSecond(), seconds(percentile(c.Latencies, 0.5)), seconds(percentile(c.Latencies, 0.9)),
		seconds(percentile(c.Latencies, 0.99)), c.AllocationErrors)
	if c.CPUSeconds > 0 && len(c.Latencies) > 0 {
		_, _ = fmt.Fprintf(r.out, "    %-6s scheduler: %.1f CPU s, %.2f ms of CPU per pod, peak RSS %d MiB\n",
			c.Name, c.CPUSeconds, 1000*c.CPUSeconds/float64(len(c.Latencies)), c.PeakRSSBytes>>20)
	}
	if c.Name == casePreempt {
		_, _ = fmt.Fprintf(r.out, "    %-6s %d of %d high-priority pods bound, %d low-priority pods preempted, %d of their GPUs wasted\n",
			c.Name, c.HighPriorityBound, c.Pods, c.Preempted, c.WastedGPUs)
	}
	if c.Name == caseGang {
		_, _ = fmt.Fprintf(r.out, "    %-6s %d of %d groups bound, %d partly bound; group creation → all bound p50 %s p99 %s\n",
			c.Name, c.GroupsBound, c.Groups, c.PartialGroups, seconds(percentile(c.GroupLatencies, 0.5)), seconds(percentile(c.GroupLatencies, 0.99)))
	}
	for _, e := range c.Errors {
		_, _ = fmt.Fprintf(r.out, "      error: %s\n", e)
	}
}

// reportFragmentation prints the result of a fragmentation case.
func (r *runner) reportFragmentation(c caseResult) {
	switch c.Name {
	case caseFragmentation:
		_, _ = fmt.Fprintf(r.out, "    %s  %d pods in %.0f s (%d never bound): %d whole free H100 nodes (ideal %d), %d free 4-GPU NUMA nodes (ideal %d), "+
			"%d of %d %d-GPU pods placed, %d allocation errors; nodes by GPUs in use %v\n",
			c.Name, c.Pods, c.Seconds, c.Unbound, c.WholeFree, c.IdealWholeFree, c.Free4GPUNUMA, c.IdealFree4GPUNUMA,
			c.LargePodsPlaced, c.LargePods, largeGPUs, c.AllocationErrors, c.ByUse)
	case caseFragmentationMIG:
		_, _ = fmt.Fprintf(r.out, "    %s  %d pods in %.0f s (%d never bound): %d whole free GPUs in MIG mode (ideal %d), MIG devices in use %v, "+
			"%d of %d whole-GPU pods placed, %d allocation errors; GPUs by memory slices in use %v\n",
			c.Name, c.Pods, c.Seconds, c.Unbound, c.WholeFree, c.IdealWholeFree, c.MIGInUse, c.LargePodsPlaced, c.LargePods, c.AllocationErrors, c.ByUse)
	}
	for _, e := range c.Errors {
		_, _ = fmt.Fprintf(r.out, "      error: %s\n", e)
	}
}

func seconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Millisecond).String()
}
