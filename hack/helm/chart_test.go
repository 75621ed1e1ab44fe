// Package helm_test checks the chart charts/drasched against config/: with
// its default values the chart renders the objects of config/scheduler and
// config/gpu-driver, compared as objects (not as text), so that the two stay
// one source. `make test-chart` runs these tests after `helm lint` and
// `helm template`.
//
// The tests live in hack/helm, the module that pins Helm (go.mod's tool
// directive), so that Helm's dependencies stay out of drasched's module. The
// module requires drasched (a replace of ../..) for the strict decoder that
// config/ is tested with, internal/manifest; so drasched's Kubernetes
// libraries are the floor of Helm's, and a Kubernetes bump needs `go mod
// tidy` here too.
package helm_test

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/drasched/drasched/internal/manifest"
)

const (
	repoRoot  = "../.."
	chartDir  = repoRoot + "/charts/drasched"
	namespace = "drasched-system"
	// kubeVersion is the Kubernetes release drasched is built on; Helm's
	// default (1.20) is older than the chart's kubeVersion.
	kubeVersion = "v1.37.2"
)

// components are the chart's components: the value that enables each and
// the config/ directory (a kustomization) it renders. A new component is a
// new line here, a block of values with `enabled` and its templates.
var components = []struct {
	enabled string // top-level key in values.yaml
	dir     string
}{
	{enabled: "scheduler", dir: repoRoot + "/config/scheduler"},
	{enabled: "gpuDriver", dir: repoRoot + "/config/gpu-driver"},
	{enabled: "admission", dir: repoRoot + "/config/admission"},
}

// helmOnly are the labels (metadata only) and pod template annotations the
// chart adds to what config/ has.
var (
	helmOnlyLabels      = []string{"app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "helm.sh/chart"}
	helmOnlyAnnotations = []string{"checksum/config"}
)

// render is `helm template drasched charts/drasched -n drasched-system
// --kube-version v1.37.2` with values.
func render(t *testing.T, values map[string]any) (string, error) {
	t.Helper()
	rel, err := renderRelease(t, values)
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

// renderRelease is render's release: its manifest and its notes
// (templates/NOTES.txt), which `helm install` prints. options change the
// install action.
func renderRelease(t *testing.T, values map[string]any, options ...func(*action.Install)) (*release.Release, error) {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.ClientOnly = true
	install.DryRun = true
	install.Replace = true
	install.ReleaseName = "drasched"
	install.Namespace = namespace
	install.KubeVersion = kv
	for _, o := range options {
		o(install)
	}
	return install.Run(chrt, values)
}

// objects decodes a multi-document YAML stream strictly (internal/manifest,
// as config/*_test.go do) into normalized objects keyed by kind, namespace
// and name.
func objects(t *testing.T, what string, data []byte, into map[string]map[string]any) {
	t.Helper()
	decoded, err := manifest.Decode(data)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	for _, obj := range decoded {
		gvk := obj.GetObjectKind().GroupVersionKind()
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			t.Fatal(err)
		}
		u["apiVersion"], u["kind"] = gvk.GroupVersion().String(), gvk.Kind
		normalize(t, u)
		meta := u["metadata"].(map[string]any)
		key := fmt.Sprintf("%s %v/%v", gvk.Kind, meta["namespace"], meta["name"])
		if prev, ok := into[key]; ok {
			// The Namespace is in both of config/'s directories.
			if diff := cmp.Diff(prev, u); diff != "" {
				t.Fatalf("%s: %s twice, different (-first +second):\n%s", what, key, diff)
			}
		}
		into[key] = u
	}
}

// normalize removes what the chart adds (Helm's labels, the configuration
// checksum) and parses configuration files in ConfigMaps, so that comments
// and key order do not count.
func normalize(t *testing.T, u map[string]any) {
	t.Helper()
	deleteKeys(u, helmOnlyLabels, "metadata", "labels")
	deleteKeys(u, helmOnlyAnnotations, "spec", "template", "metadata", "annotations")
	if u["kind"] == "ConfigMap" {
		data, _ := u["data"].(map[string]any)
		for k, v := range data {
			if !strings.HasSuffix(k, ".yaml") {
				continue
			}
			var parsed any
			if err := yaml.Unmarshal([]byte(v.(string)), &parsed); err != nil {
				t.Fatalf("ConfigMap key %s: %v", k, err)
			}
			data[k] = parsed
		}
	}
}

// deleteKeys deletes keys from the map at path and the map itself if that
// leaves it empty.
func deleteKeys(u map[string]any, keys []string, path ...string) {
	parent := u
	for _, p := range path[:len(path)-1] {
		next, ok := parent[p].(map[string]any)
		if !ok {
			return
		}
		parent = next
	}
	last := path[len(path)-1]
	m, ok := parent[last].(map[string]any)
	if !ok {
		return
	}
	for _, k := range keys {
		delete(m, k)
	}
	if len(m) == 0 {
		delete(parent, last)
	}
}

// configObjects returns the objects of the kustomization directories.
func configObjects(t *testing.T, dirs ...string) map[string]map[string]any {
	t.Helper()
	objs := map[string]map[string]any{}
	for _, dir := range dirs {
		files, err := manifest.KustomizationResources(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range files {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			objects(t, p, data, objs)
		}
	}
	return objs
}

func chartObjects(t *testing.T, values map[string]any) map[string]map[string]any {
	t.Helper()
	manifest, err := render(t, values)
	if err != nil {
		t.Fatalf("render the chart: %v", err)
	}
	objs := map[string]map[string]any{}
	objects(t, "chart", []byte(manifest), objs)
	return objs
}

func withoutNamespace(objs map[string]map[string]any) map[string]map[string]any {
	out := maps.Clone(objs)
	delete(out, "Namespace <nil>/"+namespace)
	return out
}

// TestChartRendersConfig is the "one source" check: each component of the
// chart, with default values, renders exactly what its config/ directory
// holds. When it fails after a change to config/, make the same change to
// the template of the object it names (charts/drasched/templates), or the
// other way round.
func TestChartRendersConfig(t *testing.T) {
	type testCase struct {
		values map[string]any
		dirs   []string
		// The Namespace is left to `helm install` unless namespace.create.
		keepNamespace bool
	}
	var all []string
	for _, c := range components {
		all = append(all, c.dir)
	}
	withNamespace := map[string]any{"create": true}
	cases := map[string]testCase{
		"defaults":         {values: nil, dirs: all},
		"namespace.create": {values: map[string]any{"namespace": withNamespace}, dirs: all, keepNamespace: true},
	}
	// Each component alone.
	for _, only := range components {
		values := map[string]any{"namespace": withNamespace}
		for _, c := range components {
			values[c.enabled] = map[string]any{"enabled": c == only}
		}
		cases[only.enabled+" only"] = testCase{values: values, dirs: []string{only.dir}, keepNamespace: true}
	}

	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			want := configObjects(t, tc.dirs...)
			if !tc.keepNamespace {
				want = withoutNamespace(want)
			}
			got := chartObjects(t, tc.values)
			if _, ok := want["Namespace <nil>/"+namespace]; !ok && tc.keepNamespace {
				// A component of cluster-scoped objects only (admission):
				// namespace.create still renders the namespace.
				got = withoutNamespace(got)
			}
			if diff := cmp.Diff(slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(got))); diff != "" {
				t.Errorf("objects of config/ (-) and of the chart (+):\n%s", diff)
			}
			for key, w := range want {
				if g, ok := got[key]; ok {
					if diff := cmp.Diff(w, g); diff != "" {
						t.Errorf("%s: config/ (-) and the chart (+) differ:\n%s", key, diff)
					}
				}
			}
		})
	}
}

// TestChartValues checks that the documented values reach the objects.
func TestChartValues(t *testing.T) {
	values := map[string]any{}
	if err := yaml.Unmarshal([]byte(`
commonLabels: {team: gpu}
scheduler:
  schedulerName: gpu-scheduler
  image: {repository: registry.example.com/drasched/scheduler, tag: dev, pullPolicy: Always}
  replicas: 3
  logLevel: 4
  featureGates: {GenericWorkload: true, DRAWorkloadResourceClaims: true}
  structuredDRAArgs: {allocation: {policy: BestFit}}
  resources: {requests: {cpu: 500m}}
  podDisruptionBudget: {enabled: false}
gpuDriver:
  backend: sysfs
  logLevel: 5
  image: {tag: v9.9.9}
  runtimeClassName: ""
  deviceClasses: {enabled: false}
  ownNodeSlicesPolicy: {enabled: false}
  migMonitor: true
admission:
  extendedResourceNames: [nvidia.com/gpu]
dashboards:
  enabled: true
`), &values); err != nil {
		t.Fatal(err)
	}
	manifest, err := render(t, values)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"team: gpu",
		"- schedulerName: gpu-scheduler",
		"image: registry.example.com/drasched/scheduler:dev",
		"imagePullPolicy: Always",
		"replicas: 3",
		"- --v=4",
		"- --feature-gates=DRAWorkloadResourceClaims=true,GenericWorkload=true",
		"policy: BestFit",
		"cpu: 500m",
		"- --backend=sysfs",
		"- --v=5",
		"image: ghcr.io/drasched/gpu-kubelet-plugin:v9.9.9",
		"privileged: true",
		"value: all", // NVIDIA_MIG_MONITOR_DEVICES
		`"gpu-scheduler"`,
		`["nvidia.com/gpu"]`,
		"grafana_dashboard: \"1\"",
		`"title": "drasched`,
	} {
		if !strings.Contains(manifest, want) {
			t.Errorf("rendered chart lacks %q", want)
		}
	}
	for _, absent := range []string{"kind: PodDisruptionBudget", "kind: DeviceClass", "name: gpu-kubelet-plugin-own-node-slices", "name: drasched-node-local-slices", "runtimeClassName:"} {
		if strings.Contains(manifest, absent) {
			t.Errorf("rendered chart has %q", absent)
		}
	}
	// What the values change is still a valid object of its kind.
	objects(t, "chart", []byte(manifest), map[string]map[string]any{})
}

// TestChartNodeLayout checks the values for nodes laid out otherwise than
// the defaults assume (make test-node's node is one): the kubelet's root
// directory, the CDI directory and the device root reach both the
// plugin's flags and its hostPath volumes (the driver root's usr/
// read-only), and an inventory file is passed and mounted read-only.
func TestChartNodeLayout(t *testing.T) {
	values := map[string]any{}
	if err := yaml.Unmarshal([]byte(`
gpuDriver:
  backend: inventory
  inventoryFile: /srv/node/inventory/gpus.yaml
  kubeletDir: /srv/node/kubelet/
  cdiDir: /srv/node/cdi
  devRoot: /srv/node/devroot
  driverRoot: /srv/node/driverroot/
  runtimeClassName: ""
`), &values); err != nil {
		t.Fatal(err)
	}
	rendered, err := render(t, values)
	if err != nil {
		t.Fatal(err)
	}
	decoded, err := manifest.Decode([]byte(rendered))
	if err != nil {
		t.Fatal(err)
	}
	var ds *appsv1.DaemonSet
	for _, obj := range decoded {
		if d, ok := obj.(*appsv1.DaemonSet); ok {
			ds = d
		}
	}
	if ds == nil {
		t.Fatal("no DaemonSet rendered")
	}
	spec := ds.Spec.Template.Spec
	if spec.RuntimeClassName != nil {
		t.Errorf("runtimeClassName %q, want none", *spec.RuntimeClassName)
	}
	c := spec.Containers[0]
	wantArgs := []string{
		"run", "--backend=inventory", "--inventory=/srv/node/inventory/gpus.yaml", "--v=2",
		"--registrar-dir=/srv/node/kubelet/plugins_registry",
		"--plugin-data-dir=/srv/node/kubelet/plugins/gpu.drasched.dev",
		"--cdi-dir=/srv/node/cdi",
		"--dev-root=/srv/node/devroot",
		"--container-dev-root=/host-dev-root",
		"--driver-root=/srv/node/driverroot/",
		"--container-driver-root=/host-driver-root",
	}
	if diff := cmp.Diff(wantArgs, c.Args); diff != "" {
		t.Errorf("args (-want +got):\n%s", diff)
	}
	type mount struct {
		HostPath, MountPath string
		ReadOnly            bool
	}
	want := map[string]mount{
		"plugins-registry": {"/srv/node/kubelet/plugins_registry", "/srv/node/kubelet/plugins_registry", false},
		"plugin-data":      {"/srv/node/kubelet/plugins/gpu.drasched.dev", "/srv/node/kubelet/plugins/gpu.drasched.dev", false},
		"cdi":              {"/srv/node/cdi", "/srv/node/cdi", false},
		"dev":              {"/srv/node/devroot/dev", "/host-dev-root/dev", true},
		"driver":           {"/srv/node/driverroot/usr", "/host-driver-root/usr", true},
		"inventory":        {"/srv/node/inventory", "/srv/node/inventory", true},
		"nvidia-devices":   {"/dev/null", "/var/run/nvidia-container-devices/all", true},
	}
	got := map[string]mount{}
	for _, v := range spec.Volumes {
		for _, m := range c.VolumeMounts {
			if m.Name == v.Name && v.HostPath != nil {
				got[v.Name] = mount{v.HostPath.Path, m.MountPath, m.ReadOnly}
			}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("hostPath volumes (-want +got):\n%s", diff)
	}
}

// TestChartRefuses checks the values the chart refuses to render: by its
// templates (fail) or by values.schema.json.
func TestChartRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		values map[string]any
		want   string
	}{
		"default-scheduler": {
			values: map[string]any{"scheduler": map[string]any{"schedulerName": "default-scheduler"}},
			want:   "/scheduler/schedulerName': value must be 'any name but default-scheduler",
		},
		"scheduler name not a DNS subdomain": {
			// The API server would refuse every pod the routing policy
			// gave it, and the policy refuses pods that lack it.
			values: map[string]any{"scheduler": map[string]any{"schedulerName": "GPU_Scheduler"}},
			want:   "/scheduler/schedulerName': 'GPU_Scheduler' does not match pattern",
		},
		"scheduler name too long": {
			values: map[string]any{"scheduler": map[string]any{"schedulerName": strings.Repeat("a", 254)}},
			want:   "/scheduler/schedulerName",
		},
		"extended resource name of a class the chart does not install": {
			values: map[string]any{"gpuDriver": map[string]any{"deviceClasses": map[string]any{"extendedResourceNames": map[string]any{"gpu.example.com": "example.com/gpu"}}}},
			want:   "additional properties 'gpu.example.com' not allowed",
		},
		"malformed extended resource name of a class": {
			values: map[string]any{"gpuDriver": map[string]any{"deviceClasses": map[string]any{"extendedResourceNames": map[string]any{"gpu.drasched.dev": "gpu"}}}},
			want:   "/gpuDriver/deviceClasses/extendedResourceNames/gpu.drasched.dev': 'gpu' does not match pattern",
		},
		"one extended resource name for two classes": {
			values: map[string]any{"gpuDriver": map[string]any{"deviceClasses": map[string]any{"extendedResourceNames": map[string]any{
				"gpu.drasched.dev": "nvidia.com/gpu", "mig.gpu.drasched.dev": "nvidia.com/gpu",
			}}}},
			want: "nvidia.com/gpu is given to more than one DeviceClass",
		},
		"malformed admission.extendedResourceNames": {
			values: map[string]any{"admission": map[string]any{"extendedResourceNames": []any{"fpga"}}},
			want:   "/admission/extendedResourceNames/0",
		},
		"replicas without leader election": {
			values: map[string]any{"scheduler": map[string]any{"leaderElection": map[string]any{"enabled": false}}},
			want:   "needs scheduler.leaderElection.enabled",
		},
		// values.schema.json
		"unknown value": {
			values: map[string]any{"scheduler": map[string]any{"replica": 3}},
			want:   "additional properties 'replica' not allowed",
		},
		"replicas not a number": {
			values: map[string]any{"scheduler": map[string]any{"replicas": "two"}},
			want:   "/scheduler/replicas",
		},
		"inventory backend without a file": {
			values: map[string]any{"gpuDriver": map[string]any{"backend": "inventory"}},
			want:   "gpuDriver.backend=inventory needs gpuDriver.inventoryFile",
		},
		"inventory file with another backend": {
			values: map[string]any{"gpuDriver": map[string]any{"inventoryFile": "/etc/gpus.yaml"}},
			want:   "gpuDriver.inventoryFile is only used with gpuDriver.backend=inventory",
		},
		"relative kubelet directory": {
			values: map[string]any{"gpuDriver": map[string]any{"kubeletDir": "var/lib/kubelet"}},
			want:   "/gpuDriver/kubeletDir",
		},
		"relative device root": {
			values: map[string]any{"gpuDriver": map[string]any{"devRoot": "run/nvidia/driver"}},
			want:   "/gpuDriver/devRoot",
		},
		"relative driver root": {
			values: map[string]any{"gpuDriver": map[string]any{"driverRoot": "run/nvidia/driver"}},
			want:   "/gpuDriver/driverRoot",
		},
		"unknown backend": {
			values: map[string]any{"gpuDriver": map[string]any{"backend": "nvml"}},
			want:   "/gpuDriver/backend",
		},
		"unknown StructuredDRAArgs field": {
			values: map[string]any{"scheduler": map[string]any{"structuredDRAArgs": map[string]any{"filterTimout": "5s"}}},
			want:   "additional properties 'filterTimout' not allowed",
		},
		"unknown allocation policy": {
			values: map[string]any{"scheduler": map[string]any{"structuredDRAArgs": map[string]any{"allocation": map[string]any{"policy": "Random"}}}},
			want:   "/scheduler/structuredDRAArgs/allocation/policy",
		},
		"malformed duration": {
			values: map[string]any{"scheduler": map[string]any{"structuredDRAArgs": map[string]any{"filterTimeout": "ten seconds"}}},
			want:   "/scheduler/structuredDRAArgs/filterTimeout",
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := render(t, tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one with %q", err, tc.want)
			}
		})
	}
}

// TestChartRefusesWithoutSchema: with the schema skipped (`helm template
// --skip-schema-validation`), the templates still refuse the scheduler
// name default-scheduler.
func TestChartRefusesWithoutSchema(t *testing.T) {
	_, err := renderRelease(t, map[string]any{"scheduler": map[string]any{"schedulerName": "default-scheduler"}}, func(install *action.Install) {
		install.SkipSchemaValidation = true
	})
	if want := "must not be default-scheduler"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want one with %q", err, want)
	}
}

// TestChartKubeVersion: the chart installs where a scheduler build is
// within upstream's skew policy (an API server of the build's minor or one
// minor newer: 1.35 to 1.38), with the build for the cluster's minor, the
// newest for a newer cluster (docs/compatibility.md); the routing policy
// (MutatingAdmissionPolicy v1) only where it is served, from 1.36 on.
func TestChartKubeVersion(t *testing.T) {
	for version, want := range map[string]struct {
		image   string // "" where the chart refuses the cluster
		routing bool
	}{
		"v1.34.4": {},
		"v1.35.4": {image: "ghcr.io/drasched/scheduler:v0.1.0-k8s1.35"},
		"v1.36.3": {image: "ghcr.io/drasched/scheduler:v0.1.0-k8s1.36", routing: true},
		"v1.37.0": {image: "ghcr.io/drasched/scheduler:v0.1.0-k8s1.37", routing: true},
		"v1.37.2": {image: "ghcr.io/drasched/scheduler:v0.1.0-k8s1.37", routing: true},
		"v1.38.1": {image: "ghcr.io/drasched/scheduler:v0.1.0-k8s1.37", routing: true},
		"v1.39.0": {},
	} {
		t.Run(version, func(t *testing.T) {
			kv, err := chartutil.ParseKubeVersion(version)
			if err != nil {
				t.Fatal(err)
			}
			rel, err := renderRelease(t, nil, func(install *action.Install) { install.KubeVersion = kv })
			switch {
			case want.image != "" && err != nil:
				t.Fatalf("refused: %v", err)
			case want.image == "":
				if err == nil || !strings.Contains(err.Error(), "is incompatible with Kubernetes") {
					t.Errorf("error %v, want the chart's kubeVersion to refuse the cluster", err)
				}
				return
			}
			if !strings.Contains(rel.Manifest, "image: "+want.image+"\n") {
				t.Errorf("the scheduler's image is not %s", want.image)
			}
			if got := strings.Contains(rel.Manifest, "kind: MutatingAdmissionPolicy\n"); got != want.routing {
				t.Errorf("routing policy installed: %v, want %v", got, want.routing)
			}
		})
	}
}

// TestChartSchedulerMinor: scheduler.kubeMinor picks another build, within
// the skew policy only.
func TestChartSchedulerMinor(t *testing.T) {
	for name, tc := range map[string]struct {
		cluster, minor string
		image          string // "" where the install fails
		err            string
	}{
		"the build one minor older": {cluster: "v1.37.2", minor: "1.36", image: "ghcr.io/drasched/scheduler:v0.1.0-k8s1.36"},
		"its own minor":             {cluster: "v1.36.3", minor: "1.36", image: "ghcr.io/drasched/scheduler:v0.1.0-k8s1.36"},
		"newer than the cluster":    {cluster: "v1.36.3", minor: "1.37", err: "may not talk to this cluster's API server"},
		"two minors older":          {cluster: "v1.37.2", minor: "1.35", err: "may not talk to this cluster's API server"},
	} {
		t.Run(name, func(t *testing.T) {
			kv, err := chartutil.ParseKubeVersion(tc.cluster)
			if err != nil {
				t.Fatal(err)
			}
			rel, err := renderRelease(t, map[string]any{"scheduler": map[string]any{"kubeMinor": tc.minor}}, func(install *action.Install) { install.KubeVersion = kv })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("error %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(rel.Manifest, "image: "+tc.image+"\n") {
				t.Errorf("the scheduler's image is not %s", tc.image)
			}
		})
	}
}

// TestChartMinors: the chart knows the builds that exist, go.mod's minor and
// hack/minor/*, and its kubeVersion admits exactly their API servers.
func TestChartMinors(t *testing.T) {
	gomod, err := os.ReadFile(repoRoot + "/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	newest := regexp.MustCompile(`(?m)^\s*k8s.io/kubernetes v1\.([0-9]+)\.`).FindSubmatch(gomod)
	if newest == nil {
		t.Fatal("go.mod requires no k8s.io/kubernetes")
	}
	entries, err := os.ReadDir(repoRoot + "/hack/minor")
	if err != nil {
		t.Fatal(err)
	}
	minors := []int{atoi(t, string(newest[1]))}
	for _, e := range entries {
		minors = append(minors, atoi(t, strings.TrimPrefix(e.Name(), "1.")))
	}
	slices.Sort(minors)
	var builds []string
	for _, m := range minors {
		builds = append(builds, fmt.Sprintf("1.%d", m))
	}
	helpers, err := os.ReadFile(chartDir + "/templates/_helpers.tpl")
	if err != nil {
		t.Fatal(err)
	}
	if want := "define \"drasched.schedulerBuilds\" -}}\n" + strings.Join(builds, " ") + "\n"; !strings.Contains(string(helpers), want) {
		t.Errorf("_helpers.tpl's drasched.schedulerBuilds are not %s", strings.Join(builds, " "))
	}
	chartYAML, err := os.ReadFile(chartDir + "/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("kubeVersion: \">=1.%d.0-0 <1.%d.0-0\"\n", minors[0], minors[len(minors)-1]+2)
	if !strings.Contains(string(chartYAML), want) {
		t.Errorf("Chart.yaml lacks %s", want)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestChartExtendedResourceNames: the extended resource names that the
// admission policies route and guard are derived from the DeviceClasses
// the chart installs (gpuDriver.deviceClasses.extendedResourceNames, which
// set the classes' spec.extendedResourceName), plus
// admission.extendedResourceNames for classes installed otherwise: no list
// to keep in step by hand.
func TestChartExtendedResourceNames(t *testing.T) {
	classNames := func(names map[string]any) map[string]any {
		return map[string]any{"deviceClasses": map[string]any{"extendedResourceNames": names}}
	}
	tests := map[string]struct {
		values map[string]any
		// wantClasses are the DeviceClasses and their extendedResourceName.
		wantClasses map[string]string
		// wantPolicy is the policies' variable extendedResourceNames.
		wantPolicy string
	}{
		"defaults": {
			wantClasses: map[string]string{"gpu.drasched.dev": "", "mig.gpu.drasched.dev": ""},
			wantPolicy:  `[]`,
		},
		"a class's name": {
			values:      map[string]any{"gpuDriver": classNames(map[string]any{"gpu.drasched.dev": "nvidia.com/gpu"})},
			wantClasses: map[string]string{"gpu.drasched.dev": "nvidia.com/gpu", "mig.gpu.drasched.dev": ""},
			wantPolicy:  `["nvidia.com/gpu"]`,
		},
		"both classes' names and another class's": {
			values: map[string]any{
				"gpuDriver": classNames(map[string]any{"gpu.drasched.dev": "nvidia.com/gpu", "mig.gpu.drasched.dev": "nvidia.com/mig"}),
				"admission": map[string]any{"extendedResourceNames": []any{"example.com/fpga", "nvidia.com/gpu"}},
			},
			wantClasses: map[string]string{"gpu.drasched.dev": "nvidia.com/gpu", "mig.gpu.drasched.dev": "nvidia.com/mig"},
			wantPolicy:  `["nvidia.com/gpu","nvidia.com/mig","example.com/fpga"]`,
		},
		"classes not installed": {
			values: map[string]any{
				"gpuDriver": map[string]any{"deviceClasses": map[string]any{"enabled": false, "extendedResourceNames": map[string]any{"gpu.drasched.dev": "nvidia.com/gpu"}}},
				"admission": map[string]any{"extendedResourceNames": []any{"example.com/fpga"}},
			},
			wantClasses: map[string]string{},
			wantPolicy:  `["example.com/fpga"]`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rendered, err := render(t, tc.values)
			if err != nil {
				t.Fatal(err)
			}
			decoded, err := manifest.Decode([]byte(rendered))
			if err != nil {
				t.Fatal(err)
			}
			classes := map[string]string{}
			for _, class := range manifest.OfType[*resourceapi.DeviceClass](decoded) {
				classes[class.Name] = ptr.Deref(class.Spec.ExtendedResourceName, "")
			}
			if diff := cmp.Diff(tc.wantClasses, classes); diff != "" {
				t.Errorf("DeviceClasses and their extendedResourceName (-want +got):\n%s", diff)
			}
			policies := map[string][]admissionv1.Variable{}
			for _, p := range manifest.OfType[*admissionv1.MutatingAdmissionPolicy](decoded) {
				policies[p.Name] = p.Spec.Variables
			}
			for _, p := range manifest.OfType[*admissionv1.ValidatingAdmissionPolicy](decoded) {
				if p.Name == "drasched-scheduler-required" {
					policies[p.Name] = p.Spec.Variables
				}
			}
			if len(policies) != 2 {
				t.Fatalf("admission policies %v, want drasched-routing and drasched-scheduler-required", slices.Sorted(maps.Keys(policies)))
			}
			for policy, variables := range policies {
				i := slices.IndexFunc(variables, func(v admissionv1.Variable) bool { return v.Name == "extendedResourceNames" })
				if i < 0 {
					t.Errorf("%s has no variable extendedResourceNames", policy)
					continue
				}
				if got := variables[i].Expression; got != tc.wantPolicy {
					t.Errorf("%s: extendedResourceNames %s, want %s", policy, got, tc.wantPolicy)
				}
			}
		})
	}
}

// TestChartNotes: `helm install` prints a warning for every value that
// weakens one of the controls of docs/security.md, saying what it opens;
// with the default values it prints none.
func TestChartNotes(t *testing.T) {
	tests := map[string]struct {
		values map[string]any
		want   []string // the warnings' beginnings
	}{
		"defaults": {},
		"admission off": {
			values: map[string]any{"admission": map[string]any{"enabled": false}},
			want:   []string{"WARNING: admission.enabled=false: nothing keeps pods with resource claims away from other schedulers"},
		},
		"own-node slice policy off": {
			values: map[string]any{"gpuDriver": map[string]any{"ownNodeSlicesPolicy": map[string]any{"enabled": false}}},
			want:   []string{"WARNING: gpuDriver.ownNodeSlicesPolicy.enabled=false: the GPU plugin's ServiceAccount may create, change and delete the ResourceSlices of every node"},
		},
		"own-node slice policy off without the driver": {
			values: map[string]any{"gpuDriver": map[string]any{"enabled": false, "ownNodeSlicesPolicy": map[string]any{"enabled": false}}},
		},
		"MIG monitor": {
			values: map[string]any{"gpuDriver": map[string]any{"migMonitor": true}},
			want:   []string{"WARNING: gpuDriver.migMonitor=true: the GPU plugin runs privileged"},
		},
		"health endpoint off loopback": {
			values: map[string]any{"gpuDriver": map[string]any{"extraArgs": []any{"--health-probe-bind-address=0.0.0.0:8081"}}},
			want:   []string{"WARNING: gpuDriver.extraArgs --health-probe-bind-address=0.0.0.0:8081: the health endpoint listens where other pods reach it"},
		},
		"health endpoint on another loopback port": {
			values: map[string]any{"gpuDriver": map[string]any{"extraArgs": []any{"--health-probe-bind-address=127.0.0.1:9081"}}},
		},
		"no filter timeout": {
			values: map[string]any{"scheduler": map[string]any{"structuredDRAArgs": map[string]any{"filterTimeout": "0s"}}},
			want:   []string{"WARNING: scheduler.structuredDRAArgs.filterTimeout=0s: StructuredDRA's Filter has no time limit. Whoever may create a ResourceClaim can give it CEL selectors that take minutes to evaluate"},
		},
		"no filter timeout, written 0": {
			values: map[string]any{"scheduler": map[string]any{"structuredDRAArgs": map[string]any{"filterTimeout": "0"}}},
			want:   []string{"WARNING: scheduler.structuredDRAArgs.filterTimeout=0: StructuredDRA's Filter has no time limit"},
		},
		"no filter timeout, written 0m0.000s": {
			values: map[string]any{"scheduler": map[string]any{"structuredDRAArgs": map[string]any{"filterTimeout": "0m0.000s"}}},
			want:   []string{"WARNING: scheduler.structuredDRAArgs.filterTimeout=0m0.000s"},
		},
		"filter timeout of 100ms": {
			values: map[string]any{"scheduler": map[string]any{"structuredDRAArgs": map[string]any{"filterTimeout": "100ms"}}},
		},
		"filter timeout of 0.5s": {
			values: map[string]any{"scheduler": map[string]any{"structuredDRAArgs": map[string]any{"filterTimeout": "0.5s"}}},
		},
		"no filter timeout without the scheduler": {
			values: map[string]any{"scheduler": map[string]any{"enabled": false, "structuredDRAArgs": map[string]any{"filterTimeout": "0s"}}},
		},
		"filter timeout gate off": {
			values: map[string]any{"scheduler": map[string]any{"featureGates": map[string]any{"DRASchedulerFilterTimeout": false}}},
			want:   []string{"WARNING: scheduler.featureGates.DRASchedulerFilterTimeout=false: StructuredDRA ignores filterTimeout, and its Filter has no time limit"},
		},
		"filter timeout gate on": {
			values: map[string]any{"scheduler": map[string]any{"featureGates": map[string]any{"DRASchedulerFilterTimeout": true}}},
		},
		"all of them": {
			values: map[string]any{
				"admission": map[string]any{"enabled": false},
				"gpuDriver": map[string]any{"migMonitor": true, "ownNodeSlicesPolicy": map[string]any{"enabled": false}},
			},
			want: []string{
				"WARNING: admission.enabled=false",
				"WARNING: gpuDriver.ownNodeSlicesPolicy.enabled=false",
				"WARNING: gpuDriver.migMonitor=true",
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rel, err := renderRelease(t, tc.values)
			if err != nil {
				t.Fatal(err)
			}
			notes := rel.Info.Notes
			if got := strings.Count(notes, "WARNING: "); got != len(tc.want) {
				t.Errorf("%d warnings, want %d:\n%s", got, len(tc.want), notes)
			}
			for _, want := range tc.want {
				if !strings.Contains(notes, want) {
					t.Errorf("notes lack %q:\n%s", want, notes)
				}
			}
			if len(tc.want) > 0 && !strings.Contains(notes, "docs/security.md") {
				t.Errorf("notes with warnings do not point to docs/security.md:\n%s", notes)
			}
		})
	}
}
