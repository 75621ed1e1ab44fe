package integration

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	draschedconfig "github.com/drasched/drasched/apis/config"
	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/test/integration/framework"
)

// The allocator setting is an A/B switch: with `allocator: upstream` the
// scheduler runs upstream's structured allocator instead of ours. Pods
// scheduled one after another onto one node must get the same devices, in
// the same order, either way; with the default policy our allocator
// returns what upstream's does.
func TestAllocatorSettingSamePlacements(t *testing.T) {
	placements := map[draschedconfig.AllocatorName][]string{}
	for _, allocator := range []draschedconfig.AllocatorName{draschedconfig.AllocatorBuiltin, draschedconfig.AllocatorUpstream} {
		t.Run(string(allocator), func(t *testing.T) {
			placements[allocator] = schedulePlacementWorkload(t, allocator)
		})
	}
	if t.Failed() {
		return
	}
	if diff := cmp.Diff(placements[draschedconfig.AllocatorUpstream], placements[draschedconfig.AllocatorBuiltin]); diff != "" {
		t.Errorf("placements differ (-upstream +builtin):\n%s", diff)
	}
}

// schedulePlacementWorkload schedules pods with a mix of requests one by one
// and returns, per pod, the request and device of each allocation result.
func schedulePlacementWorkload(t *testing.T, allocator draschedconfig.AllocatorName) []string {
	env := framework.Setup(t)
	node := env.CreateNode("node")
	// Eight GPUs behind two PCIe roots, with two memory sizes.
	env.PublishSlices(env.NodeSlice(node, builder.Devices("gpu", 8, func(i int, d *builder.DeviceWrapper) {
		d.String("root", fmt.Sprintf("root-%d", i/4)).Int("memory", int64(40+40*(i%2)))
	})...).Obj())
	class := env.CreateClass("gpu")
	memory := func(gi int) string { return fmt.Sprintf("device.attributes[%q].memory >= %d", env.Driver, gi) }
	root := resourceapi.FullyQualifiedName(env.Driver + "/root")
	templates := map[string]*builder.ClaimWrapper{
		"one":       builder.MakeClaim("").Request("gpu", class, 1),
		"big":       builder.MakeClaim("").Request("gpu", class, 1, memory(80)),
		"two-local": builder.MakeClaim("").Request("gpu", class, 2).MatchAttribute(string(root)),
		"spread":    builder.MakeClaim("").Request("a", class, 1).Request("b", class, 1).DistinctAttribute(string(root)),
		"fallback": builder.MakeClaim("").FirstAvailable("gpu",
			resourceapi.DeviceSubRequest{Name: "big-pair", DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2,
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: memory(80)}}}},
			resourceapi.DeviceSubRequest{Name: "any", DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}),
	}
	for name, claim := range templates {
		env.CreateTemplate(builder.MakeTemplate(name, claim))
	}
	env.StartScheduler(framework.SchedulerOptions{Configure: framework.UseAllocator(allocator)})

	// The order fills all eight devices; each pod's choice depends on
	// what the earlier ones took.
	var placements []string
	for i, template := range []string{"big", "spread", "two-local", "fallback", "one"} {
		name := fmt.Sprintf("pod-%d-%s", i, template)
		env.CreatePod(env.MakePod(name).ClaimFromTemplate("gpu", template))
		claim := env.PodClaim(env.WaitForPodScheduled(name), "gpu")
		for _, result := range claim.Status.Allocation.Devices.Results {
			placements = append(placements, fmt.Sprintf("%s: %s=%s", name, result.Request, result.Device))
		}
	}
	if len(placements) != 8 {
		t.Errorf("%d allocation results, want all 8 devices: %v", len(placements), placements)
	}
	env.VerifyAllocations()
	return placements
}
