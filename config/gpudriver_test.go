package config_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	podutil "k8s.io/kubernetes/pkg/api/pod"
	"k8s.io/kubernetes/pkg/apis/apps"
	appsvalidation "k8s.io/kubernetes/pkg/apis/apps/validation"
	"k8s.io/kubernetes/pkg/capabilities"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/drasched/drasched/internal/manifest"
	"github.com/drasched/drasched/pkg/driver/gpu"
	"github.com/drasched/drasched/pkg/driver/gpu/cdi"
)

// gpuDriverDaemonSet is the DaemonSet of config/gpu-driver.
func gpuDriverDaemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	return named[*appsv1.DaemonSet](t, decodeFile(t, filepath.Join("gpu-driver", "daemonset.yaml")), "gpu-kubelet-plugin")
}

// TestGPUDriverLeastPrivilege: the plugin runs its `run` command
// unprivileged, with every capability dropped, a read-only root filesystem
// and the runtime's seccomp profile, and writes only to the host
// directories where the kubelet and the container runtime expect its
// sockets, checkpoint and CDI specs: the plugin's own defaults, mounted at
// the same paths (the kubelet passes the host paths on). TestManifests runs
// the API server's validation on it.
func TestGPUDriverLeastPrivilege(t *testing.T) {
	spec := gpuDriverDaemonSet(t).Spec.Template.Spec
	c := spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "run" {
		t.Errorf("container args %v, want the run command", c.Args)
	}

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
	// read-write at the same path, except the host's /dev and /usr, which
	// it only reads (read-only, at --container-dev-root and under
	// --container-driver-root), and /dev/null, the NVIDIA runtime's
	// request for all GPUs as a volume mount; nothing else of the host is
	// mounted.
	registry, pluginData := kubeletplugin.KubeletRegistryDir, filepath.Join(kubeletplugin.KubeletPluginsDir, gpu.DefaultDriverName)
	wantMounts := map[string]corev1.VolumeMount{
		registry:       {MountPath: registry},
		pluginData:     {MountPath: pluginData},
		cdi.DefaultDir: {MountPath: cdi.DefaultDir},
		"/dev":         {MountPath: "/host-dev-root/dev", ReadOnly: true, RecursiveReadOnly: ptr.To(corev1.RecursiveReadOnlyIfPossible)},
		"/usr":         {MountPath: "/host-driver-root/usr", ReadOnly: true, RecursiveReadOnly: ptr.To(corev1.RecursiveReadOnlyIfPossible)},
		"/dev/null":    {MountPath: "/var/run/nvidia-container-devices/all", ReadOnly: true},
	}
	gotMounts := map[string]corev1.VolumeMount{}
	for _, v := range spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		mounted := false
		for _, m := range c.VolumeMounts {
			if m.Name == v.Name {
				mounted = true
				m.Name = ""
				gotMounts[v.HostPath.Path] = m
			}
		}
		if !mounted {
			t.Errorf("volume %s is not mounted", v.Name)
		}
	}
	if diff := cmp.Diff(wantMounts, gotMounts); diff != "" {
		t.Errorf("hostPath volumes by host path (-plugin defaults +DaemonSet):\n%s", diff)
	}
	for _, want := range []string{"--dev-root=/", "--container-dev-root=/host-dev-root", "--driver-root=/", "--container-driver-root=/host-driver-root"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %q lack %s", c.Args, want)
		}
	}

	// The liveness probe asks /healthz from inside the container: the
	// health endpoint listens on loopback, where no other pod can fill it
	// and have the kubelet restart the plugin. Only the metrics endpoint,
	// HTTPS with delegated authentication, is a port of the pod.
	if probe := c.LivenessProbe; probe == nil || probe.Exec == nil || !slices.Equal(probe.Exec.Command, []string{"gpu-kubelet-plugin", "healthcheck"}) {
		t.Errorf("liveness probe %+v, want exec gpu-kubelet-plugin healthcheck", probe)
	}
	for _, arg := range c.Args {
		if strings.HasPrefix(arg, "--health-probe-bind-address") || strings.HasPrefix(arg, "--metrics-bind-address") {
			t.Errorf("argument %s: the probe and the port follow the plugin's defaults", arg)
		}
	}
	var ports []string
	for _, p := range c.Ports {
		ports = append(ports, fmt.Sprintf("%s:%d", p.Name, p.ContainerPort))
	}
	if !slices.Equal(ports, []string{"metrics:8443"}) {
		t.Errorf("container ports %v, want the metrics endpoint's, metrics:8443", ports)
	}
}

// TestGPUDriverDeviceClasses evaluates the GPU driver's DeviceClasses' CEL
// selectors on the devices the driver publishes for an A100 node with MIG
// devices: each class selects exactly its type.
func TestGPUDriverDeviceClasses(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	node := exampleNodes(t)["a100-mig-8"]
	want := map[string]struct {
		typ   string
		count int
	}{
		"gpu.drasched.dev":     {typ: "gpu", count: 8},
		"mig.gpu.drasched.dev": {typ: "mig", count: 25},
	}
	classes := manifest.OfType[*resourceapi.DeviceClass](decodeFile(t, filepath.Join("gpu-driver", "deviceclasses.yaml")))
	if len(classes) != len(want) {
		t.Errorf("%d DeviceClasses, want %d", len(classes), len(want))
	}
	for _, class := range classes {
		matched := 0
		for _, s := range node.slices {
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

// TestGPUDriverMIGOverlay: config/gpu-driver-mig is the DaemonSet of
// config/gpu-driver with exactly what MIG discovery needs added (a
// privileged container with the MIG monitor capability), and the API server
// accepts it where privileged containers are allowed.
func TestGPUDriverMIGOverlay(t *testing.T) {
	built, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), "gpu-driver-mig")
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
		objects, err := manifest.Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		mig = objects[0].(*appsv1.DaemonSet)
	}
	if mig == nil {
		t.Fatal("the overlay has no DaemonSet")
	}
	if got, want := len(built.Resources()), len(decodeAll(t, "gpu-driver")); got != want {
		t.Errorf("the overlay has %d objects, want the %d of config/gpu-driver", got, want)
	}

	want := gpuDriverDaemonSet(t).DeepCopy()
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
