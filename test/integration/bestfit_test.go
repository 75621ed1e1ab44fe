package integration

import (
	"fmt"
	"testing"

	draschedconfig "github.com/drasched/drasched/apis/config"
	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/test/integration/framework"
)

// TestBestFitKeepsRootsWhole: on a node with four PCIe roots of two GPUs,
// one GPU in use on root 1, a 1-GPU pod and then three pods of two GPUs on
// one root. FirstFit gives the 1-GPU pod root 0's first GPU, which leaves
// two whole roots: the third pair does not fit. BestFit gives it root 1's
// other GPU, which leaves three: all pods run. Both through the real API
// server, claim controller and scheduler.
func TestBestFitKeepsRootsWhole(t *testing.T) {
	for policy, wantPending := range map[draschedconfig.AllocationPolicy]bool{
		draschedconfig.AllocationPolicyFirstFit: true,
		draschedconfig.AllocationPolicyBestFit:  false,
	} {
		t.Run(string(policy), func(t *testing.T) {
			env := framework.Setup(t)
			node := env.CreateNode("node")
			env.PublishSlices(env.NodeSlice(node, builder.Devices("gpu", 8, func(i int, d *builder.DeviceWrapper) {
				d.String("resource.kubernetes.io/pcieRoot", fmt.Sprintf("pci%d", i/2)).Int("resource.kubernetes.io/numaNode", int64(i/4))
			})...).Obj())
			class := env.CreateClass("gpu")
			rootOne := `device.attributes["resource.kubernetes.io"].pcieRoot == "pci1"`
			env.CreateTemplate(builder.MakeTemplate("one", builder.MakeClaim("").Request("gpu", class, 1)))
			env.CreateTemplate(builder.MakeTemplate("root-1", builder.MakeClaim("").Request("gpu", class, 1, rootOne)))
			env.CreateTemplate(builder.MakeTemplate("pair", builder.MakeClaim("").Request("gpu", class, 2).MatchAttribute("resource.kubernetes.io/pcieRoot")))
			env.StartScheduler(framework.SchedulerOptions{Configure: framework.UseAllocation(policy, nil)})

			// gpu-2 in use: a pod that takes a GPU of root 1.
			env.CreatePod(env.MakePod("on-root-1").ClaimFromTemplate("gpu", "root-1"))
			if got := env.PodClaim(env.WaitForPodScheduled("on-root-1"), "gpu").Status.Allocation.Devices.Results[0].Device; got != "gpu-2" {
				t.Fatalf("on-root-1 got %s, want gpu-2", got)
			}
			env.CreatePod(env.MakePod("single").ClaimFromTemplate("gpu", "one"))
			single := env.PodClaim(env.WaitForPodScheduled("single"), "gpu").Status.Allocation.Devices.Results[0].Device
			want := map[draschedconfig.AllocationPolicy]string{
				draschedconfig.AllocationPolicyFirstFit: "gpu-0",
				draschedconfig.AllocationPolicyBestFit:  "gpu-3",
			}[policy]
			if single != want {
				t.Errorf("single got %s, want %s", single, want)
			}
			// One after the other, so that the one left over is known.
			for i := range 2 {
				env.CreatePod(env.MakePod(fmt.Sprintf("pair-%d", i)).ClaimFromTemplate("gpu", "pair"))
				env.WaitForPodScheduled(fmt.Sprintf("pair-%d", i))
			}
			env.CreatePod(env.MakePod("pair-2").ClaimFromTemplate("gpu", "pair"))
			if wantPending {
				waitForUnschedulableMessage(t, env, "pair-2", "matchAttribute")
			} else {
				env.WaitForPodScheduled("pair-2")
			}
			env.VerifyAllocations()
		})
	}
}
