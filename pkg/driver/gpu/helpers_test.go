package gpu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2/ktesting"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/clock"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/pkg/driver/gpu/checkpoint"
	"github.com/drasched/drasched/pkg/driver/gpu/discovery"
)

const (
	testNode   = "node-1"
	testBootID = "0f8c3e5a-1b2c-4d5e-8f90-a1b2c3d4e5f6"
)

var claimCounter atomic.Int64

// newClaim starts a claim with a UID of its own, shaped like the API
// server's.
func newClaim(name string) *builder.ClaimWrapper {
	n := claimCounter.Add(1)
	return builder.MakeClaim(name).UID(fmt.Sprintf("%08x-1111-4222-8333-%012x", n, n))
}

// testEnv is a running plugin with the sockets a kubelet would use.
type testEnv struct {
	driver    *Driver
	client    *fake.Clientset
	dra       drapbv1.DRAPluginClient
	health    drahealthv1.DRAResourceHealthClient
	registrar registerapi.RegistrationClient
	dir       string
	inventory string
	cfg       Config
}

type envOptions struct {
	inventory string // file in config/inventory
	noRun     bool   // only New, no kubelet plugin
	clock     clock.PassiveClock
	// discoverer wraps the inventory's discoverer, if set.
	discoverer func(discovery.Discoverer) discovery.Discoverer
}

// setupDirs creates the plugin's directories under a short temp dir: unix
// socket paths must stay under 108 bytes, which t.TempDir() can exceed.
func setupDirs(t *testing.T, inventory string) (string, Config) {
	t.Helper()
	dir, err := os.MkdirTemp("", "gkp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	for _, sub := range []string{"reg", "plug", "inv"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bootID := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(bootID, []byte(testBootID+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	invPath := filepath.Join(dir, "inv", "inventory.yaml")
	data, err := os.ReadFile(filepath.Join(inventoryDir, inventory))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, invPath, data)
	// The device nodes the CDI specs name must exist; plain files under a
	// directory that stands for the host's / do.
	nodes := []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}
	for minor := range 16 {
		nodes = append(nodes, fmt.Sprintf("nvidia%d", minor))
	}
	gpus, err := discovery.ParseInventory(data)
	if err != nil {
		t.Fatal(err)
	}
	versions := map[string]bool{}
	for _, g := range gpus {
		versions[g.DriverVersion] = true
		for _, m := range g.MIG {
			if m.Caps != nil {
				for _, n := range m.Caps.DeviceNodes() {
					nodes = append(nodes, strings.TrimPrefix(n, "/dev/"))
				}
			}
		}
	}
	for _, n := range nodes {
		writeFile(t, filepath.Join(dir, "host", "dev", n), nil)
	}
	// The driver's libraries of the inventory's versions, with the links
	// the loader uses, under a directory that stands for the driver root.
	for v := range versions {
		for _, lib := range []string{"libcuda.so", "libnvidia-ml.so"} {
			libDir := filepath.Join(dir, "driver", "usr", "lib64")
			writeFile(t, filepath.Join(libDir, lib+"."+v), nil)
			if err := os.Symlink(lib+"."+v, filepath.Join(libDir, lib+".1")); err != nil && !os.IsExist(err) {
				t.Fatal(err)
			}
		}
	}
	return dir, Config{
		DriverName:         DefaultDriverName,
		NodeName:           testNode,
		Discoverer:         &discovery.Inventory{Path: invPath},
		PluginDataDir:      filepath.Join(dir, "plug"),
		RegistrarDir:       filepath.Join(dir, "reg"),
		StateDir:           filepath.Join(dir, "state"),
		CDIDir:             filepath.Join(dir, "cdi"),
		DevRoot:            "/",
		ContainerDevRoot:   filepath.Join(dir, "host"),
		DriverRoot:         filepath.Join(dir, "driver"),
		BootIDPath:         bootID,
		RescanInterval:     time.Hour, // changes must arrive through fsnotify
		HealthCheckTimeout: 3 * time.Second,
	}
}

// writeFile replaces a file atomically, as editors and kubectl do.
func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func newFakeClient(objects ...runtime.Object) *fake.Clientset {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, UID: "node-1-uid", Labels: map[string]string{"kubernetes.io/hostname": testNode}}}
	client := fake.NewClientset(append([]runtime.Object{node}, objects...)...)
	// The fake clientset does not implement generateName, which the
	// ResourceSlice controller relies on.
	var n atomic.Int64
	client.PrependReactor("create", "resourceslices", func(action k8stesting.Action) (bool, runtime.Object, error) {
		slice := action.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice)
		if slice.Name == "" {
			slice.Name = slice.GenerateName + strconv.FormatInt(n.Add(1), 10)
		}
		return false, nil, nil
	})
	return client
}

func setup(t *testing.T, opts envOptions, claims ...*resourceapi.ResourceClaim) *testEnv {
	t.Helper()
	if opts.inventory == "" {
		opts.inventory = "a100-mig-8.yaml"
	}
	RegisterMetrics()
	logger, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	dir, cfg := setupDirs(t, opts.inventory)
	objects := make([]runtime.Object, 0, len(claims))
	for _, c := range claims {
		objects = append(objects, c)
	}
	env := &testEnv{client: newFakeClient(objects...), dir: dir, inventory: filepath.Join(dir, "inv", "inventory.yaml")}
	cfg.KubeClient = env.client
	if opts.clock != nil {
		cfg.Clock = opts.clock
	}
	if opts.discoverer != nil {
		cfg.Discoverer = opts.discoverer(cfg.Discoverer)
	}
	env.cfg = cfg
	d, err := New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatalf("New: %v", err)
	}
	env.driver = d
	if opts.noRun {
		t.Cleanup(cancel)
		return env
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := d.Run(ctx); err != nil {
			logger.Error(err, "Run failed")
			t.Errorf("Run: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })

	draSocket := filepath.Join(cfg.PluginDataDir, "dra.sock")
	regSocket := filepath.Join(cfg.RegistrarDir, DefaultDriverName+"-reg.sock")
	waitFor(t, "plugin sockets", func() (bool, string) {
		for _, s := range []string{draSocket, regSocket} {
			if _, err := os.Stat(s); err != nil {
				return false, err.Error()
			}
		}
		return true, ""
	})
	env.dra = drapbv1.NewDRAPluginClient(dial(t, draSocket))
	env.health = drahealthv1.NewDRAResourceHealthClient(dial(t, draSocket))
	env.registrar = registerapi.NewRegistrationClient(dial(t, regSocket))
	return env
}

func dial(t *testing.T, socket string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", socket, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// waitFor polls cond until it holds. It is a wait, not a timing check: the
// deadline only keeps a broken test from hanging.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %s", what, detail)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *testEnv) prepare(t *testing.T, claims ...*resourceapi.ResourceClaim) (*drapbv1.NodePrepareResourcesResponse, error) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	req := &drapbv1.NodePrepareResourcesRequest{}
	for _, c := range claims {
		req.Claims = append(req.Claims, &drapbv1.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)})
	}
	return e.dra.NodePrepareResources(ctx, req)
}

func (e *testEnv) unprepare(t *testing.T, claims ...*resourceapi.ResourceClaim) (*drapbv1.NodeUnprepareResourcesResponse, error) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	req := &drapbv1.NodeUnprepareResourcesRequest{}
	for _, c := range claims {
		req.Claims = append(req.Claims, &drapbv1.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)})
	}
	return e.dra.NodeUnprepareResources(ctx, req)
}

// loadCheckpoint reads the checkpoint as a restarted plugin would.
func (e *testEnv) loadCheckpoint(t *testing.T) *checkpoint.Checkpoint {
	t.Helper()
	cp, err := checkpoint.File{Path: filepath.Join(e.cfg.StateDir, checkpointFileName)}.Load()
	if err != nil {
		t.Fatalf("load checkpoint: %v", err)
	}
	return cp
}

// cdiSpecs returns the CDI devices in the CDI directory, as the container
// runtime sees them, with their environment and device nodes.
func (e *testEnv) cdiSpecs(t *testing.T) map[string][]string {
	t.Helper()
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(e.cfg.CDIDir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := cache.Refresh(); err != nil {
		t.Fatalf("CDI specs do not load: %v", err)
	}
	out := map[string][]string{}
	for _, id := range cache.ListDevices() {
		dev := cache.GetDevice(id)
		var edits []string
		edits = append(edits, dev.ContainerEdits.Env...)
		for _, n := range dev.ContainerEdits.DeviceNodes {
			edits = append(edits, n.Path)
		}
		out[id] = edits
	}
	return out
}

// publishedSlices returns the ResourceSlices in the fake apiserver.
func (e *testEnv) publishedSlices(t *testing.T) []resourceapi.ResourceSlice {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	list, err := e.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// recordingPublisher remembers what would have been published.
type recordingPublisher struct {
	mu        sync.Mutex
	published []resourceslice.DriverResources
}

func (p *recordingPublisher) PublishResources(_ context.Context, r resourceslice.DriverResources) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.published = append(p.published, r)
	return nil
}

func (p *recordingPublisher) last() (resourceslice.DriverResources, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.published) == 0 {
		return resourceslice.DriverResources{}, 0
	}
	return p.published[len(p.published)-1], len(p.published)
}

func deviceNames(r resourceslice.DriverResources) []string {
	var names []string
	for _, pool := range r.Pools {
		for _, s := range pool.Slices {
			for _, d := range s.Devices {
				names = append(names, d.Name)
			}
		}
	}
	return names
}

// editInventory rewrites the test inventory through a function of its text.
func (e *testEnv) editInventory(t *testing.T, edit func(string) string) {
	t.Helper()
	data, err := os.ReadFile(e.inventory)
	if err != nil {
		t.Fatal(err)
	}
	edited := edit(string(data))
	if edited == string(data) {
		t.Fatal("inventory edit changed nothing")
	}
	writeFile(t, e.inventory, []byte(edited))
}

// markUnhealthy adds a health entry to the GPU with the given UUID.
func markUnhealthy(uuid, reason string) func(string) string {
	return func(s string) string {
		return strings.Replace(s, "  uuid: "+uuid+"\n", "  uuid: "+uuid+"\n  health: {status: Unhealthy, reason: "+reason+", message: injected by the test}\n", 1)
	}
}
