// Package checkpoint persists which claims the GPU driver has prepared, so
// that a restarted plugin neither forgets a prepared claim (and hands its
// GPUs to another one) nor keeps a half-prepared one.
//
// The file is versioned JSON with a SHA-256 checksum over its payload:
//
//	{"version":"v1","checksum":"sha256:<hex>","data":{"bootID":"...","claims":{...}}}
//
// It is written atomically (temporary file, fsync, rename, fsync of the
// directory), so a crash leaves either the old or the new content. A file
// that is nevertheless damaged, or written by a newer version, is reported as
// an error and left untouched: guessing would risk giving a GPU that is in
// use to a second workload.
package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Version is the schema version this package writes and reads. It changes
// with the fields, not with the kinds of key in Device.Hardware, as long as
// each driver's conflict check stays safe on the other's keys (see
// device.Ref.Hardware): after a rollback, the previous driver refuses to
// start on a file of a new version.
const Version = "v1"

// DefaultBootIDPath is where Linux publishes the ID of the current boot.
const DefaultBootIDPath = "/proc/sys/kernel/random/boot_id"

// maxFileSize bounds what Load reads; a node with hundreds of prepared
// claims needs a few hundred KiB.
const maxFileSize = 16 << 20

// Sentinel errors, for callers that branch on the kind of damage.
var (
	// ErrCorrupt means the file is not a checkpoint: truncated, not JSON,
	// or missing fields.
	ErrCorrupt = errors.New("checkpoint is corrupt")
	// ErrChecksumMismatch means the payload does not match its checksum.
	ErrChecksumMismatch = errors.New("checkpoint checksum mismatch")
	// ErrUnsupportedVersion means the file was written by another version
	// of the driver.
	ErrUnsupportedVersion = errors.New("checkpoint version not supported")
)

// State is the progress of preparing one claim.
type State string

const (
	// PrepareStarted is written before any side effect of Prepare. A claim
	// found in this state after a restart was interrupted and is rolled
	// back.
	PrepareStarted State = "PrepareStarted"
	// PrepareCompleted is written once the claim's CDI spec exists.
	PrepareCompleted State = "PrepareCompleted"
)

// Checkpoint is the persisted state of the driver on one node.
type Checkpoint struct {
	// BootID is the boot the claims were prepared in. Prepared state does
	// not survive a reboot.
	BootID string `json:"bootID"`
	// Claims maps claim UIDs to what was prepared for them.
	Claims map[string]*Claim `json:"claims"`
}

// Claim is one prepared (or being prepared) claim.
type Claim struct {
	State     State  `json:"state"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Devices lists the claim's devices of this driver, in the order
	// Prepare returned them.
	Devices []Device `json:"devices"`
	// CDISpecName is the file name of the claim's CDI spec.
	CDISpecName string `json:"cdiSpecName,omitempty"`
}

// Device is one prepared device.
type Device struct {
	Requests []string `json:"requests"`
	Pool     string   `json:"pool"`
	Device   string   `json:"device"`
	// Hardware lists the keys of the hardware the device occupies (see
	// device.Ref.Hardware). Prepare refuses a device whose hardware
	// overlaps what another claim holds. The JSON name is from when every
	// key was a UUID.
	Hardware     []string `json:"uuids"`
	CDIDeviceIDs []string `json:"cdiDeviceIDs"`
	// AdminAccess devices were allocated for monitoring or maintenance
	// next to the workloads that use them; they are never exclusive.
	AdminAccess bool `json:"adminAccess,omitempty"`
	// Config is the opaque configuration applied to the device, as
	// normalised JSON; empty when none.
	Config json.RawMessage `json:"config,omitempty"`
}

// New returns an empty checkpoint for a boot.
func New(bootID string) *Checkpoint {
	return &Checkpoint{BootID: bootID, Claims: map[string]*Claim{}}
}

type envelope struct {
	Version  string          `json:"version"`
	Checksum string          `json:"checksum"`
	Data     json.RawMessage `json:"data"`
}

// Marshal encodes a checkpoint with its version and checksum.
func Marshal(cp *Checkpoint) ([]byte, error) {
	data, err := json.Marshal(cp)
	if err != nil {
		return nil, fmt.Errorf("encode checkpoint: %w", err)
	}
	return json.Marshal(envelope{Version: Version, Checksum: checksum(data), Data: data})
}

// Unmarshal decodes and verifies a checkpoint.
func Unmarshal(raw []byte) (*Checkpoint, error) {
	var env envelope
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: data after the checkpoint", ErrCorrupt)
	}
	if env.Version != Version {
		return nil, fmt.Errorf("%w: %q (this driver reads %q)", ErrUnsupportedVersion, env.Version, Version)
	}
	if len(env.Data) == 0 || env.Checksum == "" {
		return nil, fmt.Errorf("%w: no data or no checksum", ErrCorrupt)
	}
	if got := checksum(env.Data); got != env.Checksum {
		return nil, fmt.Errorf("%w: file says %s, data has %s", ErrChecksumMismatch, env.Checksum, got)
	}
	var cp Checkpoint
	dec = json.NewDecoder(bytes.NewReader(env.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cp); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if cp.Claims == nil {
		cp.Claims = map[string]*Claim{}
	}
	for uid, claim := range cp.Claims {
		if claim == nil || (claim.State != PrepareStarted && claim.State != PrepareCompleted) {
			return nil, fmt.Errorf("%w: claim %s has no valid state", ErrCorrupt, uid)
		}
	}
	return &cp, nil
}

func checksum(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// File is a checkpoint file. It is not safe for concurrent use; the driver
// serialises access with a file lock (see package flock).
type File struct {
	// Path is the checkpoint file.
	Path string
}

// Load reads the checkpoint. A missing file is an empty checkpoint with an
// empty boot ID; any other problem is an error and the file is left as it
// is.
func (f File) Load() (*Checkpoint, error) {
	file, err := os.Open(f.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return New(""), nil
	}
	if err != nil {
		return nil, fmt.Errorf("open checkpoint: %w", err)
	}
	defer func() { _ = file.Close() }() // read-only
	raw, err := io.ReadAll(io.LimitReader(file, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read checkpoint %s: %w", f.Path, err)
	}
	if len(raw) > maxFileSize {
		return nil, fmt.Errorf("checkpoint %s: %w: larger than %d bytes", f.Path, ErrCorrupt, maxFileSize)
	}
	cp, err := Unmarshal(raw)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", f.Path, err)
	}
	return cp, nil
}

// Store writes the checkpoint atomically: a crash at any point leaves the
// previous or the new checkpoint, never a mix, and after Store returns the
// new one survives a power loss.
func (f File) Store(cp *Checkpoint) error {
	raw, err := Marshal(cp)
	if err != nil {
		return err
	}
	dir := filepath.Dir(f.Path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(f.Path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write checkpoint %s: %w", f.Path, err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(raw); err != nil {
		return fmt.Errorf("write checkpoint %s: %w", tmp.Name(), err)
	}
	// fsync before rename: otherwise a power loss can leave the renamed
	// file empty on filesystems that reorder metadata and data writes.
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("sync checkpoint %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close checkpoint %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), f.Path); err != nil {
		return fmt.Errorf("replace checkpoint %s: %w", f.Path, err)
	}
	committed = true
	// fsync the directory so that the rename itself is durable.
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open checkpoint directory: %w", err)
	}
	if err := d.Sync(); err != nil {
		_ = d.Close()
		return fmt.Errorf("sync checkpoint directory %s: %w", dir, err)
	}
	return d.Close()
}

// ReadBootID returns the ID of the running boot from path (usually
// DefaultBootIDPath).
func ReadBootID(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read boot ID: %w", err)
	}
	id := strings.TrimSpace(string(raw))
	if id == "" || len(id) > 64 {
		return "", fmt.Errorf("boot ID in %s: %w: %q", path, ErrCorrupt, id)
	}
	return id, nil
}
