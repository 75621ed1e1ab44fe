package validation

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/drasched/drasched/apis/config"
)

func validArgs() *config.StructuredDRAArgs {
	return &config.StructuredDRAArgs{
		FilterTimeout:  metav1.Duration{Duration: 10 * time.Second},
		BindingTimeout: metav1.Duration{Duration: 600 * time.Second},
		Allocator:      config.AllocatorBuiltin,
		Scoring:        config.ScoringArgs{DeviceStrategy: config.DeviceScoringMostAllocated},
		Allocation: config.AllocationArgs{
			Policy:             config.AllocationPolicyFirstFit,
			TopologyAttributes: []resourceapi.FullyQualifiedName{"resource.kubernetes.io/pcieRoot", "gpu.drasched.dev/nvlinkDomain"},
		},
	}
}

func TestValidateStructuredDRAArgs(t *testing.T) {
	testCases := map[string]struct {
		path    *field.Path
		modify  func(*config.StructuredDRAArgs)
		wantErr string
	}{
		"defaults": {
			modify: func(*config.StructuredDRAArgs) {},
		},
		"BestFit": {
			modify: func(a *config.StructuredDRAArgs) { a.Allocation.Policy = config.AllocationPolicyBestFit },
		},
		"BestFit without topology attributes": {
			modify: func(a *config.StructuredDRAArgs) {
				a.Allocation.Policy = config.AllocationPolicyBestFit
				a.Allocation.TopologyAttributes = nil
			},
		},
		"unknown policy": {
			modify:  func(a *config.StructuredDRAArgs) { a.Allocation.Policy = "Random" },
			wantErr: `allocation.policy: Unsupported value: "Random": supported values: "FirstFit", "BestFit"`,
		},
		"BestFit with the upstream allocator": {
			modify: func(a *config.StructuredDRAArgs) {
				a.Allocation.Policy = config.AllocationPolicyBestFit
				a.Allocator = config.AllocatorUpstream
			},
			wantErr: `allocation.policy: Invalid value: "BestFit": needs allocator "builtin": the upstream allocator only has FirstFit`,
		},
		"topology attribute not fully qualified": {
			modify: func(a *config.StructuredDRAArgs) {
				a.Allocation.TopologyAttributes = []resourceapi.FullyQualifiedName{"pcieRoot"}
			},
			wantErr: `allocation.topologyAttributes[0]: Invalid value: "pcieRoot": must be fully qualified, <domain>/<name>, e.g. resource.kubernetes.io/pcieRoot`,
		},
		"topology attribute with a bad domain and name": {
			modify: func(a *config.StructuredDRAArgs) {
				a.Allocation.TopologyAttributes = []resourceapi.FullyQualifiedName{"Example_com/pcie-root"}
			},
			wantErr: `[allocation.topologyAttributes[0]: Invalid value: "Example_com/pcie-root": domain: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*'), ` +
				`allocation.topologyAttributes[0]: Invalid value: "Example_com/pcie-root": name: a valid C identifier must start with alphabetic character or '_', followed by a string of alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex used for validation is '[A-Za-z_][A-Za-z0-9_]*')]`,
		},
		"duplicate and too many topology attributes": {
			modify: func(a *config.StructuredDRAArgs) {
				for i := range 9 {
					a.Allocation.TopologyAttributes = append(a.Allocation.TopologyAttributes, resourceapi.FullyQualifiedName(fmt.Sprintf("example.com/a%d", i%8)))
				}
			},
			wantErr: `[allocation.topologyAttributes: Too many: 11: must have at most 8 items, allocation.topologyAttributes[10]: Duplicate value: "example.com/a0"]`,
		},
		"filter timeout zero disables it": {
			modify: func(a *config.StructuredDRAArgs) { a.FilterTimeout.Duration = 0 },
		},
		"filter timeout negative": {
			modify:  func(a *config.StructuredDRAArgs) { a.FilterTimeout.Duration = -time.Second },
			wantErr: `filterTimeout: Invalid value: "-1s": must be zero or positive`,
		},
		"negative nomination margin": {
			modify:  func(a *config.StructuredDRAArgs) { a.Preemption.NominationMargin.Duration = -time.Second },
			wantErr: `preemption.nominationMargin: Invalid value: "-1s": must be zero or positive`,
		},
		"zero nomination margin": {
			modify: func(a *config.StructuredDRAArgs) { a.Preemption.NominationMargin.Duration = 0 },
		},
		"binding timeout one second": {
			modify: func(a *config.StructuredDRAArgs) { a.BindingTimeout.Duration = time.Second },
		},
		"binding timeout below one second": {
			modify:  func(a *config.StructuredDRAArgs) { a.BindingTimeout.Duration = 999 * time.Millisecond },
			wantErr: `bindingTimeout: Invalid value: "999ms": must be at least 1 second`,
		},
		"binding timeout zero": {
			modify:  func(a *config.StructuredDRAArgs) { a.BindingTimeout.Duration = 0 },
			wantErr: `bindingTimeout: Invalid value: "0s": must be at least 1 second`,
		},
		"upstream allocator": {
			modify: func(a *config.StructuredDRAArgs) { a.Allocator = config.AllocatorUpstream },
		},
		"unknown allocator": {
			modify:  func(a *config.StructuredDRAArgs) { a.Allocator = "Builtin" },
			wantErr: `allocator: Unsupported value: "Builtin": supported values: "builtin", "upstream"`,
		},
		"empty allocator": {
			modify:  func(a *config.StructuredDRAArgs) { a.Allocator = "" },
			wantErr: `allocator: Unsupported value: "": supported values: "builtin", "upstream"`,
		},
		"least allocated": {
			modify: func(a *config.StructuredDRAArgs) { a.Scoring.DeviceStrategy = config.DeviceScoringLeastAllocated },
		},
		"no device scoring": {
			modify: func(a *config.StructuredDRAArgs) { a.Scoring.DeviceStrategy = config.DeviceScoringNone },
		},
		"unknown device strategy": {
			modify:  func(a *config.StructuredDRAArgs) { a.Scoring.DeviceStrategy = "BestFit" },
			wantErr: `scoring.deviceStrategy: Unsupported value: "BestFit": supported values: "MostAllocated", "LeastAllocated", "None"`,
		},
		"every field invalid, under a path": {
			path: field.NewPath("profiles").Index(0).Child("pluginConfig").Index(2).Child("args"),
			modify: func(a *config.StructuredDRAArgs) {
				a.FilterTimeout.Duration = -time.Minute
				a.BindingTimeout.Duration = -time.Minute
				a.Allocator = "fast"
				a.Scoring.DeviceStrategy = ""
			},
			wantErr: `[` +
				`profiles[0].pluginConfig[2].args.filterTimeout: Invalid value: "-1m0s": must be zero or positive, ` +
				`profiles[0].pluginConfig[2].args.bindingTimeout: Invalid value: "-1m0s": must be at least 1 second, ` +
				`profiles[0].pluginConfig[2].args.allocator: Unsupported value: "fast": supported values: "builtin", "upstream", ` +
				`profiles[0].pluginConfig[2].args.scoring.deviceStrategy: Unsupported value: "": supported values: "MostAllocated", "LeastAllocated", "None"` +
				`]`,
		},
	}
	for name, tc := range testCases {
		t.Run(name, func(t *testing.T) {
			args := validArgs()
			tc.modify(args)
			err := ValidateStructuredDRAArgs(tc.path, args)
			var gotErr string
			if err != nil {
				gotErr = err.Error()
			}
			if diff := cmp.Diff(tc.wantErr, gotErr); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
}
