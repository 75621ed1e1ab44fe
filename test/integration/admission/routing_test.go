package admission

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/internal/manifest"
	"github.com/drasched/drasched/test/integration/framework"
)

// optOutLabel is the label by which a namespace or a pod opts out of the
// routing (config/admission/routing.yaml).
const optOutLabel = "drasched.dev/routing"

// TestRouting applies config/admission as shipped and checks what the
// policy does to the pods created after it is in force: pods with claims or
// with extended resources backed by a DeviceClass that the default
// scheduler would schedule go to drasched, which binds them; other pods,
// pods for another scheduler, bound pods and pods that opt out are left as
// they are.
func TestRouting(t *testing.T) {
	env := framework.Setup(t)
	applyRouting(t, env)

	nodes := env.CreateNodes(1)
	env.PublishSlices(env.NodeSlice(nodes[0], builder.Devices("gpu", 4, nil)...).Obj())
	class := env.CreateClass("gpu")
	env.CreateTemplate(builder.MakeTemplate("one-gpu", builder.MakeClaim("").Request("gpu", class, 1)))
	env.StartScheduler(framework.SchedulerOptions{})

	// No default scheduler runs: a pod the policy leaves alone stays
	// pending, a routed one is bound by drasched.
	tests := map[string]struct {
		pod *builder.PodWrapper
		// dryRun creates the pod only with a dry run, for a pod that would
		// break the invariants checked at the end.
		dryRun        bool
		wantScheduler string
	}{
		"claim template": {
			pod:           makePod("template").ClaimFromTemplate("gpu", "one-gpu"),
			wantScheduler: framework.SchedulerName,
		},
		"claim template, default-scheduler named": {
			pod:           makePod("named-default").SchedulerName(v1.DefaultSchedulerName).ClaimFromTemplate("gpu", "one-gpu"),
			wantScheduler: framework.SchedulerName,
		},
		"extended resource backed by a DeviceClass": {
			pod: makePod("extended").Containers(builder.Container("app",
				map[v1.ResourceName]string{v1.ResourceName("deviceclass.resource.kubernetes.io/" + class): "1"})),
			wantScheduler: framework.SchedulerName,
		},
		"no claims": {
			pod:           makePod("no-claims"),
			wantScheduler: v1.DefaultSchedulerName,
		},
		"another scheduler": {
			pod:           makePod("other").SchedulerName("other-scheduler").ClaimFromTemplate("gpu", "one-gpu"),
			wantScheduler: "other-scheduler",
		},
		"pod opts out": {
			pod:           makePod("opt-out").Label(optOutLabel, "disabled").ClaimFromTemplate("gpu", "one-gpu"),
			wantScheduler: v1.DefaultSchedulerName,
		},
		"already bound": {
			pod: func() *builder.PodWrapper {
				pod := makePod("bound").ClaimFromTemplate("gpu", "one-gpu")
				pod.Spec.NodeName = nodes[0].Name
				return pod
			}(),
			// Bound, with a claim that nothing allocates.
			dryRun:        true,
			wantScheduler: v1.DefaultSchedulerName,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			env := env.Sub(t)
			var pod *v1.Pod
			if tc.dryRun {
				pod = dryRunCreate(t, env, tc.pod)
			} else {
				pod = env.CreatePod(tc.pod)
			}
			if pod.Spec.SchedulerName != tc.wantScheduler {
				t.Fatalf("schedulerName %q after create, want %q", pod.Spec.SchedulerName, tc.wantScheduler)
			}
			if tc.wantScheduler != framework.SchedulerName {
				return
			}
			bound := env.WaitForPodScheduled(pod.Name)
			if bound.Spec.NodeName != nodes[0].Name {
				t.Errorf("pod bound to %q, want %s", bound.Spec.NodeName, nodes[0].Name)
			}
			waitScheduledBy(t, env, pod.Name, framework.SchedulerName)
		})
	}
	env.WaitForConsistentAllocations()

	t.Run("namespace opts out", func(t *testing.T) {
		env := env.Sub(t)
		env.LabelNamespace(optOutLabel, "disabled")
		// The policy reads namespace labels from an informer: wait until
		// it sees the label.
		probe := makePod("probe").ClaimFromTemplate("gpu", "one-gpu")
		waitForRouting(env, probe, v1.DefaultSchedulerName)
		pod := env.CreatePod(makePod("namespace-opt-out").ClaimFromTemplate("gpu", "one-gpu"))
		if pod.Spec.SchedulerName != v1.DefaultSchedulerName {
			t.Errorf("schedulerName %q after create, want %q", pod.Spec.SchedulerName, v1.DefaultSchedulerName)
		}
	})
}

// makePod starts a pod without a scheduler name, as users write them.
func makePod(name string) *builder.PodWrapper {
	pod := builder.MakePod(name)
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	return pod
}

// applyRouting creates the objects of config/admission, as `kubectl apply
// -k config/admission` would, removes them when the test ends, and waits
// until the policy is in force: the API server compiles policies and
// bindings asynchronously, a moment after they are created.
func applyRouting(t *testing.T, env *framework.Env) {
	t.Helper()
	dir := framework.RepoFile("config", "admission")
	files, err := manifest.KustomizationResources(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("%s/kustomization.yaml lists no resources", dir)
	}
	for _, file := range files {
		applyFile(t, env.Ctx, env.Client, file)
	}
	waitForRouting(env, makePod("probe").ClaimFromTemplate("gpu", "one-gpu"), framework.SchedulerName)
}

// waitForRouting creates the pod with a dry run until the API server
// admits it with the scheduler name want.
func waitForRouting(env *framework.Env, pod *builder.PodWrapper, want string) {
	probe := pod.Obj().DeepCopy()
	probe.Namespace = env.Namespace
	env.WaitFor(framework.Timeout, "the routing policy to give a pod with claims schedulerName "+want, func(ctx context.Context) (bool, string, error) {
		created, err := env.Client.CoreV1().Pods(env.Namespace).Create(ctx, probe, dryRun)
		if err != nil {
			return false, "", err
		}
		return created.Spec.SchedulerName == want, "schedulerName " + created.Spec.SchedulerName, nil
	})
}

var dryRun = metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}

// dryRunCreate creates the pod in the test's namespace with a dry run and
// returns what the API server would have stored.
func dryRunCreate(t *testing.T, env *framework.Env, pod *builder.PodWrapper) *v1.Pod {
	t.Helper()
	obj := pod.Obj().DeepCopy()
	obj.Namespace = env.Namespace
	created, err := env.Client.CoreV1().Pods(env.Namespace).Create(env.Ctx, obj, dryRun)
	if err != nil {
		t.Fatalf("create pod %s with a dry run: %v", obj.Name, err)
	}
	return created
}

// waitScheduledBy waits for the pod's Scheduled event and checks that the
// scheduler profile named want reported it: no other scheduler runs here,
// but the event says so in the words an operator reads.
func waitScheduledBy(t *testing.T, env *framework.Env, pod, want string) {
	t.Helper()
	selector := fields.Set{"involvedObject.name": pod, "reason": "Scheduled"}.AsSelector().String()
	env.WaitFor(framework.Timeout, "the Scheduled event of pod "+pod, func(ctx context.Context) (bool, string, error) {
		events, err := env.Client.CoreV1().Events(env.Namespace).List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			return false, "", err
		}
		if len(events.Items) == 0 {
			return false, "no event", nil
		}
		if got := events.Items[0].ReportingController; got != want {
			t.Errorf("pod %s scheduled by %q, want %q", pod, got, want)
		}
		return true, "", nil
	})
}
