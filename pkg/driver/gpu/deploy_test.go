package gpu

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	podutil "k8s.io/kubernetes/pkg/api/pod"
	"k8s.io/kubernetes/pkg/apis/apps"
	_ "k8s.io/kubernetes/pkg/apis/apps/install" // DaemonSet defaults and conversion
	appsvalidation "k8s.io/kubernetes/pkg/apis/apps/validation"
	_ "k8s.io/kubernetes/pkg/apis/core/install" // pod template defaults and conversion
	resourceinternal "k8s.io/kubernetes/pkg/apis/resource"
	resourceinstall "k8s.io/kubernetes/pkg/apis/resource/install"
	resourcevalidation "k8s.io/kubernetes/pkg/apis/resource/validation"
	"k8s.io/kubernetes/pkg/capabilities"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/drasched/drasched/pkg/driver/gpu/cdi"
)

var deployDir = filepath.Join("..", "..", "..", "config", "gpu-driver")

// loadManifests decodes every object in a YAML file strictly (unknown
// fields are errors).
func loadManifests(t *testing.T, name string) []runtime.Object {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(deployDir, name))
	if err != nil {
		t.Fatal(err)
	}
	codecs := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict)
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	var objects []runtime.Object
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		objects = append(objects, obj)
	}
	return objects
}

func TestDeployManifestsDecode(t *testing.T) {
	files := map[string]int{
		"namespace.yaml":      1,
		"serviceaccount.yaml": 1,
		"rbac.yaml":           4,
		"deviceclasses.yaml":  2,
		"daemonset.yaml":      1,
		"example-claims.yaml": 3,
	}
	for name, want := range files {
		t.Run(name, func(t *testing.T) {
			if got := len(loadManifests(t, name)); got != want {
				t.Errorf("%d objects, want %d", got, want)
			}
		})
	}
	ds := loadManifests(t, "daemonset.yaml")[0].(*appsv1.DaemonSet)
	c := ds.Spec.Template.Spec.Containers[0]
	if c.Args[0] != "run" || len(c.VolumeMounts) != 4 {
		t.Errorf("DaemonSet container: args %v, %d mounts", c.Args, len(c.VolumeMounts))
	}
	for _, m := range c.VolumeMounts {
		for _, v := range ds.Spec.Template.Spec.Volumes {
			// The host's /dev is only read, at --container-dev-root.
			if v.Name == m.Name && v.Name != "dev" && v.HostPath.Path != m.MountPath {
				t.Errorf("volume %s: host path %s mounted at %s; the kubelet needs the same path", v.Name, v.HostPath.Path, m.MountPath)
			}
		}
	}
}

// TestDeviceClassesSelectDevices evaluates the shipped DeviceClasses' CEL
// selectors on the devices the driver publishes: each class selects exactly
// its type.
func TestDeviceClassesSelectDevices(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	slices, err := BuildResourceSlices(SliceOptions{NodeName: "node-1"}, loadInventory(t, "a100-mig-8.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	apiScheme := runtime.NewScheme()
	resourceinstall.Install(apiScheme)
	want := map[string]struct {
		typ   string
		count int
	}{
		"gpu.drasched.dev":     {typ: "gpu", count: 8},
		"mig.gpu.drasched.dev": {typ: "mig", count: 25},
	}
	for _, obj := range loadManifests(t, "deviceclasses.yaml") {
		class := obj.(*resourceapi.DeviceClass)
		var internal resourceinternal.DeviceClass
		if err := apiScheme.Convert(class, &internal, nil); err != nil {
			t.Fatal(err)
		}
		if errs := resourcevalidation.ValidateDeviceClass(&internal); len(errs) > 0 {
			t.Errorf("DeviceClass %s: %v", class.Name, errs.ToAggregate())
		}
		matched := 0
		for _, s := range slices {
			for _, d := range s.Spec.Devices {
				ok := true
				for _, sel := range class.Spec.Selectors {
					result := dracel.GetCompiler(dracel.Features{}).CompileCELExpression(sel.CEL.Expression, dracel.Options{})
					if result.Error != nil {
						t.Fatalf("DeviceClass %s: %v", class.Name, result.Error)
					}
					match, _, err := result.DeviceMatches(ctx, dracel.Device{Driver: s.Spec.Driver, Attributes: d.Attributes, Capacity: d.Capacity})
					if err != nil {
						t.Fatalf("DeviceClass %s on %s: %v", class.Name, d.Name, err)
					}
					ok = ok && match
				}
				if ok {
					matched++
					if got := *d.Attributes["type"].StringValue; got != want[class.Name].typ {
						t.Errorf("DeviceClass %s selects %s of type %s", class.Name, d.Name, got)
					}
				}
			}
		}
		if matched != want[class.Name].count {
			t.Errorf("DeviceClass %s selects %d devices, want %d", class.Name, matched, want[class.Name].count)
		}
	}
}

// TestExampleConfigDecodes: the opaque configuration in the example claim
// is accepted by the driver's strict decoder.
func TestExampleConfigDecodes(t *testing.T) {
	for _, obj := range loadManifests(t, "example-claims.yaml") {
		tmpl, ok := obj.(*resourceapi.ResourceClaimTemplate)
		if !ok {
			continue
		}
		for _, c := range tmpl.Spec.Spec.Devices.Config {
			if c.Opaque == nil || c.Opaque.Driver != DefaultDriverName {
				continue
			}
			if _, err := DecodeConfig(c.Opaque.Parameters.Raw); err != nil {
				t.Errorf("ResourceClaimTemplate %s: %v", tmpl.Name, err)
			}
		}
	}
}

// TestDaemonSetLeastPrivilege: the plugin runs unprivileged, with every
// capability dropped, a read-only root filesystem and the runtime's
// seccomp profile, and writes only to the host directories where the
// kubelet and the container runtime expect its sockets, checkpoint and CDI
// specs: the plugin's own defaults. The DaemonSet passes the API server's
// validation.
func TestDaemonSetLeastPrivilege(t *testing.T) {
	ds := loadManifests(t, "daemonset.yaml")[0].(*appsv1.DaemonSet)
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]

	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("container has no securityContext")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("container is privileged")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("root filesystem is writable")
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		t.Errorf("capabilities %+v: want ALL dropped and none added", sc.Capabilities)
	}
	seccomp := sc.SeccompProfile
	if seccomp == nil && spec.SecurityContext != nil {
		seccomp = spec.SecurityContext.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("seccomp profile %+v, want RuntimeDefault", seccomp)
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Error("the pod shares a host namespace")
	}

	// Every hostPath is one the plugin writes to by default, mounted
	// read-write at the same path, except the host's /dev, which it only
	// reads (read-only, at --container-dev-root); nothing else of the host
	// is mounted.
	registry, pluginData := kubeletplugin.KubeletRegistryDir, filepath.Join(kubeletplugin.KubeletPluginsDir, DefaultDriverName)
	wantMounts := map[string]corev1.VolumeMount{
		registry:       {MountPath: registry},
		pluginData:     {MountPath: pluginData},
		cdi.DefaultDir: {MountPath: cdi.DefaultDir},
		"/dev":         {MountPath: "/host-dev-root/dev", ReadOnly: true, RecursiveReadOnly: ptr.To(corev1.RecursiveReadOnlyIfPossible)},
	}
	gotMounts := map[string]corev1.VolumeMount{}
	for _, v := range spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		for _, m := range c.VolumeMounts {
			if m.Name == v.Name {
				m.Name = ""
				gotMounts[v.HostPath.Path] = m
			}
		}
	}
	if diff := cmp.Diff(wantMounts, gotMounts); diff != "" {
		t.Errorf("hostPath volumes by host path (-plugin defaults +DaemonSet):\n%s", diff)
	}
	for _, want := range []string{"--dev-root=/", "--container-dev-root=/host-dev-root"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %q lack %s", c.Args, want)
		}
	}
	if probe := c.LivenessProbe; probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe %+v, want GET /healthz", probe)
	}

	versioned := ds.DeepCopy()
	legacyscheme.Scheme.Default(versioned)
	var internal apps.DaemonSet
	if err := legacyscheme.Scheme.Convert(versioned, &internal, nil); err != nil {
		t.Fatal(err)
	}
	if errs := appsvalidation.ValidateDaemonSet(&internal, podutil.GetValidationOptionsFromPodTemplate(&internal.Spec.Template, nil)); len(errs) > 0 {
		t.Errorf("DaemonSet does not validate: %v", errs.ToAggregate())
	}
}

// TestMIGOverlay: config/gpu-driver-mig is the DaemonSet of config/gpu-driver
// with exactly what MIG discovery needs added (a privileged container with
// the MIG monitor capability), and the API server accepts it where
// privileged containers are allowed.
func TestMIGOverlay(t *testing.T) {
	built, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(deployDir+"-mig"))
	if err != nil {
		t.Fatalf("kustomize build: %v", err)
	}
	var mig *appsv1.DaemonSet
	for _, res := range built.Resources() {
		if res.GetKind() != "DaemonSet" {
			continue
		}
		raw, err := res.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		obj, _, err := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer().Decode(raw, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		mig = obj.(*appsv1.DaemonSet)
	}
	if mig == nil {
		t.Fatal("the overlay has no DaemonSet")
	}
	if got := len(built.Resources()); got != 1+1+4+2+1 {
		t.Errorf("the overlay has %d objects, want those of config/gpu-driver", got)
	}

	base := loadManifests(t, "daemonset.yaml")[0].(*appsv1.DaemonSet)
	want := base.DeepCopy()
	c := &want.Spec.Template.Spec.Containers[0]
	c.Env = append(c.Env, corev1.EnvVar{Name: "NVIDIA_MIG_MONITOR_DEVICES", Value: "all"})
	c.SecurityContext.Privileged = ptr.To(true)
	c.SecurityContext.AllowPrivilegeEscalation = ptr.To(true)
	// Kustomize merges the patch's variables in front; order does not
	// matter to the container.
	byName := cmpopts.SortSlices(func(a, b corev1.EnvVar) bool { return a.Name < b.Name })
	if diff := cmp.Diff(want, mig, byName); diff != "" {
		t.Errorf("MIG DaemonSet (-base with the MIG additions +overlay):\n%s", diff)
	}

	capabilities.ResetForTest()
	capabilities.Setup(true, 0)
	t.Cleanup(capabilities.ResetForTest)
	legacyscheme.Scheme.Default(mig)
	var internal apps.DaemonSet
	if err := legacyscheme.Scheme.Convert(mig, &internal, nil); err != nil {
		t.Fatal(err)
	}
	if errs := appsvalidation.ValidateDaemonSet(&internal, podutil.GetValidationOptionsFromPodTemplate(&internal.Spec.Template, nil)); len(errs) > 0 {
		t.Errorf("MIG DaemonSet does not validate: %v", errs.ToAggregate())
	}
}
