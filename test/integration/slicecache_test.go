package integration

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/test/integration/framework"
)

// The scheduler keeps ResourceSlices without their managedFields and with
// one copy of the names and values that repeat across them
// (pkg/plugins/dra/compact.go), and allocates from them as from the API's:
// a claim that selects by such a value gets its device.
func TestCompactedSlices(t *testing.T) {
	env := framework.Setup(t)
	gpu := func() *builder.DeviceWrapper {
		return builder.MakeDevice("gpu-0").String("model", "H100").Version("driverVersion", "1.2.3").Capacity("memory", "80Gi")
	}
	slices := env.PublishSlices(
		env.NodeSlice(env.CreateNode("a"), gpu()).Obj(),
		env.NodeSlice(env.CreateNode("b"), gpu()).Obj(),
	)
	if len(slices[0].ManagedFields) == 0 {
		t.Fatal("the API server wrote no managedFields: the test checks nothing")
	}
	class := env.CreateClass("gpu", fmt.Sprintf("device.attributes[%q].model == \"H100\"", env.Driver))
	s := env.StartScheduler(framework.SchedulerOptions{})

	var models []string
	for _, slice := range slices {
		cached, err := s.CachedSlice(slice.Name)
		if err != nil {
			t.Fatal(err)
		}
		want := slice.DeepCopy()
		want.ManagedFields = nil
		if !apiequality.Semantic.DeepEqual(want, cached) {
			t.Errorf("the scheduler's copy of slice %s (-want +got):\n%s", slice.Name, cmp.Diff(want, cached))
		}
		model := cached.Spec.Devices[0].Attributes[resourceapi.QualifiedName("model")].StringValue
		if model == nil {
			t.Fatalf("slice %s: no model in the scheduler's copy", slice.Name)
		}
		models = append(models, *model)
	}
	if unsafe.StringData(models[0]) != unsafe.StringData(models[1]) {
		t.Errorf("the slices' equal model %q is kept twice", models[0])
	}

	claim := env.CreateClaim(builder.MakeClaim("claim").Request("gpu", class, 1))
	env.CreatePod(env.MakePod("pod").Claim("gpu", claim.Name))
	env.WaitForPodScheduled("pod")
	env.VerifyAllocations()
}
