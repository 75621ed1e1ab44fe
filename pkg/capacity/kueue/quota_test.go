package kueue_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/pkg/capacity/kueue"
)

func TestParseMapping(t *testing.T) {
	for name, tc := range map[string]struct {
		values  []string
		want    kueue.Mapping
		wantErr string
	}{
		"default": {values: kueue.DefaultMapping, want: kueue.Mapping{"gpu.drasched.dev": "drasched.dev/gpu", "mig.gpu.drasched.dev": "drasched.dev/mig"}},
		"several classes": {
			values: []string{"example.com/gpu = a.example.com, b.example.com"},
			want:   kueue.Mapping{"a.example.com": "example.com/gpu", "b.example.com": "example.com/gpu"},
		},
		"none":                  {want: kueue.Mapping{}},
		"no class":              {values: []string{"drasched.dev/gpu"}, wantErr: `"drasched.dev/gpu": want RESOURCE=CLASS[,CLASS...], such as drasched.dev/gpu=gpu.drasched.dev`},
		"no resource":           {values: []string{"=gpu.drasched.dev"}, wantErr: "want RESOURCE=CLASS"},
		"empty class":           {values: []string{"drasched.dev/gpu=gpu.drasched.dev,"}, wantErr: "an empty DeviceClass name"},
		"bad resource name":     {values: []string{"drasched.dev/GPU s=gpu.drasched.dev"}, wantErr: `resource name "drasched.dev/GPU s"`},
		"bad class name":        {values: []string{"drasched.dev/gpu=GPU_class"}, wantErr: `DeviceClass "GPU_class"`},
		"resource twice":        {values: []string{"drasched.dev/gpu=a.example.com", "drasched.dev/gpu=b.example.com"}, wantErr: "resource drasched.dev/gpu is mapped twice"},
		"class to two resource": {values: []string{"example.com/a=gpu.example.com", "example.com/b=gpu.example.com"}, wantErr: "DeviceClass gpu.example.com is mapped to example.com/a already"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := kueue.ParseMapping(tc.values)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("mapping (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUsage(t *testing.T) {
	mapping := kueue.Mapping{"gpu.drasched.dev": "drasched.dev/gpu", "mig.gpu.drasched.dev": "drasched.dev/mig"}
	templates := map[string]*resourceapi.ResourceClaimTemplate{
		"two-gpus":    builder.MakeTemplate("two-gpus", builder.MakeClaim("").Request("gpus", "gpu.drasched.dev", 2)).Obj(),
		"gpu-and-mig": builder.MakeTemplate("gpu-and-mig", builder.MakeClaim("").Request("gpu", "gpu.drasched.dev", 1).Request("mig", "mig.gpu.drasched.dev", 3)).Obj(),
		"on-one-root": builder.MakeTemplate("on-one-root", builder.MakeClaim("").Request("gpus", "gpu.drasched.dev", 4).MatchAttribute("resource.kubernetes.io/pcieRoot")).Obj(),
		"all":         builder.MakeTemplate("all", builder.MakeClaim("").RequestAll("gpus", "gpu.drasched.dev")).Obj(),
		"selector":    builder.MakeTemplate("selector", builder.MakeClaim("").Request("gpu", "gpu.drasched.dev", 1, `device.attributes["gpu.drasched.dev"].model == "H100"`)).Obj(),
		"first":       builder.MakeTemplate("first", builder.MakeClaim("").FirstAvailable("gpu", builder.SubRequest("big", "gpu.drasched.dev", 1))).Obj(),
		"unmapped":    builder.MakeTemplate("unmapped", builder.MakeClaim("").Request("nic", "nic.example.com", 1)).Obj(),
	}
	lookup := func(namespace, name string) *resourceapi.ResourceClaimTemplate {
		if t := templates[name]; t != nil && namespace == "default" {
			return t
		}
		return nil
	}
	pod := func(templates ...string) *v1.Pod {
		w := builder.MakePod("p")
		for _, t := range templates {
			w.ClaimFromTemplate(t, t)
		}
		return w.Obj()
	}
	for name, tc := range map[string]struct {
		pods []*v1.Pod
		want kueue.Usage
	}{
		"one template":  {pods: []*v1.Pod{pod("two-gpus")}, want: kueue.Usage{Devices: map[string]int64{"drasched.dev/gpu": 2}}},
		"two resources": {pods: []*v1.Pod{pod("two-gpus", "gpu-and-mig")}, want: kueue.Usage{Devices: map[string]int64{"drasched.dev/gpu": 3, "drasched.dev/mig": 3}}},
		"a gang's pods": {pods: []*v1.Pod{pod("two-gpus"), pod("two-gpus")}, want: kueue.Usage{Devices: map[string]int64{"drasched.dev/gpu": 4}}},
		"a claim by name is not counted": {
			pods: []*v1.Pod{builder.MakePod("p").Claim("shared", "shared-gpu").Obj()},
			want: kueue.Usage{Devices: map[string]int64{}},
		},
		"cpu is listed": {
			pods: []*v1.Pod{builder.MakePod("p").Containers(builder.Container("c", map[v1.ResourceName]string{v1.ResourceCPU: "1"})).ClaimFromTemplate("g", "two-gpus").Obj()},
			want: kueue.Usage{Devices: map[string]int64{"drasched.dev/gpu": 2}, Requests: []string{"cpu"}},
		},
		"constraint":       {pods: []*v1.Pod{pod("on-one-root")}, want: kueue.Usage{NotAdmitted: "ResourceClaimTemplate on-one-root: device constraints (MatchAttribute) are not supported"}},
		"allocation All":   {pods: []*v1.Pod{pod("all")}, want: kueue.Usage{NotAdmitted: "ResourceClaimTemplate all: request gpus: allocation mode All is not supported"}},
		"selector":         {pods: []*v1.Pod{pod("selector")}, want: kueue.Usage{NotAdmitted: "ResourceClaimTemplate selector: request gpu: CEL selectors are not supported"}},
		"firstAvailable":   {pods: []*v1.Pod{pod("first")}, want: kueue.Usage{NotAdmitted: "ResourceClaimTemplate first: request gpu: FirstAvailable device selection is not supported"}},
		"unmapped class":   {pods: []*v1.Pod{pod("unmapped")}, want: kueue.Usage{NotAdmitted: "ResourceClaimTemplate unmapped: DeviceClass nic.example.com is not mapped in Kueue's deviceClassMappings"}},
		"missing template": {pods: []*v1.Pod{pod("gone")}, want: kueue.Usage{NotAdmitted: "ResourceClaimTemplate default/gone does not exist"}},
	} {
		t.Run(name, func(t *testing.T) {
			got := mapping.Usage(tc.pods, lookup)
			if tc.want.NotAdmitted != "" {
				if got.NotAdmitted != tc.want.NotAdmitted {
					t.Errorf("not admitted: %q, want %q", got.NotAdmitted, tc.want.NotAdmitted)
				}
				return
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFit: the quota arithmetic, from the ClusterQueue as read.
func TestFit(t *testing.T) {
	const gpu = "drasched.dev/gpu"
	quota := func(nominal, inUse, borrowed string, borrowingLimit *string) kueue.Quota {
		q := kueue.Quota{Name: gpu, Nominal: resource.MustParse(nominal), InUse: resource.MustParse(inUse), Borrowed: resource.MustParse(borrowed)}
		if borrowingLimit != nil {
			q.BorrowingLimit = ptr.To(resource.MustParse(*borrowingLimit))
		}
		return q
	}
	queue := func(cohort string, flavors ...kueue.FlavorQuota) *kueue.ClusterQueue {
		return &kueue.ClusterQueue{Name: "team-a", Cohort: cohort, Groups: []kueue.ResourceGroup{{Covered: []string{gpu}, Flavors: flavors}}}
	}
	gpus := func(q kueue.Quota) kueue.FlavorQuota {
		return kueue.FlavorQuota{Name: "gpus", Resources: []kueue.Quota{q}}
	}
	onePerPod := kueue.Usage{Devices: map[string]int64{gpu: 1}}
	for name, tc := range map[string]struct {
		queue *kueue.ClusterQueue
		usage kueue.Usage
		want  *kueue.QuotaFit
	}{
		"free nominal quota": {
			queue: queue("", gpus(quota("8", "3", "0", nil))),
			usage: kueue.Usage{Devices: map[string]int64{gpu: 2}},
			want: &kueue.QuotaFit{ClusterQueue: "team-a", Fits: ptr.To(2),
				Resources: []kueue.ResourceFit{{Name: gpu, Flavor: "gpus", PerUnit: 2, Nominal: 8, InUse: 3, Free: 5}}},
		},
		// 6 in use of 4, 2 of them borrowed: none free, not -2.
		"over-used: borrowed, no borrowingLimit": {
			queue: queue("gpus", gpus(quota("4", "6", "2", nil))),
			usage: onePerPod,
			want: &kueue.QuotaFit{ClusterQueue: "team-a", Cohort: "gpus", Fits: ptr.To(0), BorrowingUnlimited: true,
				Resources: []kueue.ResourceFit{{Name: gpu, Flavor: "gpus", PerUnit: 1, Nominal: 4, InUse: 6, Borrowed: 2, Free: 0}}},
		},
		"borrowing up to the limit": {
			queue: queue("gpus", gpus(quota("4", "5", "1", ptr.To("3")))),
			usage: onePerPod,
			want: &kueue.QuotaFit{ClusterQueue: "team-a", Cohort: "gpus", Fits: ptr.To(0), FitsBorrowing: ptr.To(2),
				Resources: []kueue.ResourceFit{{Name: gpu, Flavor: "gpus", PerUnit: 1, Nominal: 4, InUse: 5, Borrowed: 1, BorrowingLimit: ptr.To(int64(3)), Free: 0}}},
		},
		"borrowing limit used up": {
			queue: queue("gpus", gpus(quota("4", "7", "3", ptr.To("2")))),
			usage: onePerPod,
			want: &kueue.QuotaFit{ClusterQueue: "team-a", Cohort: "gpus", Fits: ptr.To(0), FitsBorrowing: ptr.To(0),
				Resources: []kueue.ResourceFit{{Name: gpu, Flavor: "gpus", PerUnit: 1, Nominal: 4, InUse: 7, Borrowed: 3, BorrowingLimit: ptr.To(int64(2)), Free: 0}}},
		},
		// A pod set takes a group's resources from one flavor: the one
		// where the most fit.
		"the flavor where most fit": {
			queue: queue("", kueue.FlavorQuota{Name: "a100", Resources: []kueue.Quota{quota("4", "3", "0", nil)}}, gpus(quota("4", "1", "0", nil))),
			usage: onePerPod,
			want: &kueue.QuotaFit{ClusterQueue: "team-a", Fits: ptr.To(3),
				Resources: []kueue.ResourceFit{{Name: gpu, Flavor: "gpus", PerUnit: 1, Nominal: 4, InUse: 1, Free: 3}}},
		},
		"the fewest of two resources": {
			queue: &kueue.ClusterQueue{Name: "team-a", Groups: []kueue.ResourceGroup{
				{Covered: []string{gpu}, Flavors: []kueue.FlavorQuota{gpus(quota("8", "0", "0", nil))}},
				{Covered: []string{"drasched.dev/mig"}, Flavors: []kueue.FlavorQuota{{Name: "mig", Resources: []kueue.Quota{{Name: "drasched.dev/mig", Nominal: resource.MustParse("7"), InUse: resource.MustParse("4")}}}}},
			}},
			usage: kueue.Usage{Devices: map[string]int64{gpu: 1, "drasched.dev/mig": 2}},
			want: &kueue.QuotaFit{ClusterQueue: "team-a", Fits: ptr.To(1), Resources: []kueue.ResourceFit{
				{Name: gpu, Flavor: "gpus", PerUnit: 1, Nominal: 8, Free: 8},
				{Name: "drasched.dev/mig", Flavor: "mig", PerUnit: 2, Nominal: 7, InUse: 4, Free: 3},
			}},
		},
		"no quota for the resource": {
			queue: queue("", gpus(quota("8", "0", "0", nil))),
			usage: kueue.Usage{Devices: map[string]int64{"drasched.dev/mig": 1}},
			want:  &kueue.QuotaFit{ClusterQueue: "team-a", Fits: ptr.To(0), NotAdmitted: "ClusterQueue team-a has no quota for drasched.dev/mig"},
		},
		"Kueue does not admit the pods": {
			queue: queue("", gpus(quota("8", "0", "0", nil))),
			usage: kueue.Usage{NotAdmitted: "ResourceClaimTemplate x: device constraints (MatchAttribute) are not supported"},
			want:  &kueue.QuotaFit{ClusterQueue: "team-a", Fits: ptr.To(0), NotAdmitted: "ResourceClaimTemplate x: device constraints (MatchAttribute) are not supported"},
		},
		"no devices: the queue does not bound": {
			queue: queue("", gpus(quota("8", "0", "0", nil))),
			usage: kueue.Usage{Devices: map[string]int64{}},
			want:  &kueue.QuotaFit{ClusterQueue: "team-a"},
		},
		"covered requests are noted": {
			queue: &kueue.ClusterQueue{Name: "team-a", Groups: []kueue.ResourceGroup{{Covered: []string{"cpu", gpu}, Flavors: []kueue.FlavorQuota{
				{Name: "gpus", Resources: []kueue.Quota{{Name: "cpu", Nominal: resource.MustParse("64")}, quota("8", "0", "0", nil)}},
			}}}},
			usage: kueue.Usage{Devices: map[string]int64{gpu: 4}, Requests: []string{"cpu", "memory"}},
			want: &kueue.QuotaFit{ClusterQueue: "team-a", Fits: ptr.To(2),
				Resources: []kueue.ResourceFit{{Name: gpu, Flavor: "gpus", PerUnit: 4, Nominal: 8, Free: 8}},
				Notes:     []string{"the pods' requests for cpu count against the queue's quota too: not counted here"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.queue.Fit(tc.usage)); diff != "" {
				t.Errorf("fit (-want +got):\n%s", diff)
			}
		})
	}
}
