package gpu

import (
	"context"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"
)

// settleDelay lets a burst of file events (an editor's write, rename and
// chmod; a ConfigMap's symlink swap) end before the rescan, so that the
// rescan reads the finished file.
const settleDelay = 200 * time.Millisecond

// watchDevices rediscovers the devices when their source changes (fsnotify
// on the backend's paths, as KubeVirt's device plugins watch their
// directories) and every RescanInterval, and republishes when something
// changed. It runs until ctx is done and is the only goroutine that
// publishes after startup.
func (d *Driver) watchDevices(ctx context.Context, p publisher) {
	logger := klog.FromContext(ctx)
	var events <-chan fsnotify.Event
	var watchErrors <-chan error
	if paths := d.cfg.Discoverer.WatchPaths(); len(paths) > 0 {
		watcher, err := fsnotify.NewWatcher()
		if err != nil {
			logger.Error(err, "File watching unavailable, relying on the periodic rescan", "interval", d.cfg.RescanInterval)
		} else {
			defer func() { _ = watcher.Close() }()
			for _, path := range paths {
				if err := watcher.Add(path); err != nil {
					logger.Error(err, "Cannot watch path, relying on the periodic rescan", "path", path, "interval", d.cfg.RescanInterval)
				}
			}
			events, watchErrors = watcher.Events, watcher.Errors
			// A change between the discovery at startup and the watch
			// above made no event: look once more now that the watch is
			// in place, instead of waiting for the periodic rescan.
			d.rescan(ctx, p)
		}
	}
	rescan := time.NewTicker(d.cfg.RescanInterval)
	defer rescan.Stop()
	var settled <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-events:
			logger.V(5).Info("Device source changed", "event", ev.String())
			if settled == nil {
				settled = time.After(settleDelay)
			}
		case err := <-watchErrors:
			logger.Error(err, "File watch error")
		case <-settled:
			settled = nil
			d.rescan(ctx, p)
		case <-rescan.C:
			d.rescan(ctx, p)
		case <-d.resync:
			if err := d.publish(ctx, p); err != nil {
				logger.Error(err, "Republishing devices")
			}
		}
	}
}

// rescan discovers the devices again and republishes them if they changed.
// When discovery fails the previous devices stay published: a broken
// inventory or a hiccup of nvidia-smi must not make GPUs vanish from the
// cluster, nor publish anything wrong. But only for the grace period: after
// that they are tainted (see publishableLocked), so that a node whose
// driver or GPUs broke does not keep attracting pods.
func (d *Driver) rescan(ctx context.Context, p publisher) {
	logger := klog.FromContext(ctx)
	gpus, err := d.cfg.Discoverer.Discover(ctx)
	if err != nil {
		discoveryErrors.Inc()
		logger.Error(err, "Device discovery failed, keeping the published devices", "discovery", d.cfg.Discoverer.String())
		gpus = nil
	}
	if !d.setDevices(ctx, gpus, err) {
		if d.CheckPublishing() != nil {
			// Ask the ResourceSlice controller to try again now rather
			// than after its backoff, which grows to many minutes: a
			// lasting failure is then reported again within a rescan
			// interval, and a repaired one ends its report.
			if err := d.publish(ctx, p); err != nil {
				logger.Error(err, "Republishing devices")
			}
		}
		return
	}
	logger.Info("Devices changed, republishing", "discovery", d.cfg.Discoverer.String())
	if err := d.publish(ctx, p); err != nil {
		logger.Error(err, "Republishing devices")
	}
}
