//go:build node

package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/drasched/drasched/pkg/driver/gpu"
	"github.com/drasched/drasched/pkg/driver/gpu/device"
	"github.com/drasched/drasched/pkg/driver/gpu/discovery"
)

const (
	// releaseNamespace is where the chart goes, as the README installs it.
	releaseNamespace = "drasched-system"
	schedulerName    = "drasched"
	driverName       = gpu.DefaultDriverName
	gpuClass         = "gpu.drasched.dev"
	migClass         = "mig.gpu.drasched.dev"
	// gpuCheckImage is the workload (test/node/images/gpu-check), built and
	// imported by hack/build-node.sh and hack/node.sh.
	gpuCheckImage = "localhost/drasched-node/gpu-check:test"

	// Device numbers of the simulated nodes. 195 is the NVIDIA driver's
	// major; the UVM nodes get one from the range Linux keeps for local
	// use (120-127), as nvidia-uvm's own is dynamic. No driver serves them,
	// so a container that may open one gets ENXIO, one that may not EPERM.
	nvidiaMajor    = 195
	nvidiactlMinor = 255
	uvmMajor       = 120
	// capsMajor is that of the nvidia-caps nodes, also dynamic on a GPU
	// host.
	capsMajor = 121
)

// cluster is the node the tests share.
type cluster struct {
	repo     string // the repository root
	root     string // NODE_ROOT (test/node/harness)
	nodeName string
	client   kubernetes.Interface

	// devRoot's dev/ holds the simulated device nodes (gpuDriver.devRoot).
	devRoot string
	// driverRoot holds the fake NVIDIA driver (gpuDriver.driverRoot;
	// driver_test.go), and driverFiles is what a claim's containers see of
	// it: the SHA-256 of the file at each path.
	driverRoot  string
	driverFiles map[string]string
	// nodeBin is hack/build-node.sh's output (NODE_BIN).
	nodeBin string
	// inventory is the plugin's inventory file (gpuDriver.inventoryFile);
	// original is its content as testdata/inventory.yaml has it.
	inventory string
	original  []byte
	// devices are the GPUs of the original inventory, by device name.
	devices map[string]device.Ref
	// cdiDir is where the plugin writes and containerd reads CDI specs;
	// stateDir holds the plugin's checkpoint and lock file.
	cdiDir, stateDir string
}

var (
	setupOnce sync.Once
	shared    *cluster
	setupErr  error
)

// setup returns the node with the chart installed. The first call installs
// it; a failure fails every test.
func setup(t *testing.T) *cluster {
	t.Helper()
	setupOnce.Do(func() { shared, setupErr = newCluster() })
	if setupErr != nil {
		t.Fatalf("set up the node: %v", setupErr)
	}
	return shared
}

func newCluster() (*cluster, error) {
	root := os.Getenv("NODE_ROOT")
	kubeconfig := os.Getenv("KUBECONFIG")
	nodeName := os.Getenv("NODE_HOSTNAME")
	nodeBin := os.Getenv("NODE_BIN")
	if root == "" || kubeconfig == "" || nodeName == "" || nodeBin == "" {
		return nil, fmt.Errorf("NODE_ROOT, NODE_HOSTNAME, NODE_BIN and KUBECONFIG are not set: these tests run on the node of hack/node.sh; run make test-node")
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		return nil, err
	}
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	config.QPS, config.Burst = 50, 100
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	c := &cluster{
		repo:       repo,
		root:       root,
		nodeName:   nodeName,
		client:     client,
		devRoot:    filepath.Join(root, "devroot"),
		driverRoot: filepath.Join(root, "driverroot"),
		nodeBin:    nodeBin,
		inventory:  filepath.Join(root, "inventory", "gpus.yaml"),
		cdiDir:     filepath.Join(root, "cdi"),
		stateDir:   filepath.Join(root, "kubelet", "plugins", driverName),
	}
	if c.original, err = os.ReadFile("testdata/inventory.yaml"); err != nil {
		return nil, err
	}
	gpus, err := discovery.ParseInventory(c.original)
	if err != nil {
		return nil, err
	}
	c.devices = map[string]device.Ref{}
	for _, ref := range device.Refs(gpus) {
		c.devices[ref.Name()] = ref
	}
	if err := c.createDeviceNodes(gpus); err != nil {
		return nil, err
	}
	if c.driverFiles, err = createDriverRoot(c.driverRoot, c.nodeBin); err != nil {
		return nil, err
	}
	if err := writeAtomically(c.inventory, c.original); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := c.installChart(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// createDeviceNodes makes the character devices of the simulated GPUs
// under the device root, as the NVIDIA driver has them under /dev.
func (c *cluster) createDeviceNodes(gpus []device.GPU) error {
	dev := filepath.Join(c.devRoot, "dev")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		return err
	}
	nodes := map[string]uint64{
		"nvidiactl":        unix.Mkdev(nvidiaMajor, nvidiactlMinor),
		"nvidia-uvm":       unix.Mkdev(uvmMajor, 0),
		"nvidia-uvm-tools": unix.Mkdev(uvmMajor, 1),
	}
	for _, g := range gpus {
		nodes[fmt.Sprintf("nvidia%d", g.Minor)] = unix.Mkdev(nvidiaMajor, uint32(g.Minor))
		for _, m := range g.MIG {
			if m.Caps == nil {
				continue
			}
			for _, minor := range []int{m.Caps.GPUInstance, m.Caps.ComputeInstance} {
				nodes[fmt.Sprintf("nvidia-caps/nvidia-cap%d", minor)] = unix.Mkdev(capsMajor, uint32(minor))
			}
		}
	}
	if err := os.MkdirAll(filepath.Join(dev, "nvidia-caps"), 0o755); err != nil {
		return err
	}
	for name, dev := range nodes {
		if err := mknod(filepath.Join(c.devRoot, "dev", name), dev); err != nil {
			return err
		}
	}
	return nil
}

func mknod(path string, dev uint64) error {
	if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(dev)); err != nil && !os.IsExist(err) {
		return fmt.Errorf("mknod %s: %w", path, err)
	}
	return nil
}

// installChart installs charts/drasched as docs/install says, with the
// values this node needs: where its kubelet, CDI directory and device
// nodes are, the inventory backend, no NVIDIA RuntimeClass, and images
// that are never pulled (there is no registry; hack/node.sh imported them).
func (c *cluster) installChart(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   releaseNamespace,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"},
	}}
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if err := c.helmUpgrade(ctx, c.chartValues()); err != nil {
		return err
	}
	// The plugin has registered and published the node's devices.
	return poll(ctx, 2*time.Minute, func() (bool, error) {
		names, err := c.publishedDevices(ctx)
		return len(names) == len(c.devices), err
	})
}

// chartValues are the values the chart is installed with.
func (c *cluster) chartValues() map[string]any {
	return map[string]any{
		"scheduler": map[string]any{
			"image": map[string]any{"pullPolicy": "Never"},
		},
		"gpuDriver": map[string]any{
			"image":            map[string]any{"pullPolicy": "Never"},
			"backend":          "inventory",
			"inventoryFile":    c.inventory,
			"kubeletDir":       filepath.Join(c.root, "kubelet"),
			"cdiDir":           c.cdiDir,
			"devRoot":          c.devRoot,
			"driverRoot":       c.driverRoot,
			"runtimeClassName": "",
			"logLevel":         3,
		},
	}
}

// helmUpgrade installs or upgrades the release with these values and waits
// until its objects are ready.
func (c *cluster) helmUpgrade(ctx context.Context, values map[string]any) error {
	data, err := yaml.Marshal(values)
	if err != nil {
		return err
	}
	valuesFile := filepath.Join(c.root, "values.yaml")
	if err := os.WriteFile(valuesFile, data, 0o644); err != nil {
		return err
	}
	out, err := c.helm(ctx, "upgrade", "--install", "drasched", filepath.Join(c.repo, "charts", "drasched"),
		"--namespace", releaseNamespace, "--values", valuesFile, "--wait", "--timeout", "5m")
	if err != nil {
		return fmt.Errorf("helm upgrade --install: %w\n%s", err, out)
	}
	return nil
}

// helm runs the pinned Helm (hack/helm/go.mod) against the node.
func (c *cluster) helm(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", append([]string{"tool", "-modfile=hack/helm/go.mod", "helm"}, args...)...)
	cmd.Dir = c.repo
	return cmd.CombinedOutput()
}

// publishedDevices returns the names of the devices in the node's
// ResourceSlices, with their taints.
func (c *cluster) publishedDevices(ctx context.Context) (map[string][]resourceapi.DeviceTaint, error) {
	slices, err := c.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: resourceapi.ResourceSliceSelectorNodeName + "=" + c.nodeName,
	})
	if err != nil {
		return nil, err
	}
	out := map[string][]resourceapi.DeviceTaint{}
	for _, s := range slices.Items {
		if s.Spec.Driver != driverName {
			continue
		}
		for _, d := range s.Spec.Devices {
			out[d.Name] = d.Taints
		}
	}
	return out, nil
}

// editInventory rewrites the plugin's inventory file, as an editor or a
// ConfigMap update does (a new file renamed over the old one), and puts
// the original back when the test ends.
func (c *cluster) editInventory(t *testing.T, edit func(string) string) {
	t.Helper()
	edited := edit(string(c.original))
	if edited == string(c.original) {
		t.Fatal("inventory edit changed nothing")
	}
	if err := writeAtomically(c.inventory, []byte(edited)); err != nil {
		t.Fatal(err)
	}
}

func (c *cluster) restoreInventory(t *testing.T) {
	t.Helper()
	if err := writeAtomically(c.inventory, c.original); err != nil {
		t.Fatal(err)
	}
}

// withoutGPU removes the GPU with this UUID from an inventory.
func withoutGPU(uuid string) func(string) string {
	return func(s string) string {
		var out []string
		skip := false
		for _, line := range strings.SplitAfter(s, "\n") {
			if strings.HasPrefix(line, "- ") {
				skip = false
			}
			if strings.HasPrefix(line, "  uuid: "+uuid) {
				skip = true
				// The "- index:" line of this GPU was written already.
				out = out[:len(out)-1]
			}
			if !skip {
				out = append(out, line)
			}
		}
		return strings.Join(out, "")
	}
}

// unhealthy marks the GPU with this UUID unhealthy.
func unhealthy(uuid, reason string) func(string) string {
	return func(s string) string {
		return strings.Replace(s, "  uuid: "+uuid+"\n",
			"  uuid: "+uuid+"\n  health: {status: Unhealthy, reason: "+reason+", message: injected by test/node}\n", 1)
	}
}

func writeAtomically(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// poll calls cond every half second until it is true, it fails, or
// timeout passes. It is a wait, not a timing check: the timeout only keeps
// a broken node from hanging the test.
func poll(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var lastErr error
	for {
		ok, err := cond()
		if ok && err == nil {
			return nil
		}
		if err != nil {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("%w (last error: %w)", ctx.Err(), lastErr)
			}
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
