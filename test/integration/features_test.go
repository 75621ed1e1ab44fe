package integration

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/test/integration/framework"
)

// A request with admin access gets a device that another claim already
// holds, and does not take it from anyone: a third, ordinary claim still
// finds the device in use.
func TestAdminAccess(t *testing.T) {
	env := framework.Setup(t)
	// The API accepts admin access only in namespaces labelled for it.
	env.LabelNamespace(resourceapi.DRAAdminNamespaceLabelKey, "true")
	node := env.CreateNode("node")
	env.PublishSlices(env.NodeSlice(node, builder.MakeDevice("gpu-0")).Obj())
	class := env.CreateClass("gpu")
	user := env.CreateClaim(builder.MakeClaim("user").Request("gpu", class, 1))
	admin := env.CreateClaim(builder.MakeClaim("admin").Request("gpu", class, 1).AdminAccess())
	other := env.CreateClaim(builder.MakeClaim("other").Request("gpu", class, 1))
	env.StartScheduler(framework.SchedulerOptions{})

	env.CreatePod(env.MakePod("user").Claim("gpu", user.Name))
	env.WaitForPodScheduled("user")
	env.CreatePod(env.MakePod("admin").Claim("gpu", admin.Name))
	env.WaitForPodScheduled("admin")
	env.CreatePod(env.MakePod("other").Claim("gpu", other.Name))
	waitForUnschedulableMessage(t, env, "other", `0/1 nodes are available: 1 request "gpu": 0 of 1 matching devices free, need 1 (1 in use)`)

	for name, want := range map[string]resourceapi.DeviceRequestAllocationResult{
		user.Name:  {Request: "gpu", Driver: env.Driver, Pool: node.Name, Device: "gpu-0"},
		admin.Name: {Request: "gpu", Driver: env.Driver, Pool: node.Name, Device: "gpu-0", AdminAccess: ptr.To(true)},
	} {
		claim := env.WaitForClaim(name, "allocated", allocated)
		if diff := cmp.Diff([]resourceapi.DeviceRequestAllocationResult{want}, claim.Status.Allocation.Devices.Results); diff != "" {
			t.Errorf("claim %s allocation results (-want +got):\n%s", name, diff)
		}
	}
	env.VerifyAllocations()
}

// A prioritized list (firstAvailable) gets the first alternative that fits
// on the node; the allocation names it as <request>/<subrequest>.
func TestPrioritizedList(t *testing.T) {
	env := framework.Setup(t)
	class := env.CreateClass("gpu")
	env.CreateTemplate(builder.MakeTemplate("prioritized", builder.MakeClaim("").FirstAvailable("gpus",
		builder.SubRequest("four", class, 4),
		builder.SubRequest("two", class, 2),
		builder.SubRequest("one", class, 1),
	)))
	env.StartScheduler(framework.SchedulerOptions{})

	for name, tc := range map[string]struct {
		devices     int
		wantRequest string
		wantDevices int
	}{
		"enough-for-the-first":  {devices: 5, wantRequest: "gpus/four", wantDevices: 4},
		"enough-for-the-second": {devices: 3, wantRequest: "gpus/two", wantDevices: 2},
		"only-the-last":         {devices: 1, wantRequest: "gpus/one", wantDevices: 1},
	} {
		// The node outlives the subtest: its pod stays bound to it until
		// the test ends.
		node := env.CreateNode(name)
		env.PublishSlices(env.NodeSlice(node, builder.Devices("gpu", tc.devices, nil)...).Obj())
		t.Run(name, func(t *testing.T) {
			env := env.Sub(t)
			pod := env.CreatePod(env.MakePod(name).ClaimFromTemplate("gpus", "prioritized").NodeSelector(v1.LabelHostname, node.Name))
			pod = env.WaitForPodScheduled(pod.Name)

			claim := env.PodClaim(pod, "gpus")
			var got []string
			for _, result := range claim.Status.Allocation.Devices.Results {
				got = append(got, result.Request)
			}
			want := make([]string, tc.wantDevices)
			for i := range want {
				want[i] = tc.wantRequest
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("requests of the allocated devices (-want +got):\n%s", diff)
			}
			env.VerifyAllocations()
		})
	}
}

// Partitions of one device share its counters: two partitions that
// together need more than the counter set has are never allocated at the
// same time, and a freed partition makes room again.
func TestPartitionableDevices(t *testing.T) {
	env := framework.Setup(t)
	node := env.CreateNode("node")
	// One GPU with 8Gi of memory, offered as two 6Gi and two 2Gi partitions.
	counters := builder.MakeSlice(node.Name+"-counters").Driver(env.Driver).Node(node.Name).Pool(node.Name, 1, 2).
		Counters(builder.CounterSet("gpu-0", map[string]string{"memory": "8Gi"}))
	partitions := builder.MakeSlice(node.Name+"-partitions").Driver(env.Driver).Node(node.Name).Pool(node.Name, 1, 2)
	for _, p := range []struct{ name, size, memory string }{
		{"big-0", "big", "6Gi"}, {"big-1", "big", "6Gi"}, {"small-0", "small", "2Gi"}, {"small-1", "small", "2Gi"},
	} {
		partitions.Devices(builder.MakeDevice(p.name).String("size", p.size).Consumes("gpu-0", map[string]string{"memory": p.memory}))
	}
	env.PublishSlices(counters.Obj(), partitions.Obj())
	big := env.CreateClass("big", driverSelector(env, "size", "big"))
	small := env.CreateClass("small", driverSelector(env, "size", "small"))
	env.CreateTemplate(builder.MakeTemplate("big", builder.MakeClaim("").Request("gpu", big, 1)))
	env.CreateTemplate(builder.MakeTemplate("small", builder.MakeClaim("").Request("gpu", small, 1)))
	env.StartScheduler(framework.SchedulerOptions{})

	env.CreatePod(env.MakePod("big-a").ClaimFromTemplate("gpu", "big"))
	env.WaitForPodScheduled("big-a")
	env.CreatePod(env.MakePod("big-b").ClaimFromTemplate("gpu", "big"))
	waitForUnschedulableMessage(t, env, "big-b", `request "gpu": 0 of 2 matching devices free, need 1`, "1 counters exhausted")
	env.CreatePod(env.MakePod("small-a").ClaimFromTemplate("gpu", "small"))
	env.WaitForPodScheduled("small-a")
	env.CreatePod(env.MakePod("small-b").ClaimFromTemplate("gpu", "small"))
	waitForUnschedulableMessage(t, env, "small-b", `request "gpu": 0 of 2 matching devices free, need 1`, "1 counters exhausted")
	env.VerifyAllocations()

	// 6Gi are free again: exactly what big-b needs, nothing for small-b.
	env.DeletePod("big-a")
	env.WaitForPodScheduled("big-b")
	env.WaitForConsistentAllocations()
	env.WaitForPodUnschedulable("small-b")
}

// A device that allows multiple allocations is shared by claims that ask
// for part of its capacity: each share gets its own shareID, and the shares
// never add up to more than the device has.
func TestConsumableCapacity(t *testing.T) {
	env := framework.Setup(t)
	node := env.CreateNode("node")
	env.PublishSlices(env.NodeSlice(node, builder.MakeDevice("gpu-0").Capacity("memory", "10Gi").Shareable(nil)).Obj())
	class := env.CreateClass("gpu")
	for name, size := range map[string]string{"two-gi": "2Gi", "four-gi": "4Gi"} {
		env.CreateTemplate(builder.MakeTemplate(name, builder.MakeClaim("").Request("gpu", class, 1).CapacityRequest("memory", size)))
	}
	env.StartScheduler(framework.SchedulerOptions{})

	for _, name := range []string{"4g-a", "4g-b"} {
		env.CreatePod(env.MakePod(name).ClaimFromTemplate("gpu", "four-gi"))
		env.WaitForPodScheduled(name)
	}
	// 2Gi left: another 4Gi does not fit, 2Gi does.
	env.CreatePod(env.MakePod("4g-c").ClaimFromTemplate("gpu", "four-gi"))
	waitForUnschedulableMessage(t, env, "4g-c", `request "gpu": 0 of 1 matching devices free, need 1 (1 capacity exhausted)`)
	env.CreatePod(env.MakePod("2g").ClaimFromTemplate("gpu", "two-gi"))
	env.WaitForPodScheduled("2g")

	shareIDs := map[string]string{}
	for pod, want := range map[string]string{"4g-a": "4Gi", "4g-b": "4Gi", "2g": "2Gi"} {
		claim := env.PodClaim(env.WaitForPodScheduled(pod), "gpu")
		results := claim.Status.Allocation.Devices.Results
		if len(results) != 1 || results[0].Device != "gpu-0" || results[0].ShareID == nil {
			t.Errorf("pod %s: allocation results %+v, want one share of gpu-0", pod, results)
			continue
		}
		if other, ok := shareIDs[string(*results[0].ShareID)]; ok {
			t.Errorf("pods %s and %s got the same shareID %s", other, pod, *results[0].ShareID)
		}
		shareIDs[string(*results[0].ShareID)] = pod
		if diff := cmp.Diff(map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(want)}, results[0].ConsumedCapacity); diff != "" {
			t.Errorf("pod %s: consumed capacity (-want +got):\n%s", pod, diff)
		}
	}
	env.VerifyAllocations()

	env.DeletePod("4g-a")
	env.WaitForPodScheduled("4g-c")
	env.WaitForConsistentAllocations()
}

// A DeviceTaintRule with effect NoSchedule keeps pods that do not tolerate
// the taint off the devices; a pod that tolerates it gets one.
func TestDeviceTaintRule(t *testing.T) {
	env := framework.Setup(t)
	node := env.CreateNode("node")
	env.PublishSlices(env.NodeSlice(node, builder.Devices("gpu", 2, nil)...).Obj())
	class := env.CreateClass("gpu")
	const taintKey = "example.com/maintenance"
	env.CreateTaintRule("maintenance", resourceapi.DeviceTaint{Key: taintKey, Effect: resourceapi.DeviceTaintEffectNoSchedule})
	env.CreateTemplate(builder.MakeTemplate("intolerant", builder.MakeClaim("").Request("gpu", class, 1)))
	env.CreateTemplate(builder.MakeTemplate("tolerant", builder.MakeClaim("").Request("gpu", class, 1).Tolerate(taintKey)))
	env.StartScheduler(framework.SchedulerOptions{})

	env.CreatePod(env.MakePod("intolerant").ClaimFromTemplate("gpu", "intolerant"))
	waitForUnschedulableMessage(t, env, "intolerant", `request "gpu": 0 of 2 matching devices free, need 1 (2 tainted)`)
	env.CreatePod(env.MakePod("tolerant").ClaimFromTemplate("gpu", "tolerant"))
	env.WaitForPodScheduled("tolerant")

	// One tainted device is still free; the intolerant pod still may not use it.
	env.WaitForPodUnschedulable("intolerant")
	env.VerifyAllocations()
}

func allocated(claim *resourceapi.ResourceClaim) bool { return claim.Status.Allocation != nil }
