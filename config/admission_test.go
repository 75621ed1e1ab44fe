package config_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/scheduler"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedvalidation "k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	"k8s.io/kubernetes/pkg/scheduler/profile"

	"github.com/drasched/drasched/internal/manifest"
)

// exemptNamespaces is the namespace selector of config/admission's
// bindings: a cluster admin exempts a namespace with the label
// drasched.dev/routing: disabled.
var exemptNamespaces = `{"matchExpressions":[{"key":"drasched.dev/routing","operator":"NotIn","values":["disabled"]}]}`

// TestAdmissionPolicies checks what test/integration/admission cannot
// show with a few pods: the routing policy and the ValidatingAdmissionPolicy
// decide "uses DRA" with the same expression, for the same scheduler name
// and extended resource names, so that no pod is routed that is then
// refused, nor refused that the routing would have sent elsewhere; and
// both bindings exempt exactly the namespaces a cluster admin labelled,
// never a pod by its own label.
func TestAdmissionPolicies(t *testing.T) {
	routing := named[*admissionv1.MutatingAdmissionPolicy](t, decodeFile(t, filepath.Join("admission", "routing.yaml")), "drasched-routing")
	routingBinding := named[*admissionv1.MutatingAdmissionPolicyBinding](t, decodeFile(t, filepath.Join("admission", "routing.yaml")), "drasched-routing")
	required := named[*admissionv1.ValidatingAdmissionPolicy](t, decodeFile(t, filepath.Join("admission", "scheduler-required.yaml")), "drasched-scheduler-required")
	requiredBinding := named[*admissionv1.ValidatingAdmissionPolicyBinding](t, decodeFile(t, filepath.Join("admission", "scheduler-required.yaml")), "drasched-scheduler-required")

	variables := func(vars []admissionv1.Variable) map[string]string {
		out := map[string]string{}
		for _, v := range vars {
			out[v.Name] = v.Expression
		}
		return out
	}
	if diff := cmp.Diff(variables(routing.Spec.Variables), variables(required.Spec.Variables)); diff != "" {
		t.Errorf("variables (-routing.yaml +scheduler-required.yaml):\n%s", diff)
	}
	for _, name := range []string{"schedulerName", "extendedResourceNames", "usesDRA"} {
		if _, ok := variables(required.Spec.Variables)[name]; !ok {
			t.Errorf("scheduler-required.yaml has no variable %s", name)
		}
	}
	if got := variables(required.Spec.Variables)["schedulerName"]; got != `"`+schedulerName+`"` {
		t.Errorf("variable schedulerName is %s, want the profile's %q", got, schedulerName)
	}

	// Pods that request the extended resource of a shipped DeviceClass
	// are routed and guarded: the classes' names are in the list.
	var listed []string
	if err := json.Unmarshal([]byte(variables(required.Spec.Variables)["extendedResourceNames"]), &listed); err != nil {
		t.Fatalf("variable extendedResourceNames: %v", err)
	}
	for _, file := range []string{filepath.Join("gpu-driver", "deviceclasses.yaml"), filepath.Join("examples", "deviceclasses.yaml")} {
		for _, class := range manifest.OfType[*resourceapi.DeviceClass](decodeFile(t, file)) {
			if name := class.Spec.ExtendedResourceName; name != nil && !slices.Contains(listed, *name) {
				t.Errorf("%s: DeviceClass %s maps extended resource %s, which the admission policies' extendedResourceNames %v lack", file, class.Name, *name, listed)
			}
		}
	}

	if p := required.Spec.FailurePolicy; p == nil || *p != admissionv1.Fail {
		t.Errorf("ValidatingAdmissionPolicy failurePolicy %v, want Fail", p)
	}
	if !slices.Equal(requiredBinding.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) {
		t.Errorf("binding validationActions %v, want [Deny]", requiredBinding.Spec.ValidationActions)
	}
	for name, match := range map[string]*admissionv1.MatchResources{
		"routing.yaml":            routingBinding.Spec.MatchResources,
		"scheduler-required.yaml": requiredBinding.Spec.MatchResources,
	} {
		if match == nil || match.ObjectSelector != nil && (len(match.ObjectSelector.MatchLabels) > 0 || len(match.ObjectSelector.MatchExpressions) > 0) {
			t.Errorf("%s: the binding selects objects (%+v): anyone who creates a pod could opt it out", name, match)
			continue
		}
		selector, err := json.Marshal(match.NamespaceSelector)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(selector); got != exemptNamespaces {
			t.Errorf("%s: namespaceSelector %s, want %s", name, got, exemptNamespaces)
		}
	}
}

// TestDefaultSchedulerConfig checks default-scheduler-config.yaml, the
// profile for the cluster's own kube-scheduler: kube-scheduler's
// validation passes, and built by kube-scheduler's framework it is the
// default profile, named default-scheduler, with DynamicResources gone from
// every extension point and nothing else changed.
func TestDefaultSchedulerConfig(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	cfg := loadSchedulerConfig(t, readFile(t, "default-scheduler-config.yaml"))
	if err := schedvalidation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		t.Errorf("kube-scheduler validation: %v", err)
	}
	if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != "default-scheduler" {
		t.Fatalf("want one profile default-scheduler, got %d profiles", len(cfg.Profiles))
	}
	reference := loadSchedulerConfig(t, []byte(`
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: reference
`))
	client := fake.NewClientset()
	sched, err := scheduler.New(ctx, client, informers.NewSharedInformerFactory(client, 0), nil,
		profile.NewRecorderFactory(events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})),
		scheduler.WithProfiles(append(cfg.Profiles, reference.Profiles...)...))
	if err != nil {
		t.Fatalf("create scheduler: %v", err)
	}
	got := extensionPoints(sched.Profiles["default-scheduler"].ListPlugins())
	want := extensionPoints(sched.Profiles["reference"].ListPlugins())
	isDRA := func(p schedconfig.Plugin) bool { return p.Name == names.DynamicResources }
	removed := 0
	for point, plugins := range want {
		if slices.ContainsFunc(plugins, isDRA) {
			removed++
		}
		want[point] = slices.DeleteFunc(slices.Clone(plugins), isDRA)
		if len(want[point]) == 0 {
			delete(want, point)
		}
	}
	if removed == 0 {
		t.Fatal("the default profile has no DynamicResources; update this test")
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("plugins (-default profile without DynamicResources +default-scheduler-config.yaml):\n%s", diff)
	}
}
