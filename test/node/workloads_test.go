//go:build node

package node

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/pkg/driver/gpu/device"
)

// TestWorkloads runs GPU workloads as real containers; each must see
// exactly the devices of its claims' allocations (expectSees).
func TestWorkloads(t *testing.T) {
	c := setup(t)

	t.Run("one GPU", func(t *testing.T) {
		ns := c.namespace(t, "one-gpu")
		c.createTemplate(t, template(ns, "gpu", claim(ns, "gpu").Request("gpu", gpuClass, 1)))
		c.createPod(t, gpuPod(ns, "one-gpu").ClaimFromTemplate("gpu", "gpu").Obj())
		if devices := c.expectSees(t, c.waitRunning(t, ns, "one-gpu")); len(devices) != 1 {
			t.Errorf("devices %v, want one", devices)
		}
	})

	t.Run("two GPUs", func(t *testing.T) {
		ns := c.namespace(t, "two-gpus")
		c.createTemplate(t, template(ns, "gpus", claim(ns, "gpus").Request("gpus", gpuClass, 2)))
		c.createPod(t, gpuPod(ns, "two-gpus").ClaimFromTemplate("gpus", "gpus").Obj())
		if devices := c.expectSees(t, c.waitRunning(t, ns, "two-gpus")); len(devices) != 2 {
			t.Errorf("devices %v, want two", devices)
		}
	})

	t.Run("one claim shared by two pods", func(t *testing.T) {
		ns := c.namespace(t, "shared")
		c.createClaim(t, claim(ns, "shared").Request("gpu", gpuClass, 1).Obj())
		for _, name := range []string{"first", "second"} {
			c.createPod(t, gpuPod(ns, name).Claim("gpu", "shared").Obj())
		}
		first := c.expectSees(t, c.waitRunning(t, ns, "first"))
		second := c.expectSees(t, c.waitRunning(t, ns, "second"))
		if !slices.Equal(first, second) {
			t.Errorf("the pods of one claim see different devices: %v and %v", first, second)
		}
		cl, err := c.client.ResourceV1().ResourceClaims(ns).Get(t.Context(), "shared", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(cl.Status.ReservedFor) != 2 {
			t.Errorf("claim reserved for %+v, want both pods", cl.Status.ReservedFor)
		}
	})

	t.Run("MIG partition", func(t *testing.T) {
		c.runMIGWorkload(t, c.namespace(t, "mig"))
	})

	t.Run("MIG partitions of one GPU in two pods", func(t *testing.T) {
		ns := c.namespace(t, "mig-pair")
		// Each claim names the GPU, so that the scheduler puts both on
		// it and the plugin must prepare two MIG devices of one GPU.
		parent := c.gpuWithMIGDevices(t, 2)
		for _, name := range []string{"first", "second"} {
			c.createClaim(t, claim(ns, name).Request("mig", migClass, 1,
				fmt.Sprintf(`device.attributes["%s"].parentUUID == "%s"`, driverName, parent.UUID)).Obj())
			c.createPod(t, gpuPod(ns, name).Claim("mig", name).Obj())
		}
		first := c.waitRunning(t, ns, "first")
		second := c.waitRunning(t, ns, "second")
		c.expectUnchanged(t, first)
		var seen []string
		for _, pod := range []*corev1.Pod{first, second} {
			devices := c.expectSees(t, pod)
			if len(devices) != 1 || c.devices[devices[0]].MIG == nil || c.devices[devices[0]].GPU.UUID != parent.UUID {
				t.Fatalf("pod %s sees %v, want one MIG device of %s", pod.Name, devices, parent.Name())
			}
			seen = append(seen, devices[0])
		}
		if seen[0] == seen[1] {
			t.Errorf("both pods have MIG device %s", seen[0])
		}
	})

	t.Run("prioritized list", func(t *testing.T) {
		ns := c.namespace(t, "prioritized")
		// Eight GPUs do not exist here; the second choice does.
		c.createTemplate(t, template(ns, "gpu", claim(ns, "gpu").FirstAvailable("gpu",
			builder.SubRequest("eight", gpuClass, 8),
			builder.SubRequest("one", gpuClass, 1))))
		pod := c.createPod(t, gpuPod(ns, "prioritized").ClaimFromTemplate("gpu", "gpu").Obj())
		running := c.waitRunning(t, ns, pod.Name)
		c.expectSees(t, running)
		name := podClaims(running)[0]
		cl, err := c.client.ResourceV1().ResourceClaims(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r := cl.Status.Allocation.Devices.Results; len(r) != 1 || r[0].Request != "gpu/one" {
			t.Errorf("allocation %+v, want one device for subrequest gpu/one", r)
		}
	})

	t.Run("a pod without a claim that asks for every GPU sees none", func(t *testing.T) {
		ns := c.namespace(t, "no-claim")
		// Next to a pod with a claim, whose spec must not reach others.
		c.createTemplate(t, template(ns, "gpu", claim(ns, "gpu").Request("gpu", gpuClass, 1)))
		c.createPod(t, gpuPod(ns, "with-claim").ClaimFromTemplate("gpu", "gpu").Obj())
		c.expectSees(t, c.waitRunning(t, ns, "with-claim"))
		// What CUDA's images set, and what the NVIDIA runtime hook gives
		// every GPU for when it honours the variable. Nothing here
		// does: the claims' containers get their GPUs from CDI specs.
		pod := gpuPod(ns, "no-claim").Obj()
		pod.Spec.Containers[0].Env = append(pod.Spec.Containers[0].Env, corev1.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"})
		c.createPod(t, pod)
		c.expectSeesNoGPU(t, c.waitRunning(t, ns, "no-claim"))
	})

	t.Run("routed to drasched by the chart's admission policy", func(t *testing.T) {
		ns := c.namespace(t, "routed")
		c.createTemplate(t, template(ns, "gpu", claim(ns, "gpu").Request("gpu", gpuClass, 1)))
		// No schedulerName: the default scheduler's pod, as users write it.
		pod := gpuPod(ns, "routed").SchedulerName("").ClaimFromTemplate("gpu", "gpu").Obj()
		created := c.createPod(t, pod)
		if created.Spec.SchedulerName != schedulerName {
			t.Fatalf("schedulerName %q after admission, want %s", created.Spec.SchedulerName, schedulerName)
		}
		c.expectSees(t, c.waitRunning(t, ns, "routed"))
	})

	t.Run("claim the driver cannot prepare", func(t *testing.T) {
		// A running pod that must not notice anything.
		ns := c.namespace(t, "unpreparable")
		bystanderUUID := c.devices["gpu-0"].GPU.UUID
		goneUUID := c.devices["gpu-1"].GPU.UUID
		c.createClaim(t, claim(ns, "bystander").Request("gpu", gpuClass, 1, pinned(bystanderUUID)).Obj())
		c.createPod(t, gpuPod(ns, "bystander").Claim("gpu", "bystander").Obj())
		bystander := c.waitRunning(t, ns, "bystander")

		// The pod is scheduled and its claim allocated while the driver's
		// Prepare waits for its lock; then the GPU leaves the inventory.
		lock := c.holdPrepareLock(t)
		c.createClaim(t, claim(ns, "gone").Request("gpu", gpuClass, 1, pinned(goneUUID)).Obj())
		c.createPod(t, gpuPod(ns, "gone").Claim("gpu", "gone").Obj())
		if got := c.allocatedDevices(t, ns, "gone"); !slices.Equal(got, []string{"gpu-1"}) {
			t.Fatalf("claim allocated %v, want gpu-1", got)
		}
		c.editInventory(t, withoutGPU(goneUUID))
		t.Cleanup(func() { c.restoreInventory(t) })
		c.waitPublished(t, "gpu-1", false)
		lock.release()

		msg := c.waitEvent(t, ns, "Pod", "gone", "FailedPrepareDynamicResources")
		t.Logf("pod whose GPU is gone: %s", msg)
		for _, want := range []string{"allocated device does not exist on this node", "gpu-1"} {
			if !strings.Contains(msg, want) {
				t.Errorf("event %q does not say %q", msg, want)
			}
		}
		// Nothing of the claim is prepared; nothing else changed.
		claimUID := c.claimUID(t, ns, "gone")
		if prepared := c.preparedClaims(t); prepared[claimUID] {
			t.Errorf("the refused claim is in the plugin's checkpoint")
		}
		if specs := c.cdiSpecs(t); specs[claimUID] {
			t.Errorf("the refused claim has a CDI spec")
		}
		c.expectUnchanged(t, bystander)
		if got := c.allocatedDevices(t, ns, "gone"); !slices.Equal(got, []string{"gpu-1"}) {
			t.Errorf("the refused claim's allocation is now %v, want gpu-1 still", got)
		}

		// The GPU comes back: the kubelet's retry prepares the same claim.
		c.restoreInventory(t)
		c.waitPublished(t, "gpu-1", true)
		c.expectSees(t, c.waitRunning(t, ns, "gone"))
	})
}

// waitPublished waits until the node's ResourceSlices list (or no longer
// list) the device.
func (c *cluster) waitPublished(t *testing.T, name string, published bool) map[string][]resourceapi.DeviceTaint {
	t.Helper()
	var devices map[string][]resourceapi.DeviceTaint
	err := poll(t.Context(), time.Minute, func() (bool, error) {
		var err error
		devices, err = c.publishedDevices(t.Context())
		_, ok := devices[name]
		return ok == published, err
	})
	if err != nil {
		t.Fatalf("device %s published %v: %v", name, published, err)
	}
	return devices
}

// runMIGWorkload runs a pod with one 3g.20gb MIG partition in ns and checks
// that its container sees exactly that device.
func (c *cluster) runMIGWorkload(t *testing.T, ns string) {
	t.Helper()
	c.createTemplate(t, template(ns, "mig", claim(ns, "mig").Request("mig", migClass, 1,
		`device.attributes["gpu.drasched.dev"].profile == "3g.20gb"`)))
	c.createPod(t, gpuPod(ns, "mig").ClaimFromTemplate("mig", "mig").Obj())
	devices := c.expectSees(t, c.waitRunning(t, ns, "mig"))
	if len(devices) != 1 || c.devices[devices[0]].MIG == nil {
		t.Errorf("devices %v, want one MIG device", devices)
	}
}

// gpuWithMIGDevices returns the first GPU of the inventory, by name, with
// at least n MIG devices.
func (c *cluster) gpuWithMIGDevices(t *testing.T, n int) *device.GPU {
	t.Helper()
	for _, name := range slices.Sorted(maps.Keys(c.devices)) {
		if ref := c.devices[name]; ref.MIG == nil && len(ref.GPU.MIG) >= n {
			return ref.GPU
		}
	}
	t.Fatalf("no GPU with %d MIG devices in the inventory", n)
	return nil
}
