package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/invariants"
	"github.com/drasched/drasched/internal/kueue"
	"github.com/drasched/drasched/internal/manifest"
)

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
	// KueueDir receives the files of Kueue's manager (configuration,
	// certificates, log) for the queue case.
	KueueDir string
	// Workers create pods in parallel.
	Workers int
	// Timeout is how long the pods of a case may take to be bound, plus
	// PerPod for each pod.
	Timeout, PerPod time.Duration
}

// runner runs the workloads against one cluster.
type runner struct {
	client kubernetes.Interface
	// restConfig is the cluster's, for Kueue (the queue case).
	restConfig *rest.Config
	cfg        runConfig
	out        io.Writer
	tracker    *tracker
	// cost reads the scheduler process, if cfg.SchedulerPID is set;
	// costStart is the mark of the case running, costErr why it has none.
	cost      *costMeter
	costStart costMark
	costErr   error
	// kueue is Kueue's manager while the queue case runs.
	kueue *kueue.Kueue
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
	// The queue case stops Kueue once it is cleaned up; this is for a run
	// that ends before.
	defer r.stopKueue(context.WithoutCancel(ctx))
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
		case casePreemptGang:
			c := caseResult{Name: name}
			r.measurePreemptGang(ctx, &c, capa)
			cases = []caseResult{c}
		case caseQueue:
			c := caseResult{Name: name}
			r.measureQueue(ctx, &c, capa)
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
		// Kueue runs until its Jobs are gone: its webhooks stand in front
		// of Jobs, and its workloads' finalizers wait for it.
		r.stopKueue(ctx)
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

// verify checks the allocations in the namespace with invariants.Check, as
// an observer after the fact (every allocated device published).
// Pods are listed before and after the claims, and only those bound in
// both lists, the same pod and not being deleted, are checked against the
// claims: a pod bound before the claims were listed got its claims
// allocated before that (PreBind writes them before Bind), and one that
// preemption evicts meanwhile may have lost them. Binding goes on after a
// case in the preemption cases, so no list is taken while none is.
func (r *runner) verify(ctx context.Context) []error {
	before, err := r.client.CoreV1().Pods(r.cfg.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return []error{fmt.Errorf("list pods: %w", err)}
	}
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
	after, err := r.client.CoreV1().Pods(r.cfg.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return []error{fmt.Errorf("list pods: %w", err)}
	}
	pods := stablyBound(before.Items, after.Items)
	return invariants.Check(invariants.Cluster{Pods: pods, Claims: claims.Items, Slices: resourceSlices.Items, Nodes: nodes.Items},
		invariants.Options{Namespace: r.cfg.Namespace, Unpublished: true})
}

// stablyBound returns the pods bound in before that are in after too, the
// same pod on the same node, not being deleted and not terminated: the
// claim controller releases the claims of a pod that has ended (kwok ends
// the pods of Jobs, the queue case's, as soon as they run).
func stablyBound(before, after []corev1.Pod) []corev1.Pod {
	later := map[types.UID]*corev1.Pod{}
	for i := range after {
		later[after[i].UID] = &after[i]
	}
	var out []corev1.Pod
	for _, pod := range before {
		p, ok := later[pod.UID]
		if pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil || !ok || p.Spec.NodeName != pod.Spec.NodeName || p.DeletionTimestamp != nil ||
			terminated(&pod) || terminated(p) {
			continue
		}
		out = append(out, pod)
	}
	return out
}

// terminated says whether the pod has ended.
func terminated(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// cleanup deletes the pods of the namespace and waits until their claims
// are gone too, so that the next case starts with free devices. It deletes
// the Jobs of the queue case first, whose controller would otherwise make
// their pods again, and the PodGroups of the gang cases too, where the
// cluster serves them.
func (r *runner) cleanup(ctx context.Context) error {
	ours := metav1.ListOptions{LabelSelector: appLabel + "=" + appValue}
	// The Jobs go first, their pods with them (the garbage collector
	// deletes what the wait below does not).
	deleteJobs := func(ctx context.Context) error {
		return r.client.BatchV1().Jobs(r.cfg.Namespace).DeleteCollection(ctx,
			metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}, ours)
	}
	deletePods := func(ctx context.Context) error {
		return r.client.CoreV1().Pods(r.cfg.Namespace).DeleteCollection(ctx,
			metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, ours)
	}
	// Deleting a thousand pods (or 640 Jobs) at once can outlast a busy
	// API server's patience ("stream error ... INTERNAL_ERROR"), with some
	// deleted: the wait below deletes again while some are left, pods
	// again too where Jobs were left, whose controller may have made pods
	// meanwhile.
	jobsErr := deleteJobs(ctx)
	deleteErr := deletePods(ctx)
	// NotFound: the cluster does not serve scheduling.k8s.io/v1beta1,
	// so there are none.
	err := r.client.SchedulingV1beta1().PodGroups(r.cfg.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, ours)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete PodGroups: %w", err)
	}
	var jobs, pods, claims int
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if jobsErr != nil {
			jobList, err := r.client.BatchV1().Jobs(r.cfg.Namespace).List(ctx, ours)
			if err != nil {
				return false, err
			}
			jobs = len(jobList.Items)
			if jobs == 0 {
				jobsErr = nil
			} else {
				if jobsErr = deleteJobs(ctx); jobsErr == nil {
					jobs = 0
				}
				deleteErr = errors.Join(deleteErr, errJobsLeft)
			}
		}
		podList, err := r.client.CoreV1().Pods(r.cfg.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		if deleteErr != nil && len(podList.Items) > 0 {
			deleteErr = deletePods(ctx)
		}
		claimList, err := r.client.ResourceV1().ResourceClaims(r.cfg.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		pods, claims = len(podList.Items), len(claimList.Items)
		return jobsErr == nil && pods == 0 && claims == 0, nil
	})
	if err != nil {
		return fmt.Errorf("cleanup: %d Jobs, %d pods and %d claims left: %w", jobs, pods, claims, errors.Join(err, jobsErr, deleteErr))
	}
	return nil
}

// errJobsLeft marks pods to delete again: Jobs were left.
var errJobsLeft = errors.New("some Jobs were left")

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
	if c.Name == casePreempt || c.Name == casePreemptGang {
		_, _ = fmt.Fprintf(r.out, "    %-6s %d of %d high-priority pods bound, %d low-priority pods preempted, %d of their GPUs wasted\n",
			c.Name, c.HighPriorityBound, c.Pods, c.Preempted, c.WastedGPUs)
	}
	if c.Name == caseGang || c.Name == casePreemptGang {
		_, _ = fmt.Fprintf(r.out, "    %-6s %d of %d groups bound, %d partly bound; group creation → all bound p50 %s p99 %s\n",
			c.Name, c.GroupsBound, c.Groups, c.PartialGroups, seconds(percentile(c.GroupLatencies, 0.5)), seconds(percentile(c.GroupLatencies, 0.99)))
	}
	if c.Name == caseQueue {
		_, _ = fmt.Fprintf(r.out, "    %-6s %d of %d Jobs %v with all pods bound, the last %s after the first Job's creation; Job creation → all pods bound p50 %s p99 %s, "+
			"→ first pod seen p50 %s p99 %s; pod seen → bound p50 %s p99 %s; Kueue: at most %d GPUs of quota in use, %d borrowed, %d workloads evicted\n",
			c.Name, c.JobsBound, c.Jobs, c.JobsByQueue, seconds(c.Seconds), seconds(percentile(c.JobLatencies, 0.5)), seconds(percentile(c.JobLatencies, 0.99)),
			seconds(percentile(c.JobStartLatencies, 0.5)), seconds(percentile(c.JobStartLatencies, 0.99)),
			seconds(percentile(c.SchedulingLatencies, 0.5)), seconds(percentile(c.SchedulingLatencies, 0.99)),
			c.UsedPeak, c.BorrowedPeak, c.WorkloadsEvicted)
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
