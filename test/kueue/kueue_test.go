package kueue

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/internal/kueue"
	"github.com/drasched/drasched/test/integration/framework"
)

// gpusPerNode and nodes make the cluster: 8 GPUs, as much as the two
// teams' nominal quotas together.
const (
	gpusPerNode = 4
	nodes       = 2
	driver      = "gpu.drasched.dev"
	// timeout bounds each step: Kueue's admission, its evictions and
	// drasched's placement take about a second each on a quiet machine.
	timeout = 2 * time.Minute
)

var workloads = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}

// cluster is one test's Kueue, scheduler and GPU nodes.
type cluster struct {
	t       *testing.T
	env     *framework.Env
	dynamic dynamic.Interface
	kueue   *kueue.Kueue
	// priorities maps "low" and "high" to the test's PriorityClasses.
	priorities map[string]string
}

// setUp starts what a cluster with Kueue runs beside drasched (the claim
// and Job controllers, Kueue's manager from its chart), the drasched
// scheduler, two nodes with four GPUs each published as the GPU driver
// would, and the teams' queues: ClusterQueues team-a and team-b with four
// GPUs each in cohort "gpus", where team-a may borrow what team-b leaves
// idle and team-b may not borrow, both reclaim their quota from borrowers
// and preempt lower priorities within their own queue.
//
// claimGate, if not nil, holds requests of the claim controller.
func setUp(t *testing.T, claimGate *framework.RequestGate) *cluster {
	env := framework.SetupWith(t, framework.SetupOptions{NoClaimController: true})
	claimConfig := rest.CopyConfig(env.Config)
	if claimGate != nil {
		claimGate.Wrap(claimConfig)
		t.Cleanup(claimGate.Release)
	}
	stopClaims, err := framework.StartClaimController(env.Ctx, claimConfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopClaims)
	stopJobs, err := framework.StartJobController(env.Ctx, env.Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopJobs)
	env.StartScheduler(framework.SchedulerOptions{})

	dir := t.TempDir()
	k, err := kueue.Start(env.Ctx, env.Config, kueue.Options{Root: framework.RepoFile(), Dir: dir})
	if err != nil {
		t.Fatalf("start Kueue: %v", err)
	}
	t.Cleanup(func() {
		if err := k.Stop(); err != nil {
			t.Errorf("Kueue's manager: %v", err)
		}
		if t.Failed() {
			if log, err := os.ReadFile(k.Log); err == nil {
				t.Logf("Kueue's log:\n%s", tail(string(log), 60))
			}
		}
	})
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, env: env, dynamic: dyn, kueue: k}

	classes, err := os.ReadFile(framework.RepoFile("config", "gpu-driver", "deviceclasses.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c.apply(string(classes))
	for i := range nodes {
		node := env.CreateNode(fmt.Sprintf("node-%d", i))
		env.PublishSlices(builder.MakeSlice(node.Name).Driver(driver).Node(node.Name).Devices(
			builder.Devices("gpu-", gpusPerNode, func(_ int, d *builder.DeviceWrapper) { d.String("type", "gpu") })...).Obj())
	}
	c.priorities = map[string]string{
		"low":  env.CreatePriorityClass("low", 100),
		"high": env.CreatePriorityClass("high", 1000),
	}
	c.apply(fmt.Sprintf(queues, env.Namespace, env.Name("")))
	return c
}

const queues = `
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: %[2]sgpus
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: %[2]steam-a
spec:
  cohortName: %[2]sgpus
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [drasched.dev/gpu]
    flavors:
    - name: %[2]sgpus
      resources:
      - name: drasched.dev/gpu
        nominalQuota: 4
  preemption:
    reclaimWithinCohort: Any
    withinClusterQueue: LowerPriority
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: %[2]steam-b
spec:
  cohortName: %[2]sgpus
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [drasched.dev/gpu]
    flavors:
    - name: %[2]sgpus
      resources:
      - name: drasched.dev/gpu
        nominalQuota: 4
        borrowingLimit: 0
  preemption:
    reclaimWithinCohort: Any
    withinClusterQueue: LowerPriority
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata:
  name: team-a
  namespace: %[1]s
spec:
  clusterQueue: %[2]steam-a
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata:
  name: team-b
  namespace: %[1]s
spec:
  clusterQueue: %[2]steam-b
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: one-gpu
  namespace: %[1]s
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.drasched.dev
`

// job is a batch/v1 Job as a user writes it for Kueue: a queue label and
// no suspend field (Kueue's webhook suspends it until admission), pods for
// drasched with one GPU each from a ResourceClaimTemplate.
const job = `
apiVersion: batch/v1
kind: Job
metadata:
  name: %[2]s
  namespace: %[1]s
  labels:
    kueue.x-k8s.io/queue-name: %[3]s
spec:
  parallelism: %[4]d
  completions: %[4]d
  template:
    spec:
      schedulerName: drasched
      priorityClassName: %[5]s
      restartPolicy: Never
      terminationGracePeriodSeconds: 0
      containers:
      - name: train
        image: registry.k8s.io/pause:3.10
        resources:
          claims:
          - name: gpu
      resourceClaims:
      - name: gpu
        resourceClaimTemplateName: one-gpu
`

// submit creates a Job of pods one-GPU pods in the LocalQueue queue.
func (c *cluster) submit(name, queue string, pods int, priority string) {
	c.t.Helper()
	c.apply(fmt.Sprintf(job, c.env.Namespace, name, queue, pods, c.priorities[priority]))
}

func (c *cluster) apply(manifests string) {
	c.t.Helper()
	objects, err := kueue.Decode([]byte(manifests))
	if err != nil {
		c.t.Fatal(err)
	}
	if err := kueue.Apply(c.env.Ctx, c.env.Config, objects); err != nil {
		c.t.Fatal(err)
	}
}

// workload returns the Workload Kueue made for a Job, or nil.
func (c *cluster) workload(ctx context.Context, jobName string) (*unstructured.Unstructured, error) {
	list, err := c.dynamic.Resource(workloads).Namespace(c.env.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range list.Items {
		for _, owner := range list.Items[i].GetOwnerReferences() {
			if owner.Kind == "Job" && owner.Name == jobName {
				return &list.Items[i], nil
			}
		}
	}
	return nil, nil
}

// condition returns a Workload's condition of that type: status and message.
func condition(wl *unstructured.Unstructured, conditionType string) (status, message string) {
	conditions, _, _ := unstructured.NestedSlice(wl.Object, "status", "conditions")
	for _, c := range conditions {
		c := c.(map[string]any)
		if c["type"] == conditionType {
			status, _ = c["status"].(string)
			message, _ = c["message"].(string)
			return status, message
		}
	}
	return "", ""
}

// waitAdmitted waits until Kueue has (or has not) admitted the Job's
// workload, and returns the workload.
func (c *cluster) waitAdmitted(jobName string, admitted bool) *unstructured.Unstructured {
	c.t.Helper()
	want := map[bool]string{true: "True", false: "False"}[admitted]
	var wl *unstructured.Unstructured
	c.env.WaitFor(timeout, fmt.Sprintf("Kueue: workload of job %s admitted=%v", jobName, admitted), func(ctx context.Context) (bool, string, error) {
		var err error
		if wl, err = c.workload(ctx, jobName); err != nil || wl == nil {
			return false, "no workload yet", err
		}
		status, message := condition(wl, "Admitted")
		quota, quotaMessage := condition(wl, "QuotaReserved")
		state := fmt.Sprintf("Admitted=%q (%s), QuotaReserved=%q (%s)", status, message, quota, quotaMessage)
		// A workload that was never admitted has no Admitted condition.
		return status == want || (!admitted && status == "" && quota == "False"), state, nil
	})
	return wl
}

// jobPods returns the Job's pods that are not being deleted, and how many
// of them are bound.
func (c *cluster) jobPods(ctx context.Context, jobName string) (live []v1.Pod, bound int, err error) {
	pods, err := c.env.Client.CoreV1().Pods(c.env.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + jobName})
	if err != nil {
		return nil, 0, err
	}
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp != nil {
			continue
		}
		live = append(live, pod)
		if pod.Spec.NodeName != "" {
			bound++
		}
	}
	return live, bound, nil
}

// waitPlaced waits until all n pods of the Job are bound, each with its
// claim allocated, and no other pod of it is left.
func (c *cluster) waitPlaced(jobName string, n int) {
	c.t.Helper()
	c.env.WaitFor(timeout, fmt.Sprintf("drasched: %d pods of job %s bound", n, jobName), func(ctx context.Context) (bool, string, error) {
		pods, bound, err := c.jobPods(ctx, jobName)
		return len(pods) == n && bound == n, fmt.Sprintf("%d pods, %d bound", len(pods), bound), err
	})
}

// waitGone waits until the Job has no pods at all, its claims
// deallocated: what Kueue's eviction must lead to.
func (c *cluster) waitGone(jobName string) {
	c.t.Helper()
	c.env.WaitFor(timeout, fmt.Sprintf("job %s's pods gone", jobName), func(ctx context.Context) (bool, string, error) {
		pods, err := c.env.Client.CoreV1().Pods(c.env.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + jobName})
		if err != nil {
			return false, "", err
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d pods", len(pods.Items)), nil
	})
}

// allocatedGPUs counts the devices allocated to claims of the namespace.
func (c *cluster) allocatedGPUs(ctx context.Context) (int, error) {
	claims, err := c.env.Client.ResourceV1().ResourceClaims(c.env.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, claim := range claims.Items {
		if claim.Status.Allocation != nil {
			n += len(claim.Status.Allocation.Devices.Results)
		}
	}
	return n, nil
}

// usage returns what a ClusterQueue's status says it uses of its GPU
// quota, and how much of that is borrowed.
func (c *cluster) usage(ctx context.Context, queue string) (total, borrowed int64, err error) {
	cq, err := c.dynamic.Resource(schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"}).
		Get(ctx, c.env.Name(queue), metav1.GetOptions{})
	if err != nil {
		return 0, 0, err
	}
	flavors, _, _ := unstructured.NestedSlice(cq.Object, "status", "flavorsUsage")
	for _, f := range flavors {
		resources, _, _ := unstructured.NestedSlice(f.(map[string]any), "resources")
		for _, r := range resources {
			r := r.(map[string]any)
			if r["name"] != "drasched.dev/gpu" {
				continue
			}
			total += quantity(r["total"])
			borrowed += quantity(r["borrowed"])
		}
	}
	return total, borrowed, nil
}

func quantity(v any) int64 {
	var n int64
	switch v := v.(type) {
	case string:
		_, _ = fmt.Sscan(v, &n)
	case int64:
		n = v
	case float64:
		n = int64(v)
	}
	return n
}

// TestQuotaAndPlacement follows two teams' Jobs through Kueue and drasched:
// admission by quota for DRA devices, borrowing within the cohort, Kueue's
// reclaim of lent quota and its priority preemption within a queue, and
// drasched placing exactly what Kueue admitted, with no device in two
// claims at any step and no pod of an unadmitted workload left running.
func TestQuotaAndPlacement(t *testing.T) {
	c := setUp(t, nil)
	env := c.env
	step := func(what string) { t.Logf("--- %s", what) }

	step("team-a's job of 6 GPUs: 4 of its quota and 2 borrowed from idle team-b")
	c.submit("a-train", "team-a", 6, "low")
	wl := c.waitAdmitted("a-train", true)
	requests, _, _ := unstructured.NestedSlice(wl.Object, "status", "admission", "podSetAssignments")
	if !strings.Contains(fmt.Sprint(requests), "drasched.dev/gpu") {
		t.Errorf("Kueue's admission of a-train names no drasched.dev/gpu quota: %v", requests)
	}
	c.waitPlaced("a-train", 6)
	env.VerifyAllocations()
	env.WaitFor(timeout, "team-a's usage 6 GPUs, 2 borrowed", func(ctx context.Context) (bool, string, error) {
		total, borrowed, err := c.usage(ctx, "team-a")
		return total == 6 && borrowed == 2, fmt.Sprintf("total %d, borrowed %d", total, borrowed), err
	})

	step("team-b's job of 4 GPUs reclaims its lent quota: Kueue evicts a-train, drasched places b-train")
	c.submit("b-train", "team-b", 4, "low")
	c.waitAdmitted("b-train", true)
	c.waitPlaced("b-train", 4)
	// a-train cannot come back: team-a has 4, team-b lends nothing now.
	c.waitAdmitted("a-train", false)
	c.waitGone("a-train")
	env.WaitForConsistentAllocations()
	env.VerifyAllocations()
	if _, message := condition(mustWorkload(t, c, "a-train"), "Evicted"); message == "" {
		t.Error("a-train's workload has no Evicted condition after team-b reclaimed its quota")
	}

	step("team-b's high-priority job of 2 GPUs preempts b-train within team-b; a-train borrows again")
	c.submit("b-serve", "team-b", 2, "high")
	c.waitAdmitted("b-serve", true)
	c.waitPlaced("b-serve", 2)
	c.waitAdmitted("b-train", false)
	c.waitGone("b-train")
	// team-b now uses 2 of its 4: team-a's 6-GPU job fits by borrowing
	// the other 2, and the devices are there for it.
	c.waitAdmitted("a-train", true)
	c.waitPlaced("a-train", 6)
	env.WaitForConsistentAllocations()
	env.VerifyAllocations()
	env.WaitFor(timeout, "8 GPUs allocated: b-serve's 2 and a-train's 6", func(ctx context.Context) (bool, string, error) {
		n, err := c.allocatedGPUs(ctx)
		return n == nodes*gpusPerNode, fmt.Sprintf("%d allocated", n), err
	})

	step("b-train waits in Kueue's queue, not in drasched's: no pod of it exists")
	live, bound, err := c.jobPods(env.Ctx, "b-train")
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != 0 {
		t.Errorf("b-train is not admitted but has %d pods (%d bound)", len(live), bound)
	}
	if status, message := condition(mustWorkload(t, c, "b-train"), "QuotaReserved"); status != "False" || message == "" {
		t.Errorf("b-train's QuotaReserved = %q (%q), want False with the reason", status, message)
	}
	c.checkClaimsOfAdmittedOnly()
}

// checkClaimsOfAdmittedOnly checks that every allocated claim of the
// namespace belongs to a bound pod of an admitted workload's Job.
func (c *cluster) checkClaimsOfAdmittedOnly() {
	c.t.Helper()
	ctx := c.env.Ctx
	claims, err := c.env.Client.ResourceV1().ResourceClaims(c.env.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, claim := range claims.Items {
		if claim.Status.Allocation == nil {
			continue
		}
		owner := claimOwner(&claim)
		pod, err := c.env.Client.CoreV1().Pods(c.env.Namespace).Get(ctx, owner, metav1.GetOptions{})
		if err != nil {
			c.t.Errorf("claim %s is allocated for pod %s: %v", claim.Name, owner, err)
			continue
		}
		jobName := pod.Labels["batch.kubernetes.io/job-name"]
		wl, err := c.workload(ctx, jobName)
		if err != nil || wl == nil {
			c.t.Errorf("claim %s: pod %s of job %q has no workload (%v)", claim.Name, pod.Name, jobName, err)
			continue
		}
		if status, _ := condition(wl, "Admitted"); status != "True" {
			c.t.Errorf("claim %s is allocated for pod %s of job %s, whose workload is not admitted", claim.Name, pod.Name, jobName)
		}
	}
}

func claimOwner(claim *resourceapi.ResourceClaim) string {
	i := slices.IndexFunc(claim.OwnerReferences, func(o metav1.OwnerReference) bool { return o.Kind == "Pod" })
	if i < 0 {
		return ""
	}
	return claim.OwnerReferences[i].Name
}

func mustWorkload(t *testing.T, c *cluster, jobName string) *unstructured.Unstructured {
	t.Helper()
	wl, err := c.workload(c.env.Ctx, jobName)
	if err != nil || wl == nil {
		t.Fatalf("workload of job %s: %v", jobName, err)
	}
	return wl
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestKueueOwnsPreemption checks the division of preemption (docs/kueue.md):
// a pod of a workload Kueue admitted does not preempt with drasched, and
// drasched evicts no pod of a workload Kueue admitted. The point where the
// two would fight is made to last: Kueue evicts b-train for the
// higher-priority b-serve of the same queue and admits b-serve once
// b-train's pods are gone, while the claim controller's writes that free
// b-train's devices are held. b-serve's pods then find every GPU taken,
// and the only pods drasched could evict are a-train's, of lower priority
// and admitted by Kueue in the other queue.
func TestKueueOwnsPreemption(t *testing.T) {
	freeing := framework.HoldFrom(1, bTrainClaimWrite, false, bTrainClaimWrite)
	c := setUp(t, freeing)
	env := c.env

	c.submit("a-train", "team-a", 4, "low")
	c.waitAdmitted("a-train", true)
	c.waitPlaced("a-train", 4)
	c.submit("b-train", "team-b", 4, "low")
	c.waitAdmitted("b-train", true)
	c.waitPlaced("b-train", 4)
	aPods, _, err := c.jobPods(env.Ctx, "a-train")
	if err != nil {
		t.Fatal(err)
	}

	c.submit("b-serve", "team-b", 2, "high")
	c.waitAdmitted("b-serve", true)
	c.waitGone("b-train")
	select {
	case <-freeing.Arrived():
	case <-time.After(timeout):
		t.Fatal("the claim controller did not start to free b-train's claims")
	}
	// Both of b-serve's pods have tried and been told why they wait.
	env.WaitFor(timeout, "b-serve's pods unschedulable, waiting for Kueue's evictions", func(ctx context.Context) (bool, string, error) {
		pods, bound, err := c.jobPods(ctx, "b-serve")
		if err != nil {
			return false, "", err
		}
		if bound > 0 {
			// Only an eviction can have freed a device.
			c.checkIntact("a-train", aPods)
			t.Fatalf("%d of b-serve's pods were bound while every GPU was taken", bound)
		}
		waiting := 0
		var state []string
		for _, pod := range pods {
			cond := framework.PodScheduledCondition(&pod)
			if cond != nil && cond.Status == v1.ConditionFalse && strings.Contains(cond.Message, "managed by Kueue") {
				waiting++
			}
			if cond != nil {
				state = append(state, pod.Name+": "+cond.Message)
			}
		}
		return len(pods) == 2 && waiting == 2, fmt.Sprintf("%d pods, %d bound: %s", len(pods), bound, strings.Join(state, "; ")), nil
	})
	c.checkIntact("a-train", aPods)

	freeing.Release()
	c.waitPlaced("b-serve", 2)
	c.checkIntact("a-train", aPods)
	env.WaitForConsistentAllocations()
	env.VerifyAllocations()
	c.checkClaimsOfAdmittedOnly()

	// The other way: a pod outside Kueue, of high priority, needs 3 GPUs
	// where 2 are free. Only a-train's pods are of lower priority, and
	// they are Kueue's: drasched evicts none and the pod waits.
	c.apply(fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata:
  name: outsider
  namespace: %s
spec:
  schedulerName: drasched
  priorityClassName: %s
  containers:
  - name: c
    image: registry.k8s.io/pause:3.10
    resources:
      claims: [{name: a}, {name: b}, {name: c}]
  resourceClaims:
  - {name: a, resourceClaimTemplateName: one-gpu}
  - {name: b, resourceClaimTemplateName: one-gpu}
  - {name: c, resourceClaimTemplateName: one-gpu}
`, env.Namespace, c.priorities["high"]))
	msg := env.WaitForPodUnschedulable("outsider", "preemption: ")
	if strings.Contains(msg, "preempting") {
		t.Errorf("outsider preempts: %s", msg)
	}
	t.Logf("outsider: %s", msg)
	c.checkIntact("a-train", aPods)
	env.VerifyAllocations()
}

// bTrainClaimWrite matches the claim controller's writes to b-train's
// claims: the updates that remove a gone pod from reservedFor and
// deallocate the claim, and the deletion of the claim.
func bTrainClaimWrite(call framework.APICall) bool {
	return framework.ClaimWrites(call) && call.Verb != "create" && strings.HasPrefix(call.Name, "b-train-")
}

// checkIntact checks that the Job still runs exactly the given pods, bound
// and not being deleted: no one evicted any of them.
func (c *cluster) checkIntact(jobName string, want []v1.Pod) {
	c.t.Helper()
	pods, bound, err := c.jobPods(c.env.Ctx, jobName)
	if err != nil {
		c.t.Fatal(err)
	}
	uids := func(pods []v1.Pod) []string {
		var out []string
		for _, pod := range pods {
			out = append(out, string(pod.UID))
		}
		slices.Sort(out)
		return out
	}
	if !slices.Equal(uids(pods), uids(want)) || bound != len(want) {
		c.t.Errorf("job %s: %d pods, %d bound, not the %d it ran before: a pod of it was evicted", jobName, len(pods), bound, len(want))
	}
}

// TestUnsupportedClaims checks what happens to Jobs whose claims Kueue's
// DRA support cannot count: one from a template with a constraint between
// its devices, one whose pods share a ResourceClaim (resourceClaimName).
// Kueue admits neither and says why in the workload's QuotaReserved
// condition, and no pod of either reaches drasched.
func TestUnsupportedClaims(t *testing.T) {
	c := setUp(t, nil)
	env := c.env
	c.apply(fmt.Sprintf(`
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: two-gpus-one-root
  namespace: %[1]s
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly:
          deviceClassName: gpu.drasched.dev
          count: 2
      constraints:
      - matchAttribute: resource.kubernetes.io/pcieRoot
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: shared-gpu
  namespace: %[1]s
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.drasched.dev
`, env.Namespace))
	for _, tc := range []struct{ job, claim string }{
		{"constrained", "resourceClaimTemplateName: two-gpus-one-root"},
		{"shared", "resourceClaimName: shared-gpu"},
	} {
		c.apply(strings.Replace(fmt.Sprintf(job, env.Namespace, tc.job, "team-a", 2, c.priorities["low"]),
			"resourceClaimTemplateName: one-gpu", tc.claim, 1))
	}
	for _, tc := range []struct{ job, want string }{
		{"constrained", "device constraints (MatchAttribute) are not supported"},
		{"shared", "does not support use of resource claims"},
	} {
		env.WaitFor(timeout, "Kueue to refuse the workload of job "+tc.job+", saying why", func(ctx context.Context) (bool, string, error) {
			wl, err := c.workload(ctx, tc.job)
			if err != nil || wl == nil {
				return false, "no workload", err
			}
			status, message := condition(wl, "QuotaReserved")
			return status == "False" && strings.Contains(message, tc.want), fmt.Sprintf("QuotaReserved=%q (%s)", status, message), nil
		})
		_, message := condition(mustWorkload(t, c, tc.job), "QuotaReserved")
		t.Logf("Kueue on job %s: %s", tc.job, message)
		if pods, _, err := c.jobPods(env.Ctx, tc.job); err != nil || len(pods) != 0 {
			t.Errorf("job %s, not admitted, has %d pods (%v)", tc.job, len(pods), err)
		}
	}
}
