//go:build node

package node

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/internal/invariants"
	"github.com/drasched/drasched/pkg/driver/gpu/device"
)

// checkInvariants fails the test with every violation of invariants.Check
// in the namespace, the checks the integration tests, the demo and the
// benchmarks make: the bound pods' claims allocated on this node and
// reserved for them, no claim held for a pod that is gone, no device in two
// claims of any namespace, no counter of a GPU and its MIG devices
// overcommitted.
func (c *cluster) checkInvariants(t *testing.T, ctx context.Context, namespace string) {
	t.Helper()
	pods, err := c.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("check invariants: %v", err)
		return
	}
	claims, err := c.client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("check invariants: %v", err)
		return
	}
	resourceSlices, err := c.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("check invariants: %v", err)
		return
	}
	nodes, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("check invariants: %v", err)
		return
	}
	for _, err := range invariants.Check(invariants.Cluster{Pods: pods.Items, Claims: claims.Items, Slices: resourceSlices.Items, Nodes: nodes.Items},
		invariants.Options{Namespace: namespace, GonePods: true}) {
		t.Errorf("invariant violated: %v", err)
	}
}

// namespace creates a namespace for one test and deletes it when the test
// ends, waiting until it is gone: its pods' claims are unprepared and
// their devices free for the next test. Before it deletes the namespace it
// checks the invariants (checkInvariants).
func (c *cluster) namespace(t *testing.T, name string) string {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		c.checkInvariants(t, ctx, name)
		if t.Failed() {
			c.dumpNamespace(t, ctx, name)
		}
		if err := c.client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete namespace %s: %v", name, err)
			return
		}
		err := poll(ctx, 3*time.Minute, func() (bool, error) {
			_, err := c.client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Errorf("namespace %s not gone: %v", name, err)
		}
	})
	return name
}

// dumpNamespace logs the pods, claims and events of a namespace.
func (c *cluster) dumpNamespace(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	if pods, err := c.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			t.Logf("pod %s/%s: phase %s, node %q, conditions %+v, containers %+v", ns, p.Name, p.Status.Phase, p.Spec.NodeName, p.Status.Conditions, p.Status.ContainerStatuses)
		}
	}
	if claims, err := c.client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, cl := range claims.Items {
			t.Logf("claim %s/%s: allocation %+v, reservedFor %+v", ns, cl.Name, cl.Status.Allocation, cl.Status.ReservedFor)
		}
	}
	if events, err := c.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, e := range events.Items {
			t.Logf("event %s %s/%s: %s: %s", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
}

// gpuPod is a pod of drasched that runs gpu-check from the imported image.
func gpuPod(ns, name string) *builder.PodWrapper {
	p := builder.MakePod(name).SchedulerName(schedulerName)
	p.ObjectMeta.Namespace = ns
	p.Spec.Containers[0].Name = "gpu-check"
	p.Spec.Containers[0].Image = gpuCheckImage
	p.Spec.Containers[0].ImagePullPolicy = corev1.PullNever
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](2)
	return p
}

// claim is a ResourceClaim of the namespace (builder.MakeClaim sets a UID
// for tests without an API server).
func claim(ns, name string) *builder.ClaimWrapper {
	w := builder.MakeClaim(name)
	w.ObjectMeta.Namespace, w.ObjectMeta.UID = ns, ""
	return w
}

// template is a ResourceClaimTemplate with the spec of claim.
func template(ns, name string, claim *builder.ClaimWrapper) *resourceapi.ResourceClaimTemplate {
	tmpl := builder.MakeTemplate(name, claim).Obj()
	tmpl.Namespace = ns
	return tmpl
}

// pinned selects the device with this UUID.
func pinned(uuid string) string {
	return fmt.Sprintf(`device.attributes["%s"].uuid == "%s"`, driverName, uuid)
}

func (c *cluster) createTemplate(t *testing.T, tmpl *resourceapi.ResourceClaimTemplate) {
	t.Helper()
	if _, err := c.client.ResourceV1().ResourceClaimTemplates(tmpl.Namespace).Create(t.Context(), tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (c *cluster) createClaim(t *testing.T, cl *resourceapi.ResourceClaim) {
	t.Helper()
	if _, err := c.client.ResourceV1().ResourceClaims(cl.Namespace).Create(t.Context(), cl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (c *cluster) createPod(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := c.client.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// waitRunning waits until the pod's containers run, and fails early when
// one cannot be created (a CDI spec the runtime refuses shows here).
func (c *cluster) waitRunning(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	var stuck string
	err := poll(t.Context(), 3*time.Minute, func() (bool, error) {
		var err error
		pod, err = c.client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, s := range pod.Status.ContainerStatuses {
			if w := s.State.Waiting; w != nil && (w.Reason == "CreateContainerError" || w.Reason == "CreateContainerConfigError" || w.Reason == "ErrImageNeverPull") {
				stuck = w.Reason + ": " + w.Message
				return true, nil
			}
		}
		if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
			return false, fmt.Errorf("pod %s/%s ended: %s", ns, name, pod.Status.Phase)
		}
		return pod.Status.Phase == corev1.PodRunning && len(pod.Status.ContainerStatuses) > 0 &&
			pod.Status.ContainerStatuses[0].State.Running != nil, nil
	})
	if stuck != "" {
		t.Fatalf("pod %s/%s: container not created: %s", ns, name, stuck)
	}
	if err != nil {
		t.Fatalf("pod %s/%s not running: %v", ns, name, err)
	}
	if pod.Spec.NodeName != c.nodeName {
		t.Fatalf("pod %s/%s runs on %q, want %s", ns, name, pod.Spec.NodeName, c.nodeName)
	}
	return pod
}

// Report is what gpu-check prints (test/node/images/gpu-check).
type Report struct {
	Env     map[string]string `json:"env"`
	Devices []DeviceNode      `json:"devices"`
	// Files are the files where the NVIDIA driver's go, with their
	// SHA-256; CUDA is what cuda-check printed, by mode.
	Files map[string]string `json:"files"`
	CUDA  map[string]string `json:"cuda"`
}

// DeviceNode is a character device gpu-check found under /dev.
type DeviceNode struct {
	Path  string `json:"path"`
	Major uint32 `json:"major"`
	Minor uint32 `json:"minor"`
	Open  string `json:"open"`
}

// report reads what the pod's container printed, through the API server
// and the kubelet (kubectl logs).
func (c *cluster) report(t *testing.T, ns, pod string) Report {
	t.Helper()
	var rep Report
	var logs []byte
	err := poll(t.Context(), time.Minute, func() (bool, error) {
		var err error
		logs, err = c.client.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: "gpu-check"}).DoRaw(t.Context())
		if err != nil {
			return false, err
		}
		sc := bufio.NewScanner(bytes.NewReader(logs))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "gpu-check "); ok {
				return true, json.Unmarshal([]byte(data), &rep)
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("output of pod %s/%s: %v\n%s", ns, pod, err, logs)
	}
	return rep
}

// allocatedDevices returns the devices of this driver in a claim's
// allocation, after waiting for it.
func (c *cluster) allocatedDevices(t *testing.T, ns, name string) []string {
	t.Helper()
	var claim *resourceapi.ResourceClaim
	err := poll(t.Context(), time.Minute, func() (bool, error) {
		var err error
		claim, err = c.client.ResourceV1().ResourceClaims(ns).Get(t.Context(), name, metav1.GetOptions{})
		return err == nil && claim.Status.Allocation != nil, err
	})
	if err != nil {
		t.Fatalf("claim %s/%s not allocated: %v", ns, name, err)
	}
	var names []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != driverName {
			continue
		}
		if r.Pool != c.nodeName {
			t.Errorf("claim %s/%s: device %s is in pool %s, not the node's", ns, name, r.Device, r.Pool)
		}
		names = append(names, r.Device)
	}
	return names
}

// podClaims returns the names of the ResourceClaims of a running pod.
func podClaims(pod *corev1.Pod) []string {
	var names []string
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			names = append(names, *s.ResourceClaimName)
		}
	}
	for _, rc := range pod.Spec.ResourceClaims {
		if rc.ResourceClaimName != nil {
			names = append(names, *rc.ResourceClaimName)
		}
	}
	return names
}

// expectSees checks that the pod's container sees exactly the GPUs of its
// claims' allocations, through the claims' CDI specs alone: their
// /dev/nvidia<minor> nodes, a MIG device's nvidia-caps nodes, the control
// nodes, usable (the device cgroup lets it open them: ENXIO, as no driver
// serves the simulated numbers, not EPERM), and no other GPU; the driver's
// files of the fake driver root, and none of its other files; a loader that
// finds libcuda.so.1, in the image's default directories and in CUDA's
// LD_LIBRARY_PATH; NVIDIA_VISIBLE_DEVICES=void, so that no NVIDIA runtime
// hook would add anything. It returns the devices.
func (c *cluster) expectSees(t *testing.T, pod *corev1.Pod) []string {
	t.Helper()
	var devices []string
	for _, name := range podClaims(pod) {
		devices = append(devices, c.allocatedDevices(t, pod.Namespace, name)...)
	}
	if len(devices) == 0 {
		t.Fatalf("pod %s/%s has no allocated devices", pod.Namespace, pod.Name)
	}
	wantNodes := map[string]DeviceNode{
		"/dev/nvidiactl":        {Path: "/dev/nvidiactl", Major: nvidiaMajor, Minor: nvidiactlMinor},
		"/dev/nvidia-uvm":       {Path: "/dev/nvidia-uvm", Major: uvmMajor, Minor: 0},
		"/dev/nvidia-uvm-tools": {Path: "/dev/nvidia-uvm-tools", Major: uvmMajor, Minor: 1},
	}
	for _, name := range devices {
		ref, ok := c.devices[name]
		if !ok {
			t.Fatalf("allocated device %s is not in the inventory", name)
		}
		p := fmt.Sprintf("/dev/nvidia%d", ref.GPU.Minor)
		wantNodes[p] = DeviceNode{Path: p, Major: nvidiaMajor, Minor: uint32(ref.GPU.Minor)}
		// A MIG device is usable through the nvidia-caps nodes of its GPU
		// and compute instance, a whole GPU in MIG mode through those of
		// all its MIG devices.
		var migs []device.MIGDevice
		switch {
		case ref.MIG != nil:
			migs = []device.MIGDevice{*ref.MIG}
		case ref.GPU.MIGEnabled:
			migs = ref.GPU.MIG
		}
		for _, m := range migs {
			if m.Caps == nil {
				t.Fatalf("MIG device %s of %s has no caps in the inventory", m.UUID, name)
			}
			for _, minor := range []int{m.Caps.GPUInstance, m.Caps.ComputeInstance} {
				p := fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", minor)
				wantNodes[p] = DeviceNode{Path: p, Major: capsMajor, Minor: uint32(minor)}
			}
		}
	}

	rep := c.report(t, pod.Namespace, pod.Name)
	got := map[string]DeviceNode{}
	for _, d := range rep.Devices {
		if strings.HasPrefix(d.Path, "/dev/nvidia") {
			if d.Open != syscall.ENXIO.Error() {
				t.Errorf("pod %s/%s: opening %s gave %q, want %q (the device cgroup allows it, no driver serves it)",
					pod.Namespace, pod.Name, d.Path, d.Open, syscall.ENXIO.Error())
			}
			d.Open = ""
			got[d.Path] = d
		}
	}
	if diff := cmp.Diff(wantNodes, got); diff != "" {
		t.Errorf("pod %s/%s with devices %v: NVIDIA device nodes (-want +got):\n%s", pod.Namespace, pod.Name, devices, diff)
	}
	if diff := cmp.Diff(c.driverFiles, rep.Files); diff != "" {
		t.Errorf("pod %s/%s: the driver's files, by SHA-256 (-want +got):\n%s", pod.Namespace, pod.Name, diff)
	}
	wantCUDA := map[string]string{
		"default":    "12080 " + containerLib + "/libcuda.so.1",
		"cuda-image": "12080 " + cudaImageLib + "/libcuda.so.1",
	}
	if diff := cmp.Diff(wantCUDA, rep.CUDA); diff != "" {
		t.Errorf("pod %s/%s: cuda-check, the dynamic loader finding libcuda.so.1 (-want +got):\n%s", pod.Namespace, pod.Name, diff)
	}
	if v := rep.Env["NVIDIA_VISIBLE_DEVICES"]; v != "void" {
		t.Errorf("pod %s/%s: NVIDIA_VISIBLE_DEVICES=%q, want void", pod.Namespace, pod.Name, v)
	}
	t.Logf("pod %s/%s sees %v: %d device nodes, %d driver files, libcuda %s", pod.Namespace, pod.Name, devices, len(got), len(rep.Files), rep.CUDA["default"])
	return devices
}

// expectSeesNoGPU checks that the pod's container sees nothing of the
// GPUs: no NVIDIA device node, none of the driver's files, no libcuda for
// the loader.
func (c *cluster) expectSeesNoGPU(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	rep := c.report(t, pod.Namespace, pod.Name)
	for _, d := range rep.Devices {
		if strings.HasPrefix(d.Path, "/dev/nvidia") {
			t.Errorf("pod %s/%s without a claim sees %s (%d:%d)", pod.Namespace, pod.Name, d.Path, d.Major, d.Minor)
		}
	}
	if len(rep.Files) > 0 {
		t.Errorf("pod %s/%s without a claim sees driver files %v", pod.Namespace, pod.Name, slices.Sorted(maps.Keys(rep.Files)))
	}
	for mode, out := range rep.CUDA {
		if !strings.Contains(out, "libcuda.so.1: cannot open shared object file") {
			t.Errorf("pod %s/%s without a claim: cuda-check (%s) printed %q, want the loader not finding libcuda.so.1", pod.Namespace, pod.Name, mode, out)
		}
	}
}

// waitEvent waits for an event of the object with this reason and returns
// its message.
func (c *cluster) waitEvent(t *testing.T, ns, kind, name, reason string) string {
	t.Helper()
	var msg string
	err := poll(t.Context(), 2*time.Minute, func() (bool, error) {
		events, err := c.client.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.kind": kind, "involvedObject.name": name, "reason": reason}.String(),
		})
		if err != nil || len(events.Items) == 0 {
			return false, err
		}
		msg = events.Items[len(events.Items)-1].Message
		return true, nil
	})
	if err != nil {
		t.Fatalf("no %s event for %s %s/%s: %v", reason, kind, ns, name, err)
	}
	return msg
}
