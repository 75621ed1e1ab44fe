//go:build node

package node

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/drasched/drasched/pkg/driver/gpu"
	"github.com/drasched/drasched/pkg/driver/gpu/device"
	"github.com/drasched/drasched/pkg/driver/gpu/discovery"
)

const (
	// transcriptFile is what the stand-in for nvidia-smi prints.
	transcriptFile = "testdata/nvidia-smi.txt"
	// containerProcDir is where the plugin reads the driver's /proc files
	// (--nvidia-proc-dir) in this test.
	containerProcDir = "/host-proc-driver-nvidia"
)

// TestNvidiaSMIBackend runs the plugin with the chart's default backend,
// nvidia-smi, the image `make images` built, and nvidia-smi where the
// NVIDIA container runtime puts it: a bind mount of the binary, and only
// it, into the container's /usr/bin. The binary is the fake driver's
// stand-in (test/node/driver/nvidia-smi.c), a program linked against the
// GNU C library like NVIDIA's, printing the inventory's GPUs; the runtime
// brings neither the C library nor its loader, so the image must. The
// plugin must publish the stand-in's GPUs (the PCIe roots and NUMA nodes
// of the inventory are missing: this host's sysfs does not have the
// GPUs), and a MIG workload gets the caps that the plugin found through
// nvidia-smi -q -x and the driver's capability files.
func TestNvidiaSMIBackend(t *testing.T) {
	c := setup(t)
	_, ctx := ktesting.NewTestContext(t)

	// The driver's /proc files of the transcript, for --nvidia-proc-dir:
	// the host has none, and the NVIDIA runtime's masking of /proc cannot
	// be had with a plain mount.
	procDir := filepath.Join(c.root, "proc-driver-nvidia")
	if err := writeProcFiles(transcriptFile, procDir); err != nil {
		t.Fatal(err)
	}
	want := c.stubPublished(t)

	values := c.chartValues()
	gpuDriver := values["gpuDriver"].(map[string]any)
	gpuDriver["backend"] = discovery.BackendNvidiaSMI
	delete(gpuDriver, "inventoryFile")
	gpuDriver["extraArgs"] = []string{"--nvidia-proc-dir=" + containerProcDir}
	t.Cleanup(func() { c.restorePlugin(t) })
	// Not --wait: until the patch below, the plugin finds no nvidia-smi.
	data, err := json.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	valuesFile := filepath.Join(c.root, "values-nvidia-smi.json")
	if err := os.WriteFile(valuesFile, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.helm(ctx, "upgrade", "drasched", filepath.Join(c.repo, "charts", "drasched"),
		"--namespace", releaseNamespace, "--values", valuesFile); err != nil {
		t.Fatalf("helm upgrade with the nvidia-smi backend: %v\n%s", err, out)
	}
	c.patchPlugin(t, nvidiaRuntimeMounts(filepath.Join(c.driverRoot, "usr", "bin", "nvidia-smi"), procDir))
	c.waitPluginRollout(t)

	err = poll(ctx, 2*time.Minute, func() (bool, error) {
		got, err := c.publishedAttributes(ctx)
		return err == nil && cmp.Equal(want, got), err
	})
	if err != nil {
		got, _ := c.publishedAttributes(ctx)
		t.Fatalf("the plugin does not publish the stand-in's GPUs: %v\n(-want +got):\n%s\nplugin log:\n%s", err, cmp.Diff(want, got), c.pluginLogs(t, false))
	}

	c.runMIGWorkload(t, c.namespace(t, "nvidia-smi-mig"))
}

// stubPublished returns the attributes of the devices the plugin must
// publish from the stand-in's output: the transcript replayed through the
// backend's own parser, with this host's sysfs as the plugin sees it.
func (c *cluster) stubPublished(t *testing.T) map[string]map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	rec, err := discovery.LoadRecording(transcriptFile)
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := (&discovery.NvidiaSMI{Runner: rec, SysfsRoot: discovery.DefaultSysfsRoot}).Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gpus {
		if g.PCIeRoot != "" {
			t.Fatalf("this host's sysfs has the stand-in's GPU %s (%s): the test could not tell the backends apart", g.Name(), g.PCIBusID)
		}
	}
	want := c.expectedAttributes(t, gpus)
	if inventory := c.expectedAttributes(t, c.inventoryGPUs(t)); cmp.Equal(want, inventory) {
		t.Fatal("the stand-in's devices are those of the inventory: the test could not tell the backends apart")
	}
	return want
}

func (c *cluster) inventoryGPUs(t *testing.T) []device.GPU {
	t.Helper()
	gpus, err := discovery.ParseInventory(c.original)
	if err != nil {
		t.Fatal(err)
	}
	return gpus
}

// expectedAttributes are the attributes of the devices the plugin
// publishes for these GPUs, by device name.
func (c *cluster) expectedAttributes(t *testing.T, gpus []device.GPU) map[string]map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	t.Helper()
	slices, err := gpu.BuildResourceSlices(gpu.SliceOptions{NodeName: c.nodeName}, gpus)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			out[d.Name] = d.Attributes
		}
	}
	return out
}

// publishedAttributes returns the attributes of the devices in the node's
// ResourceSlices, by device name.
func (c *cluster) publishedAttributes(ctx context.Context) (map[string]map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, error) {
	slices, err := c.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: resourceapi.ResourceSliceSelectorNodeName + "=" + c.nodeName,
	})
	if err != nil {
		return nil, err
	}
	out := map[string]map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	for _, s := range slices.Items {
		if s.Spec.Driver != driverName {
			continue
		}
		for _, d := range s.Spec.Devices {
			out[d.Name] = d.Attributes
		}
	}
	return out, nil
}

// nvidiaRuntimeMounts is a strategic merge patch of the plugin's
// DaemonSet that mounts, as the NVIDIA runtime does, nvidia-smi (the
// binary alone, at /usr/bin/nvidia-smi) and, for the driver's /proc files,
// procDir at containerProcDir; with delete set, it takes them away again.
func nvidiaRuntimeMounts(nvidiaSMI, procDir string) func(bool) []byte {
	return func(remove bool) []byte {
		volumes := []map[string]any{
			{"name": "nvidia-smi", "hostPath": map[string]any{"path": nvidiaSMI, "type": "File"}},
			{"name": "nvidia-proc", "hostPath": map[string]any{"path": procDir, "type": "Directory"}},
		}
		mounts := []map[string]any{
			{"name": "nvidia-smi", "mountPath": "/usr/bin/nvidia-smi", "readOnly": true},
			{"name": "nvidia-proc", "mountPath": containerProcDir, "readOnly": true},
		}
		if remove {
			volumes = []map[string]any{{"name": "nvidia-smi", "$patch": "delete"}, {"name": "nvidia-proc", "$patch": "delete"}}
			mounts = []map[string]any{{"mountPath": "/usr/bin/nvidia-smi", "$patch": "delete"}, {"mountPath": containerProcDir, "$patch": "delete"}}
		}
		patch, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"volumes":    volumes,
			"containers": []map[string]any{{"name": "plugin", "volumeMounts": mounts}},
		}}}})
		if err != nil {
			panic(err)
		}
		return patch
	}
}

// patchPlugin applies a strategic merge patch to the plugin's DaemonSet
// and, when the test ends, its reverse.
func (c *cluster) patchPlugin(t *testing.T, patch func(remove bool) []byte) {
	t.Helper()
	apply := func(ctx context.Context, remove bool) error {
		_, err := c.client.AppsV1().DaemonSets(releaseNamespace).Patch(ctx, "gpu-kubelet-plugin", types.StrategicMergePatchType, patch(remove), metav1.PatchOptions{})
		return err
	}
	// Registered before the patch: cleanups run last in, first out, so
	// this one runs before restorePlugin's helm upgrade, which would keep
	// what helm did not add.
	t.Cleanup(func() {
		if err := apply(context.WithoutCancel(t.Context()), true); err != nil {
			t.Errorf("take the patch back: %v", err)
		}
	})
	if err := apply(t.Context(), false); err != nil {
		t.Fatal(err)
	}
}

// waitPluginRollout waits until the plugin's DaemonSet runs its current
// template, ready; it fails at once when the new plugin's container
// crashed, with what it said.
func (c *cluster) waitPluginRollout(t *testing.T) {
	t.Helper()
	var ds *appsv1.DaemonSet
	err := poll(t.Context(), 3*time.Minute, func() (bool, error) {
		var err error
		ds, err = c.client.AppsV1().DaemonSets(releaseNamespace).Get(t.Context(), "gpu-kubelet-plugin", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pods, err := c.client.CoreV1().Pods(releaseNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=gpu-kubelet-plugin"})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			for _, s := range p.Status.ContainerStatuses {
				if term := s.LastTerminationState.Terminated; term != nil && p.DeletionTimestamp == nil {
					logs, _ := c.client.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: s.Name, Previous: true}).DoRaw(t.Context())
					t.Fatalf("plugin pod %s: container %s exited (%s, code %d):\n%s", p.Name, s.Name, term.Reason, term.ExitCode, lastLines(string(logs), 15))
				}
			}
		}
		st := ds.Status
		return st.ObservedGeneration >= ds.Generation && st.DesiredNumberScheduled == 1 &&
			st.UpdatedNumberScheduled == 1 && st.NumberAvailable == 1 && st.NumberUnavailable == 0, nil
	})
	if err != nil {
		t.Fatalf("plugin DaemonSet not rolled out: %v (status %+v)", err, ds.Status)
	}
}

// restorePlugin installs the chart with the values of the other tests
// again and waits until the plugin publishes the inventory's devices.
func (c *cluster) restorePlugin(t *testing.T) {
	t.Helper()
	ctx := context.WithoutCancel(t.Context())
	if err := c.helmUpgrade(ctx, c.chartValues()); err != nil {
		t.Errorf("restore the chart's values: %v", err)
		return
	}
	want := c.expectedAttributes(t, c.inventoryGPUs(t))
	err := poll(ctx, 2*time.Minute, func() (bool, error) {
		got, err := c.publishedAttributes(ctx)
		return err == nil && cmp.Equal(want, got), err
	})
	if err != nil {
		t.Errorf("the plugin does not publish the inventory's devices again: %v", err)
	}
}

// writeProcFiles writes the driver's /proc files of a transcript
// ("$ cat /proc/driver/nvidia/<name>" and the content) under dir.
func writeProcFiles(transcript, dir string) error {
	data, err := os.ReadFile(transcript)
	if err != nil {
		return err
	}
	const prompt = "$ cat " + discovery.DefaultNvidiaProcDir + "/"
	files := map[string]*bytes.Buffer{}
	var current *bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, prompt):
			current = &bytes.Buffer{}
			files[strings.TrimPrefix(line, prompt)] = current
		case strings.HasPrefix(line, "$ "):
			current = nil
		case current != nil:
			current.WriteString(line + "\n")
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("%s has no /proc files", transcript)
	}
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, content.Bytes(), 0o444); err != nil {
			return err
		}
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
