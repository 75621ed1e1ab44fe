package gpu

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/drasched/drasched/pkg/driver/gpu/discovery"
)

// swappableRunner is an nvidia-smi whose behaviour a test changes between
// rescans, as a GPU host's changes between two runs.
type swappableRunner struct {
	mu     sync.Mutex
	runner discovery.Runner
}

func (s *swappableRunner) set(r discovery.Runner) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runner = r
}

func (s *swappableRunner) get() discovery.Runner {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runner
}

func (s *swappableRunner) Run(ctx context.Context, args ...string) ([]byte, error) {
	return s.get().Run(ctx, args...)
}

// ReadProcFile serves the /proc files of a recording; a live runner has
// none, like a host whose driver lost them.
func (s *swappableRunner) ReadProcFile(name string) ([]byte, error) {
	if files, ok := s.get().(discovery.ProcFiles); ok {
		return files.ReadProcFile(name)
	}
	return nil, fmt.Errorf("%s: %w", name, fs.ErrNotExist)
}

// failingRunner is nvidia-smi exiting with an error, as ExecRunner reports
// it.
type failingRunner struct {
	code   int
	output string
}

func (f failingRunner) Run(_ context.Context, args ...string) ([]byte, error) {
	return nil, &discovery.ExitError{Args: args, Code: f.code, Output: []byte(f.output)}
}

func loadRecording(t *testing.T, name string) *discovery.Recording {
	t.Helper()
	rec, err := discovery.LoadRecording(filepath.Join("discovery", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// unhealthyTaints returns the unhealthy taint of each device that has one.
func unhealthyTaints(r resourceslice.DriverResources) map[string]string {
	out := map[string]string{}
	for _, pool := range r.Pools {
		for _, s := range pool.Slices {
			for _, d := range s.Devices {
				for _, taint := range d.Taints {
					if taint.Key == DefaultDriverName+UnhealthyTaintSuffix && taint.Effect == resourceapi.DeviceTaintEffectNoSchedule {
						out[d.Name] = taint.Value
					}
				}
			}
		}
	}
	return out
}

// TestDiscoveryFailsClosed: when nvidia-smi fails, hangs, or stops listing
// a GPU, the devices it no longer confirms stay published as they were for
// the grace period, are tainted unhealthy after it, and lose the taint when
// discovery sees them healthy again.
func TestDiscoveryFailsClosed(t *testing.T) {
	hang := filepath.Join(t.TempDir(), "nvidia-smi")
	if err := os.WriteFile(hang, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	allFour := []string{"gpu-0", "gpu-1", "gpu-2", "gpu-3"}
	tests := map[string]struct {
		broken      discovery.Runner
		wantTainted []string
		wantReason  string
		wantHealth  map[string]kubeletplugin.HealthStatus // within the grace period
	}{
		"nvidia-smi exits with an error": {
			broken:      failingRunner{code: 255, output: "Unable to determine the device handle for GPU0000:81:00.0: Unknown Error\n"},
			wantTainted: allFour,
			wantReason:  ReasonDiscoveryFailing,
		},
		"nvidia-smi hangs and is killed": {
			broken:      discovery.ExecRunner{Path: hang, Timeout: 50 * time.Millisecond},
			wantTainted: allFour,
			wantReason:  ReasonDiscoveryFailing,
		},
		"a GPU fell off the bus": {
			broken:      loadRecording(t, "nvidia-smi-l40s-4-gpu-lost.txt"),
			wantTainted: []string{"gpu-2"},
			wantReason:  ReasonNotDiscovered,
			wantHealth: map[string]kubeletplugin.HealthStatus{
				"gpu-0": kubeletplugin.HealthStatusHealthy,
				"gpu-2": kubeletplugin.HealthStatusUnknown,
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			RegisterMetrics()
			_, ctx := ktesting.NewTestContext(t)
			good := loadRecording(t, "nvidia-smi-l40s-4.txt")
			runner := &swappableRunner{runner: good}
			fakeClock := testingclock.NewFakeClock(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
			_, cfg := setupDirs(t, "l40s-4.yaml")
			cfg.Discoverer = &discovery.NvidiaSMI{Runner: runner, SysfsRoot: t.TempDir()}
			cfg.Clock = fakeClock
			cfg.RescanInterval = 30 * time.Second
			cfg.DiscoveryGracePeriod = time.Minute
			d, err := New(ctx, cfg)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			pub := &recordingPublisher{}
			if err := d.publish(ctx, pub); err != nil {
				t.Fatal(err)
			}

			// One rescan into the grace period: nothing changes in
			// the slices.
			runner.set(tc.broken)
			fakeClock.Step(30 * time.Second)
			d.rescan(ctx, pub)
			last, published := pub.last()
			if taints := unhealthyTaints(last); published != 1 || len(taints) != 0 {
				t.Errorf("within the grace period: %d publications, taints %v; want the first one only, untainted", published, taints)
			}
			for name, want := range tc.wantHealth {
				if got := healthOf(d, name); got != want {
					t.Errorf("within the grace period: %s reported %s, want %s", name, got, want)
				}
			}

			// The grace period is over: the devices discovery does not
			// confirm are tainted, and reported unhealthy.
			fakeClock.Step(30 * time.Second)
			d.rescan(ctx, pub)
			last, _ = pub.last()
			want := map[string]string{}
			for _, name := range tc.wantTainted {
				want[name] = tc.wantReason
			}
			if diff := cmp.Diff(want, unhealthyTaints(last)); diff != "" {
				t.Errorf("taints after the grace period (-want +got):\n%s", diff)
			}
			if names := deviceNames(last); len(names) != 4 {
				t.Errorf("published %v after the grace period, want all four GPUs (tainted or not)", names)
			}
			for _, name := range tc.wantTainted {
				if got := healthOf(d, name); got != kubeletplugin.HealthStatusUnhealthy {
					t.Errorf("after the grace period: %s reported %s, want Unhealthy", name, got)
				}
			}
			if v, _ := testutil.GetGaugeMetricValue(unhealthyDevices); v != float64(len(tc.wantTainted)) {
				t.Errorf("unhealthy_devices = %v, want %d", v, len(tc.wantTainted))
			}

			// Discovery sees them healthy again: the taints go.
			runner.set(good)
			fakeClock.Step(30 * time.Second)
			d.rescan(ctx, pub)
			last, _ = pub.last()
			if taints := unhealthyTaints(last); len(taints) != 0 || len(deviceNames(last)) != 4 {
				t.Errorf("after recovery: taints %v on %v, want four untainted devices", taints, deviceNames(last))
			}
			for _, h := range d.healthReport().Devices {
				if h.Health != kubeletplugin.HealthStatusHealthy {
					t.Errorf("after recovery: %s reported %s (%s)", h.DeviceName, h.Health, h.Message)
				}
			}
		})
	}
}

func healthOf(d *Driver, name string) kubeletplugin.HealthStatus {
	for _, h := range d.healthReport().Devices {
		if h.DeviceName == name {
			return h.Health
		}
	}
	return ""
}
