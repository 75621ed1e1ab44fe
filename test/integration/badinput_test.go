package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/test/integration/framework"
)

// A DeviceClass whose CEL selector fails at runtime (it reads an attribute
// the devices do not have) gives its pod a PodScheduled condition that
// names the class and the failure; pods of other classes still schedule.
func TestCELRuntimeError(t *testing.T) {
	env := framework.Setup(t)
	node := env.CreateNode("node")
	env.PublishSlices(env.NodeSlice(node, builder.Devices("gpu", 2, func(_ int, d *builder.DeviceWrapper) {
		d.String("model", "a100")
	})...).Obj())
	broken := env.CreateClass("broken", fmt.Sprintf("device.attributes[%q].missing == \"x\"", env.Driver))
	good := env.CreateClass("good")
	env.CreateTemplate(builder.MakeTemplate("broken", builder.MakeClaim("").Request("gpu", broken, 1)))
	env.CreateTemplate(builder.MakeTemplate("good", builder.MakeClaim("").Request("gpu", good, 1)))
	env.StartScheduler(framework.SchedulerOptions{})

	env.CreatePod(env.MakePod("broken").ClaimFromTemplate("gpu", "broken"))
	condition := framework.PodScheduledCondition(env.WaitForPod("broken", "refused because of its class", func(pod *v1.Pod) bool {
		c := framework.PodScheduledCondition(pod)
		return c != nil && c.Status == v1.ConditionFalse && strings.Contains(c.Message, broken)
	}))
	assertBadInputCondition(t, condition, broken, "no such key: missing")

	env.CreatePod(env.MakePod("good").ClaimFromTemplate("gpu", "good"))
	env.WaitForPodScheduled("good")
	env.VerifyAllocations()
}

// assertBadInputCondition checks the PodScheduled condition of a pod whose
// claim cannot be allocated because of broken input: it must say which
// class and what went wrong.
//
// Like upstream's DynamicResources, StructuredDRA reports such input as a
// scheduling error (reason SchedulerError) and retries with backoff: every
// node would fail the same way, and a fixed class needs no other event.
func assertBadInputCondition(t *testing.T, condition *v1.PodCondition, class, problem string) {
	t.Helper()
	if condition.Reason != v1.PodReasonSchedulerError {
		t.Errorf("PodScheduled reason %q, want %q", condition.Reason, v1.PodReasonSchedulerError)
	}
	for _, want := range []string{class, problem} {
		if !strings.Contains(condition.Message, want) {
			t.Errorf("PodScheduled message %q does not say %q", condition.Message, want)
		}
	}
}

// A claim that names a DeviceClass which does not exist leaves its pod
// unschedulable with a message naming the class; creating the class lets
// the pod schedule.
func TestMissingDeviceClass(t *testing.T) {
	env := framework.Setup(t)
	node := env.CreateNode("node")
	env.PublishSlices(env.NodeSlice(node, builder.Devices("gpu", 1, nil)...).Obj())
	class := env.Name("later")
	env.CreateTemplate(builder.MakeTemplate("gpu", builder.MakeClaim("").Request("gpu", class, 1)))
	env.StartScheduler(framework.SchedulerOptions{})

	env.CreatePod(env.MakePod("pod").ClaimFromTemplate("gpu", "gpu"))
	waitForUnschedulableMessage(t, env, "pod", fmt.Sprintf("device class %s does not exist", class))

	env.CreateClass("later")
	env.WaitForPodScheduled("pod")
	env.VerifyAllocations()
}

// A driver that publishes slices of a pool with a lower generation than
// the pool already has: the scheduler goes by the highest generation, so the
// stale slice's devices are not allocated while the newer slice exists, and
// are once it is gone.
func TestPoolGenerationBackwards(t *testing.T) {
	env := framework.Setup(t)
	node := env.CreateNode("node")
	pool := env.Name("pool")
	env.PublishSlices(env.MakeSlice("current").Node(node.Name).Pool(pool, 5, 1).Devices(builder.MakeDevice("current-0")).Obj())
	class := env.CreateClass("gpu")
	env.CreateTemplate(builder.MakeTemplate("gpu", builder.MakeClaim("").Request("gpu", class, 1)))
	env.StartScheduler(framework.SchedulerOptions{})

	env.CreatePod(env.MakePod("first").ClaimFromTemplate("gpu", "gpu"))
	assertDevice(t, env, env.WaitForPodScheduled("first"), "current-0")

	env.PublishSlices(env.MakeSlice("stale").Node(node.Name).Pool(pool, 3, 1).Devices(builder.Devices("stale", 2, nil)...).Obj())
	env.CreatePod(env.MakePod("second").ClaimFromTemplate("gpu", "gpu"))
	waitForUnschedulableMessage(t, env, "second", `request "gpu": 0 of 1 matching devices free, need 1 (1 in use)`)

	// Without the newer slice, generation 3 is the pool's current one.
	if err := env.Client.ResourceV1().ResourceSlices().Delete(env.Ctx, env.Name("current"), metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete slice: %v", err)
	}
	env.CreatePod(env.MakePod("third").ClaimFromTemplate("gpu", "gpu"))
	assertDevice(t, env, env.WaitForPodScheduled("third"), "stale-0", "stale-1")
	env.VerifyAllocations()

	t.Run("waiting-pod-requeued", func(t *testing.T) {
		// StructuredDRA requeues "second" on the slice's deletion, which
		// made a device usable. Upstream's DynamicResources requeues on
		// ResourceSlice Add and Update only, so the pod would wait for the
		// 5-minute flush of unschedulable pods.
		env := env.Sub(t)
		assertDevice(t, env, env.WaitForPodScheduled("second"), "stale-0", "stale-1")
		env.VerifyAllocations()
	})
}

// assertDevice checks that the pod's claim "gpu" got one of the devices.
func assertDevice(t *testing.T, env *framework.Env, pod *v1.Pod, devices ...string) {
	t.Helper()
	results := env.PodClaim(pod, "gpu").Status.Allocation.Devices.Results
	if len(results) != 1 || !slices.Contains(devices, results[0].Device) {
		t.Errorf("pod %s got devices %+v, want one of %v", pod.Name, results, devices)
	}
}

// 10,000 devices in one pool, published as slices of at most 128 devices:
// the scheduler keeps up and finds the one device a pod asks for, as well as
// devices for a pod that takes any.
func TestManyDevices(t *testing.T) {
	const numDevices, perSlice = 10000, resourceapi.ResourceSliceMaxDevices
	env := framework.Setup(t)
	node := env.CreateNode("node")
	numSlices := (numDevices + perSlice - 1) / perSlice
	var manySlices []*resourceapi.ResourceSlice
	for i := range numSlices {
		slice := env.MakeSlice(fmt.Sprintf("many-%03d", i)).Node(node.Name).Pool(env.Name("many"), 1, int64(numSlices))
		for j := i * perSlice; j < min((i+1)*perSlice, numDevices); j++ {
			slice.Devices(builder.MakeDevice(fmt.Sprintf("gpu-%05d", j)).Int("index", int64(j)))
		}
		manySlices = append(manySlices, slice.Obj())
	}
	env.PublishSlices(manySlices...)
	last := env.CreateClass("last", fmt.Sprintf("device.attributes[%q].index == %d", env.Driver, numDevices-1))
	anyDevice := env.CreateClass("any")
	env.CreateTemplate(builder.MakeTemplate("last", builder.MakeClaim("").Request("gpu", last, 1)))
	env.CreateTemplate(builder.MakeTemplate("any", builder.MakeClaim("").Request("gpu", anyDevice, 8)))
	env.StartScheduler(framework.SchedulerOptions{})

	env.CreatePod(env.MakePod("last").ClaimFromTemplate("gpu", "last"))
	env.CreatePod(env.MakePod("any").ClaimFromTemplate("gpu", "any"))
	assertDevice(t, env, env.WaitForPodScheduled("last"), fmt.Sprintf("gpu-%05d", numDevices-1))
	env.WaitForPodScheduled("any")
	env.VerifyAllocations()
}
