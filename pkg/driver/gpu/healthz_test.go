package gpu

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	testingclock "k8s.io/utils/clock/testing"
)

// TestCheckRegistration talks to the plugin's registration socket as the
// kubelet's plugin watcher does: /healthz's registration check follows
// what the kubelet says, and fails when it says nothing for too long.
func TestCheckRegistration(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fakeClock := testingclock.NewFakeClock(time.Now())
	env := setup(t, envOptions{inventory: "l40s-4.yaml", clock: fakeClock})
	if err := env.driver.CheckRegistration(); err != nil {
		t.Errorf("just started: %v, want no error while the kubelet may still register", err)
	}
	fakeClock.Step(registrationTimeout + time.Second)
	if err := env.driver.CheckRegistration(); err == nil || !strings.Contains(err.Error(), "has not registered") {
		t.Errorf("unregistered after %v: %v, want an error saying so", registrationTimeout, err)
	}

	if _, err := env.registrar.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: false, Error: "no supported version"}); err == nil {
		t.Error("NotifyRegistrationStatus with a refusal succeeded, want the helper's error")
	}
	if err := env.driver.CheckRegistration(); err == nil || !strings.Contains(err.Error(), "refused the registration: no supported version") {
		t.Errorf("refused: %v, want the kubelet's reason", err)
	}

	if _, err := env.registrar.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	if err := env.driver.CheckRegistration(); err != nil {
		t.Errorf("registered: %v", err)
	}
}

// TestCheckPublishing: a ResourceSlice error reported by the helper fails
// /healthz's publishing check; while it does, every rescan republishes
// (asking the controller to retry now), and two quiet rescan intervals end
// it.
func TestCheckPublishing(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fakeClock := testingclock.NewFakeClock(time.Now())
	env := setup(t, envOptions{inventory: "l40s-4.yaml", noRun: true, clock: fakeClock})
	d := env.driver
	pub := &recordingPublisher{}
	if err := d.CheckPublishing(); err != nil {
		t.Errorf("before any error: %v", err)
	}
	d.rescan(ctx, pub)
	if _, n := pub.last(); n != 0 {
		t.Fatalf("published %d times without a change or an error", n)
	}

	forbidden := fmt.Errorf(`resourceslices.resource.k8s.io is forbidden: %w`, kubeletplugin.ErrRecoverable)
	d.HandleError(ctx, forbidden, "processing ResourceSlice objects")
	if err := d.CheckPublishing(); err == nil || !strings.Contains(err.Error(), "processing ResourceSlice objects: resourceslices.resource.k8s.io is forbidden") {
		t.Errorf("after a publishing error: %v, want it", err)
	}
	fakeClock.Step(d.cfg.RescanInterval)
	d.rescan(ctx, pub)
	if _, n := pub.last(); n != 1 {
		t.Errorf("published %d times while publishing fails, want a retry at the rescan", n)
	}
	if err := d.CheckPublishing(); err == nil {
		t.Error("one rescan after the error: no error, want it until two rescans passed quietly")
	}

	fakeClock.Step(d.cfg.RescanInterval)
	if err := d.CheckPublishing(); err != nil {
		t.Errorf("two quiet rescan intervals after the error: %v", err)
	}
	d.rescan(ctx, pub)
	if _, n := pub.last(); n != 1 {
		t.Errorf("published %d times, want no retry once publishing works", n)
	}
}
