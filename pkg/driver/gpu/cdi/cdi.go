// Package cdi writes the Container Device Interface specs through which the
// container runtime gives prepared GPUs to containers: one transient spec
// per claim, named after the claim UID only, holding one CDI device named
// after the claim UID. It uses tags.cncf.io/container-device-interface for
// naming, validation and writing.
package cdi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

const (
	// Class is the CDI class of the driver's devices; the vendor is the
	// driver name, so the kind is "<driver name>/gpu".
	Class = "gpu"
	// DefaultDir is where transient specs go: the runtime reads it and it
	// is cleared at reboot.
	DefaultDir = cdiapi.DefaultDynamicDir
)

// ControlDeviceNodes are the NVIDIA driver's control devices, which every
// CUDA container needs besides its /dev/nvidia<minor> nodes.
var ControlDeviceNodes = []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}

// ClaimEdits is what one claim's containers get.
type ClaimEdits struct {
	// ClaimUID names the spec and the CDI device.
	ClaimUID string
	// DeviceNodes are the claim's GPU device nodes, e.g. /dev/nvidia3.
	DeviceNodes []string
	// Env is set in the containers, e.g. NVIDIA_VISIBLE_DEVICES=GPU-....
	Env []string
}

// Writer writes and removes claim specs in one directory. Its methods are
// safe for concurrent use on different claims.
type Writer struct {
	vendor string
	cache  *cdiapi.Cache
	dir    string
}

// NewWriter prepares dir (created if missing) for the specs of a driver.
func NewWriter(dir, driverName string) (*Writer, error) {
	if err := parser.ValidateVendorName(driverName); err != nil {
		return nil, fmt.Errorf("driver name %q as CDI vendor: %w", driverName, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create CDI spec directory: %w", err)
	}
	// No auto-refresh: the writer never looks up devices, and a watch on a
	// directory shared with other drivers would only cost inotify handles.
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("CDI cache for %s: %w", dir, err)
	}
	return &Writer{vendor: driverName, cache: cache, dir: dir}, nil
}

// Kind is the CDI kind of the specs ("<vendor>/<class>").
func (w *Writer) Kind() string { return w.vendor + "/" + Class }

// SpecName is the file name of a claim's spec. It depends on the claim UID
// only, so Unprepare finds it without any other state.
func (w *Writer) SpecName(claimUID string) string {
	return cdiapi.GenerateTransientSpecName(w.vendor, Class, claimUID) + ".json"
}

// SpecPath is the full path of a claim's spec.
func (w *Writer) SpecPath(claimUID string) string {
	return filepath.Join(w.dir, w.SpecName(claimUID))
}

// DeviceID is the fully qualified CDI device ID the kubelet passes to the
// runtime for a claim.
func (w *Writer) DeviceID(claimUID string) string {
	return parser.QualifiedName(w.vendor, Class, claimUID)
}

// Write creates or replaces a claim's spec and returns its CDI device ID.
func (w *Writer) Write(edits ClaimEdits) (string, error) {
	if err := parser.ValidateDeviceName(edits.ClaimUID); err != nil {
		return "", fmt.Errorf("claim UID %q as CDI device name: %w", edits.ClaimUID, err)
	}
	nodes := make([]*cdispec.DeviceNode, 0, len(edits.DeviceNodes))
	for _, path := range edits.DeviceNodes {
		nodes = append(nodes, &cdispec.DeviceNode{Path: path})
	}
	control := make([]*cdispec.DeviceNode, 0, len(ControlDeviceNodes))
	for _, path := range ControlDeviceNodes {
		control = append(control, &cdispec.DeviceNode{Path: path})
	}
	spec := &cdispec.Spec{
		Kind: w.Kind(),
		Devices: []cdispec.Device{{
			Name:           edits.ClaimUID,
			ContainerEdits: cdispec.ContainerEdits{DeviceNodes: nodes, Env: edits.Env},
		}},
		ContainerEdits: cdispec.ContainerEdits{DeviceNodes: control},
	}
	version, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return "", fmt.Errorf("CDI spec version for claim %s: %w", edits.ClaimUID, err)
	}
	spec.Version = version
	if err := w.cache.WriteSpec(spec, w.SpecName(edits.ClaimUID)); err != nil {
		return "", fmt.Errorf("write CDI spec for claim %s: %w", edits.ClaimUID, err)
	}
	return w.DeviceID(edits.ClaimUID), nil
}

// Remove deletes a claim's spec. A spec that does not exist is not an
// error: Unprepare must be idempotent.
func (w *Writer) Remove(claimUID string) error {
	if err := w.cache.RemoveSpec(w.SpecName(claimUID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove CDI spec for claim %s: %w", claimUID, err)
	}
	return nil
}
