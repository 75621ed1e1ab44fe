package gpu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/clock"

	"github.com/drasched/drasched/pkg/driver/gpu/cdi"
	"github.com/drasched/drasched/pkg/driver/gpu/checkpoint"
	"github.com/drasched/drasched/pkg/driver/gpu/device"
	"github.com/drasched/drasched/pkg/driver/gpu/discovery"
	"github.com/drasched/drasched/pkg/driver/gpu/flock"
)

// Defaults of Config.
const (
	DefaultRescanInterval     = 30 * time.Second
	DefaultHealthCheckTimeout = 30 * time.Second
	// DefaultDiscoveryGracePeriod lets two rescans fail (or miss a GPU)
	// before devices are tainted: one nvidia-smi hiccup should not drain a
	// node, a GPU that fell off the bus should not stay schedulable.
	DefaultDiscoveryGracePeriod = time.Minute
	checkpointFileName          = "checkpoint.json"
	lockFileName                = "prepare.lock"
)

// Config configures the kubelet plugin.
type Config struct {
	// DriverName defaults to DefaultDriverName.
	DriverName string
	// NodeName is the node the plugin runs on; required.
	NodeName string
	// KubeClient reads claims and the node and publishes ResourceSlices;
	// required by Run.
	KubeClient kubernetes.Interface
	// Discoverer finds the node's GPUs; required.
	Discoverer discovery.Discoverer
	// PluginDataDir holds the DRA socket; default
	// /var/lib/kubelet/plugins/<driver name>.
	PluginDataDir string
	// RegistrarDir is where the kubelet looks for plugin registration
	// sockets; default /var/lib/kubelet/plugins_registry.
	RegistrarDir string
	// StateDir holds the checkpoint and the lock file; default
	// PluginDataDir. It must survive restarts of the plugin's pod.
	StateDir string
	// CDIDir receives the claims' CDI specs; default /var/run/cdi.
	CDIDir string
	// DevRoot is the host directory whose dev/ holds the GPUs' device
	// nodes, and ContainerDevRoot where this process sees it; see
	// cdi.Options. Default "/" for both.
	DevRoot, ContainerDevRoot string
	// DriverRoot is the host directory under which the NVIDIA driver's
	// user-space files are installed, and ContainerDriverRoot where this
	// process sees it; see cdi.Options. Default "/" for both.
	DriverRoot, ContainerDriverRoot string
	// BootIDPath is read to notice reboots; default
	// /proc/sys/kernel/random/boot_id.
	BootIDPath string
	// RescanInterval is how often devices are discovered again, in
	// addition to file-change notifications.
	RescanInterval time.Duration
	// HealthCheckTimeout is how long the kubelet trusts a health report;
	// reports are resent three times per timeout.
	HealthCheckTimeout time.Duration
	// DiscoveryGracePeriod is how long a device that discovery no longer
	// confirms (discovery fails, or an observing backend stops listing
	// it) stays published as it was. After that it is tainted unhealthy
	// until discovery sees it again; see lostHealth.
	DiscoveryGracePeriod time.Duration
	// Clock tells the time of discoveries; tests use a fake one.
	Clock clock.PassiveClock
	// RollingUpdateUID, the plugin pod's UID, enables seamless plugin
	// upgrades (kubelet 1.33+).
	RollingUpdateUID types.UID
	// PluginOptions are appended to the kubeletplugin options (tests).
	PluginOptions []kubeletplugin.Option
}

func (c *Config) setDefaults() {
	if c.DriverName == "" {
		c.DriverName = DefaultDriverName
	}
	if c.PluginDataDir == "" {
		c.PluginDataDir = filepath.Join(kubeletplugin.KubeletPluginsDir, c.DriverName)
	}
	if c.RegistrarDir == "" {
		c.RegistrarDir = kubeletplugin.KubeletRegistryDir
	}
	if c.StateDir == "" {
		c.StateDir = c.PluginDataDir
	}
	if c.CDIDir == "" {
		c.CDIDir = cdi.DefaultDir
	}
	if c.BootIDPath == "" {
		c.BootIDPath = checkpoint.DefaultBootIDPath
	}
	if c.RescanInterval <= 0 {
		c.RescanInterval = DefaultRescanInterval
	}
	if c.HealthCheckTimeout <= 0 {
		c.HealthCheckTimeout = DefaultHealthCheckTimeout
	}
	if c.DiscoveryGracePeriod <= 0 {
		c.DiscoveryGracePeriod = DefaultDiscoveryGracePeriod
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
}

// publisher is the part of kubeletplugin.Helper the driver uses to publish.
type publisher interface {
	PublishResources(ctx context.Context, resources resourceslice.DriverResources) error
}

// Driver is the GPU kubelet plugin. It implements kubeletplugin.DRAPlugin.
//
// PrepareResourceClaims and UnprepareResourceClaims keep no state in memory
// between calls: each takes the node-wide file lock, loads the checkpoint,
// works and stores it again, so that two plugin processes (rolling update)
// and a restarted plugin always agree.
type Driver struct {
	cfg        Config
	checkpoint checkpoint.File
	lockPath   string
	cdi        *cdi.Writer
	bootID     string

	// node is set by Run before the kubelet can call Prepare and not
	// changed afterwards.
	node *corev1.Node

	// resync asks the device loop to publish again (HandleError reacts to
	// dropped fields this way; publishing from the error handler itself
	// could re-enter the ResourceSlice controller).
	resync chan struct{}
	// cancel stops Run on fatal errors reported to HandleError.
	cancel context.CancelCauseFunc

	// mu guards the fields below. The device loop replaces the devices;
	// Prepare and WatchHealthStatus read them concurrently. Nothing slow
	// happens under mu: discovery and publishing run outside it.
	mu sync.Mutex
	// gpus are the devices to publish: those of the last successful
	// discovery and, for an observing backend, those it no longer lists
	// (see publishableLocked). It is replaced, never modified, so readers
	// may keep the slice after unlocking.
	gpus []device.GPU
	// index maps device names to gpus; replaced together with gpus.
	index map[string]device.Ref
	// known holds every GPU published since the start, by UUID, with when
	// discovery last listed it.
	known map[string]knownGPU
	// generation counts successful discoveries; known GPUs listed by the
	// last one carry it.
	generation uint64
	// discovered is when the last discovery succeeded.
	discovered time.Time
	// discoveryErr is the error of the last discovery, nil if it worked.
	discoveryErr error
	// withoutCounters and withoutTaints are set when the apiserver drops
	// those fields because their features are disabled.
	withoutCounters, withoutTaints bool
	// started is when Run started the kubelet plugin; zero before.
	started time.Time
	// registration is the kubelet's last NotifyRegistrationStatus; nil
	// until it calls.
	registration *registerapi.RegistrationStatus
	// backgroundErr is the last error the kubelet plugin helper reported
	// from the background (see HandleError), at backgroundErrAt.
	backgroundErr   error
	backgroundErrAt time.Time
	// healthSubscribers are signalled when device health changes.
	healthSubscribers map[chan struct{}]struct{}
}

var _ kubeletplugin.DRAPlugin = &Driver{}

// New creates the driver: it discovers the devices once, and recovers the
// checkpoint, rolling back claims whose preparation was interrupted and
// forgetting claims prepared before a reboot.
func New(ctx context.Context, cfg Config) (*Driver, error) {
	cfg.setDefaults()
	if cfg.NodeName == "" {
		return nil, ErrNoNodeName
	}
	if cfg.Discoverer == nil {
		return nil, errors.New("no device discovery configured")
	}
	if err := os.MkdirAll(cfg.StateDir, 0o750); err != nil {
		return nil, fmt.Errorf("create state directory: %w", err)
	}
	bootID, err := checkpoint.ReadBootID(cfg.BootIDPath)
	if err != nil {
		return nil, err
	}
	writer, err := cdi.NewWriter(cfg.CDIDir, cfg.DriverName, cdi.Options{
		DevRoot:             cfg.DevRoot,
		ContainerDevRoot:    cfg.ContainerDevRoot,
		DriverRoot:          cfg.DriverRoot,
		ContainerDriverRoot: cfg.ContainerDriverRoot,
	})
	if err != nil {
		return nil, err
	}
	d := &Driver{
		cfg:               cfg,
		checkpoint:        checkpoint.File{Path: filepath.Join(cfg.StateDir, checkpointFileName)},
		lockPath:          filepath.Join(cfg.StateDir, lockFileName),
		cdi:               writer,
		bootID:            bootID,
		resync:            make(chan struct{}, 1),
		known:             map[string]knownGPU{},
		healthSubscribers: map[chan struct{}]struct{}{},
	}
	if err := d.recover(ctx); err != nil {
		return nil, err
	}
	gpus, err := cfg.Discoverer.Discover(ctx)
	if err != nil {
		return nil, fmt.Errorf("discover devices with %s: %w", cfg.Discoverer, err)
	}
	d.setDevices(ctx, gpus, nil)
	return d, nil
}

// recover brings the checkpoint to a consistent state at startup.
func (d *Driver) recover(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	lock, err := flock.Acquire(ctx, d.lockPath)
	if err != nil {
		return err
	}
	defer d.release(ctx, lock)
	cp, err := d.checkpoint.Load()
	if err != nil {
		return fmt.Errorf("recover prepared claims (move the file away to start over, after making sure no pod uses this node's GPUs): %w", err)
	}
	changed := false
	if cp.BootID != d.bootID {
		if len(cp.Claims) > 0 {
			logger.Info("Node rebooted since the checkpoint was written, forgetting prepared claims", "claims", len(cp.Claims), "checkpointBootID", cp.BootID, "bootID", d.bootID)
		}
		for uid := range cp.Claims {
			// CDI specs normally live on a tmpfs that the reboot cleared.
			if err := d.cdi.Remove(uid); err != nil {
				return err
			}
		}
		cp = checkpoint.New(d.bootID)
		changed = true
	}
	rolledBack, err := d.rollBackInterrupted(ctx, cp)
	if err != nil {
		return err
	}
	if changed || rolledBack {
		if err := d.checkpoint.Store(cp); err != nil {
			return err
		}
	}
	preparedDevices.Set(float64(countDevices(cp)))
	return nil
}

// rollBackInterrupted undoes claims left in PrepareStarted. The lock is held
// for a whole Prepare call, so a lock holder only sees PrepareStarted when
// the process that wrote it died mid-call.
func (d *Driver) rollBackInterrupted(ctx context.Context, cp *checkpoint.Checkpoint) (bool, error) {
	changed := false
	for uid, claim := range cp.Claims {
		if claim.State != checkpoint.PrepareStarted {
			continue
		}
		klog.FromContext(ctx).Info("Rolling back interrupted prepare", "claim", klog.KRef(claim.Namespace, claim.Name), "claimUID", uid)
		if err := d.cdi.Remove(uid); err != nil {
			return changed, err
		}
		delete(cp.Claims, uid)
		changed = true
	}
	return changed, nil
}

func (d *Driver) release(ctx context.Context, lock *flock.Lock) {
	if err := lock.Release(); err != nil {
		klog.FromContext(ctx).Error(err, "Releasing the prepare lock")
	}
}

// Run starts the kubelet plugin, publishes the devices and keeps them up to
// date until ctx is done or a fatal error is reported to HandleError.
func (d *Driver) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if d.cfg.KubeClient == nil {
		return errors.New("no Kubernetes client configured")
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	d.cancel = cancel

	var node *corev1.Node
	err := retry.OnError(retry.DefaultBackoff, func(error) bool { return ctx.Err() == nil }, func() error {
		var err error
		node, err = d.cfg.KubeClient.CoreV1().Nodes().Get(ctx, d.cfg.NodeName, metav1.GetOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("get node %s: %w", d.cfg.NodeName, err)
	}
	d.node = node

	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(d.cfg.DriverName),
		kubeletplugin.KubeClient(d.cfg.KubeClient),
		kubeletplugin.NodeName(d.cfg.NodeName),
		kubeletplugin.NodeUID(node.UID),
		kubeletplugin.RegistrarDirectoryPath(d.cfg.RegistrarDir),
		kubeletplugin.PluginDataDirectoryPath(d.cfg.PluginDataDir),
	}
	if d.cfg.RollingUpdateUID != "" {
		opts = append(opts, kubeletplugin.RollingUpdate(d.cfg.RollingUpdateUID))
	}
	opts = append(opts, kubeletplugin.GRPCInterceptor(d.observeRegistration))
	opts = append(opts, d.cfg.PluginOptions...)
	d.mu.Lock()
	d.started = d.cfg.Clock.Now()
	d.mu.Unlock()
	helper, err := kubeletplugin.Start(ctx, d, opts...)
	if err != nil {
		return fmt.Errorf("start kubelet plugin: %w", err)
	}
	defer helper.Stop()
	logger.Info("Kubelet plugin started", "driver", d.cfg.DriverName, "node", klog.KObj(node), "discovery", d.cfg.Discoverer.String())

	if err := d.publish(ctx, helper); err != nil && ctx.Err() == nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Go(func() { d.watchDevices(ctx, helper) })
	<-ctx.Done()
	wg.Wait()
	if cause := context.Cause(ctx); !errors.Is(cause, context.Canceled) {
		return cause
	}
	return nil
}

// HandleError implements kubeletplugin.DRAPlugin. Dropped fields mean the
// cluster lacks a feature the slices rely on: the driver then publishes
// what the cluster can represent safely. Non-recoverable errors stop Run.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	utilruntime.HandleErrorWithContext(ctx, err, msg)
	if dropped, ok := errors.AsType[*resourceslice.DroppedFieldsError](err); ok {
		features := dropped.DisabledFeatures()
		d.mu.Lock()
		if slices.Contains(features, "DRAPartitionableDevices") && !d.withoutCounters {
			// Without counters a GPU and its MIG devices could both be
			// allocated; leave MIG devices out.
			d.withoutCounters = true
			klog.FromContext(ctx).Error(nil, "The cluster dropped shared counters (DRAPartitionableDevices is off); publishing whole GPUs only")
		}
		if slices.Contains(features, "DRADeviceTaints") && !d.withoutTaints {
			// Without taints an unhealthy device would look healthy;
			// leave unhealthy devices out.
			d.withoutTaints = true
			klog.FromContext(ctx).Error(nil, "The cluster dropped device taints (DRADeviceTaints is off); leaving unhealthy devices out")
		}
		d.mu.Unlock()
		select {
		case d.resync <- struct{}{}:
		default:
		}
		return
	}
	if errors.Is(err, kubeletplugin.ErrRecoverable) {
		// The ResourceSlice controller's errors (and stale health
		// reports): the cluster's view of the devices is wrong until
		// they stop; /healthz says so (see CheckPublishing).
		d.mu.Lock()
		d.backgroundErr, d.backgroundErrAt = fmt.Errorf("%s: %w", msg, err), d.cfg.Clock.Now()
		d.mu.Unlock()
		return
	}
	if d.cancel != nil {
		d.cancel(fmt.Errorf("%s: %w", msg, err))
	}
}

// setDevices records a discovery result and recomputes the devices to
// publish. It returns whether they (including their health) changed. A
// failed discovery keeps the previous devices, tainted once the grace
// period has passed.
func (d *Driver) setDevices(ctx context.Context, discovered []device.GPU, discoveryErr error) bool {
	now := d.cfg.Clock.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if discoveryErr == nil {
		d.generation++
		d.discovered = now
		if d.cfg.Discoverer.Declared() {
			clear(d.known)
		}
		for _, g := range discovered {
			d.known[g.UUID] = knownGPU{gpu: g, seen: now, generation: d.generation}
		}
	}
	if (discoveryErr == nil) != (d.discoveryErr == nil) {
		// Health turns Unknown when discovery starts failing and back
		// when it works again.
		d.notifyHealthLocked()
	}
	d.discoveryErr = discoveryErr
	gpus, lost, dropped := d.publishableLocked(now)
	if len(dropped) > 0 {
		klog.FromContext(ctx).Error(nil, "GPUs that discovery no longer lists collide with the GPUs it lists now (index, minor number, PCI address or UUID), leaving them out", "devices", dropped)
	}
	changed := !reflect.DeepEqual(gpus, d.gpus)
	if changed {
		if len(lost) > 0 {
			klog.FromContext(ctx).Error(discoveryErr, "Devices not confirmed by discovery for longer than the grace period are tainted unhealthy", "devices", lost, "gracePeriod", d.cfg.DiscoveryGracePeriod)
		}
		d.gpus = gpus
		d.index = device.Index(gpus)
		d.notifyHealthLocked()
	}
	return changed
}

// devices returns the current devices; the result must not be modified.
func (d *Driver) devices() ([]device.GPU, map[string]device.Ref) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.gpus, d.index
}

// sliceOptions returns how slices are built now.
func (d *Driver) sliceOptions() SliceOptions {
	d.mu.Lock()
	defer d.mu.Unlock()
	return SliceOptions{
		DriverName:      d.cfg.DriverName,
		NodeName:        d.cfg.NodeName,
		WithoutCounters: d.withoutCounters,
		WithoutTaints:   d.withoutTaints,
	}
}

// publish builds the slices of the current devices and hands them to the
// ResourceSlice controller, which applies them in the background.
func (d *Driver) publish(ctx context.Context, p publisher) error {
	gpus, _ := d.devices()
	opts := d.sliceOptions()
	resources, err := BuildDriverResources(opts, gpus)
	if err != nil {
		return fmt.Errorf("build ResourceSlices: %w", err)
	}
	if err := p.PublishResources(ctx, resources); err != nil {
		return fmt.Errorf("publish ResourceSlices: %w", err)
	}
	refs := device.Refs(gpus)
	unhealthy := 0
	for _, ref := range refs {
		if !ref.GPU.Health.IsHealthy() {
			unhealthy++
		}
	}
	publishedDevices.Set(float64(len(refs)))
	unhealthyDevices.Set(float64(unhealthy))
	klog.FromContext(ctx).V(2).Info("Published devices", "devices", len(refs), "unhealthy", unhealthy, "slices", len(resources.Pools[opts.NodeName].Slices))
	return nil
}

func countDevices(cp *checkpoint.Checkpoint) int {
	n := 0
	for _, c := range cp.Claims {
		n += len(c.Devices)
	}
	return n
}
