// Package cdi writes the Container Device Interface specs through which the
// container runtime gives prepared GPUs to containers: one transient spec
// per claim, named after the claim UID only, holding one CDI device named
// after the claim UID. It uses tags.cncf.io/container-device-interface for
// naming, validation and writing. Every spec is built here, in Write.
//
// Device nodes. A spec names each node by its path in the container
// (/dev/nvidia0) and, when the device root is not /, by its path on the
// host (<dev root>/dev/nvidia0), which the runtime stats to create the node
// in the container. The runtime fails every container of a claim whose
// spec names a host node that does not exist ("failed to stat CDI host
// device"), so Write checks the nodes first:
//
//   - the claim's /dev/nvidia<minor> and /dev/nvidiactl must exist: without
//     them the GPU is unusable, and Write fails with ErrDeviceNodeMissing,
//     which the kubelet reports on the pod and retries;
//   - /dev/nvidia-uvm and /dev/nvidia-uvm-tools are named only if they
//     exist. The NVIDIA driver creates them lazily (nvidia-modprobe -u -c=0,
//     or `nvidia-ctk system create-device-nodes`, when something first
//     loads nvidia-uvm); until then a claim gets its GPU without them, as
//     `nvidia-ctk cdi generate` leaves out missing control nodes, and Write
//     logs what it left out. A claim prepared then keeps its spec: it gets
//     the UVM nodes when it is prepared again, not when they appear.
package cdi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"k8s.io/klog/v2"
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

// optionalDeviceNodes are the control devices that the NVIDIA driver
// creates lazily: left out of a spec while they do not exist.
var optionalDeviceNodes = map[string]bool{"/dev/nvidia-uvm": true, "/dev/nvidia-uvm-tools": true}

// ErrDeviceNodeMissing is wrapped by Write's error when a device node that
// a claim cannot do without does not exist on the host.
var ErrDeviceNodeMissing = errors.New("device node does not exist on the host")

// Options configure a Writer.
type Options struct {
	// DevRoot is the host directory whose dev/ holds the device nodes:
	// "/" (the default) on a host with the NVIDIA driver, the driver
	// container's root with NVIDIA's GPU operator, a directory of
	// simulated nodes in tests.
	DevRoot string
	// ContainerDevRoot is where this process sees DevRoot, to check that
	// nodes exist; default DevRoot. The plugin's container mounts the
	// host's <DevRoot>/dev there, read-only.
	ContainerDevRoot string
}

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
	opts   Options
}

// NewWriter prepares dir (created if missing) for the specs of a driver.
func NewWriter(dir, driverName string, opts Options) (*Writer, error) {
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
	if opts.DevRoot == "" {
		opts.DevRoot = "/"
	}
	if opts.ContainerDevRoot == "" {
		opts.ContainerDevRoot = opts.DevRoot
	}
	if !filepath.IsAbs(opts.DevRoot) || !filepath.IsAbs(opts.ContainerDevRoot) {
		return nil, fmt.Errorf("device roots %q and %q: want absolute paths", opts.DevRoot, opts.ContainerDevRoot)
	}
	return &Writer{vendor: driverName, cache: cache, dir: dir, opts: opts}, nil
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
// It fails with ErrDeviceNodeMissing, writing nothing, when a node the
// claim needs does not exist (see the package documentation).
func (w *Writer) Write(ctx context.Context, edits ClaimEdits) (string, error) {
	if err := parser.ValidateDeviceName(edits.ClaimUID); err != nil {
		return "", fmt.Errorf("claim UID %q as CDI device name: %w", edits.ClaimUID, err)
	}
	var missing, leftOut []string
	nodes := make([]*cdispec.DeviceNode, 0, len(edits.DeviceNodes))
	for _, p := range edits.DeviceNodes {
		node, err := w.deviceNode(p)
		if err != nil {
			return "", fmt.Errorf("CDI spec for claim %s: %w", edits.ClaimUID, err)
		}
		if node == nil {
			missing = append(missing, p)
			continue
		}
		nodes = append(nodes, node)
	}
	control := make([]*cdispec.DeviceNode, 0, len(ControlDeviceNodes))
	for _, p := range ControlDeviceNodes {
		node, err := w.deviceNode(p)
		if err != nil {
			return "", fmt.Errorf("CDI spec for claim %s: %w", edits.ClaimUID, err)
		}
		switch {
		case node != nil:
			control = append(control, node)
		case optionalDeviceNodes[p]:
			leftOut = append(leftOut, p)
		default:
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("CDI spec for claim %s: %w: %v under %s (is the NVIDIA driver loaded?)",
			edits.ClaimUID, ErrDeviceNodeMissing, missing, w.opts.DevRoot)
	}
	if len(leftOut) > 0 {
		klog.FromContext(ctx).Info("Device nodes left out of the claim's CDI spec until the NVIDIA driver creates them; CUDA needs them",
			"claimUID", edits.ClaimUID, "devRoot", w.opts.DevRoot, "nodes", leftOut)
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

// deviceNode is the spec's entry for the node at containerPath, nil if the
// node does not exist on the host.
func (w *Writer) deviceNode(containerPath string) (*cdispec.DeviceNode, error) {
	local := filepath.Join(w.opts.ContainerDevRoot, containerPath)
	if _, err := os.Stat(local); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("device node %s: %w", local, err)
	}
	node := &cdispec.DeviceNode{Path: containerPath}
	if w.opts.DevRoot != "/" {
		node.HostPath = path.Join(w.opts.DevRoot, containerPath)
	}
	return node, nil
}

// Remove deletes a claim's spec. A spec that does not exist is not an
// error: Unprepare must be idempotent.
func (w *Writer) Remove(claimUID string) error {
	if err := w.cache.RemoveSpec(w.SpecName(claimUID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove CDI spec for claim %s: %w", claimUID, err)
	}
	return nil
}
