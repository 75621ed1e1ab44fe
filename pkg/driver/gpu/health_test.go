package gpu

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2/ktesting"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"

	"github.com/drasched/drasched/pkg/driver/gpu/device"
	"github.com/drasched/drasched/pkg/driver/gpu/discovery"
)

// healthStream reads the kubelet's health stream in the background.
func healthStream(t *testing.T, env *testEnv) <-chan *drahealthv1.NodeWatchResourcesResponse {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	stream, err := env.health.NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
	if err != nil {
		t.Fatalf("NodeWatchResources: %v", err)
	}
	ch := make(chan *drahealthv1.NodeWatchResourcesResponse, 100)
	go func() {
		defer close(ch)
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			ch <- resp
		}
	}()
	return ch
}

// waitForReport reads reports until one satisfies want.
func waitForReport(t *testing.T, reports <-chan *drahealthv1.NodeWatchResourcesResponse, what string, want func(map[string]*drahealthv1.DeviceHealth) bool) map[string]*drahealthv1.DeviceHealth {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case resp, ok := <-reports:
			if !ok {
				t.Fatalf("health stream ended while waiting for %s", what)
			}
			byName := map[string]*drahealthv1.DeviceHealth{}
			for _, d := range resp.Devices {
				byName[d.Device.DeviceName] = d
			}
			if want(byName) {
				return byName
			}
		case <-timeout:
			t.Fatalf("timed out waiting for a health report with %s", what)
		}
	}
}

func taintsOf(slices []resourceapi.ResourceSlice, deviceName string) ([]resourceapi.DeviceTaint, bool) {
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			if d.Name == deviceName {
				return d.Taints, true
			}
		}
	}
	return nil, false
}

// TestHealthTaintAndRecovery: a device turning unhealthy is reported to the
// kubelet and tainted in its ResourceSlice; when it recovers, both go back.
func TestHealthTaintAndRecovery(t *testing.T) {
	env := setup(t, envOptions{inventory: "l40s-4.yaml"})
	l40s := loadInventory(t, "l40s-4.yaml")
	reports := healthStream(t, env)

	waitForReport(t, reports, "4 healthy devices", func(h map[string]*drahealthv1.DeviceHealth) bool {
		if len(h) != 4 {
			return false
		}
		for _, d := range h {
			if d.Health != drahealthv1.HealthStatus_HEALTHY || d.HealthCheckTimeoutSeconds != 3 {
				return false
			}
		}
		return true
	})
	waitFor(t, "published slices", func() (bool, string) {
		_, ok := taintsOf(env.publishedSlices(t), "gpu-2")
		return ok, "gpu-2 not published"
	})

	env.editInventory(t, markUnhealthy(l40s[2].UUID, "XidError79"))
	got := waitForReport(t, reports, "gpu-2 unhealthy", func(h map[string]*drahealthv1.DeviceHealth) bool {
		return h["gpu-2"] != nil && h["gpu-2"].Health == drahealthv1.HealthStatus_UNHEALTHY
	})
	if msg := got["gpu-2"].Message; !strings.Contains(msg, "XidError79: injected by the test") {
		t.Errorf("health message %q does not carry the reason", msg)
	}
	if got["gpu-1"].Health != drahealthv1.HealthStatus_HEALTHY {
		t.Errorf("gpu-1 became %v, want healthy", got["gpu-1"].Health)
	}
	wantTaint := []resourceapi.DeviceTaint{{Key: "gpu.drasched.dev/unhealthy", Value: "XidError79", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	waitFor(t, "the unhealthy taint", func() (bool, string) {
		taints, _ := taintsOf(env.publishedSlices(t), "gpu-2")
		for i := range taints {
			taints[i].TimeAdded = nil // set by the apiserver
		}
		diff := cmp.Diff(wantTaint, taints)
		return diff == "", diff
	})
	if v, _ := testutil.GetGaugeMetricValue(unhealthyDevices); v != 1 {
		t.Errorf("unhealthy_devices = %v, want 1", v)
	}

	// Recovery: NVIDIA's driver leaves its taints; this one removes them.
	env.editInventory(t, func(s string) string {
		return strings.Replace(s, "  health: {status: Unhealthy, reason: XidError79, message: injected by the test}\n", "", 1)
	})
	waitForReport(t, reports, "gpu-2 healthy again", func(h map[string]*drahealthv1.DeviceHealth) bool {
		return h["gpu-2"] != nil && h["gpu-2"].Health == drahealthv1.HealthStatus_HEALTHY
	})
	waitFor(t, "the taint to go", func() (bool, string) {
		taints, ok := taintsOf(env.publishedSlices(t), "gpu-2")
		return ok && len(taints) == 0, "taints still there"
	})
}

// TestDevicesAppearAndDisappear: editing the inventory republishes without
// a restart, and a GPU taken out of the file goes at once: the inventory
// is Declared, so no grace period keeps it (see TestDiscoveryFailsClosed).
func TestDevicesAppearAndDisappear(t *testing.T) {
	env := setup(t, envOptions{inventory: "l40s-4.yaml"})
	published := func() []string {
		var names []string
		for _, s := range env.publishedSlices(t) {
			for _, d := range s.Spec.Devices {
				names = append(names, d.Name)
			}
		}
		slices.Sort(names)
		return names
	}
	waitFor(t, "initial devices", func() (bool, string) {
		diff := cmp.Diff([]string{"gpu-0", "gpu-1", "gpu-2", "gpu-3"}, published())
		return diff == "", diff
	})
	// GPU 3 goes (e.g. taken out for repair), GPU 4 arrives.
	l40s := loadInventory(t, "l40s-4.yaml")
	env.editInventory(t, func(s string) string {
		s = strings.Replace(s, "- index: 3\n", "- index: 4\n", 1)
		s = strings.Replace(s, l40s[3].UUID, "GPU-0badc0de-0000-4000-8000-000000000004", 1)
		return strings.Replace(s, "0000:c1:00.0", "0000:e1:00.0", 1)
	})
	waitFor(t, "changed devices", func() (bool, string) {
		diff := cmp.Diff([]string{"gpu-0", "gpu-1", "gpu-2", "gpu-4"}, published())
		return diff == "", diff
	})
}

// TestChangeBeforeWatch: an inventory edited after the discovery at start
// and before the plugin watches the file is seen without waiting for the
// periodic rescan (an hour in these tests). The edit is made by the first
// discovery itself, right after it read the file, so it always falls in
// that window.
func TestChangeBeforeWatch(t *testing.T) {
	env := setup(t, envOptions{inventory: "l40s-4.yaml", discoverer: func(d discovery.Discoverer) discovery.Discoverer {
		file := &testEnv{inventory: d.(*discovery.Inventory).Path}
		return &editAfterFirst{Discoverer: d, edit: func() {
			file.editInventory(t, func(s string) string { return strings.Replace(s, "- index: 3\n", "- index: 4\n", 1) })
		}}
	}})
	waitFor(t, "the device edited before the watch", func() (bool, string) {
		var names []string
		for _, s := range env.publishedSlices(t) {
			for _, d := range s.Spec.Devices {
				names = append(names, d.Name)
			}
		}
		slices.Sort(names)
		diff := cmp.Diff([]string{"gpu-0", "gpu-1", "gpu-2", "gpu-4"}, names)
		return diff == "", diff
	})
}

// editAfterFirst runs edit once, after the first discovery returned what
// it read.
type editAfterFirst struct {
	discovery.Discoverer
	once sync.Once
	edit func()
}

func (e *editAfterFirst) Discover(ctx context.Context) ([]device.GPU, error) {
	gpus, err := e.Discoverer.Discover(ctx)
	e.once.Do(e.edit)
	return gpus, err
}

// TestBrokenInventoryKeepsDevices: a rescan of a broken inventory publishes
// nothing, reports health as unknown, and recovers once the file is fixed.
func TestBrokenInventoryKeepsDevices(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	env := setup(t, envOptions{inventory: "l40s-4.yaml", noRun: true})
	pub := &recordingPublisher{}
	raw, err := os.ReadFile(env.inventory)
	if err != nil {
		t.Fatal(err)
	}
	good := string(raw)
	errorsBefore, _ := testutil.GetCounterMetricValue(discoveryErrors)

	writeFile(t, env.inventory, []byte(good[:len(good)/3]))
	env.driver.rescan(ctx, pub)
	if _, n := pub.last(); n != 0 {
		t.Errorf("a broken inventory was published")
	}
	report := env.driver.healthReport()
	if len(report.Devices) != 4 {
		t.Fatalf("health report covers %d devices, want the 4 still published", len(report.Devices))
	}
	for _, d := range report.Devices {
		if d.Health != kubeletplugin.HealthStatusUnknown || !strings.Contains(d.Message, "device discovery fails") {
			t.Errorf("%s: health %s (%q), want Unknown with the discovery error", d.DeviceName, d.Health, d.Message)
		}
	}
	if v, _ := testutil.GetCounterMetricValue(discoveryErrors); v != errorsBefore+1 {
		t.Errorf("discovery_errors_total grew by %v, want 1", v-errorsBefore)
	}

	writeFile(t, env.inventory, []byte(good))
	env.driver.rescan(ctx, pub)
	if _, n := pub.last(); n != 0 {
		t.Errorf("republished although the devices did not change")
	}
	for _, d := range env.driver.healthReport().Devices {
		if d.Health != kubeletplugin.HealthStatusHealthy {
			t.Errorf("%s: health %s after the fix", d.DeviceName, d.Health)
		}
	}
}

// TestHealthResend: without changes, reports keep coming three times per
// health check timeout, so the kubelet never marks devices unknown.
func TestHealthResend(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	env := setup(t, envOptions{inventory: "l40s-4.yaml", noRun: true})
	env.driver.cfg.HealthCheckTimeout = 150 * time.Millisecond
	ctx, cancel := context.WithCancel(ctx)
	reports := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error)
	go func() { done <- env.driver.WatchHealthStatus(ctx, reports) }()
	for i := range 4 {
		r := <-reports
		if len(r.Devices) != 4 || r.Devices[0].HealthCheckTimeout != 150*time.Millisecond {
			t.Errorf("report %d: %+v", i, r)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("WatchHealthStatus returned %v after cancellation, want nil", err)
	}
}

// TestDroppedFields: when the apiserver drops counters or taints, the
// driver stops publishing what the cluster cannot enforce.
func TestDroppedFields(t *testing.T) {
	a100 := loadInventory(t, "a100-mig-8.yaml")
	migName := a100[0].MIGName(&a100[0].MIG[0])
	desired, err := BuildResourceSlices(SliceOptions{NodeName: testNode}, a100)
	if err != nil {
		t.Fatal(err)
	}
	countersDropped := desired[0].DeepCopy()
	countersDropped.Spec.SharedCounters = nil
	tests := map[string]struct {
		err           error
		unhealthy     bool
		wantPublished func(names []string) string
	}{
		"counters dropped: MIG devices are left out": {
			err: &resourceslice.DroppedFieldsError{PoolName: testNode, DesiredSlice: desired[0], ActualSlice: countersDropped},
			wantPublished: func(names []string) string {
				if slices.Contains(names, migName) || !slices.Contains(names, "gpu-0") {
					return "want whole GPUs only, got " + strings.Join(names, ",")
				}
				return ""
			},
		},
		"taints dropped: unhealthy devices are left out": {
			err: func() error {
				d := desired[1].DeepCopy()
				d.Spec.Devices[6].Taints = []resourceapi.DeviceTaint{{Key: "k", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
				return &resourceslice.DroppedFieldsError{PoolName: testNode, DesiredSlice: d, ActualSlice: desired[1]}
			}(),
			unhealthy: true,
			wantPublished: func(names []string) string {
				if slices.Contains(names, "gpu-6") || !slices.Contains(names, "gpu-7") {
					return "want gpu-6 left out, got " + strings.Join(names, ",")
				}
				return ""
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			env := setup(t, envOptions{noRun: true})
			if tc.unhealthy {
				env.editInventory(t, markUnhealthy(a100[6].UUID, "GPULost"))
				env.driver.rescan(ctx, &recordingPublisher{})
			}
			env.driver.HandleError(ctx, tc.err, "publishing")
			select {
			case <-env.driver.resync:
			default:
				t.Fatal("HandleError did not ask for a republish")
			}
			pub := &recordingPublisher{}
			if err := env.driver.publish(ctx, pub); err != nil {
				t.Fatal(err)
			}
			last, _ := pub.last()
			if problem := tc.wantPublished(deviceNames(last)); problem != "" {
				t.Error(problem)
			}
		})
	}
}

// TestFatalErrorStopsRun: a non-recoverable error reported by the helper
// ends Run with that error, so that the pod restarts.
func TestFatalErrorStopsRun(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	_, cfg := setupDirs(t, "l40s-4.yaml")
	cfg.KubeClient = newFakeClient()
	d, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- d.Run(ctx) }()
	waitFor(t, "the slices", func() (bool, string) {
		list, err := cfg.KubeClient.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) > 0, "no slices yet"
	})
	d.HandleError(ctx, kubeletplugin.ErrRecoverable, "recoverable")
	select {
	case err := <-done:
		t.Fatalf("Run ended after a recoverable error: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	boom := errors.New("registration failed for good")
	d.HandleError(ctx, boom, "registrar")
	if err := <-done; !errors.Is(err, boom) {
		t.Errorf("Run returned %v, want the fatal error", err)
	}
}

func TestHealthReportOfMIGParent(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	env := setup(t, envOptions{noRun: true})
	gpus, _ := env.driver.devices()
	changed := append([]device.GPU(nil), gpus...)
	changed[0].Health = device.Health{Status: device.Unhealthy, Reason: "GPULost", Message: "fell off the bus"}
	env.driver.setDevices(ctx, changed, nil)
	unhealthy := 0
	for _, d := range env.driver.healthReport().Devices {
		if d.Health == kubeletplugin.HealthStatusUnhealthy {
			unhealthy++
			if !strings.HasPrefix(d.DeviceName, "gpu-0") {
				t.Errorf("%s unhealthy, only GPU 0 and its MIG devices should be", d.DeviceName)
			}
		}
	}
	if unhealthy != 8 {
		t.Errorf("%d unhealthy devices, want 8 (GPU 0 and its 7 MIG devices)", unhealthy)
	}
}
