package dra

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drasched/drasched/internal/builder"
)

// freedForPreemptor counts, per request, the devices of the preemptor's
// fit on the node that its victims' claims held or that share counters
// with one they held; devices free before the preemption do not count.
func TestFreedForPreemptor(t *testing.T) {
	// gpu-0 is a whole GPU whose partition gpu-0-mig consumes the same
	// counters; gpu-1 ... gpu-3 are plain GPUs.
	slice := builder.MakeSlice("node-a").Node("node-a").
		Counters(builder.CounterSet("gpu-0-counters", map[string]string{"memory": "80Gi"})).
		Devices(
			builder.MakeDevice("gpu-0").Consumes("gpu-0-counters", map[string]string{"memory": "80Gi"}),
			builder.MakeDevice("gpu-0-mig").Consumes("gpu-0-counters", map[string]string{"memory": "10Gi"}),
			builder.MakeDevice("gpu-1"), builder.MakeDevice("gpu-2"), builder.MakeDevice("gpu-3")).Obj()
	preemptor := podWithClaims("pending")
	env := newPluginEnv(t, preemptor, builder.MakeClass(gpuClass), slice, gpuClaim("pending").Obj())
	pl := env.plugin
	victim := func(name string) *v1.Pod {
		p := builder.MakePod(name).Obj()
		p.UID = types.UID(name)
		return p
	}
	fit := func(devices map[string][]string) []resourceapi.AllocationResult {
		var result resourceapi.AllocationResult
		for request, names := range devices {
			for _, device := range names {
				result.Devices.Results = append(result.Devices.Results, resourceapi.DeviceRequestAllocationResult{
					Request: request, Driver: "gpu.example.com", Pool: "node-a", Device: device,
				})
			}
		}
		return []resourceapi.AllocationResult{result}
	}
	for name, tc := range map[string]struct {
		victims map[string]string // pod name to the device of its claim
		fit     map[string][]string
		want    string
	}{
		"victims' devices, one free before": {
			victims: map[string]string{"v1": "gpu-1", "v2": "gpu-2"},
			fit:     map[string][]string{"gpu": {"gpu-1", "gpu-2", "gpu-3"}},
			want:    "2 devices of request gpu",
		},
		"one device": {
			victims: map[string]string{"v1": "gpu-1"},
			fit:     map[string][]string{"gpu": {"gpu-1"}},
			want:    "1 device of request gpu",
		},
		"a whole GPU whose partition a victim used": {
			victims: map[string]string{"v0": "gpu-0-mig"},
			fit:     map[string][]string{"gpu": {"gpu-0"}},
			want:    "1 device of request gpu",
		},
		"two requests": {
			victims: map[string]string{"v1": "gpu-1", "v2": "gpu-2", "v3": "gpu-3"},
			fit:     map[string][]string{"b": {"gpu-3"}, "a": {"gpu-1", "gpu-2"}},
			want:    "2 devices of request a and 1 of request b",
		},
		"nothing the pod gets": {
			victims: map[string]string{"v1": "gpu-1"},
			fit:     map[string][]string{"gpu": {"gpu-3"}},
			want:    "",
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := &preemptionFit{results: fit(tc.fit)}
			for pod, device := range tc.victims {
				p := victim(pod)
				f.victims = append(f.victims, p)
				f.freed = append(f.freed, allocated(gpuClaim(pod), device, p.UID))
			}
			got, err := pl.freedForPreemptor("node-a", f)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("freed %q, want %q", got, tc.want)
			}
		})
	}
}
