package main

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func TestQueueJobs(t *testing.T) {
	for name, tc := range map[string]struct {
		gpus int
		// want counts the Jobs per team.
		want map[string]int
	}{
		// 800 H100 nodes: team-a 50% of 6400 GPUs in Jobs of 8, team-b 30%.
		"1000 nodes": {gpus: 6400, want: map[string]int{"team-a": 400, "team-b": 240}},
		// QUICK: 80 H100 nodes.
		"100 nodes": {gpus: 640, want: map[string]int{"team-a": 40, "team-b": 24}},
		// Shares that do not come out whole: rounded down, to whole Jobs.
		"21 nodes": {gpus: 168, want: map[string]int{"team-a": 10, "team-b": 6}},
		"too few":  {gpus: 8, want: map[string]int{}},
	} {
		t.Run(name, func(t *testing.T) {
			jobs := queueJobs(tc.gpus)
			got := map[string]int{}
			gpus := map[string]int{}
			names := map[string]bool{}
			for i, j := range jobs {
				got[j.queue]++
				gpus[j.queue] += gangGroupGPUs(j.shape)
				if names[j.name] {
					t.Errorf("Job name %s twice", j.name)
				}
				names[j.name] = true
				if !slices.Contains(queueShapes, j.shape) {
					t.Errorf("Job %s of shape %+v, not one of %+v", j.name, j.shape, queueShapes)
				}
				// The shapes alternate within a team; the teams come one
				// after the other.
				if i > 0 && jobs[i-1].queue == j.queue && jobs[i-1].shape == j.shape {
					t.Errorf("Jobs %s and %s of the same shape in a row", jobs[i-1].name, j.name)
				}
				if i > 0 && jobs[i-1].queue != j.queue && slices.ContainsFunc(jobs[:i], func(o queueJob) bool { return o.queue == j.queue }) {
					t.Errorf("Job %s: the Jobs of %s are not together", j.name, j.queue)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Jobs per team (-want +got):\n%s", diff)
			}
			if got := queuePods(jobs); got != queuePodsOf(jobs) {
				t.Errorf("queuePods %d, want %d", got, queuePodsOf(jobs))
			}
			// Every Job is admitted at once, without preemption: each
			// team within its nominal quota and borrowing limit, and what
			// the borrowers borrow within what the others leave unused.
			nominal := percentOf(tc.gpus, queueNominalPercent)
			borrowed, unused := 0, 0
			for _, team := range queueTeams {
				if limit := nominal + percentOf(tc.gpus, team.borrowPercent); gpus[team.name] > limit {
					t.Errorf("%s asks for %d GPUs, more than its quota and borrowing limit %d", team.name, gpus[team.name], limit)
				}
				if gpus[team.name] > percentOf(tc.gpus, team.demandPercent) {
					t.Errorf("%s asks for %d GPUs, more than its share %d%%", team.name, gpus[team.name], team.demandPercent)
				}
				borrowed += max(0, gpus[team.name]-nominal)
				unused += max(0, nominal-gpus[team.name])
			}
			if borrowed > unused {
				t.Errorf("the teams borrow %d GPUs, the others leave %d unused", borrowed, unused)
			}
			if total := gpus["team-a"] + gpus["team-b"]; total > len(queueTeams)*nominal {
				t.Errorf("the Jobs take %d GPUs, more than the cohort's %d", total, len(queueTeams)*nominal)
			}
		})
	}
	// At 1,000 nodes team-a must borrow, or the case would not show it.
	a := 0
	for _, j := range queueJobs(6400) {
		if j.queue == "team-a" {
			a += gangGroupGPUs(j.shape)
		}
	}
	if a <= percentOf(6400, queueNominalPercent) {
		t.Errorf("team-a's Jobs take %d GPUs, within its nominal quota: it borrows nothing", a)
	}
}

func queuePodsOf(jobs []queueJob) int {
	n := 0
	for _, j := range jobs {
		n += j.shape.pods
	}
	return n
}

// Every shape takes the same GPUs, which queueJobs counts on.
func TestQueueShapes(t *testing.T) {
	for _, s := range queueShapes {
		if gangGroupGPUs(s) != gangGroupGPUs(queueShapes[0]) {
			t.Errorf("shape %+v takes %d GPUs, %+v %d", s, gangGroupGPUs(s), queueShapes[0], gangGroupGPUs(queueShapes[0]))
		}
	}
}

func TestQueueObjects(t *testing.T) {
	labels := map[string]string{"gpu.drasched.dev/inventory": "h100-hgx-8"}
	objects := queueObjects("bench", 6400, labels)
	byKind := map[string][]*unstructured.Unstructured{}
	for _, obj := range objects {
		if obj.GetAPIVersion() != "kueue.x-k8s.io/v1beta2" {
			t.Errorf("%s %s: apiVersion %s", obj.GetKind(), obj.GetName(), obj.GetAPIVersion())
		}
		byKind[obj.GetKind()] = append(byKind[obj.GetKind()], obj)
	}
	if n := len(byKind["ResourceFlavor"]); n != 1 {
		t.Fatalf("%d ResourceFlavors, want 1", n)
	}
	flavor := byKind["ResourceFlavor"][0]
	nodeLabels, _, _ := unstructured.NestedStringMap(flavor.Object, "spec", "nodeLabels")
	if flavor.GetName() != queueFlavor || !cmp.Equal(labels, nodeLabels) {
		t.Errorf("ResourceFlavor %s with nodeLabels %v, want %s with %v", flavor.GetName(), nodeLabels, queueFlavor, labels)
	}

	type quota struct {
		cohort, flavor, resource string
		nominal, borrowing       int64
	}
	got := map[string]quota{}
	for _, cq := range byKind["ClusterQueue"] {
		if cq.GetNamespace() != "" {
			t.Errorf("ClusterQueue %s in namespace %s", cq.GetName(), cq.GetNamespace())
		}
		var q quota
		q.cohort, _, _ = unstructured.NestedString(cq.Object, "spec", "cohortName")
		groups, _, _ := unstructured.NestedSlice(cq.Object, "spec", "resourceGroups")
		if len(groups) != 1 {
			t.Fatalf("ClusterQueue %s: %d resource groups", cq.GetName(), len(groups))
		}
		covered, _, _ := unstructured.NestedStringSlice(groups[0].(map[string]any), "coveredResources")
		flavors, _, _ := unstructured.NestedSlice(groups[0].(map[string]any), "flavors")
		if !cmp.Equal([]string{queueResource}, covered) || len(flavors) != 1 {
			t.Fatalf("ClusterQueue %s: covers %v with %d flavors", cq.GetName(), covered, len(flavors))
		}
		q.flavor, _, _ = unstructured.NestedString(flavors[0].(map[string]any), "name")
		resources, _, _ := unstructured.NestedSlice(flavors[0].(map[string]any), "resources")
		if len(resources) != 1 {
			t.Fatalf("ClusterQueue %s: %d resources", cq.GetName(), len(resources))
		}
		r := resources[0].(map[string]any)
		q.resource, _ = r["name"].(string)
		q.nominal, q.borrowing = quantityValue(r["nominalQuota"]), quantityValue(r["borrowingLimit"])
		if _, ok := r["borrowingLimit"]; !ok {
			t.Errorf("ClusterQueue %s: no borrowingLimit, which would let it borrow all", cq.GetName())
		}
		if _, ok, _ := unstructured.NestedMap(cq.Object, "spec", "preemption"); ok {
			t.Errorf("ClusterQueue %s preempts; the quotas leave room for every Job", cq.GetName())
		}
		got[cq.GetName()] = q
	}
	want := map[string]quota{
		"team-a": {cohort: queueCohort, flavor: queueFlavor, resource: queueResource, nominal: 2560, borrowing: 640},
		"team-b": {cohort: queueCohort, flavor: queueFlavor, resource: queueResource, nominal: 2560, borrowing: 0},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(quota{})); diff != "" {
		t.Errorf("ClusterQueues (-want +got):\n%s", diff)
	}

	localQueues := map[string]string{}
	for _, lq := range byKind["LocalQueue"] {
		if lq.GetNamespace() != "bench" {
			t.Errorf("LocalQueue %s in namespace %q, want bench", lq.GetName(), lq.GetNamespace())
		}
		localQueues[lq.GetName()], _, _ = unstructured.NestedString(lq.Object, "spec", "clusterQueue")
	}
	if diff := cmp.Diff(map[string]string{"team-a": "team-a", "team-b": "team-b"}, localQueues); diff != "" {
		t.Errorf("LocalQueues → ClusterQueues (-want +got):\n%s", diff)
	}
}

// Kueue counts the queue case's claims against the ClusterQueues' quota
// only if hack/kueue/values.yaml maps their class to the quota resource.
func TestQueueResourceMapped(t *testing.T) {
	data, err := os.ReadFile(repoRoot + "/hack/kueue/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		ManagerConfig struct {
			ControllerManagerConfigYaml string `json:"controllerManagerConfigYaml"`
		} `json:"managerConfig"`
	}
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	var config struct {
		FeatureGates map[string]bool `json:"featureGates"`
		Resources    struct {
			DeviceClassMappings []struct {
				Name             string   `json:"name"`
				DeviceClassNames []string `json:"deviceClassNames"`
			} `json:"deviceClassMappings"`
		} `json:"resources"`
	}
	if err := yaml.Unmarshal([]byte(values.ManagerConfig.ControllerManagerConfigYaml), &config); err != nil {
		t.Fatal(err)
	}
	if !config.FeatureGates["DynamicResourceAllocation"] {
		t.Error("Kueue's DynamicResourceAllocation gate is off: it counts no device")
	}
	for _, m := range config.Resources.DeviceClassMappings {
		if m.Name == queueResource && slices.Contains(m.DeviceClassNames, gpuClass) {
			return
		}
	}
	t.Errorf("hack/kueue/values.yaml does not map DeviceClass %s to %s: %+v", gpuClass, queueResource, config.Resources.DeviceClassMappings)
}

func TestJobObject(t *testing.T) {
	j := queueJob{name: "team-a-0001", queue: "team-a", shape: gangShape{pods: 4, gpus: 2}}
	job := jobObject("bench", "sched", j)
	if job.Name != j.name || job.Namespace != "bench" {
		t.Errorf("Job %s/%s", job.Namespace, job.Name)
	}
	if diff := cmp.Diff(map[string]string{appLabel: appValue, caseLabel: caseQueue, queueLabel: "team-a"}, job.Labels); diff != "" {
		t.Errorf("Job labels (-want +got):\n%s", diff)
	}
	// The pods carry the benchmark's labels, for cleanup and the checks,
	// and not the queue's: Kueue manages the Job, not its pods.
	if diff := cmp.Diff(map[string]string{appLabel: appValue, caseLabel: caseQueue}, job.Spec.Template.Labels); diff != "" {
		t.Errorf("pod labels (-want +got):\n%s", diff)
	}
	if job.Spec.Suspend != nil {
		t.Errorf("Job has suspend %v; Kueue's webhook sets it", *job.Spec.Suspend)
	}
	if *job.Spec.Parallelism != 4 || *job.Spec.Completions != 4 {
		t.Errorf("parallelism %d, completions %d, want 4", *job.Spec.Parallelism, *job.Spec.Completions)
	}
	pod := job.Spec.Template.Spec
	if pod.SchedulerName != "sched" || pod.RestartPolicy != corev1.RestartPolicyNever || pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds != 0 {
		t.Errorf("pod spec: scheduler %q, restart %s, grace %v", pod.SchedulerName, pod.RestartPolicy, pod.TerminationGracePeriodSeconds)
	}
	if len(pod.ResourceClaims) != 1 || *pod.ResourceClaims[0].ResourceClaimTemplateName != queueTemplate(2) {
		t.Errorf("claims %+v, want one from %s", pod.ResourceClaims, queueTemplate(2))
	}
	if len(pod.NodeSelector) != 0 {
		t.Errorf("node selector %v; the ResourceFlavor's labels are Kueue's to add", pod.NodeSelector)
	}
}

func jobPod(name, job, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{batchv1.JobNameLabel: job}},
		Spec:       corev1.PodSpec{NodeName: node},
	}
}

func TestMeasureJobs(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := start
	at := func(d time.Duration) { now = start.Add(d) }
	tr := newTracker(func() time.Time { return now })
	two := gangShape{pods: 2, gpus: 1}
	jobs := []queueJob{
		{name: "a", shape: two},
		{name: "b", shape: two},
		{name: "c", shape: two},
		{name: "never-created", shape: two},
	}
	tr.creating("a")
	at(time.Second)
	tr.creating("b")
	tr.creating("c")
	at(2 * time.Second)
	tr.observe(jobPod("a-1", "a", ""))
	tr.observe(jobPod("x-1", "x", "n")) // not a Job of the benchmark
	tr.observe(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain"}, Spec: corev1.PodSpec{NodeName: "n"}})
	at(3 * time.Second)
	tr.observe(jobPod("a-2", "a", ""))
	tr.observe(jobPod("b-1", "b", ""))
	at(4 * time.Second)
	tr.observe(jobPod("a-1", "a", "n"))
	tr.observe(jobPod("b-1", "b", "n"))
	at(6 * time.Second)
	tr.observe(jobPod("a-2", "a", "n"))
	tr.observe(jobPod("a-1", "a", "n")) // a later update does not count
	// b-2 is never created: b is incomplete. c has no pod.

	if got := tr.countJobPodsBound(jobs); got != 3 {
		t.Errorf("countJobPodsBound: %d, want 3", got)
	}
	got := tr.measureJobs(jobs, start)
	want := jobSample{
		// a-1, a-2 from a's creation at 0; b-1 from b's at 1 s.
		sample:       sample{latencies: []float64{4, 6, 3}, boundAt: []float64{4, 6, 4}, seconds: 6, unbound: 1 + 2 + 2},
		scheduling:   []float64{2, 3, 1},
		started:      []float64{2, 2},
		jobLatencies: []float64{6},
		incomplete:   3,
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(jobSample{}, sample{})); diff != "" {
		t.Errorf("jobs (-want +got):\n%s", diff)
	}
	// A pod of a Job the benchmark did not create is not recorded.
	if _, ok := tr.boundAt("x-1"); ok {
		t.Error("x-1 recorded")
	}
}

// A Job whose controller replaced a pod is bound once as many pods as its
// shape are.
func TestMeasureJobsReplacedPod(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := start
	tr := newTracker(func() time.Time { return now })
	jobs := []queueJob{{name: "a", shape: gangShape{pods: 2, gpus: 1}}}
	tr.creating("a")
	now = start.Add(time.Second)
	tr.observe(jobPod("a-1", "a", "n"))
	now = start.Add(2 * time.Second)
	tr.observe(jobPod("a-2", "a", "n"))
	now = start.Add(5 * time.Second)
	tr.observe(jobPod("a-3", "a", "n"))
	if got := tr.countJobPodsBound(jobs); got != 2 {
		t.Errorf("countJobPodsBound: %d, want 2", got)
	}
	got := tr.measureJobs(jobs, start)
	if diff := cmp.Diff([]float64{2}, got.jobLatencies); diff != "" || got.incomplete != 0 || got.unbound != 0 || len(got.latencies) != 3 {
		t.Errorf("job latencies (-want +got):\n%s; sample %+v", diff, got)
	}
}

func TestQueueUsage(t *testing.T) {
	cq := func(name string, resources ...map[string]any) unstructured.Unstructured {
		var rs []any
		for _, r := range resources {
			rs = append(rs, r)
		}
		return unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": name},
			"status": map[string]any{"flavorsUsage": []any{map[string]any{
				"name": queueFlavor, "resources": rs,
			}}},
		}}
	}
	queues := []unstructured.Unstructured{
		cq("team-a", map[string]any{"name": queueResource, "total": "3k", "borrowed": "440"}),
		cq("team-b", map[string]any{"name": queueResource, "total": int64(1200)},
			map[string]any{"name": "cpu", "total": "64", "borrowed": "8"}),
		{Object: map[string]any{"metadata": map[string]any{"name": "no-status"}}},
	}
	used, borrowed := queueUsage(queues)
	if used != 4200 || borrowed != 440 {
		t.Errorf("usage %d, borrowed %d, want 4200 and 440", used, borrowed)
	}
}

func TestConditionStatus(t *testing.T) {
	obj := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"conditions": []any{
		map[string]any{"type": "Other", "status": "False"},
		map[string]any{"type": "Active", "status": "True", "message": "Can admit new workloads"},
	}}}}
	if status, message := conditionStatus(obj, "Active"); status != "True" || message != "Can admit new workloads" {
		t.Errorf("Active: %q %q", status, message)
	}
	if status, _ := conditionStatus(obj, "Missing"); status != "" {
		t.Errorf("Missing: %q", status)
	}
}
