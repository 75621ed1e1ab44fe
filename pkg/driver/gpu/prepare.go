package gpu

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/drasched/drasched/pkg/driver/gpu/cdi"
	"github.com/drasched/drasched/pkg/driver/gpu/checkpoint"
	"github.com/drasched/drasched/pkg/driver/gpu/device"
	"github.com/drasched/drasched/pkg/driver/gpu/flock"
)

// Errors that make Prepare refuse a claim. They are per claim: the kubelet
// retries the claim, the other claims of the call are unaffected.
var (
	// ErrWrongNode: the claim's devices are not on this node.
	ErrWrongNode = errors.New("claim is not allocated on this node")
	// ErrNotForDriver: the claim has no devices of this driver.
	ErrNotForDriver = errors.New("claim has no devices of this driver")
	// ErrUnknownDevice: an allocated device is not (or no longer) here.
	ErrUnknownDevice = errors.New("allocated device does not exist on this node")
	// ErrDeviceInUse: the hardware is already prepared for another claim.
	ErrDeviceInUse = errors.New("device is already prepared for another claim")
	// ErrMIGCapsUnknown: discovery could not find a MIG device's
	// nvidia-caps nodes, without which a container cannot use it.
	ErrMIGCapsUnknown = errors.New("the nvidia-caps device nodes of the MIG device are unknown")
)

// PrepareResourceClaims implements kubeletplugin.DRAPlugin.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	start := time.Now()
	defer func() { operationDuration.WithLabelValues(operationPrepare).Observe(time.Since(start).Seconds()) }()
	claimOperations.WithLabelValues(operationPrepare).Add(float64(len(claims)))

	results, err := d.prepare(ctx, claims)
	if err != nil {
		claimOperationErrors.WithLabelValues(operationPrepare).Add(float64(len(claims)))
		return nil, err
	}
	for _, r := range results {
		if r.Err != nil {
			claimOperationErrors.WithLabelValues(operationPrepare).Inc()
		}
	}
	return results, nil
}

func (d *Driver) prepare(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	lock, err := flock.Acquire(ctx, d.lockPath)
	if err != nil {
		return nil, err
	}
	defer d.release(ctx, lock)
	cp, err := d.loadCheckpoint(ctx)
	if err != nil {
		return nil, err
	}
	_, index := d.devices()
	results := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		devices, err := d.prepareClaim(ctx, cp, index, claim)
		if err != nil {
			err = fmt.Errorf("prepare claim %s: %w", klog.KObj(claim), err)
		}
		results[claim.UID] = kubeletplugin.PrepareResult{Devices: devices, Err: err}
	}
	preparedDevices.Set(float64(countDevices(cp)))
	return results, nil
}

// loadCheckpoint reads the checkpoint under the lock and rolls back what a
// crashed process left half done.
func (d *Driver) loadCheckpoint(ctx context.Context) (*checkpoint.Checkpoint, error) {
	cp, err := d.checkpoint.Load()
	if err != nil {
		return nil, err
	}
	if cp.BootID != d.bootID {
		return nil, fmt.Errorf("checkpoint %s belongs to boot %q, this is boot %q: restart the plugin", d.checkpoint.Path, cp.BootID, d.bootID)
	}
	if rolledBack, err := d.rollBackInterrupted(ctx, cp); err != nil {
		return nil, err
	} else if rolledBack {
		if err := d.checkpoint.Store(cp); err != nil {
			return nil, err
		}
	}
	return cp, nil
}

// prepareClaim prepares one claim and records it in cp (and on disk).
func (d *Driver) prepareClaim(ctx context.Context, cp *checkpoint.Checkpoint, index map[string]device.Ref, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	logger := klog.FromContext(ctx)
	uid := string(claim.UID)
	if prepared, ok := cp.Claims[uid]; ok {
		// Completed: the kubelet asks again after a restart. Return the
		// same result without touching anything.
		logger.V(3).Info("Claim already prepared", "claim", klog.KObj(claim))
		return resultDevices(prepared), nil
	}

	planned, edits, err := d.plan(claim, index)
	if err != nil {
		return nil, err
	}
	if err := checkConflicts(cp, index, planned); err != nil {
		return nil, err
	}

	entry := &checkpoint.Claim{
		State:       checkpoint.PrepareStarted,
		Namespace:   claim.Namespace,
		Name:        claim.Name,
		Devices:     planned,
		CDISpecName: d.cdi.SpecName(uid),
	}
	cp.Claims[uid] = entry
	// PrepareStarted reaches the disk before any side effect, so that a
	// crash from here on is rolled back at the next start instead of
	// leaving a CDI spec that no checkpoint entry accounts for.
	if err := d.checkpoint.Store(cp); err != nil {
		delete(cp.Claims, uid)
		return nil, err
	}
	cdiID, err := d.cdi.Write(ctx, edits)
	if err == nil {
		for i := range entry.Devices {
			entry.Devices[i].CDIDeviceIDs = []string{cdiID}
		}
		entry.State = checkpoint.PrepareCompleted
		err = d.checkpoint.Store(cp)
	}
	if err != nil {
		return nil, errors.Join(err, d.rollBack(cp, uid))
	}
	logger.V(2).Info("Prepared claim", "claim", klog.KObj(claim), "devices", len(planned), "cdiDevice", cdiID)
	return resultDevices(entry), nil
}

// rollBack removes a claim: the CDI spec goes first, then the entry. It
// undoes failed prepares and does Unprepare.
func (d *Driver) rollBack(cp *checkpoint.Checkpoint, uid string) error {
	if err := d.cdi.Remove(uid); err != nil {
		// Keep the entry, so that the spec is not forgotten while it may
		// still exist: the next Unprepare, or the rollback of a
		// PrepareStarted entry, retries the removal.
		return err
	}
	delete(cp.Claims, uid)
	return d.checkpoint.Store(cp)
}

// plan checks that a claim may be prepared here and works out its devices
// and CDI edits, without side effects.
func (d *Driver) plan(claim *resourceapi.ResourceClaim, index map[string]device.Ref) ([]checkpoint.Device, cdi.ClaimEdits, error) {
	alloc := claim.Status.Allocation
	if alloc == nil {
		return nil, cdi.ClaimEdits{}, errors.New("claim is not allocated")
	}
	if alloc.NodeSelector != nil && d.node != nil {
		selector, err := nodeaffinity.NewNodeSelector(alloc.NodeSelector)
		if err != nil {
			return nil, cdi.ClaimEdits{}, fmt.Errorf("allocation node selector: %w", err)
		}
		if !selector.Match(d.node) {
			return nil, cdi.ClaimEdits{}, fmt.Errorf("%w: its node selector does not match node %s", ErrWrongNode, d.cfg.NodeName)
		}
	}
	var planned []checkpoint.Device
	var nodes []string
	var driverVersion string
	var config *GPUConfig
	for _, result := range alloc.Devices.Results {
		if result.Driver != d.cfg.DriverName {
			continue
		}
		if result.Pool != d.cfg.NodeName {
			return nil, cdi.ClaimEdits{}, fmt.Errorf("%w: device %s is in pool %s, this node is %s", ErrWrongNode, result.Device, result.Pool, d.cfg.NodeName)
		}
		ref, ok := index[result.Device]
		if !ok {
			return nil, cdi.ClaimEdits{}, fmt.Errorf("%w: %s", ErrUnknownDevice, result.Device)
		}
		cfg, err := configForRequest(d.cfg.DriverName, alloc.Devices.Config, result.Request)
		if err != nil {
			return nil, cdi.ClaimEdits{}, err
		}
		if config != nil && string(config.Canonical()) != string(cfg.Canonical()) {
			return nil, cdi.ClaimEdits{}, fmt.Errorf("%w: the claim's devices have different configurations; one configuration per claim is supported", ErrInvalidConfig)
		}
		config = cfg
		planned = append(planned, checkpoint.Device{
			Requests:    []string{result.Request},
			Pool:        result.Pool,
			Device:      result.Device,
			Hardware:    ref.Hardware(),
			Config:      cfg.Canonical(),
			AdminAccess: result.AdminAccess != nil && *result.AdminAccess,
		})
		refNodes, err := deviceNodes(ref)
		if err != nil {
			return nil, cdi.ClaimEdits{}, err
		}
		nodes = append(nodes, refNodes...)
		if driverVersion != "" && ref.GPU.DriverVersion != driverVersion {
			return nil, cdi.ClaimEdits{}, fmt.Errorf("the claim's GPUs report driver versions %s and %s", driverVersion, ref.GPU.DriverVersion)
		}
		driverVersion = ref.GPU.DriverVersion
	}
	if len(planned) == 0 {
		return nil, cdi.ClaimEdits{}, fmt.Errorf("%w %s", ErrNotForDriver, d.cfg.DriverName)
	}
	return planned, cdi.ClaimEdits{
		ClaimUID:      string(claim.UID),
		DeviceNodes:   dedupe(nodes),
		Env:           config.Env(),
		DriverVersion: driverVersion,
	}, nil
}

// deviceNodes are the device nodes through which a container uses a
// device: the GPU's /dev/nvidia<minor> and, for a MIG device, the
// nvidia-caps nodes of its GPU and compute instance. A whole GPU in MIG
// mode is usable only through its MIG devices, so it gets all of theirs.
func deviceNodes(ref device.Ref) ([]string, error) {
	nodes := []string{fmt.Sprintf("/dev/nvidia%d", ref.GPU.Minor)}
	migs := ref.GPU.MIG
	switch {
	case ref.MIG != nil:
		migs = []device.MIGDevice{*ref.MIG}
	case !ref.GPU.MIGEnabled:
		migs = nil
	}
	for _, m := range migs {
		if m.Caps == nil {
			return nil, fmt.Errorf("%w: %s of %s (see the plugin's log)", ErrMIGCapsUnknown, m.UUID, ref.GPU.Name())
		}
		nodes = append(nodes, m.Caps.DeviceNodes()...)
	}
	return nodes, nil
}

// checkConflicts refuses devices whose hardware overlaps what another claim
// holds (or what the claim lists twice): the same hardware key, a key that
// is part of a held one (a memory slice of a held GPU), or one of which a
// held key is part (a GPU one of whose memory slices is held). The
// scheduler should never allow it; the driver is the last line of defence
// against two workloads on one piece of hardware.
func checkConflicts(cp *checkpoint.Checkpoint, index map[string]device.Ref, planned []checkpoint.Device) error {
	holders := map[string]string{} // hardware key → claim
	parts := map[string]string{}   // hardware key → a held key that is part of it
	hold := func(keys []string, holder string) {
		for _, k := range keys {
			holders[k] = holder
			if parent, ok := device.HardwareParent(k); ok {
				parts[parent] = k
			}
		}
	}
	// heldOverlapping returns a held key that overlaps k.
	heldOverlapping := func(k string) (string, bool) {
		if _, ok := holders[k]; ok {
			return k, true
		}
		if part, ok := parts[k]; ok {
			return part, true
		}
		if parent, ok := device.HardwareParent(k); ok {
			if _, ok := holders[parent]; ok {
				return parent, true
			}
		}
		return "", false
	}
	uids := make([]string, 0, len(cp.Claims))
	for other := range cp.Claims {
		uids = append(uids, other)
	}
	sort.Strings(uids)
	for _, other := range uids {
		c := cp.Claims[other]
		for _, dev := range c.Devices {
			if dev.AdminAccess {
				continue
			}
			hold(heldHardware(dev, index), fmt.Sprintf("%s/%s (%s)", c.Namespace, c.Name, other))
		}
	}
	for _, dev := range planned {
		if dev.AdminAccess {
			continue
		}
		for _, k := range dev.Hardware {
			if held, ok := heldOverlapping(k); ok {
				return fmt.Errorf("%w: %s (%s) is held by claim %s", ErrDeviceInUse, dev.Device, held, holders[held])
			}
		}
		hold(dev.Hardware, "this claim's device "+dev.Device)
	}
	return nil
}

// heldHardware is the hardware a prepared device holds. The version before
// memory slices were hardware keys recorded a MIG device as its UUID and its
// GPU's, which reads as the whole GPU. Such an entry is read as the device's
// memory slices while the device is here with both UUIDs (a MIG device's
// UUID names one GPU instance, whose placement never changes); otherwise
// it holds the whole GPU until it is unprepared, which refuses the GPU's
// other MIG devices too but never misses a conflict. That version's entries
// of a whole GPU (its UUID and its MIG devices') mean what they say.
func heldHardware(dev checkpoint.Device, index map[string]device.Ref) []string {
	ref, ok := index[dev.Device]
	if ok && ref.MIG != nil && slices.Equal(dev.Hardware, []string{ref.MIG.UUID, ref.GPU.UUID}) {
		return ref.Hardware()
	}
	return dev.Hardware
}

func resultDevices(c *checkpoint.Claim) []kubeletplugin.Device {
	devices := make([]kubeletplugin.Device, 0, len(c.Devices))
	for _, dev := range c.Devices {
		devices = append(devices, kubeletplugin.Device{
			Requests:     dev.Requests,
			PoolName:     dev.Pool,
			DeviceName:   dev.Device,
			CDIDeviceIDs: dev.CDIDeviceIDs,
		})
	}
	return devices
}

func dedupe(values []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range values {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin. Claims that
// are not prepared (never were, or already unprepared) succeed.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	start := time.Now()
	defer func() { operationDuration.WithLabelValues(operationUnprepare).Observe(time.Since(start).Seconds()) }()
	claimOperations.WithLabelValues(operationUnprepare).Add(float64(len(claims)))

	results, err := d.unprepare(ctx, claims)
	if err != nil {
		claimOperationErrors.WithLabelValues(operationUnprepare).Add(float64(len(claims)))
		return nil, err
	}
	for _, err := range results {
		if err != nil {
			claimOperationErrors.WithLabelValues(operationUnprepare).Inc()
		}
	}
	return results, nil
}

func (d *Driver) unprepare(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	logger := klog.FromContext(ctx)
	lock, err := flock.Acquire(ctx, d.lockPath)
	if err != nil {
		return nil, err
	}
	defer d.release(ctx, lock)
	cp, err := d.loadCheckpoint(ctx)
	if err != nil {
		return nil, err
	}
	results := make(map[types.UID]error, len(claims))
	for _, claim := range claims {
		uid := string(claim.UID)
		if _, ok := cp.Claims[uid]; !ok {
			logger.V(3).Info("Claim not prepared, nothing to unprepare", "claim", claim.NamespacedName, "claimUID", uid)
			results[claim.UID] = nil
			continue
		}
		if err := d.rollBack(cp, uid); err != nil {
			results[claim.UID] = fmt.Errorf("unprepare claim %s: %w", claim.NamespacedName, err)
			continue
		}
		logger.V(2).Info("Unprepared claim", "claim", claim.NamespacedName, "claimUID", uid)
		results[claim.UID] = nil
	}
	preparedDevices.Set(float64(countDevices(cp)))
	return results, nil
}
