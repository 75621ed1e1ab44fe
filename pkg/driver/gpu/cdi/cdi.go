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
//   - a MIG device's /dev/nvidia-caps/nvidia-cap<minor> nodes (its GPU
//     instance's and compute instance's) are device nodes of the claim
//     like /dev/nvidia<minor>, and must exist.
//
// Driver files. A spec is self-contained: it also bind-mounts, read-only,
// the NVIDIA driver's user-space files of the claim's driver version from
// the driver root (package driverroot): every versioned library, at the
// path where it is under the root and under the names of its links there
// (libcuda.so.570.86.15 and libcuda.so.1 in /usr/lib/x86_64-linux-gnu), the
// binaries (nvidia-smi, ...) and the GSP firmware. No hook runs: the
// container's loader finds the libraries by itself, in its default
// directories when the image and the host agree on them (a Debian or
// Ubuntu image on a Debian or Ubuntu host), and else in LibraryDir, where
// the spec mounts each library under its link names too: CUDA's images
// have it on LD_LIBRARY_PATH. Write fails with ErrDriverFilesMissing when
// libcuda or libnvidia-ml of the version is not under the driver root.
//
// NVIDIA_VISIBLE_DEVICES. Every spec sets it to "void", which tells the
// NVIDIA container runtime hook, where one runs for the container, to add
// nothing: the spec alone decides what the claim's containers get. It
// overrides an image's NVIDIA_VISIBLE_DEVICES=all, and the hook needs no
// variable naming the claim's GPUs. With the hook configured to ignore the
// variable in unprivileged containers, which is what keeps a pod without a
// claim from naming GPUs, it is ignored and harmless.
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

	"github.com/drasched/drasched/pkg/driver/gpu/driverroot"
)

const (
	// Class is the CDI class of the driver's devices; the vendor is the
	// driver name, so the kind is "<driver name>/gpu".
	Class = "gpu"
	// DefaultDir is where transient specs go: the runtime reads it and it
	// is cleared at reboot.
	DefaultDir = cdiapi.DefaultDynamicDir
	// LibraryDir is where containers also find the driver's libraries,
	// by the names they are loaded with: the directory that CUDA's images
	// (nvidia/cuda, NGC) put on LD_LIBRARY_PATH for this purpose.
	LibraryDir = "/usr/local/nvidia/lib64"
	// VisibleDevices is the spec's NVIDIA_VISIBLE_DEVICES (see the
	// package documentation).
	VisibleDevices = "NVIDIA_VISIBLE_DEVICES=void"
)

// mountOptions are those of every driver file: read-only, without setuid
// or device files.
var mountOptions = []string{"ro", "nosuid", "nodev", "bind"}

// ControlDeviceNodes are the NVIDIA driver's control devices, which every
// CUDA container needs besides its /dev/nvidia<minor> nodes.
var ControlDeviceNodes = []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}

// optionalDeviceNodes are the control devices that the NVIDIA driver
// creates lazily: left out of a spec while they do not exist.
var optionalDeviceNodes = map[string]bool{"/dev/nvidia-uvm": true, "/dev/nvidia-uvm-tools": true}

// ErrDeviceNodeMissing is wrapped by Write's error when a device node that
// a claim cannot do without does not exist on the host.
var ErrDeviceNodeMissing = errors.New("device node does not exist on the host")

// ErrDriverFilesMissing is wrapped by Write's error when the driver's
// libraries of the claim's driver version are not under the driver root.
var ErrDriverFilesMissing = driverroot.ErrMissing

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
	// DriverRoot is the host directory under which the NVIDIA driver's
	// user-space files are installed: "/" (the default) on a host with
	// the driver, the driver container's root with NVIDIA's GPU operator
	// (/run/nvidia/driver), a fake installation in tests.
	DriverRoot string
	// ContainerDriverRoot is where this process sees DriverRoot, to find
	// the files; default DriverRoot. The plugin's container mounts the
	// host's <DriverRoot>/usr there, read-only.
	ContainerDriverRoot string
}

// ClaimEdits is what one claim's containers get.
type ClaimEdits struct {
	// ClaimUID names the spec and the CDI device.
	ClaimUID string
	// DeviceNodes are the claim's GPU device nodes, e.g. /dev/nvidia3, and
	// the nvidia-caps nodes of its MIG devices.
	DeviceNodes []string
	// Env is set in the containers (the sharing configuration).
	Env []string
	// DriverVersion is the NVIDIA driver version that the claim's GPUs
	// report; it selects the driver's files.
	DriverVersion string
}

// Writer writes and removes claim specs in one directory. Its methods are
// safe for concurrent use on different claims.
type Writer struct {
	vendor string
	cache  *cdiapi.Cache
	dir    string
	opts   Options
	driver driverroot.Root
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
	if opts.DriverRoot == "" {
		opts.DriverRoot = "/"
	}
	if opts.ContainerDriverRoot == "" {
		opts.ContainerDriverRoot = opts.DriverRoot
	}
	for _, root := range []string{opts.DevRoot, opts.ContainerDevRoot, opts.DriverRoot, opts.ContainerDriverRoot} {
		if !filepath.IsAbs(root) {
			return nil, fmt.Errorf("device and driver roots %q, %q, %q, %q: want absolute paths",
				opts.DevRoot, opts.ContainerDevRoot, opts.DriverRoot, opts.ContainerDriverRoot)
		}
	}
	// The driver root is read at every Write, not here: a driver upgraded
	// while the plugin runs changes the files, and a plugin on a node
	// without GPUs (a simulated one) never writes a spec.
	driver := driverroot.Root{Host: opts.DriverRoot, Local: opts.ContainerDriverRoot}
	return &Writer{vendor: driverName, cache: cache, dir: dir, opts: opts, driver: driver}, nil
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
	files, err := w.driver.Find(edits.DriverVersion)
	if err != nil {
		return "", fmt.Errorf("CDI spec for claim %s: %w", edits.ClaimUID, err)
	}
	mounts := driverMounts(files)
	klog.FromContext(ctx).V(5).Info("Driver files for the claim's CDI spec", "claimUID", edits.ClaimUID,
		"driverRoot", w.opts.DriverRoot, "version", files.Version, "libraries", len(files.Libraries), "mounts", len(mounts))
	spec := &cdispec.Spec{
		Kind: w.Kind(),
		Devices: []cdispec.Device{{
			Name:           edits.ClaimUID,
			ContainerEdits: cdispec.ContainerEdits{DeviceNodes: nodes, Env: edits.Env},
		}},
		ContainerEdits: cdispec.ContainerEdits{
			DeviceNodes: control,
			Mounts:      mounts,
			Env:         []string{VisibleDevices},
		},
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

// driverMounts are the bind mounts of the driver's files: each library
// where it is and under its links' names next to it and in LibraryDir,
// then the binaries and the firmware. A container path that two files
// claim (a library found in two directories) gets the first.
func driverMounts(files *driverroot.Files) []*cdispec.Mount {
	var mounts []*cdispec.Mount
	seen := map[string]bool{}
	add := func(hostPath, containerPath string) {
		if seen[containerPath] {
			return
		}
		seen[containerPath] = true
		mounts = append(mounts, &cdispec.Mount{HostPath: hostPath, ContainerPath: containerPath, Type: "bind", Options: mountOptions})
	}
	for _, lib := range files.Libraries {
		add(lib.HostPath, lib.Path)
		for _, link := range lib.Links {
			add(lib.HostPath, path.Join(path.Dir(lib.Path), link))
		}
	}
	for _, lib := range files.Libraries {
		// The names other libraries and programs load it by: its links,
		// or its own when it has none (its SONAME is then its name).
		names := lib.Links
		if len(names) == 0 {
			names = []string{path.Base(lib.Path)}
		}
		for _, name := range names {
			add(lib.HostPath, path.Join(LibraryDir, name))
		}
	}
	for _, f := range files.Binaries {
		add(f.HostPath, f.Path)
	}
	for _, f := range files.Firmware {
		add(f.HostPath, f.Path)
	}
	return mounts
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
