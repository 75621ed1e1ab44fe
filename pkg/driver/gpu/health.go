package gpu

import (
	"context"
	"fmt"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/drasched/drasched/pkg/driver/gpu/device"
)

// WatchHealthStatus implements kubeletplugin.DRAPlugin. It sends the health
// of every published device at once, again whenever a rescan changes it,
// and in between at least three times per HealthCheckTimeout, so that the
// kubelet never lets a report go stale while the plugin runs. While
// discovery fails, devices are reported as Unknown: the plugin no longer
// knows.
//
// Unhealthy devices are also tainted in the published ResourceSlices (see
// BuildPool), and the taint goes away when the device recovers.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	changed := d.subscribeHealth()
	defer d.unsubscribeHealth(changed)
	resend := time.NewTicker(d.cfg.HealthCheckTimeout / 3)
	defer resend.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case reports <- d.healthReport():
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-resend.C:
		}
	}
}

// healthReport describes every device that is currently published.
func (d *Driver) healthReport() kubeletplugin.DeviceHealthReport {
	d.mu.Lock()
	defer d.mu.Unlock()
	refs := device.Refs(d.gpus)
	report := kubeletplugin.DeviceHealthReport{Devices: make([]kubeletplugin.DeviceHealth, 0, len(refs))}
	for _, ref := range refs {
		h := kubeletplugin.DeviceHealth{
			PoolName:           d.cfg.NodeName,
			DeviceName:         ref.Name(),
			Health:             kubeletplugin.HealthStatusHealthy,
			LastUpdated:        d.discovered,
			HealthCheckTimeout: d.cfg.HealthCheckTimeout,
		}
		switch {
		case d.discoveryErr != nil:
			h.Health = kubeletplugin.HealthStatusUnknown
			h.Message = truncate(fmt.Sprintf("device discovery fails: %v", d.discoveryErr))
		case !ref.GPU.Health.IsHealthy():
			h.Health = kubeletplugin.HealthStatusUnhealthy
			h.Message = truncate(ref.GPU.Health.Reason + ": " + ref.GPU.Health.Message)
		}
		report.Devices = append(report.Devices, h)
	}
	return report
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
