//go:build !kube1.35 && !kube1.36

package gpu

import (
	"context"
	"fmt"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/drasched/drasched/pkg/driver/gpu/device"
)

// The kubelet's health service as kubeletplugin offers it from 1.37 on.
// The driver image is built from the newest minor for every cluster (see
// docs/compatibility.md); an older minor's build compiles the driver for
// its tests and fakes without it.

// WatchHealthStatus implements kubeletplugin.DRAPlugin. It sends the health
// of every published device at once, again whenever a rescan changes it,
// and in between at least three times per HealthCheckTimeout, so that the
// kubelet never lets a report go stale while the plugin runs. While
// discovery fails, devices are reported as Unknown: the plugin no longer
// knows.
//
// Unhealthy devices are also tainted in the published ResourceSlices (see
// BuildPool), and the taint goes away when the device recovers. So are
// devices that discovery has not confirmed for DiscoveryGracePeriod (see
// lostHealth).
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
		case !ref.GPU.Health.IsHealthy():
			// Also a device tainted because discovery lost it.
			h.Health = kubeletplugin.HealthStatusUnhealthy
			h.Message = truncate(ref.GPU.Health.Reason + ": " + ref.GPU.Health.Message)
		case d.discoveryErr != nil:
			h.Health = kubeletplugin.HealthStatusUnknown
			h.Message = truncate(fmt.Sprintf("device discovery fails: %v", d.discoveryErr))
		case d.known[ref.GPU.UUID].generation != d.generation:
			h.Health = kubeletplugin.HealthStatusUnknown
			h.Message = "not listed by the last device discovery"
		}
		report.Devices = append(report.Devices, h)
	}
	return report
}
