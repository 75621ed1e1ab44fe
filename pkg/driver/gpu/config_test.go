package gpu

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestDecodeConfig(t *testing.T) {
	tests := map[string]struct {
		raw     string
		wantEnv []string
		wantErr string
	}{
		"no sharing: default time slicing": {
			raw:     `{"apiVersion":"gpu.drasched.dev/v1alpha1","kind":"GPUConfig"}`,
			wantEnv: []string{"DRASCHED_GPU_SHARING=TimeSlicing", "DRASCHED_GPU_TIMESLICE_INTERVAL=Default"},
		},
		"time slicing with an interval": {
			raw:     configJSON(`{"strategy":"TimeSlicing","timeSlicing":{"interval":"Medium"}}`),
			wantEnv: []string{"DRASCHED_GPU_SHARING=TimeSlicing", "DRASCHED_GPU_TIMESLICE_INTERVAL=Medium"},
		},
		"MPS without a limit": {
			raw:     configJSON(`{"strategy":"MPS"}`),
			wantEnv: []string{"DRASCHED_GPU_SHARING=MPS"},
		},
		"MPS with a limit": {
			raw:     configJSON(`{"strategy":"MPS","mps":{"activeThreadPercentage":25}}`),
			wantEnv: []string{"DRASCHED_GPU_SHARING=MPS", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25"},
		},
		"unknown field":                {raw: configJSON(`{"strategy":"MPS","priority":1}`), wantErr: `unknown field "sharing.priority"`},
		"field name in the wrong case": {raw: `{"apiVersion":"gpu.drasched.dev/v1alpha1","kind":"GPUConfig","Sharing":{"strategy":"MPS"}}`, wantErr: `unknown field "Sharing"`},
		"duplicate field":              {raw: configJSON(`{"strategy":"MPS","strategy":"TimeSlicing"}`), wantErr: `duplicate field "sharing.strategy"`},
		"wrong apiVersion":             {raw: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GPUConfig"}`, wantErr: "apiVersion: Unsupported value"},
		"wrong kind":                   {raw: `{"apiVersion":"gpu.drasched.dev/v1alpha1","kind":"GpuConfig"}`, wantErr: "kind: Unsupported value"},
		"unknown strategy":             {raw: configJSON(`{"strategy":"Exclusive"}`), wantErr: "sharing.strategy: Unsupported value"},
		"unknown interval":             {raw: configJSON(`{"strategy":"TimeSlicing","timeSlicing":{"interval":"Tiny"}}`), wantErr: "sharing.timeSlicing.interval: Unsupported value"},
		"MPS settings with time slicing": {
			raw:     configJSON(`{"strategy":"TimeSlicing","mps":{"activeThreadPercentage":25}}`),
			wantErr: "sharing.mps: Forbidden",
		},
		"percentage zero": {raw: configJSON(`{"strategy":"MPS","mps":{"activeThreadPercentage":0}}`), wantErr: "between 1 and 100"},
		"wrong type":      {raw: configJSON(`{"strategy":"MPS","mps":{"activeThreadPercentage":"all"}}`), wantErr: "decode"},
		"not JSON":        {raw: `sharing: {strategy: MPS}`, wantErr: "decode"},
		"truncated":       {raw: configJSON(`{"strategy":"MPS"`), wantErr: "decode"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg, err := DecodeConfig([]byte(tc.raw))
			if tc.wantErr != "" {
				if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("DecodeConfig: %v, want an invalid-config error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeConfig: %v", err)
			}
			if diff := cmp.Diff(tc.wantEnv, cfg.Env()); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfigForRequest(t *testing.T) {
	opaque := func(source resourceapi.AllocationConfigSource, driver, sharing string, requests ...string) resourceapi.DeviceAllocationConfiguration {
		return resourceapi.DeviceAllocationConfiguration{
			Source: source, Requests: requests,
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(configJSON(sharing))},
			}},
		}
	}
	class, claim := resourceapi.AllocationConfigSourceClass, resourceapi.AllocationConfigSourceClaim
	mps := `{"strategy":"MPS"}`
	long := `{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}`
	tests := map[string]struct {
		configs  []resourceapi.DeviceAllocationConfiguration
		request  string
		want     SharingStrategy
		wantErr  string
		interval TimeSliceInterval
	}{
		"none":                              {request: "gpu", want: TimeSlicing, interval: DefaultTimeSlice},
		"class only":                        {configs: []resourceapi.DeviceAllocationConfiguration{opaque(class, DefaultDriverName, long)}, request: "gpu", want: TimeSlicing, interval: LongTimeSlice},
		"claim beats class":                 {configs: []resourceapi.DeviceAllocationConfiguration{opaque(claim, DefaultDriverName, mps), opaque(class, DefaultDriverName, long)}, request: "gpu", want: MPS},
		"later claim config wins":           {configs: []resourceapi.DeviceAllocationConfiguration{opaque(claim, DefaultDriverName, mps), opaque(claim, DefaultDriverName, long)}, request: "gpu", want: TimeSlicing, interval: LongTimeSlice},
		"other driver ignored":              {configs: []resourceapi.DeviceAllocationConfiguration{opaque(claim, "other.example.com", mps)}, request: "gpu", want: TimeSlicing, interval: DefaultTimeSlice},
		"subrequest matched by its request": {configs: []resourceapi.DeviceAllocationConfiguration{opaque(claim, DefaultDriverName, mps, "gpu")}, request: "gpu/large", want: MPS},
		"subrequest matched by name":        {configs: []resourceapi.DeviceAllocationConfiguration{opaque(claim, DefaultDriverName, mps, "gpu/large")}, request: "gpu/large", want: MPS},
		"broken config for another request is still an error": {
			configs: []resourceapi.DeviceAllocationConfiguration{opaque(claim, DefaultDriverName, `{"strategy":"Nope"}`, "other")},
			request: "gpu", wantErr: "config #0 (from FromClaim)",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg, err := configForRequest(DefaultDriverName, tc.configs, tc.request)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("configForRequest: %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Sharing.Strategy != tc.want {
				t.Errorf("strategy %s, want %s", cfg.Sharing.Strategy, tc.want)
			}
			if tc.interval != "" && cfg.Sharing.TimeSlicing.Interval != tc.interval {
				t.Errorf("interval %s, want %s", cfg.Sharing.TimeSlicing.Interval, tc.interval)
			}
		})
	}
}
