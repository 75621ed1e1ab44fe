package gpu

import (
	"cmp"
	"slices"
	"time"

	"github.com/drasched/drasched/pkg/driver/gpu/device"
)

// Reasons of the unhealthy taint on devices that discovery has not
// confirmed for longer than the grace period.
const (
	// ReasonDiscoveryFailing: discovery itself fails (nvidia-smi exits
	// with an error or times out, the inventory file is broken).
	ReasonDiscoveryFailing = "DiscoveryFailing"
	// ReasonNotDiscovered: discovery works but no longer lists the GPU,
	// as when it fell off the bus.
	ReasonNotDiscovered = "NotDiscovered"
)

// knownGPU is a GPU that discovery found, with when it last listed it.
type knownGPU struct {
	gpu        device.GPU
	seen       time.Time
	generation uint64
}

// lostHealth is the health of a GPU that discovery has not confirmed since
// seen: unchanged within the grace period, so that one failed rescan does
// not drain the node, and unhealthy after it. Unhealthy devices are tainted
// by the one rule in buildDevice, so a lost device gets the same
// gpu.drasched.dev/unhealthy taint as one that reported an error, and loses
// it the same way: when discovery lists it healthy again.
func lostHealth(k knownGPU, now time.Time, grace time.Duration, discoveryErr error) device.Health {
	if now.Sub(k.seen) < grace {
		return k.gpu.Health
	}
	if discoveryErr != nil {
		return device.Health{Status: device.Unhealthy, Reason: ReasonDiscoveryFailing,
			Message: "device discovery has failed since " + k.seen.UTC().Format(time.RFC3339)}
	}
	return device.Health{Status: device.Unhealthy, Reason: ReasonNotDiscovered,
		Message: "not listed by device discovery since " + k.seen.UTC().Format(time.RFC3339)}
}

// publishableLocked returns the devices to publish at now: the GPUs of the
// last discovery if it succeeded, and the known GPUs it did not confirm
// with their lostHealth. It also returns the names of the lost GPUs that
// are tainted, and of those left out because a listed GPU now has their
// index, minor number, PCI address or UUID (nvidia-smi renumbers when a GPU
// disappears): one device name cannot stand for two GPUs. d.mu must be
// held.
func (d *Driver) publishableLocked(now time.Time) (gpus []device.GPU, lost, dropped []string) {
	var unconfirmed []knownGPU
	for _, k := range d.known {
		if d.discoveryErr == nil && k.generation == d.generation {
			gpus = append(gpus, k.gpu)
		} else {
			unconfirmed = append(unconfirmed, k)
		}
	}
	byIndex := func(a, b device.GPU) int { return cmp.Compare(a.Index, b.Index) }
	slices.SortFunc(gpus, byIndex)
	slices.SortFunc(unconfirmed, func(a, b knownGPU) int { return byIndex(a.gpu, b.gpu) })
	for _, k := range unconfirmed {
		g := k.gpu
		g.Health = lostHealth(k, now, d.cfg.DiscoveryGracePeriod, d.discoveryErr)
		if err := device.Validate(append(slices.Clip(gpus), g)); err != nil {
			dropped = append(dropped, g.Name())
			continue
		}
		if g.Health != k.gpu.Health {
			lost = append(lost, g.Name())
		}
		gpus = append(gpus, g)
	}
	slices.SortFunc(gpus, byIndex)
	return gpus, lost, dropped
}

// subscribeHealth returns a channel that is signalled when health changes.
func (d *Driver) subscribeHealth() chan struct{} {
	ch := make(chan struct{}, 1)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.healthSubscribers[ch] = struct{}{}
	return ch
}

func (d *Driver) unsubscribeHealth(ch chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.healthSubscribers, ch)
}

// notifyHealthLocked signals all subscribers without blocking: a pending
// signal already makes the subscriber send a fresh report. d.mu must be
// held.
func (d *Driver) notifyHealthLocked() {
	for ch := range d.healthSubscribers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func truncate(s string) string {
	const maxLen = 256
	if len(s) > maxLen {
		return s[:maxLen-3] + "..."
	}
	return s
}
