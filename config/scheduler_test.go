package config_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	rbacvalidation "k8s.io/component-helpers/auth/rbac/validation"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	schedvalidation "k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/profile"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac/bootstrappolicy"

	"github.com/drasched/drasched/apis/config"
	_ "github.com/drasched/drasched/apis/config/scheme"
	"github.com/drasched/drasched/apis/config/validation"
	"github.com/drasched/drasched/internal/manifest"
	"github.com/drasched/drasched/pkg/plugins/dra"
	"github.com/drasched/drasched/pkg/plugins/drapreemption"
)

const (
	pluginName     = "StructuredDRA"
	schedulerName  = "drasched"
	namespace      = "drasched-system"
	serviceAccount = "drasched-scheduler"
)

// loadSchedulerConfig loads scheduler-config.yaml as kube-scheduler's
// --config does.
func loadSchedulerConfig(t *testing.T, data []byte) *schedconfig.KubeSchedulerConfiguration {
	t.Helper()
	obj, _, err := schedscheme.Codecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		t.Fatalf("decode scheduler configuration: %v", err)
	}
	cfg, ok := obj.(*schedconfig.KubeSchedulerConfiguration)
	if !ok {
		t.Fatalf("decoded a %T, want *KubeSchedulerConfiguration", obj)
	}
	return cfg
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestSchedulerConfig validates the shipped profile with kube-scheduler's own
// validation, as the binary does at startup, and the plugin's arguments
// with ours, which that validation cannot know: it validates only the
// arguments of in-tree plugins. It also checks the names that other files
// must agree on.
func TestSchedulerConfig(t *testing.T) {
	cfg := loadSchedulerConfig(t, readFile(t, "scheduler-config.yaml"))
	if err := schedvalidation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		t.Errorf("kube-scheduler validation: %v", err)
	}

	if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != schedulerName {
		t.Fatalf("want one profile %q, got %d profiles", schedulerName, len(cfg.Profiles))
	}
	var found bool
	for i, pc := range cfg.Profiles[0].PluginConfig {
		if pc.Name != pluginName {
			continue
		}
		found = true
		args, ok := pc.Args.(*config.StructuredDRAArgs)
		if !ok {
			t.Fatalf("%s args are a %T", pluginName, pc.Args)
		}
		path := field.NewPath("profiles").Index(0).Child("pluginConfig").Index(i).Child("args")
		if err := validation.ValidateStructuredDRAArgs(path, args); err != nil {
			t.Errorf("args: %v", err)
		}
	}
	if !found {
		t.Errorf("no pluginConfig for %s", pluginName)
	}

	le := cfg.LeaderElection
	if !le.LeaderElect || le.ResourceLock != "leases" || le.ResourceNamespace != namespace || le.ResourceName != "drasched" {
		t.Errorf("leader election: %+v", le)
	}
	// The RBAC Role must allow exactly that Lease.
	role := named[*rbacv1.Role](t, decodeFile(t, "scheduler/rbac.yaml"), "drasched-scheduler:leader-election")
	if role.Namespace != le.ResourceNamespace {
		t.Errorf("leader election Role in namespace %s, Lease in %s", role.Namespace, le.ResourceNamespace)
	}
	leaseRules := []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{le.ResourceName}, Verbs: []string{"get", "update"}},
	}
	if covered, missing := rbacvalidation.Covers(role.Rules, leaseRules); !covered {
		t.Errorf("leader election Role does not allow %v", missing)
	}

	// Every example pod asks for this profile.
	for _, pod := range manifest.OfType[*corev1.Pod](userExamples(t)) {
		if pod.Spec.SchedulerName != schedulerName {
			t.Errorf("example pod %s: schedulerName %q, want %q", pod.Name, pod.Spec.SchedulerName, schedulerName)
		}
	}
}

// TestSchedulerConfigMap: the Deployment reads scheduler-config.yaml from
// the ConfigMap, which holds it byte for byte.
func TestSchedulerConfigMap(t *testing.T) {
	objects := decodeAll(t, "scheduler")
	cm := named[*corev1.ConfigMap](t, objects, "drasched-scheduler-config")
	const key = "scheduler-config.yaml"
	if diff := cmp.Diff(string(readFile(t, "scheduler-config.yaml")), cm.Data[key]); diff != "" {
		t.Errorf("ConfigMap %s differs from config/scheduler-config.yaml; run `make update-codegen` (-file +ConfigMap):\n%s", key, diff)
	}

	deployment := named[*appsv1.Deployment](t, objects, "drasched-scheduler")
	spec := deployment.Spec.Template.Spec
	container := spec.Containers[0]
	var configPath string
	for _, arg := range container.Args {
		if value, ok := strings.CutPrefix(arg, "--config="); ok {
			configPath = value
		}
	}
	var mounted []string
	for _, m := range container.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
				mounted = append(mounted, filepath.Join(m.MountPath, key))
			}
		}
	}
	if !slices.Contains(mounted, configPath) {
		t.Errorf("--config=%s, but the ConfigMap's %s is mounted at %v", configPath, key, mounted)
	}
}

// TestDeployment checks what the manifests promise: two replicas under
// the ServiceAccount that RBAC binds, probes on the secure port over HTTPS,
// and a locked-down container.
func TestDeployment(t *testing.T) {
	objects := decodeAll(t, "scheduler")
	d := named[*appsv1.Deployment](t, objects, "drasched-scheduler")
	spec := d.Spec.Template.Spec
	if got := *d.Spec.Replicas; got != 2 {
		t.Errorf("replicas %d, want 2", got)
	}
	if d.Namespace != namespace || spec.ServiceAccountName != serviceAccount {
		t.Errorf("runs as %s/%s, want %s/%s", d.Namespace, spec.ServiceAccountName, namespace, serviceAccount)
	}
	named[*corev1.ServiceAccount](t, objects, spec.ServiceAccountName)
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	for name, probe := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil {
			t.Errorf("%s probe: want an HTTPS GET", name)
			continue
		}
		wantPath := map[string]string{"liveness": "/livez", "readiness": "/readyz"}[name]
		port := probe.HTTPGet.Port.IntVal
		if probe.HTTPGet.Port.Type == intstr.String {
			port = 0
			for _, p := range c.Ports {
				if p.Name == probe.HTTPGet.Port.StrVal {
					port = p.ContainerPort
				}
			}
		}
		if port != 10259 {
			t.Errorf("%s probe: port %s is %d, want kube-scheduler's secure port 10259", name, probe.HTTPGet.Port.String(), port)
		}
		if probe.HTTPGet.Path != wantPath || probe.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("%s probe: %s %s, want HTTPS %s", name, probe.HTTPGet.Scheme, probe.HTTPGet.Path, wantPath)
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("requests %v: want cpu and memory", c.Resources.Requests)
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext %+v: want a read-only root, no privilege escalation, all capabilities dropped", sc)
	}
	if psc := spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Errorf("pod securityContext %+v: want runAsNonRoot", psc)
	}
	anti := spec.Affinity
	if anti == nil || anti.PodAntiAffinity == nil || len(anti.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 0 {
		t.Fatalf("no pod anti-affinity")
	}
	term := anti.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
	if term.TopologyKey != corev1.LabelHostname || !reflect.DeepEqual(term.LabelSelector.MatchLabels, d.Spec.Selector.MatchLabels) {
		t.Errorf("anti-affinity term %+v: want the Deployment's own pods, per node", term)
	}
}

// TestSchedulerProfile builds the profile as the scheduler binary does and
// compares it, extension point by extension point, with kube-scheduler's
// default profile: StructuredDRA must be exactly where DynamicResources is
// (same extension points, same score weight, after the same plugins),
// StructuredDRAPreemption where DefaultPreemption is (after StructuredDRA),
// StructuredDRAQueueSort where PrioritySort is,
// and nothing else may change but order.
//
// The profile runs the real StructuredDRA plugin (pkg/plugins/dra), so this
// also checks that it implements every extension point that
// DynamicResources implements in this Kubernetes version, except those
// listed in notImplemented, and at no other but those in added.
//
// It runs with 1.37's default feature gates and again with the workload
// gates on, which add gang scheduling's plugins to both profiles and
// which StructuredDRA must start with.
func TestSchedulerProfile(t *testing.T) {
	t.Run("default gates", testSchedulerProfile)
	t.Run("workload gates", func(t *testing.T) {
		featuregatetesting.SetFeatureGatesDuringTest(t, utilfeature.DefaultFeatureGate, featuregatetesting.FeatureOverrides{
			features.GenericWorkload:                 true,
			features.DRAWorkloadResourceClaims:       true,
			features.DRANodeAllocatableResources:     true,
			features.TopologyAwareWorkloadScheduling: true,
		})
		testSchedulerProfile(t)
	})
}

func testSchedulerProfile(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	ours := loadSchedulerConfig(t, readFile(t, "scheduler-config.yaml"))
	reference := loadSchedulerConfig(t, []byte(`
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: reference
`))

	// Two schedulers: the profiles of one must share their queue sort.
	registry := frameworkruntime.Registry{pluginName: dra.New, drapreemption.Name: drapreemption.New, drapreemption.QueueSortName: drapreemption.NewQueueSort}
	plugins := func(cfg *schedconfig.KubeSchedulerConfiguration) *schedconfig.Plugins {
		client := fake.NewClientset()
		broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
		sched, err := scheduler.New(ctx, client, informers.NewSharedInformerFactory(client, 0), nil,
			profile.NewRecorderFactory(broadcaster),
			scheduler.WithProfiles(cfg.Profiles...),
			scheduler.WithFrameworkOutOfTreeRegistry(registry))
		if err != nil {
			t.Fatalf("create scheduler: %v", err)
		}
		return sched.Profiles[cfg.Profiles[0].SchedulerName].ListPlugins()
	}

	got := extensionPoints(plugins(ours))
	want := extensionPoints(plugins(reference))
	for _, point := range []string{"PreEnqueue", "PreFilter", "Filter", "PostFilter", "Score", "Reserve", "PreBind"} {
		if !slices.ContainsFunc(want[point], func(p schedconfig.Plugin) bool { return p.Name == names.DynamicResources }) {
			t.Errorf("the default profile has no DynamicResources at %s; update this test", point)
		}
	}
	for point, wantPlugins := range want {
		gotPlugins := got[point]
		logger.V(2).Info("Extension point", "point", point, "default", wantPlugins, "drasched", gotPlugins)
		renamedPlugins := slices.Clone(wantPlugins)
		for i := range renamedPlugins {
			switch renamedPlugins[i].Name {
			case names.DynamicResources:
				renamedPlugins[i].Name = pluginName
			case names.DefaultPreemption:
				renamedPlugins[i].Name = drapreemption.Name
			case names.PrioritySort:
				renamedPlugins[i].Name = drapreemption.QueueSortName
			}
		}
		if notImplemented[point] {
			renamedPlugins = slices.DeleteFunc(renamedPlugins, func(p schedconfig.Plugin) bool { return p.Name == pluginName })
		}
		if added[point] {
			// Anywhere among the point's plugins: the order of those
			// that do not depend on each other does not matter.
			if !slices.ContainsFunc(gotPlugins, func(p schedconfig.Plugin) bool { return p.Name == pluginName }) {
				t.Errorf("%s: no %s", point, pluginName)
			}
			gotPlugins = slices.DeleteFunc(slices.Clone(gotPlugins), func(p schedconfig.Plugin) bool { return p.Name == pluginName })
		}
		if diff := cmp.Diff(renamedPlugins, gotPlugins, sortPlugins); diff != "" {
			t.Errorf("%s: plugins and weights (-default with %s +drasched):\n%s", point, pluginName, diff)
			continue
		}
		inTree := slices.IndexFunc(wantPlugins, func(p schedconfig.Plugin) bool { return p.Name == names.DynamicResources })
		if inTree < 0 || notImplemented[point] {
			continue
		}
		structured := slices.IndexFunc(gotPlugins, func(p schedconfig.Plugin) bool { return p.Name == pluginName })
		for i, p := range wantPlugins {
			j := slices.IndexFunc(gotPlugins, func(q schedconfig.Plugin) bool { return q.Name == renamedPlugins[i].Name })
			switch {
			case i < inTree && j > structured:
				t.Errorf("%s: %s runs before DynamicResources by default but after %s", point, p.Name, pluginName)
			case i > inTree && p.Name == names.DefaultPreemption && j < structured:
				t.Errorf("%s: DefaultPreemption runs after DynamicResources by default but %s before %s", point, drapreemption.Name, pluginName)
			}
		}
	}
	for point := range got {
		if _, ok := want[point]; !ok {
			t.Errorf("%s: has plugins %v, the default profile none", point, got[point])
		}
	}
}

// notImplemented are the extension points of DynamicResources that
// StructuredDRA leaves out: none since it implements PodGroupPostFilter for
// gang scheduling (docs/scheduler.md, "Gang scheduling").
var notImplemented = map[string]bool{}

// added are the extension points StructuredDRA has and DynamicResources
// has not: PreScore, which skips Score for pods with nothing to allocate
// (pkg/plugins/dra/score.go).
var added = map[string]bool{"PreScore": true}

var sortPlugins = cmpopts.SortSlices(func(a, b schedconfig.Plugin) bool { return a.Name < b.Name })

// extensionPoints maps extension point names (PreFilter, Score, ...) to
// their enabled plugins, in order.
func extensionPoints(p *schedconfig.Plugins) map[string][]schedconfig.Plugin {
	out := map[string][]schedconfig.Plugin{}
	v := reflect.ValueOf(p).Elem()
	for i := range v.NumField() {
		set, ok := v.Field(i).Interface().(schedconfig.PluginSet)
		if ok && len(set.Enabled) > 0 {
			out[v.Type().Field(i).Name] = set.Enabled
		}
	}
	return out
}

// TestRBAC compares what the ServiceAccount may do cluster-wide with what
// kube-scheduler's bootstrap roles (system:kube-scheduler and
// system:volume-scheduler, with this Kubernetes version's default feature
// gates plus GenericWorkload) allow: neither may grant anything the other
// does not, except the documented differences in rbac.yaml.
func TestRBAC(t *testing.T) {
	// The roles for gang scheduling are shipped whether or not the gate
	// is on (rbac.yaml).
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.GenericWorkload, true)
	objects := decodeFile(t, "scheduler/rbac.yaml")
	bootstrap := map[string]rbacv1.ClusterRole{}
	for _, role := range bootstrappolicy.ClusterRoles() {
		bootstrap[role.Name] = role
	}

	subject := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: serviceAccount, Namespace: namespace}
	var granted []rbacv1.PolicyRule
	for _, binding := range manifest.OfType[*rbacv1.ClusterRoleBinding](objects) {
		if !slices.Contains(binding.Subjects, subject) {
			t.Errorf("ClusterRoleBinding %s: subjects %v, want %v", binding.Name, binding.Subjects, subject)
			continue
		}
		if role, ok := bootstrap[binding.RoleRef.Name]; ok {
			granted = append(granted, role.Rules...)
			continue
		}
		granted = append(granted, named[*rbacv1.ClusterRole](t, objects, binding.RoleRef.Name).Rules...)
	}

	var upstream []rbacv1.PolicyRule
	for _, name := range []string{"system:kube-scheduler", "system:volume-scheduler"} {
		for _, rule := range bootstrap[name].Rules {
			// Leader election: a namespaced Role (checked in TestSchedulerConfig).
			if slices.Contains(rule.APIGroups, "coordination.k8s.io") {
				continue
			}
			// The extensions group serves no replicasets any more.
			rule.APIGroups = slices.DeleteFunc(slices.Clone(rule.APIGroups), func(g string) bool { return g == "extensions" })
			upstream = append(upstream, rule)
		}
	}
	if len(upstream) < 20 {
		t.Fatalf("only %d rules in kube-scheduler's bootstrap roles; did they move?", len(upstream))
	}
	// drasched's own: StructuredDRAPreemption reads Jobs to leave the pods
	// of workloads Kueue manages to Kueue's preemption (docs/kueue.md).
	upstream = append(upstream, rbacv1.PolicyRule{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"get", "list", "watch"}})
	if covered, missing := rbacvalidation.Covers(granted, upstream); !covered {
		t.Errorf("kube-scheduler may, drasched may not: %v", missing)
	}
	if covered, extra := rbacvalidation.Covers(upstream, granted); !covered {
		t.Errorf("drasched may, kube-scheduler may not: %v", extra)
	}

	// Delegated authentication reads kube-system's
	// extension-apiserver-authentication ConfigMap through this Role, which
	// kube-scheduler's own user is bound to as well.
	binding := named[*rbacv1.RoleBinding](t, objects, "drasched-scheduler:extension-apiserver-authentication-reader")
	if binding.Namespace != "kube-system" || binding.RoleRef.Kind != "Role" || !slices.Contains(binding.Subjects, subject) {
		t.Errorf("RoleBinding %s/%s: %+v", binding.Namespace, binding.Name, binding)
	}
	if !slices.ContainsFunc(bootstrappolicy.NamespaceRoles()["kube-system"], func(r rbacv1.Role) bool { return r.Name == binding.RoleRef.Name }) {
		t.Errorf("kube-system has no bootstrap Role %s", binding.RoleRef.Name)
	}
	leBinding := named[*rbacv1.RoleBinding](t, objects, "drasched-scheduler:leader-election")
	if leBinding.Namespace != namespace || leBinding.RoleRef.Name != "drasched-scheduler:leader-election" || !slices.Contains(leBinding.Subjects, subject) {
		t.Errorf("RoleBinding %s/%s: %+v", leBinding.Namespace, leBinding.Name, leBinding)
	}
}
