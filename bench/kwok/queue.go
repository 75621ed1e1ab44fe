package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/kueue"
	"github.com/drasched/drasched/internal/kwokcluster"
)

// The queue case measures scheduling under Kueue (docs/kueue.md): batch/v1
// Jobs from two teams' LocalQueues, admitted by Kueue, their pods created
// by kube-controller-manager's Job controller and placed by the scheduler.
// Kueue v0.17 (hack/kueue/go.mod) runs as internal/kueue installs it, from
// its chart with hack/kueue/values.yaml, its manager a process of this
// program for the case's length, on each scheduler's cluster alike.
//
// The workload, on the H100 GPUs of the cluster (G of them):
//
//   - ResourceFlavor h100 with the H100 nodes' inventory label as its
//     nodeLabels: Kueue adds them to the pods' nodeSelector when it admits
//     a Job. The Jobs' claim templates ask for GPUs of DeviceClass
//     gpu.drasched.dev by count alone, which Kueue counts as quota resource
//     drasched.dev/gpu; Kueue does not admit a Job whose claims have CEL
//     selectors, so the flavor, not a selector, keeps the pods on H100s.
//   - ClusterQueues team-a and team-b in cohort gpus, each with a nominal
//     quota of 40% of G. team-a may borrow up to 10% of G from the cohort,
//     team-b none; no preemption.
//   - LocalQueues team-a and team-b in the benchmark's namespace.
//   - Jobs of 8 GPUs each, 4 pods × 2 GPUs and 8 pods × 1 GPU in turn:
//     team-a's take 50% of G (more than its nominal quota: it borrows),
//     team-b's 30%, 80% in all; created at once, team-a's first, each Job
//     with the queue label and no suspend field, as users write them
//     (Kueue's webhook suspends them).
//
// The quotas admit every Job at once (team-a's 50% ≤ 40% + 10% borrowed,
// team-b's 30% ≤ its 40% less the 10% lent), so every Job is admitted
// without waiting for another to finish, and Kueue evicts none unless a
// Job's pods are not all running within waitForPodsReady's timeout (in
// hack/kueue/values.yaml), which the case counts (workloads evicted). What
// queues the Jobs is Kueue's admission itself, one workload per
// ClusterQueue per scheduling cycle, at its client's QPS, and team-a's
// borrowing. kwok does let Job pods finish: its default stages move a
// Running pod that a Job owns to Succeeded, so a Job's GPUs are freed soon
// after its pods run, and Kueue releases its quota when the Job completes.
//
// Measured: per pod, from its Job's Create call to its bind (the case's
// p50/p90/p99, as a user waits); per Job, from its Create call to the bind
// of the last of its pods (job_p50_seconds, job_p99_seconds); the first
// Job's Create to the last Job's pods all bound (last_job_seconds); and,
// per pod, from the first watch event of it (the Job controller created
// it) to its bind (pod_scheduling_p50_seconds, _p99_): the scheduler's
// share, with the claim controller's.
const caseQueue = "queue"

// Kueue's objects of the queue case.
const (
	queueCohort = "gpus"
	queueFlavor = "h100"
	// queueResource is the quota resource that hack/kueue/values.yaml
	// maps DeviceClass gpuClass to.
	queueResource = "drasched.dev/gpu"
	// queueLabel names a Job's LocalQueue.
	queueLabel = "kueue.x-k8s.io/queue-name"
	// queueNominalPercent is each ClusterQueue's nominal quota, in percent
	// of the H100 GPUs.
	queueNominalPercent = 40
)

// kueueGroupVersion is the API of Kueue's objects.
var kueueGroupVersion = schema.GroupVersion{Group: "kueue.x-k8s.io", Version: "v1beta2"}

// queueTeam is a team of the queue case: a ClusterQueue and a LocalQueue
// of its name.
type queueTeam struct {
	name string
	// demandPercent is the share of the H100 GPUs that its Jobs ask for,
	// borrowPercent the most it may borrow from the cohort beyond its
	// nominal quota, both in percent.
	demandPercent, borrowPercent int
}

// queueTeams: team-a asks for more than its nominal quota and borrows,
// team-b for less; together they fit the cohort's quota, with nothing to
// spare.
var queueTeams = []queueTeam{
	{name: "team-a", demandPercent: 50, borrowPercent: 10},
	{name: "team-b", demandPercent: 30, borrowPercent: 0},
}

// queueShapes are the Jobs' shapes, in turn: 4 pods × 2 GPUs and 8 pods ×
// 1 GPU, 8 GPUs each.
var queueShapes = []gangShape{{pods: 4, gpus: 2}, {pods: 8, gpus: 1}}

// queueJob is one Job of the queue case.
type queueJob struct {
	name  string
	queue string
	shape gangShape
}

// percentOf is percent of n, rounded down, in integers: the quotas and
// budgets of the queue case must agree to the GPU.
func percentOf(n, percent int) int { return n * percent / 100 }

// queueJobs returns the Jobs of each team, as many of queueShapes in turn
// as fit into its share of gpus, team by team.
func queueJobs(gpus int) []queueJob {
	var jobs []queueJob
	for _, team := range queueTeams {
		// All shapes take the same GPUs.
		count := percentOf(gpus, team.demandPercent) / gangGroupGPUs(queueShapes[0])
		for i := range count {
			jobs = append(jobs, queueJob{name: fmt.Sprintf("%s-%04d", team.name, i), queue: team.name, shape: queueShapes[i%len(queueShapes)]})
		}
	}
	return jobs
}

// queuePods counts the pods of the Jobs.
func queuePods(jobs []queueJob) int {
	n := 0
	for _, j := range jobs {
		n += j.shape.pods
	}
	return n
}

// queueObjects returns Kueue's objects of the case for a cluster of gpus
// H100 GPUs: the ResourceFlavor with the H100 nodes' labels, a
// ClusterQueue per team in one cohort, and a LocalQueue per team in
// namespace.
func queueObjects(namespace string, gpus int, nodeLabels map[string]string) []*unstructured.Unstructured {
	object := func(kind, name, namespace string, spec map[string]any) *unstructured.Unstructured {
		obj := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
		obj.SetAPIVersion(kueueGroupVersion.String())
		obj.SetKind(kind)
		obj.SetName(name)
		obj.SetNamespace(namespace)
		return obj
	}
	labels := map[string]any{}
	for k, v := range nodeLabels {
		labels[k] = v
	}
	out := []*unstructured.Unstructured{object("ResourceFlavor", queueFlavor, "", map[string]any{"nodeLabels": labels})}
	for _, team := range queueTeams {
		out = append(out, object("ClusterQueue", team.name, "", map[string]any{
			"cohortName":        queueCohort,
			"namespaceSelector": map[string]any{},
			"resourceGroups": []any{map[string]any{
				"coveredResources": []any{queueResource},
				"flavors": []any{map[string]any{
					"name": queueFlavor,
					"resources": []any{map[string]any{
						"name":           queueResource,
						"nominalQuota":   int64(percentOf(gpus, queueNominalPercent)),
						"borrowingLimit": int64(percentOf(gpus, team.borrowPercent)),
					}},
				}},
			}},
		}))
	}
	for _, team := range queueTeams {
		out = append(out, object("LocalQueue", team.name, namespace, map[string]any{"clusterQueue": team.name}))
	}
	return out
}

// queueTemplate is the ResourceClaimTemplate of a queue Job's pods: gpus
// GPUs of gpuClass by count alone, as Kueue counts them.
func queueTemplate(gpus int) string { return fmt.Sprintf("queue-gpu-%d", gpus) }

// jobObject is a Job of the queue case as a user writes it for Kueue: the
// queue label, no suspend field, and the pods of podObject (the
// scheduler's name, no grace period), each with a claim of the shape's
// GPUs.
func jobObject(namespace, schedulerName string, j queueJob) *batchv1.Job {
	pod := podObject(namespace, schedulerName, caseQueue, podSpec{name: j.name, template: queueTemplate(j.shape.gpus)})
	labels := maps.Clone(pod.Labels)
	labels[queueLabel] = j.queue
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: j.name, Namespace: namespace, Labels: labels},
		Spec: batchv1.JobSpec{
			Parallelism: ptr.To(int32(j.shape.pods)),
			Completions: ptr.To(int32(j.shape.pods)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: pod.Labels},
				Spec:       pod.Spec,
			},
		},
	}
}

// jobSample is what the queue case measured of its Jobs' pods.
type jobSample struct {
	// sample has, of every pod bound, the time from its Job's Create call
	// to its bind (latencies) and its bind since the start; seconds is
	// from the start to the last bind, unbound counts the pods of the
	// Jobs (as many as each Job's shape) not seen bound.
	sample
	// scheduling are, of every pod bound, from its first watch event to
	// its bind, in seconds.
	scheduling []float64
	// started are, of every Job with a pod, from its Create call to the
	// first watch event of one of its pods, in seconds: Kueue's admission
	// and the Job controller's work.
	started []float64
	// jobLatencies are, of every Job whose pods were all bound, from its
	// Create call to the bind of its last pod, in seconds; incomplete
	// counts the others.
	jobLatencies []float64
	incomplete   int
}

// measureJobs computes the Jobs' sample from the tracker, with times
// relative to start: a Job's creation is recorded under its name, its pods
// by its label.
func (t *tracker) measureJobs(jobs []queueJob, start time.Time) jobSample {
	t.mu.Lock()
	defer t.mu.Unlock()
	var s jobSample
	for _, j := range jobs {
		created, ok := t.created[j.name]
		if !ok {
			s.unbound += j.shape.pods
			s.incomplete++
			continue
		}
		pods := t.jobPods[j.name]
		if len(pods) > 0 {
			s.started = append(s.started, t.seen[pods[0]].Sub(created).Seconds())
		}
		var binds []time.Time
		for _, name := range pods {
			bound, ok := t.bound[name]
			if !ok {
				continue
			}
			binds = append(binds, bound)
			s.latencies = append(s.latencies, bound.Sub(created).Seconds())
			s.scheduling = append(s.scheduling, bound.Sub(t.seen[name]).Seconds())
			at := bound.Sub(start).Seconds()
			s.boundAt = append(s.boundAt, at)
			s.seconds = max(s.seconds, at)
		}
		// The Job controller replaces a pod that failed: the Job is
		// bound once as many pods as its shape are.
		if len(binds) < j.shape.pods {
			s.unbound += j.shape.pods - len(binds)
			s.incomplete++
			continue
		}
		slices.SortFunc(binds, func(a, b time.Time) int { return a.Compare(b) })
		s.jobLatencies = append(s.jobLatencies, binds[j.shape.pods-1].Sub(created).Seconds())
	}
	return s
}

// countJobPodsBound counts the Jobs' pods bound, at most as many per Job
// as its shape has.
func (t *tracker) countJobPodsBound(jobs []queueJob) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, j := range jobs {
		bound := 0
		for _, name := range t.jobPods[j.name] {
			if _, ok := t.bound[name]; ok {
				bound++
			}
		}
		n += min(bound, j.shape.pods)
	}
	return n
}

// measureQueue starts Kueue's manager (stopped by stopKueue once the case
// is cleaned up), creates its objects and waits until its ClusterQueues
// are active, then creates the Jobs at once and waits until all their
// pods are bound. Then it checks that every pod is on an H100 node, the
// flavor's, and counts the workloads Kueue evicted.
func (r *runner) measureQueue(ctx context.Context, c *caseResult, capa capacity) {
	jobs := queueJobs(capa.h100)
	c.Jobs, c.Pods = len(jobs), queuePods(jobs)
	c.JobsByQueue = map[string]int{}
	for _, j := range jobs {
		c.JobsByQueue[j.queue]++
	}
	if err := r.startKueue(ctx); err != nil {
		c.addErrors(err)
		return
	}
	dyn, err := dynamic.NewForConfig(r.restConfig)
	if err != nil {
		c.addErrors(err)
		return
	}
	nodeLabels := map[string]string{kwokcluster.InventoryLabel: kwokcluster.InventoryName(inventories[kindH100])}
	if err := kueue.Apply(ctx, r.restConfig, queueObjects(r.cfg.Namespace, capa.h100, nodeLabels)); err != nil {
		c.addErrors(fmt.Errorf("create Kueue's queues: %w", err))
		return
	}
	if err := waitQueuesActive(ctx, dyn, r.cfg.Namespace); err != nil {
		c.addErrors(err)
		return
	}

	// Kueue's start and setup are not the case's cost.
	r.markCost()
	start := time.Now()
	usage := watchQueueUsage(ctx, dyn)
	if err := r.createJobs(ctx, jobs); err != nil {
		c.addErrors(err)
	}
	if err := r.waitJobsBound(ctx, c.Name, jobs, start, r.timeout(c.Pods)); err != nil {
		c.addErrors(err)
	}
	c.UsedPeak, c.BorrowedPeak = usage()
	s := r.tracker.measureJobs(jobs, start)
	c.Latencies, c.BoundAt, c.Seconds, c.Unbound = s.latencies, s.boundAt, s.seconds, s.unbound
	c.SchedulingLatencies, c.JobStartLatencies, c.JobLatencies = s.scheduling, s.started, s.jobLatencies
	c.JobsBound = len(s.jobLatencies)

	if err := r.checkOnNodes(ctx, c.Name, nodeLabels); err != nil {
		c.addErrors(err)
	}
	evicted, err := evictedWorkloads(ctx, dyn, r.cfg.Namespace)
	if err != nil {
		c.addErrors(err)
	}
	c.WorkloadsEvicted = evicted
}

// startKueue installs Kueue on the cluster and runs its manager, with its
// files in cfg.KueueDir.
func (r *runner) startKueue(ctx context.Context) error {
	if r.restConfig == nil {
		return errors.New("the queue case needs the cluster's REST configuration")
	}
	started := time.Now()
	k, err := kueue.Start(ctx, r.restConfig, kueue.Options{Root: ".", Dir: r.cfg.KueueDir})
	if err != nil {
		return fmt.Errorf("start Kueue: %w", err)
	}
	r.kueue = k
	_, _ = fmt.Fprintf(r.out, "    %-6s Kueue's manager ready in %.1f s (log: %s)\n", caseQueue, time.Since(started).Seconds(), k.Log)
	return nil
}

// Kueue's chart's webhook configurations (release kueue). Its pod webhooks
// take every pod's creation in the benchmark's namespace, failing open, and
// its Job webhooks every Job's, failing closed: with the manager stopped,
// they would slow down or refuse what a later case creates.
const (
	kueueMutatingWebhooks   = "kueue-mutating-webhook-configuration"
	kueueValidatingWebhooks = "kueue-validating-webhook-configuration"
)

// stopKueue stops Kueue's manager, if it runs, and deletes its webhook
// configurations: the cluster is left as the cases without Kueue expect
// it, less Kueue's CustomResourceDefinitions and objects.
func (r *runner) stopKueue(ctx context.Context) {
	if r.kueue == nil {
		return
	}
	if err := r.kueue.Stop(); err != nil {
		_, _ = fmt.Fprintf(r.out, "      warning: Kueue's manager: %v (log: %s)\n", err, r.kueue.Log)
	}
	r.kueue = nil
	admission := r.client.AdmissionregistrationV1()
	err := errors.Join(
		admission.MutatingWebhookConfigurations().Delete(ctx, kueueMutatingWebhooks, metav1.DeleteOptions{}),
		admission.ValidatingWebhookConfigurations().Delete(ctx, kueueValidatingWebhooks, metav1.DeleteOptions{}))
	if err != nil {
		_, _ = fmt.Fprintf(r.out, "      warning: delete Kueue's webhook configurations: %v\n", err)
	}
}

// waitQueuesActive waits until Kueue reports the teams' ClusterQueues and
// LocalQueues active: a Job created before would wait in an inactive queue
// for a reason that is no part of the case.
func waitQueuesActive(ctx context.Context, dyn dynamic.Interface, namespace string) error {
	var pending string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, team := range queueTeams {
			for _, q := range []struct {
				resource, namespace string
			}{{"clusterqueues", ""}, {"localqueues", namespace}} {
				obj, err := dyn.Resource(kueueGroupVersion.WithResource(q.resource)).Namespace(q.namespace).Get(ctx, team.name, metav1.GetOptions{})
				if err != nil {
					pending = fmt.Sprintf("%s %s: %v", q.resource, team.name, err)
					return false, nil
				}
				if status, _ := conditionStatus(obj, "Active"); status != "True" {
					pending = fmt.Sprintf("%s %s not active", q.resource, team.name)
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("wait for the queues to be active: %s: %w", pending, err)
	}
	return nil
}

// conditionStatus returns the status and message of an object's condition
// of that type.
func conditionStatus(obj *unstructured.Unstructured, conditionType string) (status, message string) {
	conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conditions {
		c, ok := c.(map[string]any)
		if !ok || c["type"] != conditionType {
			continue
		}
		status, _ = c["status"].(string)
		message, _ = c["message"].(string)
		return status, message
	}
	return "", ""
}

// queueUsage returns, from the ClusterQueues' status, the GPUs of
// queueResource that their admitted workloads use and how many of those
// are borrowed, summed over the teams.
func queueUsage(queues []unstructured.Unstructured) (used, borrowed int64) {
	for _, cq := range queues {
		flavors, _, _ := unstructured.NestedSlice(cq.Object, "status", "flavorsUsage")
		for _, f := range flavors {
			f, _ := f.(map[string]any)
			resources, _, _ := unstructured.NestedSlice(f, "resources")
			for _, r := range resources {
				r, _ := r.(map[string]any)
				if r["name"] != queueResource {
					continue
				}
				used += quantityValue(r["total"])
				borrowed += quantityValue(r["borrowed"])
			}
		}
	}
	return used, borrowed
}

// quantityValue reads a quantity of a decoded object: a string, or a
// number.
func quantityValue(v any) int64 {
	switch v := v.(type) {
	case string:
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return 0
		}
		return q.Value()
	case int64:
		return v
	case float64:
		return int64(v)
	}
	return 0
}

// watchQueueUsage samples the ClusterQueues' usage every second until the
// returned function is called, which returns the peaks: GPUs in use by
// admitted workloads, and borrowed.
func watchQueueUsage(ctx context.Context, dyn dynamic.Interface) func() (used, borrowed int) {
	ctx, cancel := context.WithCancel(ctx)
	var mutex sync.Mutex
	var usedPeak, borrowedPeak int64 // guarded by mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
			list, err := dyn.Resource(kueueGroupVersion.WithResource("clusterqueues")).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			used, borrowed := queueUsage(list.Items)
			mutex.Lock()
			defer mutex.Unlock()
			usedPeak, borrowedPeak = max(usedPeak, used), max(borrowedPeak, borrowed)
			return false, nil
		})
	}()
	return func() (int, int) {
		cancel()
		<-done
		mutex.Lock()
		defer mutex.Unlock()
		return int(usedPeak), int(borrowedPeak)
	}
}

// createJobs creates the Jobs, with cfg.Workers in parallel, recording
// each creation in the tracker under the Job's name.
func (r *runner) createJobs(ctx context.Context, jobs []queueJob) error {
	return parallelize(ctx, r.cfg.Workers, jobs, "Jobs not created", func(j queueJob) error {
		r.tracker.creating(j.name)
		if _, err := r.client.BatchV1().Jobs(r.cfg.Namespace).Create(ctx, jobObject(r.cfg.Namespace, r.cfg.SchedulerName, j), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create Job %s: %w", j.name, err)
		}
		return nil
	})
}

// waitJobsBound waits until the tracker has seen all the Jobs' pods
// bound, showing progress.
func (r *runner) waitJobsBound(ctx context.Context, caseName string, jobs []queueJob, start time.Time, timeout time.Duration) error {
	total := queuePods(jobs)
	progress := newProgress(r.out, caseName, total, start)
	var bound int
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		bound = r.tracker.countJobPodsBound(jobs)
		progress.update(bound)
		return bound == total, nil
	})
	progress.done(bound)
	if err != nil {
		return fmt.Errorf("%d of %d pods of the Jobs not bound after %s: %w", total-bound, total, time.Since(start).Round(time.Second), err)
	}
	return nil
}

// checkOnNodes checks that every bound pod of the case is on a node with
// the labels: the ResourceFlavor's, which Kueue adds to the pods' node
// selector.
func (r *runner) checkOnNodes(ctx context.Context, caseName string, labels map[string]string) error {
	nodes, err := r.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: labels})})
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	names := map[string]bool{}
	for _, n := range nodes.Items {
		names[n.Name] = true
	}
	pods, err := r.client.CoreV1().Pods(r.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: caseLabel + "=" + caseName})
	if err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	var elsewhere []string
	for _, pod := range pods.Items {
		if pod.Spec.NodeName != "" && !names[pod.Spec.NodeName] {
			elsewhere = append(elsewhere, pod.Name+" on "+pod.Spec.NodeName)
		}
	}
	if len(elsewhere) > 0 {
		return fmt.Errorf("%d pods bound to nodes without the flavor's labels %v, e.g. %s", len(elsewhere), labels, elsewhere[0])
	}
	return nil
}

// evictedWorkloads counts the Workloads of the namespace that Kueue
// evicted at least once (status.schedulingStats.evictions): none, where
// the quotas admit every Job at once.
func evictedWorkloads(ctx context.Context, dyn dynamic.Interface, namespace string) (int, error) {
	list, err := dyn.Resource(kueueGroupVersion.WithResource("workloads")).Namespace(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("list Kueue's workloads: %w", err)
	}
	n := 0
	for _, wl := range list.Items {
		if evictions, _, _ := unstructured.NestedSlice(wl.Object, "status", "schedulingStats", "evictions"); len(evictions) > 0 {
			n++
		}
	}
	return n, nil
}
