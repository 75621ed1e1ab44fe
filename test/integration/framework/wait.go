package framework

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
)

// Timeout bounds every wait. It is generous because CI runs this suite on
// two cores next to other tests; waits poll and return as soon as their
// condition holds, so a passing test never waits for it.
const Timeout = 2 * time.Minute

const pollInterval = 100 * time.Millisecond

// WaitFor polls cond until it returns true, and fails the test after
// timeout with the description and the last state cond reported. An error
// from cond, such as a failed API call, counts as "not yet".
func (env *Env) WaitFor(timeout time.Duration, what string, cond func(ctx context.Context) (done bool, state string, err error)) {
	env.t.Helper()
	var state string
	var lastErr error
	err := wait.PollUntilContextTimeout(env.Ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		done, s, err := cond(ctx)
		if err != nil {
			lastErr = err
			return false, nil
		}
		state, lastErr = s, nil
		return done, nil
	})
	if err != nil {
		if lastErr != nil {
			state = fmt.Sprintf("%s (then: %v)", state, lastErr)
		}
		env.t.Fatalf("waiting %s for %s: %v; last state: %s", timeout, what, err, state)
	}
}

// WaitForPod waits until the pod satisfies cond and returns it.
func (env *Env) WaitForPod(name, what string, cond func(*v1.Pod) bool) *v1.Pod {
	env.t.Helper()
	return env.WaitForPodWithin(Timeout, name, what, cond)
}

// WaitForPodWithin is WaitForPod with another timeout, for tests where
// speed is the point.
func (env *Env) WaitForPodWithin(timeout time.Duration, name, what string, cond func(*v1.Pod) bool) *v1.Pod {
	env.t.Helper()
	var pod *v1.Pod
	env.WaitFor(timeout, fmt.Sprintf("pod %s to be %s", name, what), func(ctx context.Context) (bool, string, error) {
		var err error
		pod, err = env.Client.CoreV1().Pods(env.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return cond(pod), describePod(pod), nil
	})
	return pod
}

// WaitForPodScheduled waits until the pod is bound to a node and returns it.
func (env *Env) WaitForPodScheduled(name string) *v1.Pod {
	env.t.Helper()
	return env.WaitForPod(name, "scheduled", func(pod *v1.Pod) bool { return pod.Spec.NodeName != "" })
}

// WaitForPodUnschedulable waits until the scheduler has given up on the pod
// for now (condition PodScheduled=False, reason Unschedulable) with a
// message that says each of wants, and returns the message.
//
// The scheduler's informers lag the API: a pod created right after its
// node may first be found unschedulable with "no nodes available", and is
// tried again when the node reaches the scheduler. Waiting for the wanted
// message rather than the first one is what makes such tests
// deterministic; a message that never comes fails the test with the last
// one seen.
func (env *Env) WaitForPodUnschedulable(name string, wants ...string) string {
	env.t.Helper()
	what := "unschedulable"
	if len(wants) > 0 {
		what = fmt.Sprintf("unschedulable saying %q", wants)
	}
	pod := env.WaitForPod(name, what, func(pod *v1.Pod) bool {
		c := PodScheduledCondition(pod)
		if pod.Spec.NodeName != "" || c == nil || c.Status != v1.ConditionFalse || c.Reason != v1.PodReasonUnschedulable {
			return false
		}
		for _, want := range wants {
			if !strings.Contains(c.Message, want) {
				return false
			}
		}
		return true
	})
	return PodScheduledCondition(pod).Message
}

// PodScheduledCondition returns the pod's PodScheduled condition, nil if it
// has none yet.
func PodScheduledCondition(pod *v1.Pod) *v1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == v1.PodScheduled {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// WaitForClaim waits until the claim satisfies cond and returns it.
func (env *Env) WaitForClaim(name, what string, cond func(*resourceapi.ResourceClaim) bool) *resourceapi.ResourceClaim {
	env.t.Helper()
	var claim *resourceapi.ResourceClaim
	env.WaitFor(Timeout, fmt.Sprintf("claim %s to be %s", name, what), func(ctx context.Context) (bool, string, error) {
		var err error
		claim, err = env.Client.ResourceV1().ResourceClaims(env.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return cond(claim), fmt.Sprintf("allocation %+v, reservedFor %+v", claim.Status.Allocation, claim.Status.ReservedFor), nil
	})
	return claim
}

// PodClaim returns the ResourceClaim behind one of the pod's resource
// claims, resolving the name of a claim generated from a template through
// the pod's status.
func (env *Env) PodClaim(pod *v1.Pod, podClaimName string) *resourceapi.ResourceClaim {
	env.t.Helper()
	for i := range pod.Spec.ResourceClaims {
		podClaim := &pod.Spec.ResourceClaims[i]
		if podClaim.Name != podClaimName {
			continue
		}
		name, _, err := resourceclaim.Name(pod, podClaim)
		if err != nil || name == nil {
			env.t.Fatalf("pod %s, claim %s: no ResourceClaim name (%v)", pod.Name, podClaimName, err)
		}
		claim, err := env.Client.ResourceV1().ResourceClaims(pod.Namespace).Get(env.Ctx, *name, metav1.GetOptions{})
		if err != nil {
			env.t.Fatalf("get ResourceClaim of pod %s: %v", pod.Name, err)
		}
		return claim
	}
	env.t.Fatalf("pod %s has no resource claim %s", pod.Name, podClaimName)
	return nil
}

// Pods lists the test's pods, split into bound ones, ones the scheduler
// found unschedulable, and the rest.
func (env *Env) Pods(ctx context.Context) (bound, unschedulable, pending []v1.Pod, err error) {
	pods, err := env.Client.CoreV1().Pods(env.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("list pods: %w", err)
	}
	for _, pod := range pods.Items {
		c := PodScheduledCondition(&pod)
		switch {
		case pod.Spec.NodeName != "":
			bound = append(bound, pod)
		case c != nil && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable:
			unschedulable = append(unschedulable, pod)
		default:
			pending = append(pending, pod)
		}
	}
	return bound, unschedulable, pending, nil
}

func describePod(pod *v1.Pod) string {
	s := fmt.Sprintf("node %q", pod.Spec.NodeName)
	if c := PodScheduledCondition(pod); c != nil {
		s += fmt.Sprintf(", PodScheduled=%s reason %q message %q", c.Status, c.Reason, c.Message)
	}
	return s
}

// BoundPods returns a channel that is closed once n pods of the test's
// namespace are bound. It learns of bindings from an informer rather than
// by polling, so that a test can stop or break something in the middle of
// the scheduler's work even on a fast machine, and rather than from a bare
// watch, which the API server closes when its consumer falls behind in a
// burst of pod events; an informer watches again from where it stopped.
func (env *Env) BoundPods(n int) <-chan struct{} {
	env.t.Helper()
	factory := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, informers.WithNamespace(env.Namespace))
	done := make(chan struct{})
	var mutex sync.Mutex
	bound := sets.New[string]()
	observe := func(obj any) {
		pod, ok := obj.(*v1.Pod)
		if !ok || pod.Spec.NodeName == "" {
			return
		}
		mutex.Lock()
		defer mutex.Unlock()
		if bound.Has(pod.Name) {
			// Later updates of bound pods are no news.
			return
		}
		bound.Insert(pod.Name)
		if bound.Len() == n {
			close(done)
		}
	}
	if _, err := factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
	}); err != nil {
		env.t.Fatalf("watch pods: %v", err)
	}
	ctx, cancel := context.WithCancel(env.Ctx)
	factory.Start(ctx.Done())
	env.t.Cleanup(func() {
		cancel()
		factory.Shutdown()
	})
	factory.WaitForCacheSync(ctx.Done())
	return done
}
