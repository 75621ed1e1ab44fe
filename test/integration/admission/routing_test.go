package admission

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/internal/manifest"
	"github.com/drasched/drasched/test/integration/framework"
)

const (
	// exemptLabel is the namespace label by which a cluster admin exempts
	// a namespace from the routing and from the scheduler requirement
	// (config/admission).
	exemptLabel = "drasched.dev/routing"
	// deniedMessage is in the message of config/admission's
	// ValidatingAdmissionPolicy.
	deniedMessage = "pods that use DRA devices (resourceClaims, or extended resources backed by a DeviceClass) must be scheduled by drasched"
	// boundMessage is in its message for such a pod created bound to a
	// node, which no scheduler would see.
	boundMessage = deniedMessage + ", not created bound to a node"
)

// admissionCase is a pod to create and what admission makes of it: the
// scheduler name it gets, or an error.
type admissionCase struct {
	pod *builder.PodWrapper
	// dryRun creates the pod only with a dry run, for a pod that would
	// break the invariants checked at the end.
	dryRun bool
	// wantScheduler is the scheduler name after admission; empty: the pod
	// is refused by the ValidatingAdmissionPolicy.
	wantScheduler string
	// wantMessage is in the message of a refusal; deniedMessage if empty.
	wantMessage string
}

// TestSchedulerRequiredWithoutRouting applies only the
// ValidatingAdmissionPolicy of config/admission, as a cluster has it where
// the routing policy is not in force (deleted, or not yet loaded): a pod
// with claims that names no scheduler, which the default scheduler would
// take, is refused instead of admitted, and so is one created bound.
func TestSchedulerRequiredWithoutRouting(t *testing.T) {
	env := framework.Setup(t)
	applyAdmission(t, env, "scheduler-required.yaml")
	class := env.CreateClass("gpu")
	env.CreateTemplate(builder.MakeTemplate("one-gpu", builder.MakeClaim("").Request("gpu", class, 1)))
	classResource := map[v1.ResourceName]string{v1.ResourceName("deviceclass.resource.kubernetes.io/" + class): "1"}

	// No scheduler runs and every pod is created with a dry run: this
	// test is about admission only.
	tests := map[string]admissionCase{
		"claim template": {pod: makePod("template").ClaimFromTemplate("gpu", "one-gpu")},
		"claim template, default-scheduler named": {pod: makePod("named-default").SchedulerName(v1.DefaultSchedulerName).ClaimFromTemplate("gpu", "one-gpu")},
		"extended resource":                       {pod: makePod("extended").Containers(builder.Container("app", classResource))},
		"claim template, drasched named": {
			pod:           makePod("named-drasched").SchedulerName(framework.SchedulerName).ClaimFromTemplate("gpu", "one-gpu"),
			wantScheduler: framework.SchedulerName,
		},
		"no claims": {pod: makePod("no-claims"), wantScheduler: v1.DefaultSchedulerName},
		"claim template, drasched named, bound at creation": {
			pod:         makePod("bound-drasched").SchedulerName(framework.SchedulerName).Node("node-0").ClaimFromTemplate("gpu", "one-gpu"),
			wantMessage: boundMessage,
		},
		"no claims, bound at creation": {pod: makePod("bound-no-claims").Node("node-0"), wantScheduler: v1.DefaultSchedulerName},
	}
	for name, tc := range tests {
		tc.dryRun = true
		t.Run(name, func(t *testing.T) { checkAdmission(t, env.Sub(t), tc) })
	}

	t.Run("exempt namespace", func(t *testing.T) {
		env := framework.Setup(t)
		env.CreateTemplate(builder.MakeTemplate("one-gpu", builder.MakeClaim("").Request("gpu", class, 1)))
		exemptNamespace(env)
		for name, tc := range map[string]admissionCase{
			"claim template": {
				pod:           makePod("template").ClaimFromTemplate("gpu", "one-gpu"),
				wantScheduler: v1.DefaultSchedulerName,
			},
			"claim template, drasched named, bound at creation": {
				pod:           makePod("bound-drasched").SchedulerName(framework.SchedulerName).Node("node-0").ClaimFromTemplate("gpu", "one-gpu"),
				wantScheduler: framework.SchedulerName,
			},
		} {
			tc.dryRun = true
			t.Run(name, func(t *testing.T) { checkAdmission(t, env.Sub(t), tc) })
		}
	})
}

// checkAdmission creates the pod in the test's namespace and checks that
// admission gives it the scheduler name tc wants, or refuses it with the
// ValidatingAdmissionPolicy's message. It returns the created pod, nil if
// refused.
func checkAdmission(t *testing.T, env *framework.Env, tc admissionCase) *v1.Pod {
	t.Helper()
	obj := tc.pod.Obj().DeepCopy()
	obj.Namespace = env.Namespace
	opts := metav1.CreateOptions{}
	if tc.dryRun {
		opts = dryRun
	}
	pod, err := env.Client.CoreV1().Pods(env.Namespace).Create(env.Ctx, obj, opts)
	if tc.wantScheduler == "" {
		if err == nil {
			t.Fatalf("pod admitted with schedulerName %q, want it refused", pod.Spec.SchedulerName)
		}
		want := tc.wantMessage
		if want == "" {
			want = deniedMessage
		}
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v, want Forbidden with %q", err, want)
		}
		return nil
	}
	if err != nil {
		t.Fatalf("create pod %s: %v", obj.Name, err)
	}
	if pod.Spec.SchedulerName != tc.wantScheduler {
		t.Fatalf("schedulerName %q after create, want %q", pod.Spec.SchedulerName, tc.wantScheduler)
	}
	return pod
}

// makePod starts a pod without a scheduler name, as users write them.
func makePod(name string) *builder.PodWrapper {
	pod := builder.MakePod(name)
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	return pod
}

// applyAdmission creates the objects of the named files of config/admission,
// as `kubectl apply -f` would, removes them when the test ends, and waits
// until they are in force: the API server compiles policies and bindings
// asynchronously, a moment after they are created, and a policy of an
// earlier test may still be in force a moment after it was deleted. Only
// files that config/admission/kustomization.yaml lists may be named.
func applyAdmission(t *testing.T, env *framework.Env, files ...string) {
	t.Helper()
	dir := framework.RepoFile("config", "admission")
	listed, err := manifest.KustomizationResources(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, file := range files {
		want[file] = true
	}
	for _, path := range listed {
		name := path[strings.LastIndex(path, "/")+1:]
		if want[name] {
			applyFile(t, env.Ctx, env.Client, path)
			delete(want, name)
		}
	}
	if len(want) > 0 {
		t.Fatalf("%s/kustomization.yaml does not list %v", dir, want)
	}

	// The probe is a pod with claims that names no scheduler: routed to
	// drasched when the routing policy is in force; refused when only the
	// ValidatingAdmissionPolicy is.
	routing := strings.Contains(strings.Join(files, " "), "routing.yaml")
	probe := makePod("probe").ClaimFromTemplate("gpu", "one-gpu").Obj().DeepCopy()
	probe.Namespace = env.Namespace
	env.WaitFor(framework.Timeout, "the admission policies of "+strings.Join(files, ", ")+" in force", func(ctx context.Context) (bool, string, error) {
		created, err := env.Client.CoreV1().Pods(env.Namespace).Create(ctx, probe, dryRun)
		if !routing {
			return err != nil && strings.Contains(err.Error(), deniedMessage), "pod with claims: " + errString(err), nil
		}
		if err != nil {
			return false, "", err
		}
		// The ValidatingAdmissionPolicy must be in force too: another
		// scheduler is refused.
		other := probe.DeepCopy()
		other.Spec.SchedulerName = "other-scheduler"
		_, otherErr := env.Client.CoreV1().Pods(env.Namespace).Create(ctx, other, dryRun)
		return created.Spec.SchedulerName == framework.SchedulerName && otherErr != nil,
			"schedulerName " + created.Spec.SchedulerName + "; another scheduler: " + errString(otherErr), nil
	})
}

// exemptNamespace labels the test's namespace as a cluster admin does to
// exempt it from config/admission, and waits until the API server's
// admission sees the label: the policies read namespace labels from an
// informer.
func exemptNamespace(env *framework.Env) {
	env.LabelNamespace(exemptLabel, "disabled")
	probe := makePod("probe").SchedulerName("other-scheduler").ClaimFromTemplate("gpu", "one-gpu").Obj().DeepCopy()
	probe.Namespace = env.Namespace
	env.WaitFor(framework.Timeout, "admission to see the namespace exempt", func(ctx context.Context) (bool, string, error) {
		_, err := env.Client.CoreV1().Pods(env.Namespace).Create(ctx, probe, dryRun)
		return err == nil, "a pod with claims for another scheduler: " + errString(err), nil
	})
}

var dryRun = metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}

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
