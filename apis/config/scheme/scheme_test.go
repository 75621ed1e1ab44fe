package scheme

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubeschedulerv1 "k8s.io/kube-scheduler/config/v1"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"

	"github.com/drasched/drasched/apis/config"
	"github.com/drasched/drasched/apis/config/validation"
)

// pluginName is the name the plugin registers; the scheduler looks up its
// arguments as kind pluginName+"Args".
const pluginName = "StructuredDRA"

var defaultArgs = &config.StructuredDRAArgs{
	FilterTimeout:  metav1.Duration{Duration: 10 * time.Second},
	BindingTimeout: metav1.Duration{Duration: 10 * time.Minute},
	Allocator:      config.AllocatorBuiltin,
	Scoring:        config.ScoringArgs{DeviceStrategy: config.DeviceScoringMostAllocated},
	Allocation: config.AllocationArgs{
		Policy:             config.AllocationPolicyFirstFit,
		TopologyAttributes: []resourceapi.FullyQualifiedName{"resource.kubernetes.io/pcieRoot", "gpu.drasched.dev/nvlinkDomain", "resource.kubernetes.io/numaNode"},
	},
	Preemption: config.PreemptionArgs{NominationMargin: metav1.Duration{Duration: 30 * time.Second}},
}

// decode decodes a KubeSchedulerConfiguration as kube-scheduler's
// --config loader does: the universal decoder defaults it and converts it,
// plugin args included, to the internal version.
func decode(t *testing.T, data []byte) (*schedconfig.KubeSchedulerConfiguration, error) {
	t.Helper()
	obj, _, err := schedscheme.Codecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		return nil, err
	}
	cfg, ok := obj.(*schedconfig.KubeSchedulerConfiguration)
	if !ok {
		t.Fatalf("decoded a %T, want *KubeSchedulerConfiguration", obj)
	}
	return cfg, nil
}

// pluginArgs returns the arguments of StructuredDRA in the profile and their
// field path, as the scheduler's validation names it.
func pluginArgs(t *testing.T, cfg *schedconfig.KubeSchedulerConfiguration, profile int) (runtime.Object, *field.Path) {
	t.Helper()
	for i, pc := range cfg.Profiles[profile].PluginConfig {
		if pc.Name == pluginName {
			return pc.Args, field.NewPath("profiles").Index(profile).Child("pluginConfig").Index(i).Child("args")
		}
	}
	t.Fatalf("profile %d has no pluginConfig for %s", profile, pluginName)
	return nil, nil
}

func TestShippedSchedulerConfig(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "config", "scheduler-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := decode(t, data)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != "drasched" {
		t.Fatalf("want one profile named drasched, got %d profiles", len(cfg.Profiles))
	}
	args, path := pluginArgs(t, cfg, 0)
	if diff := cmp.Diff(runtime.Object(defaultArgs), args); diff != "" {
		t.Errorf("args (-want +got):\n%s", diff)
	}
	if err := validation.ValidateStructuredDRAArgs(path, args.(*config.StructuredDRAArgs)); err != nil {
		t.Errorf("validate: %v", err)
	}
}

func TestDecode(t *testing.T) {
	const header = `
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: drasched
  plugins:
    multiPoint:
      enabled:
      - name: StructuredDRA
      disabled:
      - name: DynamicResources
`
	testCases := map[string]struct {
		pluginConfig string
		wantArgs     *config.StructuredDRAArgs
		wantErr      string
	}{
		"no pluginConfig: the scheduler adds the defaults": {
			wantArgs: defaultArgs,
		},
		"empty args": {
			pluginConfig: `
  - name: StructuredDRA
    args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: StructuredDRAArgs
`,
			wantArgs: defaultArgs,
		},
		"some args: the others are defaulted": {
			pluginConfig: `
  - name: StructuredDRA
    args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: StructuredDRAArgs
      filterTimeout: 0s
      allocator: upstream
      scoring: {}
`,
			wantArgs: &config.StructuredDRAArgs{
				FilterTimeout:  metav1.Duration{},
				BindingTimeout: metav1.Duration{Duration: 10 * time.Minute},
				Allocator:      config.AllocatorUpstream,
				Scoring:        config.ScoringArgs{DeviceStrategy: config.DeviceScoringMostAllocated},
				Allocation:     defaultArgs.Allocation,
				Preemption:     defaultArgs.Preemption,
			},
		},
		"every arg": {
			pluginConfig: `
  - name: StructuredDRA
    args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: StructuredDRAArgs
      filterTimeout: 250ms
      bindingTimeout: 2m
      allocator: builtin
      scoring:
        deviceStrategy: LeastAllocated
      allocation:
        policy: BestFit
        topologyAttributes: [example.com/nvlinkClique, resource.kubernetes.io/numaNode]
      preemption:
        nominationMargin: 1m
`,
			wantArgs: &config.StructuredDRAArgs{
				FilterTimeout:  metav1.Duration{Duration: 250 * time.Millisecond},
				BindingTimeout: metav1.Duration{Duration: 2 * time.Minute},
				Allocator:      config.AllocatorBuiltin,
				Scoring:        config.ScoringArgs{DeviceStrategy: config.DeviceScoringLeastAllocated},
				Allocation: config.AllocationArgs{
					Policy:             config.AllocationPolicyBestFit,
					TopologyAttributes: []resourceapi.FullyQualifiedName{"example.com/nvlinkClique", "resource.kubernetes.io/numaNode"},
				},
				Preemption: config.PreemptionArgs{NominationMargin: metav1.Duration{Duration: time.Minute}},
			},
		},
		"an empty topology list turns grouping off": {
			pluginConfig: `
  - name: StructuredDRA
    args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: StructuredDRAArgs
      allocation:
        policy: BestFit
        topologyAttributes: []
`,
			wantArgs: &config.StructuredDRAArgs{
				FilterTimeout:  metav1.Duration{Duration: 10 * time.Second},
				BindingTimeout: metav1.Duration{Duration: 10 * time.Minute},
				Allocator:      config.AllocatorBuiltin,
				Scoring:        config.ScoringArgs{DeviceStrategy: config.DeviceScoringMostAllocated},
				Allocation: config.AllocationArgs{
					Policy:             config.AllocationPolicyBestFit,
					TopologyAttributes: []resourceapi.FullyQualifiedName{},
				},
				Preemption: defaultArgs.Preemption,
			},
		},
		"unknown field": {
			pluginConfig: `
  - name: StructuredDRA
    args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: StructuredDRAArgs
      filterTimout: 1s
`,
			wantErr: `strict decoding error: decoding .profiles[0].pluginConfig[0]: strict decoding error: decoding args for plugin StructuredDRA: strict decoding error: unknown field "filterTimout"`,
		},
		"not a duration": {
			pluginConfig: `
  - name: StructuredDRA
    args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: StructuredDRAArgs
      filterTimeout: ten seconds
`,
			wantErr: `decoding .profiles[0].pluginConfig[0]: decoding args for plugin StructuredDRA: time: invalid duration "ten seconds"`,
		},
		"args of another plugin": {
			pluginConfig: `
  - name: StructuredDRA
    args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: DynamicResourcesArgs
`,
			wantErr: `decoding .profiles[0].pluginConfig[0]: args for plugin StructuredDRA were not of type StructuredDRAArgs.kubescheduler.config.k8s.io, got DynamicResourcesArgs.kubescheduler.config.k8s.io`,
		},
	}
	for name, tc := range testCases {
		t.Run(name, func(t *testing.T) {
			data := header
			if tc.pluginConfig != "" {
				data += "  pluginConfig:" + tc.pluginConfig
			}
			cfg, err := decode(t, []byte(data))
			var gotErr string
			if err != nil {
				gotErr = err.Error()
			}
			if diff := cmp.Diff(tc.wantErr, gotErr); diff != "" {
				t.Fatalf("error (-want +got):\n%s", diff)
			}
			if err != nil {
				return
			}
			args, _ := pluginArgs(t, cfg, 0)
			if diff := cmp.Diff(runtime.Object(tc.wantArgs), args); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBadArgs: a file with invalid arguments decodes, and validation names
// each bad field by its path in the file.
func TestBadArgs(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "bad-args.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := decode(t, data)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	args, path := pluginArgs(t, cfg, 0)
	err = validation.ValidateStructuredDRAArgs(path, args.(*config.StructuredDRAArgs))
	want := `[` +
		`profiles[0].pluginConfig[1].args.filterTimeout: Invalid value: "-1s": must be zero or positive, ` +
		`profiles[0].pluginConfig[1].args.bindingTimeout: Invalid value: "500ms": must be at least 1 second, ` +
		`profiles[0].pluginConfig[1].args.allocator: Unsupported value: "fastest": supported values: "builtin", "upstream", ` +
		`profiles[0].pluginConfig[1].args.scoring.deviceStrategy: Unsupported value: "Random": supported values: "MostAllocated", "LeastAllocated", "None"` +
		`]`
	if err == nil {
		t.Fatalf("no validation error, want %s", want)
	}
	if diff := cmp.Diff(want, err.Error()); diff != "" {
		t.Errorf("error (-want +got):\n%s", diff)
	}
}

// TestEncode: kube-scheduler encodes its configuration back to v1 YAML at
// startup when logging at -v=2 and for --write-config-to. The args must
// survive that: encoding them converts internal to v1 through the
// plugin-args conversion scheme.
func TestEncode(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "config", "scheduler-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := decode(t, data)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	info, ok := runtime.SerializerInfoForMediaType(schedscheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeYAML)
	if !ok {
		t.Fatal("no YAML serializer")
	}
	var buf bytes.Buffer
	if err := schedscheme.Codecs.EncoderForVersion(info.Serializer, kubeschedulerv1.SchemeGroupVersion).Encode(cfg, &buf); err != nil {
		t.Fatalf("encode: %v", err)
	}
	for _, line := range []string{"kind: StructuredDRAArgs", "filterTimeout: 10s", "bindingTimeout: 10m0s", "allocator: builtin", "deviceStrategy: MostAllocated"} {
		if !strings.Contains(buf.String(), line) {
			t.Errorf("encoded configuration has no %q:\n%s", line, buf.String())
		}
	}
	again, err := decode(t, buf.Bytes())
	if err != nil {
		t.Fatalf("decode the encoded configuration: %v", err)
	}
	args, _ := pluginArgs(t, again, 0)
	if diff := cmp.Diff(runtime.Object(defaultArgs), args); diff != "" {
		t.Errorf("args after encoding and decoding (-want +got):\n%s", diff)
	}
}

func TestDefaultArgs(t *testing.T) {
	got, err := DefaultArgs()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(defaultArgs, got); diff != "" {
		t.Errorf("DefaultArgs (-want +got):\n%s", diff)
	}
}

func TestAddToScheme(t *testing.T) {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	for _, gvk := range []string{"kubescheduler.config.k8s.io/v1, Kind=StructuredDRAArgs", "kubescheduler.config.k8s.io/__internal, Kind=StructuredDRAArgs"} {
		found := false
		for known := range s.AllKnownTypes() {
			if known.String() == gvk {
				found = true
			}
		}
		if !found {
			t.Errorf("%s is not registered", gvk)
		}
	}
}
