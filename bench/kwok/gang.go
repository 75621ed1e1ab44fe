package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The gang case measures workload-aware scheduling with claims: PodGroups
// (scheduling.k8s.io/v1beta1) whose gang policy asks for all their pods at
// once (minCount = the group's size), each pod with a claim of whole H100
// GPUs from a ResourceClaimTemplate, as the other cases' pods. A scheduler
// binds a group's pods together or none of them; a group left with some
// pods bound and others not holds GPUs that it cannot use, which is the
// failure the case counts (partial groups).
//
// The case needs the GenericWorkload feature gate (beta, off by default in
// 1.37) in kube-apiserver, kube-controller-manager and the scheduler, and
// the scheduling.k8s.io/v1beta1 API: hack/bench-kwok.sh runs it on a
// cluster of its own with both, so that the gate cannot change what the
// other cases measure (with it, kube-scheduler also requeues every
// unschedulable pod on each new pod, and its preemption takes another
// path).
const caseGang = "gang"

// gangShape is the shape of a group: how many pods, of how many H100 GPUs
// each.
type gangShape struct{ pods, gpus int }

// gangShapes are the groups of the gang workload: 4 pods × 8 GPUs and
// 8 pods × 4 GPUs, 32 GPUs each. The 8-GPU groups come first, for the
// reason fillPods gives: created largest first, any placement of whole
// nodes and half nodes leaves room for the rest, so the case measures
// gang scheduling, not placement policy.
var gangShapes = []gangShape{{pods: 4, gpus: 8}, {pods: 8, gpus: 4}}

// gangGroup is one PodGroup of a gang workload (gang, preempt_gang) and
// its pods. priorityClass, if any, is the PodGroup's and every pod's:
// kube-scheduler requires the pods of a group to have the group's
// priority.
type gangGroup struct {
	name          string
	priorityClass string
	pods          []podSpec
}

// newGangGroup returns a group of the shape, its pods named after it, each
// naming the group and having its PriorityClass.
func newGangGroup(name string, shape gangShape, priorityClass string) gangGroup {
	g := gangGroup{name: name, priorityClass: priorityClass}
	for j := range shape.pods {
		g.pods = append(g.pods, podSpec{
			name:          fmt.Sprintf("%s-%d", name, j),
			template:      h100Template(shape.gpus),
			priorityClass: priorityClass,
			gpus:          shape.gpus,
			group:         name,
		})
	}
	return g
}

// gangGroupGPUs is the GPUs of one group, of either shape.
func gangGroupGPUs(s gangShape) int { return s.pods * s.gpus }

// gangGroups returns groups of the shapes of gangShapes, as many of each
// (the first shape one more if the count is odd) as fit into fraction of
// gpus, the first shape's first. Every pod names its group.
func gangGroups(gpus int, fraction float64) []gangGroup {
	budget := int(float64(gpus) * fraction)
	// All shapes take the same GPUs per group.
	count := budget / gangGroupGPUs(gangShapes[0])
	var groups []gangGroup
	for i, shape := range gangShapes {
		n := count / len(gangShapes)
		if i < count%len(gangShapes) {
			n++
		}
		for range n {
			groups = append(groups, newGangGroup(fmt.Sprintf("gang-%04d", len(groups)), shape, ""))
		}
	}
	return groups
}

// gangPods returns the pods of the groups, in order.
func gangPods(groups []gangGroup) []podSpec {
	var pods []podSpec
	for _, g := range groups {
		pods = append(pods, g.pods...)
	}
	return pods
}

// podGroupObject is the PodGroup of a group of the case: a gang of all its
// pods, with the group's PriorityClass.
func podGroupObject(namespace, caseName string, g gangGroup) *schedulingv1beta1.PodGroup {
	return &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{
			Name:      g.name,
			Namespace: namespace,
			Labels:    map[string]string{appLabel: appValue, caseLabel: caseName},
		},
		Spec: schedulingv1beta1.PodGroupSpec{
			SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
				Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(len(g.pods))},
			},
			PriorityClassName: g.priorityClass,
		},
	}
}

// groupSample is what the gang case measured of its groups.
type groupSample struct {
	// latencies are, for each group whose pods were all bound, from just
	// before its PodGroup's Create call to the bind of its last pod, in
	// seconds.
	latencies []float64
	// incomplete counts the groups with a pod never seen bound (or never
	// created).
	incomplete int
}

// measureGroups computes the group latencies from the tracker: a group's
// creation is recorded under its name, its pods' binds under theirs.
func (t *tracker) measureGroups(groups []gangGroup) groupSample {
	t.mu.Lock()
	defer t.mu.Unlock()
	var s groupSample
	for _, g := range groups {
		created, ok := t.created[g.name]
		var last time.Time
		for _, p := range g.pods {
			bound, okBound := t.bound[p.name]
			if !okBound {
				ok = false
				break
			}
			if bound.After(last) {
				last = bound
			}
		}
		if !ok || len(g.pods) == 0 {
			s.incomplete++
			continue
		}
		s.latencies = append(s.latencies, last.Sub(created).Seconds())
	}
	return s
}

// partialGroups counts, from the pods as the API lists them, the groups
// with some but not all of their pods bound (on a node and not being
// deleted), and the groups with all of them bound.
func partialGroups(groups []gangGroup, pods []corev1.Pod) (partial, complete int) {
	onNode := map[string]bool{}
	for _, pod := range pods {
		if pod.Spec.NodeName != "" && pod.DeletionTimestamp == nil {
			onNode[pod.Name] = true
		}
	}
	for _, g := range groups {
		bound := 0
		for _, p := range g.pods {
			if onNode[p.name] {
				bound++
			}
		}
		switch {
		case bound == len(g.pods) && bound > 0:
			complete++
		case bound > 0:
			partial++
		}
	}
	return partial, complete
}

// measureGang creates the PodGroups and their pods at once, each PodGroup
// just before its pods, GangFraction of the H100 GPUs in all, and waits
// until all are bound. It then waits until no pod has been bound for
// gangSettle, so that a group caught between the binds of its pods is not
// counted as partial, and counts the groups partly bound from the API.
func (r *runner) measureGang(ctx context.Context, c *caseResult, capa capacity) {
	groups := gangGroups(capa.h100, r.cfg.GangFraction)
	pods := gangPods(groups)
	names := podNames(pods)
	c.Pods, c.Groups = len(pods), len(groups)
	start := time.Now()
	if err := r.createGroups(ctx, c.Name, groups); err != nil {
		c.addErrors(err)
	}
	waitErr := r.waitBound(ctx, c.Name, names, start, r.timeout(len(pods)))
	if waitErr != nil {
		c.addErrors(waitErr)
		r.settle(ctx, names)
	}
	r.fill(c, names, start)
	s := r.tracker.measureGroups(groups)
	c.GroupLatencies = s.latencies

	list, err := r.client.CoreV1().Pods(r.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: caseLabel + "=" + c.Name})
	if err != nil {
		c.addErrors(fmt.Errorf("list gang pods: %w", err))
		return
	}
	var complete int
	c.PartialGroups, complete = partialGroups(groups, list.Items)
	c.GroupsBound = complete
	if c.PartialGroups > 0 {
		c.addErrors(fmt.Errorf("%d of %d groups partly bound", c.PartialGroups, len(groups)))
	}
}

// gangSettle is how long the gang case waits for no new bind before it
// counts partial groups, where not all pods were bound in time.
const gangSettle = 5 * time.Second

// settle waits until none of the pods has been bound for gangSettle, at
// most a minute.
func (r *runner) settle(ctx context.Context, names []string) {
	last, at := -1, time.Now()
	_ = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		if n := r.tracker.countBound(names); n != last {
			last, at = n, time.Now()
		}
		return time.Since(at) >= gangSettle, nil
	})
}

// createGroups creates each group's PodGroup and then its pods, labelled
// with the case, with cfg.Workers groups in parallel, recording each
// PodGroup's creation in the tracker under the group's name.
func (r *runner) createGroups(ctx context.Context, caseName string, groups []gangGroup) error {
	return parallelize(ctx, r.cfg.Workers, groups, "groups not created", func(g gangGroup) error {
		return r.createGroup(ctx, caseName, g)
	})
}

func (r *runner) createGroup(ctx context.Context, caseName string, g gangGroup) error {
	r.tracker.creating(g.name)
	if _, err := r.client.SchedulingV1beta1().PodGroups(r.cfg.Namespace).Create(ctx, podGroupObject(r.cfg.Namespace, caseName, g), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create PodGroup %s: %w", g.name, err)
	}
	for _, p := range g.pods {
		if err := r.createPod(ctx, caseName, p); err != nil {
			return err
		}
	}
	return nil
}
