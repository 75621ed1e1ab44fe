package gpu

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2/ktesting"
	resourceinternal "k8s.io/kubernetes/pkg/apis/resource"
	resourceinstall "k8s.io/kubernetes/pkg/apis/resource/install"
	resourcevalidation "k8s.io/kubernetes/pkg/apis/resource/validation"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/pkg/driver/gpu/device"
	"github.com/drasched/drasched/pkg/driver/gpu/discovery"
)

// inventoryDir holds the inventories shipped in config/.
var inventoryDir = filepath.Join("..", "..", "..", "config", "inventory")

func loadInventory(t *testing.T, name string) []device.GPU {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	inv := &discovery.Inventory{Path: filepath.Join(inventoryDir, name)}
	gpus, err := inv.Discover(ctx)
	if err != nil {
		t.Fatalf("load inventory %s: %v", name, err)
	}
	return gpus
}

// discoverRecording runs the nvidia-smi backend on one of its recorded
// transcripts, with empty host directories.
func discoverRecording(t *testing.T, name string) []device.GPU {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	rec, err := discovery.LoadRecording(filepath.Join("discovery", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	gpus, err := (&discovery.NvidiaSMI{Runner: rec, SysfsRoot: empty, NvidiaProcDir: empty}).Discover(ctx)
	if err != nil {
		t.Fatalf("discover %s: %v", name, err)
	}
	return gpus
}

// validateWithAPIServerRules runs the apiserver's own validation of
// ResourceSlices, handwritten and declarative, and the pool-wide checks the
// ResourceSlice controller does before publishing (counter references).
func validateWithAPIServerRules(t *testing.T, slices []*resourceapi.ResourceSlice) field.ErrorList {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	scheme := runtime.NewScheme()
	resourceinstall.Install(scheme)
	var errs field.ErrorList
	counters := map[string]map[string]bool{}
	for _, slice := range slices {
		for _, set := range slice.Spec.SharedCounters {
			if counters[set.Name] != nil {
				errs = append(errs, field.Duplicate(field.NewPath(slice.Name, "sharedCounters"), set.Name))
			}
			counters[set.Name] = map[string]bool{}
			for name := range set.Counters {
				counters[set.Name][name] = true
			}
		}
	}
	devices := map[string]bool{}
	for _, slice := range slices {
		var internal resourceinternal.ResourceSlice
		if err := scheme.Convert(slice, &internal, nil); err != nil {
			t.Fatalf("convert %s: %v", slice.Name, err)
		}
		errs = append(errs, resourcevalidation.ValidateResourceSlice(&internal)...)
		errs = append(errs, scheme.Validate(ctx, map[string]bool{"DRAPartitionableDevicesType": false}, slice)...)
		for _, d := range slice.Spec.Devices {
			p := field.NewPath(slice.Name, "devices").Key(d.Name)
			if devices[d.Name] {
				errs = append(errs, field.Duplicate(p, d.Name))
			}
			devices[d.Name] = true
			for _, c := range d.ConsumesCounters {
				for name := range c.Counters {
					if !counters[c.CounterSet][name] {
						errs = append(errs, field.NotFound(p.Child("consumesCounters"), c.CounterSet+"/"+name))
					}
				}
			}
		}
	}
	return errs
}

// sliceSummary is what a test checks about a pool's layout.
type sliceSummary struct {
	Devices     int
	CounterSets int
	Tainted     int
}

func summarize(slices []*resourceapi.ResourceSlice) []sliceSummary {
	var out []sliceSummary
	for _, s := range slices {
		sum := sliceSummary{Devices: len(s.Spec.Devices), CounterSets: len(s.Spec.SharedCounters)}
		for _, d := range s.Spec.Devices {
			if len(d.Taints) > 0 {
				sum.Tainted++
			}
		}
		out = append(out, sum)
	}
	return out
}

// gpuBuilder makes synthetic GPUs for large nodes.
type gpuBuilder struct{ g device.GPU }

func makeGPU(index int) *gpuBuilder {
	return &gpuBuilder{g: device.GPU{
		Index:                 index,
		Minor:                 index,
		UUID:                  fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", index, index),
		ProductName:           "NVIDIA H100 80GB HBM3",
		Brand:                 "Nvidia",
		Architecture:          "Hopper",
		CUDAComputeCapability: "9.0.0",
		DriverVersion:         "550.54.15",
		MemoryBytes:           81559 << 20,
		PCIBusID:              fmt.Sprintf("%04x:%02x:00.0", index/256, index%256),
	}}
}

func (b *gpuBuilder) unhealthy(reason string) *gpuBuilder {
	b.g.Health = device.Health{Status: device.Unhealthy, Reason: reason}
	return b
}

// allMIG1g splits the GPU into seven 1g.10gb devices.
func (b *gpuBuilder) allMIG1g() *gpuBuilder {
	b.g.MIGEnabled = true
	for s := range 7 {
		b.g.MIG = append(b.g.MIG, device.MIGDevice{
			UUID:        fmt.Sprintf("MIG-%08x-%04x-5000-8000-000000000000", b.g.Index, s),
			Profile:     "1g.10gb",
			Placement:   device.Placement{Start: s, Size: 1},
			MemoryBytes: 9856 << 20,
		})
	}
	return b
}

func (b *gpuBuilder) obj() device.GPU { return b.g }

func TestBuildResourceSlicesLayout(t *testing.T) {
	manyGPUs := func(n int, modify func(i int, b *gpuBuilder)) []device.GPU {
		var gpus []device.GPU
		for i := range n {
			b := makeGPU(i)
			if modify != nil {
				modify(i, b)
			}
			gpus = append(gpus, b.obj())
		}
		return gpus
	}
	tests := map[string]struct {
		gpus []device.GPU
		opts SliceOptions
		want []sliceSummary
	}{
		"h100-hgx-8": {
			gpus: loadInventory(t, "h100-hgx-8.yaml"),
			want: []sliceSummary{{Devices: 8}},
		},
		"l40s-4": {
			gpus: loadInventory(t, "l40s-4.yaml"),
			want: []sliceSummary{{Devices: 4}},
		},
		// 6 GPUs in MIG mode: 6 counter sets, 8 GPUs + 7+7+4+2+4+1 MIG devices.
		"a100-mig-8": {
			gpus: loadInventory(t, "a100-mig-8.yaml"),
			want: []sliceSummary{{CounterSets: 6}, {Devices: 33}},
		},
		"a100-mig-8 without counters keeps whole GPUs only": {
			gpus: loadInventory(t, "a100-mig-8.yaml"),
			opts: SliceOptions{WithoutCounters: true},
			want: []sliceSummary{{Devices: 8}},
		},
		"no GPUs publishes one empty slice": {
			gpus: nil,
			want: []sliceSummary{{}},
		},
		"200 whole GPUs split at 128": {
			gpus: manyGPUs(200, nil),
			want: []sliceSummary{{Devices: 128}, {Devices: 72}},
		},
		"a taint lowers the limit of its slice to 64": {
			gpus: manyGPUs(200, func(i int, b *gpuBuilder) {
				if i == 150 {
					b.unhealthy("GPULost")
				}
			}),
			want: []sliceSummary{{Devices: 128}, {Devices: 64, Tainted: 1}, {Devices: 8}},
		},
		"without taints an unhealthy GPU is left out": {
			gpus: manyGPUs(200, func(i int, b *gpuBuilder) {
				if i == 150 {
					b.unhealthy("GPULost")
				}
			}),
			opts: SliceOptions{WithoutTaints: true},
			want: []sliceSummary{{Devices: 128}, {Devices: 71}},
		},
		"25 GPUs with 7 MIG devices each: 200 devices, counters in slices of 8 sets": {
			gpus: manyGPUs(25, func(_ int, b *gpuBuilder) { b.allMIG1g() }),
			want: []sliceSummary{
				{CounterSets: 8}, {CounterSets: 8}, {CounterSets: 8}, {CounterSets: 1},
				{Devices: 64}, {Devices: 64}, {Devices: 64}, {Devices: 8},
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			opts := tc.opts
			opts.NodeName = "node-1"
			slices, err := BuildResourceSlices(opts, tc.gpus)
			if err != nil {
				t.Fatalf("BuildResourceSlices: %v", err)
			}
			if diff := cmp.Diff(tc.want, summarize(slices)); diff != "" {
				t.Errorf("slice layout (-want +got):\n%s", diff)
			}
			for _, s := range slices {
				if s.Spec.Pool.ResourceSliceCount != int64(len(slices)) {
					t.Errorf("slice %s: resourceSliceCount %d, want %d", s.Name, s.Spec.Pool.ResourceSliceCount, len(slices))
				}
			}
			if errs := validateWithAPIServerRules(t, slices); len(errs) > 0 {
				t.Errorf("apiserver validation: %v", errs.ToAggregate())
			}
		})
	}
}

func TestBuildResourceSlicesDevices(t *testing.T) {
	h100 := loadInventory(t, "h100-hgx-8.yaml")
	a100 := loadInventory(t, "a100-mig-8.yaml")
	tests := map[string]struct {
		gpus       []device.GPU
		deviceName string
		want       resourceapi.Device
	}{
		"whole H100 with standard topology attributes": {
			gpus:       h100,
			deviceName: "gpu-5",
			want: resourceapi.Device{
				Name: "gpu-5",
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					"type":                            {StringValue: ptr.To("gpu")},
					"uuid":                            {StringValue: ptr.To(h100[5].UUID)},
					"productName":                     {StringValue: ptr.To("NVIDIA H100 80GB HBM3")},
					"brand":                           {StringValue: ptr.To("Nvidia")},
					"architecture":                    {StringValue: ptr.To("Hopper")},
					"cudaComputeCapability":           {VersionValue: ptr.To("9.0.0")},
					"driverVersion":                   {VersionValue: ptr.To("550.54.15")},
					"nvlinkDomain":                    {StringValue: ptr.To("nvswitch-domain-0")},
					"index":                           {IntValue: ptr.To[int64](5)},
					"minor":                           {IntValue: ptr.To[int64](5)},
					"migEnabled":                      {BoolValue: ptr.To(false)},
					"resource.kubernetes.io/pciBusID": {StringValue: ptr.To("0000:ab:00.0")},
					"resource.kubernetes.io/pcieRoot": {StringValue: ptr.To("pci0000:97")},
					"resource.kubernetes.io/numaNode": {IntValue: ptr.To[int64](1)},
				},
				Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
					"memory": {Value: resource.MustParse("81559Mi")},
				},
			},
		},
		"A100 in MIG mode consumes every memory slice of its MIG devices": {
			gpus:       a100,
			deviceName: "gpu-4",
			want: resourceapi.Device{
				Name: "gpu-4",
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					"type":                            {StringValue: ptr.To("gpu")},
					"uuid":                            {StringValue: ptr.To(a100[4].UUID)},
					"productName":                     {StringValue: ptr.To("NVIDIA A100-SXM4-40GB")},
					"brand":                           {StringValue: ptr.To("Nvidia")},
					"architecture":                    {StringValue: ptr.To("Ampere")},
					"cudaComputeCapability":           {VersionValue: ptr.To("8.0.0")},
					"driverVersion":                   {VersionValue: ptr.To("535.104.5")},
					"nvlinkDomain":                    {StringValue: ptr.To("nvswitch-domain-0")},
					"index":                           {IntValue: ptr.To[int64](4)},
					"minor":                           {IntValue: ptr.To[int64](4)},
					"migEnabled":                      {BoolValue: ptr.To(true)},
					"resource.kubernetes.io/pciBusID": {StringValue: ptr.To("0000:87:00.0")},
					"resource.kubernetes.io/pcieRoot": {StringValue: ptr.To("pci0000:80")},
					"resource.kubernetes.io/numaNode": {IntValue: ptr.To[int64](2)},
				},
				Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
					"memory": {Value: resource.MustParse("40960Mi")},
				},
				ConsumesCounters: []resourceapi.DeviceCounterConsumption{{
					CounterSet: "gpu-4-memory-slices",
					Counters:   memorySliceCounters(0, 1, 2, 3, 4, 5, 6, 7),
				}},
			},
		},
		"MIG 3g.20gb consumes the memory slices of its placement": {
			gpus:       a100,
			deviceName: a100[4].MIGName(&a100[4].MIG[3]),
			want: resourceapi.Device{
				Name: a100[4].MIGName(&a100[4].MIG[3]),
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					"type":                            {StringValue: ptr.To("mig")},
					"uuid":                            {StringValue: ptr.To(a100[4].MIG[3].UUID)},
					"parentUUID":                      {StringValue: ptr.To(a100[4].UUID)},
					"parentIndex":                     {IntValue: ptr.To[int64](4)},
					"profile":                         {StringValue: ptr.To("3g.20gb")},
					"productName":                     {StringValue: ptr.To("NVIDIA A100-SXM4-40GB")},
					"brand":                           {StringValue: ptr.To("Nvidia")},
					"architecture":                    {StringValue: ptr.To("Ampere")},
					"cudaComputeCapability":           {VersionValue: ptr.To("8.0.0")},
					"driverVersion":                   {VersionValue: ptr.To("535.104.5")},
					"nvlinkDomain":                    {StringValue: ptr.To("nvswitch-domain-0")},
					"resource.kubernetes.io/pcieRoot": {StringValue: ptr.To("pci0000:80")},
					"resource.kubernetes.io/numaNode": {IntValue: ptr.To[int64](2)},
				},
				Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
					"memory":        {Value: resource.MustParse("19968Mi")},
					"computeSlices": {Value: resource.MustParse("3")},
					"memorySlices":  {Value: resource.MustParse("4")},
				},
				ConsumesCounters: []resourceapi.DeviceCounterConsumption{{
					CounterSet: "gpu-4-memory-slices",
					Counters:   memorySliceCounters(4, 5, 6, 7),
				}},
			},
		},
		"whole GPU without MIG does not consume counters even when others do": {
			gpus:       a100,
			deviceName: "gpu-7",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			slices, err := BuildResourceSlices(SliceOptions{NodeName: "node-1"}, tc.gpus)
			if err != nil {
				t.Fatalf("BuildResourceSlices: %v", err)
			}
			got := findDevice(slices, tc.deviceName)
			if got == nil {
				t.Fatalf("device %s not published", tc.deviceName)
			}
			if tc.want.Name == "" {
				if len(got.ConsumesCounters) != 0 {
					t.Errorf("device %s consumes counters %v, want none", tc.deviceName, got.ConsumesCounters)
				}
				return
			}
			if diff := cmp.Diff(tc.want, *got); diff != "" {
				t.Errorf("device %s (-want +got):\n%s", tc.deviceName, diff)
			}
		})
	}
}

// TestNVLinkDomainAttribute follows the NVLink domain from nvidia-smi's
// topology matrix to the published devices: every GPU of a domain and every
// MIG device of such a GPU carry it, so that matchAttribute and BestFit see
// one group; devices of a host without NVLink carry none.
func TestNVLinkDomainAttribute(t *testing.T) {
	tests := map[string]struct {
		recording string
		// want maps each GPU index to its domain, "" for none.
		want     map[int64]string
		wantMIGs int
	}{
		"A100 with MIG: GPUs and MIG devices in one domain": {
			recording: "nvidia-smi-a100-mig.txt",
			want:      map[int64]string{0: "nvlink-0000:07:00.0", 1: "nvlink-0000:07:00.0", 2: "nvlink-0000:07:00.0", 3: "nvlink-0000:07:00.0"},
			wantMIGs:  7 + 2 + 3,
		},
		"A40 with two NVLink bridges: two domains": {
			recording: "nvidia-smi-a40-nvlink-pairs.txt",
			want:      map[int64]string{0: "nvlink-0000:17:00.0", 1: "nvlink-0000:17:00.0", 2: "nvlink-0000:b1:00.0", 3: "nvlink-0000:b1:00.0"},
		},
		"L40S without NVLink: no attribute": {
			recording: "nvidia-smi-l40s-4.txt",
			want:      map[int64]string{0: "", 1: "", 2: "", 3: ""},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			slices, err := BuildResourceSlices(SliceOptions{NodeName: "node-1"}, discoverRecording(t, tc.recording))
			if err != nil {
				t.Fatalf("BuildResourceSlices: %v", err)
			}
			gpus, migs := 0, 0
			for _, s := range slices {
				for _, d := range s.Spec.Devices {
					index := d.Attributes["index"].IntValue
					if index == nil {
						index = d.Attributes["parentIndex"].IntValue
						migs++
					} else {
						gpus++
					}
					if index == nil {
						t.Fatalf("device %s has neither index nor parentIndex", d.Name)
					}
					want := tc.want[*index]
					attr, ok := d.Attributes["nvlinkDomain"]
					switch {
					case want == "" && ok:
						t.Errorf("device %s has nvlinkDomain %q, want none", d.Name, ptr.Deref(attr.StringValue, ""))
					case want != "" && (attr.StringValue == nil || *attr.StringValue != want):
						t.Errorf("device %s has nvlinkDomain %q, want %q", d.Name, ptr.Deref(attr.StringValue, ""), want)
					}
				}
			}
			if gpus != len(tc.want) || migs != tc.wantMIGs {
				t.Errorf("checked %d GPUs and %d MIG devices, want %d and %d", gpus, migs, len(tc.want), tc.wantMIGs)
			}
			if errs := validateWithAPIServerRules(t, slices); len(errs) > 0 {
				t.Errorf("apiserver validation: %v", errs.ToAggregate())
			}
		})
	}
}

// TestMIGCounterExclusion checks the property the counters exist for: a
// whole GPU shares a counter with each of its MIG devices, and MIG devices
// of one GPU share none.
func TestMIGCounterExclusion(t *testing.T) {
	slices, err := BuildResourceSlices(SliceOptions{NodeName: "node-1"}, loadInventory(t, "a100-mig-8.yaml"))
	if err != nil {
		t.Fatalf("BuildResourceSlices: %v", err)
	}
	consumed := map[string]map[string]bool{} // device → "set/counter"
	parent := map[string]string{}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			consumed[d.Name] = map[string]bool{}
			for _, c := range d.ConsumesCounters {
				for counter := range c.Counters {
					consumed[d.Name][c.CounterSet+"/"+counter] = true
				}
			}
			if p := d.Attributes["parentIndex"].IntValue; p != nil {
				parent[d.Name] = fmt.Sprintf("gpu-%d", *p)
			}
		}
	}
	overlap := func(a, b string) bool {
		for k := range consumed[a] {
			if consumed[b][k] {
				return true
			}
		}
		return false
	}
	var migs []string
	for name := range parent {
		migs = append(migs, name)
	}
	sort.Strings(migs)
	if len(migs) != 25 {
		t.Fatalf("found %d MIG devices, want 25", len(migs))
	}
	for _, m := range migs {
		if !overlap(m, parent[m]) {
			t.Errorf("MIG device %s shares no counter with its GPU %s", m, parent[m])
		}
		for _, other := range migs {
			if other != m && parent[other] == parent[m] && overlap(m, other) {
				t.Errorf("MIG devices %s and %s of %s share a counter", m, other, parent[m])
			}
		}
	}
}

func TestBuildResourceSlicesTaint(t *testing.T) {
	gpus := loadInventory(t, "a100-mig-8.yaml")
	gpus[0].Health = device.Health{Status: device.Unhealthy, Reason: "UncorrectableECCErrors"}
	slices, err := BuildResourceSlices(SliceOptions{NodeName: "node-1", DriverName: "gpu.example.com"}, gpus)
	if err != nil {
		t.Fatalf("BuildResourceSlices: %v", err)
	}
	want := []resourceapi.DeviceTaint{{Key: "gpu.example.com/unhealthy", Value: "UncorrectableECCErrors", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	tainted := 0
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			isGPU0 := d.Name == "gpu-0" || (d.Attributes["parentIndex"].IntValue != nil && *d.Attributes["parentIndex"].IntValue == 0)
			if !isGPU0 {
				if len(d.Taints) > 0 {
					t.Errorf("healthy device %s has taints %v", d.Name, d.Taints)
				}
				continue
			}
			tainted++
			if diff := cmp.Diff(want, d.Taints); diff != "" {
				t.Errorf("taints of %s (-want +got):\n%s", d.Name, diff)
			}
		}
	}
	if tainted != 8 {
		t.Errorf("%d devices of GPU 0 tainted, want 8 (the GPU and its 7 MIG devices)", tainted)
	}
	if errs := validateWithAPIServerRules(t, slices); len(errs) > 0 {
		t.Errorf("apiserver validation: %v", errs.ToAggregate())
	}
}

func TestBuildResourceSlicesErrors(t *testing.T) {
	good := []device.GPU{makeGPU(0).obj()}
	dup := []device.GPU{makeGPU(0).obj(), makeGPU(0).obj()}
	tests := map[string]struct {
		opts SliceOptions
		gpus []device.GPU
	}{
		"no node name":    {opts: SliceOptions{}, gpus: good},
		"duplicate GPUs":  {opts: SliceOptions{NodeName: "n"}, gpus: dup},
		"invalid bus ID":  {opts: SliceOptions{NodeName: "n"}, gpus: []device.GPU{func() device.GPU { g := makeGPU(0).obj(); g.PCIBusID = "00000000:4F:00.0"; return g }()}},
		"MIG without MIG": {opts: SliceOptions{NodeName: "n"}, gpus: []device.GPU{func() device.GPU { g := makeGPU(0).allMIG1g().obj(); g.MIGEnabled = false; return g }()}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if slices, err := BuildResourceSlices(tc.opts, tc.gpus); err == nil {
				t.Errorf("BuildResourceSlices succeeded with %d slices, want an error", len(slices))
			}
		})
	}
}

func memorySliceCounters(slices ...int) map[string]resourceapi.Counter {
	counters := map[string]resourceapi.Counter{}
	for _, s := range slices {
		counters[device.MemorySliceCounter(s)] = resourceapi.Counter{Value: resource.MustParse("1")}
	}
	return counters
}

func findDevice(slices []*resourceapi.ResourceSlice, name string) *resourceapi.Device {
	for _, s := range slices {
		for i := range s.Spec.Devices {
			if s.Spec.Devices[i].Name == name {
				return &s.Spec.Devices[i]
			}
		}
	}
	return nil
}

// TestAPIServerRulesCatchViolations makes sure the validation used above
// really rejects slices that break the API limits, so that its silence
// means something.
func TestAPIServerRulesCatchViolations(t *testing.T) {
	gpus := make([]device.GPU, 0, 65)
	for i := range 65 {
		gpus = append(gpus, makeGPU(i).allMIG1g().obj())
	}
	pool, err := BuildPool(SliceOptions{NodeName: "node-1"}, gpus)
	if err != nil {
		t.Fatalf("BuildPool: %v", err)
	}
	var allSets []resourceapi.CounterSet
	var allDevices []resourceapi.Device
	for _, s := range pool.Slices {
		allSets = append(allSets, s.SharedCounters...)
		allDevices = append(allDevices, s.Devices...)
	}
	slice := func(devices []resourceapi.Device, sets []resourceapi.CounterSet) []*resourceapi.ResourceSlice {
		return []*resourceapi.ResourceSlice{{
			ObjectMeta: metav1.ObjectMeta{Name: "bad"},
			Spec: resourceapi.ResourceSliceSpec{
				Driver: DefaultDriverName, NodeName: ptr.To("node-1"),
				Pool:    resourceapi.ResourcePool{Name: "node-1", ResourceSliceCount: 1},
				Devices: devices, SharedCounters: sets,
			},
		}}
	}
	tests := map[string]struct {
		slices  []*resourceapi.ResourceSlice
		wantErr string
	}{
		"nine counter sets in one slice":            {slices: slice(nil, allSets[:9]), wantErr: "must have at most 8 items"},
		"65 devices consuming counters":             {slices: append(slice(allDevices[:65], nil), slice(nil, allSets)...), wantErr: "must have at most 64 items"},
		"devices and counters in one slice":         {slices: slice(allDevices[:1], allSets[:1]), wantErr: "only one of `sharedCounters` or `devices` is allowed"},
		"a device consuming an unknown counter set": {slices: slice(allDevices[:1], nil), wantErr: "Not found"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			errs := validateWithAPIServerRules(t, tc.slices)
			if err := errs.ToAggregate(); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("validation errors %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
