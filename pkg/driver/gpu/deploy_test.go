package gpu

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/klog/v2/ktesting"
	resourceinternal "k8s.io/kubernetes/pkg/apis/resource"
	resourceinstall "k8s.io/kubernetes/pkg/apis/resource/install"
	resourcevalidation "k8s.io/kubernetes/pkg/apis/resource/validation"
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
	if c.Args[0] != "run" || len(c.VolumeMounts) != 3 {
		t.Errorf("DaemonSet container: args %v, %d mounts", c.Args, len(c.VolumeMounts))
	}
	for _, m := range c.VolumeMounts {
		for _, v := range ds.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.HostPath.Path != m.MountPath {
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
