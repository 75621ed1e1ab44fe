package gpu

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/drasched/drasched/pkg/driver/gpu/checkpoint"
)

// TestCrashRecovery restarts the driver on states a crash or a reboot can
// leave behind, and on damaged checkpoints.
func TestCrashRecovery(t *testing.T) {
	kept := newClaim("kept").Allocated("gpu", DefaultDriverName, testNode, "gpu-6").Obj()
	crashed := newClaim("crashed").Allocated("gpu", DefaultDriverName, testNode, "gpu-7").Obj()
	checkpointPath := func(env *testEnv) string { return filepath.Join(env.cfg.StateDir, checkpointFileName) }
	// markStarted turns a prepared claim back into one whose prepare
	// never finished, as if the plugin died between the two checkpoint
	// writes.
	markStarted := func(t *testing.T, env *testEnv, claim *resourceapi.ResourceClaim, keepSpec bool) {
		t.Helper()
		f := checkpoint.File{Path: checkpointPath(env)}
		cp, err := f.Load()
		if err != nil {
			t.Fatal(err)
		}
		cp.Claims[string(claim.UID)].State = checkpoint.PrepareStarted
		if err := f.Store(cp); err != nil {
			t.Fatal(err)
		}
		if !keepSpec {
			if err := os.Remove(env.driver.cdi.SpecPath(string(claim.UID))); err != nil {
				t.Fatal(err)
			}
		}
	}
	damage := func(edit func([]byte) []byte) func(t *testing.T, env *testEnv) {
		return func(t *testing.T, env *testEnv) {
			raw, err := os.ReadFile(checkpointPath(env))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(checkpointPath(env), edit(raw), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := map[string]struct {
		crash      func(t *testing.T, env *testEnv)
		wantErr    error
		wantClaims []string
	}{
		"clean restart keeps prepared claims": {
			crash:      func(t *testing.T, env *testEnv) {},
			wantClaims: []string{"crashed", "kept"},
		},
		"PrepareStarted with its CDI spec is rolled back": {
			crash:      func(t *testing.T, env *testEnv) { markStarted(t, env, crashed, true) },
			wantClaims: []string{"kept"},
		},
		"PrepareStarted before the CDI spec was written is rolled back": {
			crash:      func(t *testing.T, env *testEnv) { markStarted(t, env, crashed, false) },
			wantClaims: []string{"kept"},
		},
		"a reboot forgets every claim": {
			crash: func(t *testing.T, env *testEnv) {
				if err := os.WriteFile(env.cfg.BootIDPath, []byte("a-new-boot\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			wantClaims: nil,
		},
		"truncated checkpoint": {
			crash:   damage(func(raw []byte) []byte { return raw[:len(raw)-10] }),
			wantErr: checkpoint.ErrCorrupt,
		},
		"checksum mismatch": {
			crash:   damage(func(raw []byte) []byte { return bytes.Replace(raw, []byte(`"gpu-6"`), []byte(`"gpu-5"`), 1) }),
			wantErr: checkpoint.ErrChecksumMismatch,
		},
		"checkpoint from a newer driver": {
			crash:   damage(func(raw []byte) []byte { return []byte(`{"version":"v9","checksum":"sha256:0","data":{}}`) }),
			wantErr: checkpoint.ErrUnsupportedVersion,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			env := setup(t, envOptions{noRun: true})
			first, err := env.driver.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{kept, crashed})
			if err != nil || first[kept.UID].Err != nil || first[crashed.UID].Err != nil {
				t.Fatalf("prepare: %v, %v", first, err)
			}
			tc.crash(t, env)
			before, _ := os.ReadFile(checkpointPath(env))

			restarted, err := New(ctx, env.cfg)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("restart: error %v, want %v", err, tc.wantErr)
				}
				after, _ := os.ReadFile(checkpointPath(env))
				if string(after) != string(before) {
					t.Errorf("restart changed the damaged checkpoint; it must stay for inspection")
				}
				return
			}
			if err != nil {
				t.Fatalf("restart: %v", err)
			}
			cp := env.loadCheckpoint(t)
			var names []string
			for _, c := range cp.Claims {
				if c.State != checkpoint.PrepareCompleted {
					t.Errorf("claim %s still in %s", c.Name, c.State)
				}
				names = append(names, c.Name)
			}
			sort.Strings(names)
			if diff := cmp.Diff(tc.wantClaims, names); diff != "" {
				t.Errorf("claims after restart (-want +got):\n%s", diff)
			}
			if specs := env.cdiSpecs(t); len(specs) != len(tc.wantClaims) {
				t.Errorf("%d CDI specs after restart, want %d: %v", len(specs), len(tc.wantClaims), specs)
			}
			if cp.BootID == "" {
				t.Error("checkpoint has no boot ID")
			}

			// Every claim prepares again: kept ones return the same
			// result, rolled-back ones are prepared anew.
			again, err := restarted.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{kept, crashed})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []*resourceapi.ResourceClaim{kept, crashed} {
				if again[c.UID].Err != nil {
					t.Errorf("prepare %s after restart: %v", c.Name, again[c.UID].Err)
				}
				if diff := cmp.Diff(first[c.UID].Devices, again[c.UID].Devices); diff != "" {
					t.Errorf("devices of %s after restart (-before +after):\n%s", c.Name, diff)
				}
			}
		})
	}
}

// TestRollBackDuringCall: another plugin process died while preparing; the
// next call of this one, which holds the lock, rolls its claim back first.
func TestRollBackDuringCall(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	orphan := newClaim("orphan").Allocated("gpu", DefaultDriverName, testNode, "gpu-7").Obj()
	next := newClaim("next").Allocated("gpu", DefaultDriverName, testNode, "gpu-7").Obj()
	env := setup(t, envOptions{noRun: true})
	if res, err := env.driver.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{orphan}); err != nil || res[orphan.UID].Err != nil {
		t.Fatalf("prepare: %v %v", res, err)
	}
	f := checkpoint.File{Path: filepath.Join(env.cfg.StateDir, checkpointFileName)}
	cp, err := f.Load()
	if err != nil {
		t.Fatal(err)
	}
	cp.Claims[string(orphan.UID)].State = checkpoint.PrepareStarted
	if err := f.Store(cp); err != nil {
		t.Fatal(err)
	}

	res, err := env.driver.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{next})
	if err != nil || res[next.UID].Err != nil {
		t.Fatalf("prepare after the orphan: %v %v", res, err)
	}
	cp = env.loadCheckpoint(t)
	if _, ok := cp.Claims[string(orphan.UID)]; ok {
		t.Error("the interrupted claim is still in the checkpoint")
	}
	if _, err := os.Stat(env.driver.cdi.SpecPath(string(orphan.UID))); !os.IsNotExist(err) {
		t.Errorf("the interrupted claim's CDI spec is still there: %v", err)
	}
}
