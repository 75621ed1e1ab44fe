package gpu

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// registrationTimeout is how long the kubelet may take to register the
// plugin. Its plugin watcher notices a new socket within seconds; a plugin
// unregistered after two minutes has its socket where the kubelet does not
// look (--registrar-dir), or the kubelet ignores it.
const registrationTimeout = 2 * time.Minute

// The checks below feed the plugin's /healthz, which the DaemonSet's
// liveness probe reads: a plugin that the kubelet does not use, or whose
// devices the cluster does not see, is restarted rather than left running
// as if all were well.

// observeRegistration is a gRPC interceptor on the plugin's servers that
// records the kubelet's registration status. The helper's own
// RegistrationStatus reads it without a lock; this records it under d.mu.
func (d *Driver) observeRegistration(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if status, ok := req.(*registerapi.RegistrationStatus); ok && info.FullMethod == registerapi.Registration_NotifyRegistrationStatus_FullMethodName {
		d.mu.Lock()
		d.registration = status
		d.mu.Unlock()
	}
	return handler(ctx, req)
}

// CheckRegistration returns why the kubelet does not use the plugin: it
// refused the registration, or has not registered it within
// registrationTimeout of the start. Nil when registered, or when it still
// may be.
func (d *Driver) CheckRegistration() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.registration != nil && !d.registration.PluginRegistered:
		return fmt.Errorf("the kubelet refused the registration: %s", d.registration.Error)
	case d.registration != nil, d.started.IsZero():
		return nil
	case d.cfg.Clock.Since(d.started) > registrationTimeout:
		return fmt.Errorf("the kubelet has not registered the plugin %s after the start; is %s its plugin registry?",
			d.cfg.Clock.Since(d.started).Truncate(time.Second), d.cfg.RegistrarDir)
	}
	return nil
}

// CheckPublishing returns the last error reported by the ResourceSlice
// controller (or about stale health reports) while it is recent: less than
// two rescans old. The device loop republishes on every rescan while it is
// (see rescan), so an error that persists is reported again before it gets
// old, and one that is gone stops being reported.
func (d *Driver) CheckPublishing() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.backgroundErr == nil || d.cfg.Clock.Since(d.backgroundErrAt) >= 2*d.cfg.RescanInterval {
		return nil
	}
	return fmt.Errorf("%s ago: %w", d.cfg.Clock.Since(d.backgroundErrAt).Truncate(time.Second), d.backgroundErr)
}
