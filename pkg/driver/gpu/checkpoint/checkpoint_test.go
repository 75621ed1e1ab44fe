package checkpoint

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// checkpointBuilder builds checkpoints for tests.
type checkpointBuilder struct{ cp *Checkpoint }

func makeCheckpoint(bootID string) *checkpointBuilder {
	return &checkpointBuilder{cp: New(bootID)}
}

func (b *checkpointBuilder) claim(uid string, state State, devices ...string) *checkpointBuilder {
	c := &Claim{State: state, Namespace: "default", Name: "claim-" + uid, CDISpecName: "gpu.drasched.dev-gpu_" + uid + ".json"}
	for _, d := range devices {
		c.Devices = append(c.Devices, Device{
			Requests: []string{"gpu"}, Pool: "node-1", Device: d,
			Hardware:     []string{"GPU-" + d},
			CDIDeviceIDs: []string{"gpu.drasched.dev/gpu=" + uid},
			Config:       json.RawMessage(`{"sharing":{"strategy":"TimeSlicing"}}`),
		})
	}
	b.cp.Claims[uid] = c
	return b
}

func (b *checkpointBuilder) obj() *Checkpoint { return b.cp }

func setup(t *testing.T) File {
	t.Helper()
	return File{Path: filepath.Join(t.TempDir(), "checkpoint.json")}
}

func TestRoundTrip(t *testing.T) {
	tests := map[string]*Checkpoint{
		"empty":    makeCheckpoint("boot-1").obj(),
		"prepared": makeCheckpoint("boot-1").claim("uid-1", PrepareCompleted, "gpu-0", "gpu-1").claim("uid-2", PrepareStarted, "gpu-2").obj(),
	}
	for name, want := range tests {
		t.Run(name, func(t *testing.T) {
			f := setup(t)
			if err := f.Store(want); err != nil {
				t.Fatalf("Store: %v", err)
			}
			got, err := f.Load()
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("loaded checkpoint (-stored +loaded):\n%s", diff)
			}
			entries, err := os.ReadDir(filepath.Dir(f.Path))
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 1 {
				t.Errorf("directory holds %d files after Store, want only the checkpoint", len(entries))
			}
		})
	}
}

// TestFormatIsStable pins the on-disk format of version v1: changing it
// needs a new version and a migration, or restarted drivers cannot read the
// checkpoints of running ones. The device's hardware keys are a MIG
// device's as this version writes them; the version before memory slices
// were keys wrote the same fields.
func TestFormatIsStable(t *testing.T) {
	cp := makeCheckpoint("b").claim("u", PrepareCompleted, "gpu-0-mig-0").obj()
	cp.Claims["u"].Devices[0].Hardware = []string{"MIG-0", "GPU-0/memory-slice-0"}
	raw, err := Marshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	// The checksum is SHA-256 over the bytes of "data" exactly as stored.
	const want = `{"version":"v1","checksum":"sha256:932a51a0b39042c900245149cda28fd3b6756ab63b87f50596129e96f2c8e46f","data":{"bootID":"b","claims":{"u":{"state":"PrepareCompleted","namespace":"default","name":"claim-u","devices":[{"requests":["gpu"],"pool":"node-1","device":"gpu-0-mig-0","uuids":["MIG-0","GPU-0/memory-slice-0"],"cdiDeviceIDs":["gpu.drasched.dev/gpu=u"],"config":{"sharing":{"strategy":"TimeSlicing"}}}],"cdiSpecName":"gpu.drasched.dev-gpu_u.json"}}}}`
	if diff := cmp.Diff(want, string(raw)); diff != "" {
		t.Errorf("format changed (-want +got):\n%s", diff)
	}
	if _, err := Unmarshal([]byte(want)); err != nil {
		t.Errorf("the pinned v1 checkpoint no longer loads: %v", err)
	}
}

func TestLoadMissingFile(t *testing.T) {
	got, err := setup(t).Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if diff := cmp.Diff(New(""), got); diff != "" {
		t.Errorf("checkpoint of a missing file (-want +got):\n%s", diff)
	}
}

// TestLoadDamaged: damaged checkpoints give an error of the right kind and
// stay on disk as they were, for an operator to inspect.
func TestLoadDamaged(t *testing.T) {
	good, err := Marshal(makeCheckpoint("boot-1").claim("uid-1", PrepareCompleted, "gpu-0").obj())
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		content []byte
		wantErr error
	}{
		"truncated":         {content: good[:len(good)/2], wantErr: ErrCorrupt},
		"empty":             {content: nil, wantErr: ErrCorrupt},
		"not JSON":          {content: []byte("\x00\x00\x00"), wantErr: ErrCorrupt},
		"payload edited":    {content: []byte(strings.Replace(string(good), "gpu-0", "gpu-1", 1)), wantErr: ErrChecksumMismatch},
		"checksum edited":   {content: []byte(strings.Replace(string(good), "sha256:", "sha256:00", 1)), wantErr: ErrChecksumMismatch},
		"newer version":     {content: []byte(strings.Replace(string(good), `"version":"v1"`, `"version":"v2"`, 1)), wantErr: ErrUnsupportedVersion},
		"trailing garbage":  {content: append(append([]byte{}, good...), []byte(`{}`)...), wantErr: ErrCorrupt},
		"no checksum":       {content: []byte(`{"version":"v1","data":{"bootID":"b","claims":{}}}`), wantErr: ErrCorrupt},
		"unknown field":     {content: []byte(`{"version":"v1","checksum":"x","data":{},"extra":1}`), wantErr: ErrCorrupt},
		"claim state wrong": {content: mustMarshal(t, makeCheckpoint("b").claim("u", "Half").obj()), wantErr: ErrCorrupt},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := setup(t)
			if err := os.WriteFile(f.Path, tc.content, 0o600); err != nil {
				t.Fatal(err)
			}
			cp, err := f.Load()
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("Load: got %v (checkpoint %v), want an error wrapping %v", err, cp, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), f.Path) {
				t.Errorf("error %q does not name the file", err)
			}
			after, _ := os.ReadFile(f.Path)
			if string(after) != string(tc.content) {
				t.Errorf("Load changed the damaged file")
			}
		})
	}
}

func mustMarshal(t *testing.T, cp *Checkpoint) []byte {
	t.Helper()
	raw, err := Marshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestStoreReplacesAtomically(t *testing.T) {
	f := setup(t)
	if err := f.Store(makeCheckpoint("boot-1").claim("uid-1", PrepareStarted).obj()); err != nil {
		t.Fatal(err)
	}
	want := makeCheckpoint("boot-1").claim("uid-1", PrepareCompleted).obj()
	if err := f.Store(want); err != nil {
		t.Fatal(err)
	}
	got, err := f.Load()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("checkpoint after the second Store (-want +got):\n%s", diff)
	}

	// A directory that cannot be written: Store fails and the old
	// checkpoint stays.
	if os.Geteuid() != 0 {
		dir := filepath.Dir(f.Path)
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
		if err := f.Store(New("boot-2")); err == nil {
			t.Errorf("Store into a read-only directory succeeded")
		}
		if got, err := f.Load(); err != nil || got.BootID != "boot-1" {
			t.Errorf("after a failed Store: %v, %v; want the previous checkpoint", got, err)
		}
	}
}

func TestReadBootID(t *testing.T) {
	dir := t.TempDir()
	tests := map[string]struct {
		content string
		want    string
		wantErr bool
	}{
		"kernel format": {content: "6a0a3b1e-3a0f-4f6e-9a4e-1c2b3d4e5f60\n", want: "6a0a3b1e-3a0f-4f6e-9a4e-1c2b3d4e5f60"},
		"empty":         {content: "\n", wantErr: true},
		"too long":      {content: strings.Repeat("x", 100), wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := ReadBootID(path)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("ReadBootID = %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
