package config_test

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2/ktesting"

	"github.com/drasched/drasched/internal/manifest"
	"github.com/drasched/drasched/pkg/allocator"
	"github.com/drasched/drasched/pkg/driver/gpu"
	"github.com/drasched/drasched/pkg/driver/gpu/device"
	"github.com/drasched/drasched/pkg/driver/gpu/discovery"
)

// exampleNode is a node with the GPU driver's ResourceSlices and devices
// that are already allocated.
type exampleNode struct {
	slices    []*resourceapi.ResourceSlice
	allocated []string
}

// exampleNodes are the shipped inventories (config/inventory), each as
// one idle node named after its file, and three variants:
//   - h100-hgx-8-one-root: GPUs 0-3 share a PCIe root complex;
//   - a100-mig-8-busy: no whole GPU is free (GPUs 6 and 7 and the last MIG
//     device of every MIG-mode GPU are in use), but MIG devices are.
func exampleNodes(t *testing.T) map[string]exampleNode {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("inventory", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	inventories := map[string][]device.GPU{}
	for _, p := range paths {
		gpus, err := discovery.ParseInventory(readFile(t, p))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		inventories[strings.TrimSuffix(filepath.Base(p), ".yaml")] = gpus
	}

	h100 := slices.Clone(inventories["h100-hgx-8"])
	for i := range 4 {
		h100[i].PCIeRoot = h100[0].PCIeRoot
	}
	inventories["h100-hgx-8-one-root"] = h100

	a100 := inventories["a100-mig-8"]
	inventories["a100-mig-8-busy"] = a100
	var busy []string
	for i := range a100 {
		g := &a100[i]
		if len(g.MIG) == 0 {
			busy = append(busy, g.Name())
		} else {
			busy = append(busy, g.MIGName(&g.MIG[len(g.MIG)-1]))
		}
	}

	nodes := map[string]exampleNode{}
	for name, gpus := range inventories {
		s, err := gpu.BuildResourceSlices(gpu.SliceOptions{NodeName: name}, gpus)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		nodes[name] = exampleNode{slices: s}
	}
	nodes["a100-mig-8-busy"] = exampleNode{slices: nodes["a100-mig-8-busy"].slices, allocated: busy}
	return nodes
}

// userExamples are the objects of the examples that users apply as they
// are: config/examples and config/examples/gpu-driver, not the demo's
// steps.
func userExamples(t *testing.T) []runtime.Object {
	t.Helper()
	return append(decodeAll(t, "examples"), decodeAll(t, filepath.Join("examples", "gpu-driver"))...)
}

// exampleClaims returns the claims of the examples as the API server
// stores them, with defaults: ResourceClaims as they are, and one claim per
// ResourceClaimTemplate, as the resource claim controller creates them.
func exampleClaims(t *testing.T) map[string]*resourceapi.ResourceClaim {
	t.Helper()
	objects := withDefaults(userExamples(t))
	claims := map[string]*resourceapi.ResourceClaim{}
	add := func(name string, spec resourceapi.ResourceClaimSpec) {
		claims[name] = &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
			Spec:       spec,
		}
	}
	for _, tmpl := range manifest.OfType[*resourceapi.ResourceClaimTemplate](objects) {
		add(tmpl.Name, tmpl.Spec.Spec)
	}
	for _, claim := range manifest.OfType[*resourceapi.ResourceClaim](objects) {
		add(claim.Name, claim.Spec)
	}
	return claims
}

// TestExamplesAllocate allocates every example claim on every example node
// with upstream's structured allocator (the reference for what the
// scheduler allocates) and the GPU driver's and the examples' DeviceClasses.
// It shows that the examples' classes, selectors, attributes and constraints
// select what their comments say, and not more.
func TestExamplesAllocate(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	classes := append(
		manifest.OfType[*resourceapi.DeviceClass](withDefaults(decodeFile(t, filepath.Join("gpu-driver", "deviceclasses.yaml")))),
		manifest.OfType[*resourceapi.DeviceClass](withDefaults(decodeAll(t, "examples")))...)
	features := structured.Features{PrioritizedList: true, PartitionableDevices: true, DeviceTaints: true}

	// One whole GPU fits on every node but the busy A100 one.
	oneWholeGPU := map[string]string{
		"a100-mig-8": "gpu=1", "h100-hgx-8": "gpu=1", "h100-hgx-8-one-root": "gpu=1", "l40s-4": "gpu=1",
		"l40s-8-pcie-switch": "gpu=1",
	}
	// want: claim -> node -> "request=count ..." of the allocation, for the
	// nodes where the claim fits.
	want := map[string]map[string]string{
		"one-gpu":    oneWholeGPU,
		"shared-gpu": oneWholeGPU,
		"four-gpus-one-pcie-root": {
			"h100-hgx-8-one-root": "gpus=4", "l40s-8-pcie-switch": "gpus=4",
		},
		"mig-1g-5gb": {
			"a100-mig-8": "mig=1", "a100-mig-8-busy": "mig=1",
		},
		// config/examples/gpu-driver: MPS sharing is configuration, the
		// claim asks for one whole GPU; the two 1g.5gb MIG devices come from
		// one GPU (GPU 0 of the A100 node has seven, six free when busy).
		"one-gpu-mps": oneWholeGPU,
		"two-small-migs": {
			"a100-mig-8": "mig=2", "a100-mig-8-busy": "mig=2",
		},
		"best-available-gpu": {
			"h100-hgx-8": "gpu/large=1", "h100-hgx-8-one-root": "gpu/large=1",
			"a100-mig-8": "gpu/whole=1", "l40s-4": "gpu/whole=1", "l40s-8-pcie-switch": "gpu/whole=1",
			"a100-mig-8-busy": "gpu/mig=1",
		},
	}

	nodes := exampleNodes(t)
	got := map[string]map[string]string{}
	for claimName, claim := range exampleClaims(t) {
		got[claimName] = map[string]string{}
		for _, nodeName := range slices.Sorted(maps.Keys(nodes)) {
			node := nodes[nodeName]
			allocated := sets.New[structured.DeviceID]()
			for _, d := range node.allocated {
				allocated.Insert(structured.MakeDeviceID(gpu.DefaultDriverName, nodeName, d))
			}
			a, err := structured.NewAllocator(ctx, features, structured.AllocatedState{AllocatedDevices: allocated},
				allocator.ClassList(classes), node.slices, cel.NewCache(10, cel.Features{}))
			if err != nil {
				t.Fatalf("%s on %s: %v", claimName, nodeName, err)
			}
			results, err := a.Allocate(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, []*resourceapi.ResourceClaim{claim})
			if err != nil {
				t.Fatalf("%s on %s: %v", claimName, nodeName, err)
			}
			if results == nil {
				continue
			}
			count := map[string]int{}
			for _, r := range results[0].Devices.Results {
				count[r.Request]++
			}
			var summary []string
			for _, request := range slices.Sorted(maps.Keys(count)) {
				summary = append(summary, fmt.Sprintf("%s=%d", request, count[request]))
			}
			got[claimName][nodeName] = strings.Join(summary, " ")
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("allocations, claim -> node (-want +got):\n%s", diff)
	}
}

// TestExampleConfigs: the opaque configuration in the examples' classes and
// claims is accepted by the GPU driver's strict decoder.
func TestExampleConfigs(t *testing.T) {
	objects := userExamples(t)
	configs := map[string][]resourceapi.DeviceConfiguration{}
	for _, class := range manifest.OfType[*resourceapi.DeviceClass](objects) {
		for _, c := range class.Spec.Config {
			configs["DeviceClass "+class.Name] = append(configs["DeviceClass "+class.Name], c.DeviceConfiguration)
		}
	}
	for _, tmpl := range manifest.OfType[*resourceapi.ResourceClaimTemplate](objects) {
		for _, c := range tmpl.Spec.Spec.Devices.Config {
			configs["ResourceClaimTemplate "+tmpl.Name] = append(configs["ResourceClaimTemplate "+tmpl.Name], c.DeviceConfiguration)
		}
	}
	for _, claim := range manifest.OfType[*resourceapi.ResourceClaim](objects) {
		for _, c := range claim.Spec.Devices.Config {
			configs["ResourceClaim "+claim.Name] = append(configs["ResourceClaim "+claim.Name], c.DeviceConfiguration)
		}
	}
	if len(configs) == 0 {
		t.Fatal("no example carries a configuration")
	}
	for owner, cs := range configs {
		for _, c := range cs {
			if c.Opaque == nil || c.Opaque.Driver != gpu.DefaultDriverName {
				t.Errorf("%s: configuration for another driver: %+v", owner, c)
				continue
			}
			if _, err := gpu.DecodeConfig(c.Opaque.Parameters.Raw); err != nil {
				t.Errorf("%s: %v", owner, err)
			}
		}
	}
}
