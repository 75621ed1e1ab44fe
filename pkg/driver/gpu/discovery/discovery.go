// Package discovery finds the GPUs of a node. It has one interface and three
// backends:
//
//   - NvidiaSMI runs nvidia-smi with fixed arguments and parses its CSV and
//     table output (or replays a recorded transcript of the same commands),
//     including the `topo -m` matrix for NVLink domains;
//   - Sysfs scans /sys/bus/pci/devices for NVIDIA display and 3D
//     controllers and reads the NVIDIA driver's /proc entries;
//   - Inventory reads a YAML file describing GPUs, for simulated (kwok)
//     nodes, demos and tests.
//
// Every backend returns validated, normalised device.GPU values or an error;
// none returns a partial result, so a broken input can never be published.
// There are two exceptions. The topology attributes (PCIe root, NUMA node,
// NVLink domain) only help placement, so a backend that cannot read them
// leaves them out rather than fail; but it never publishes one it misread.
// And the nvidia-smi backend leaves out a GPU whose minor number it cannot
// read from the driver's /proc entry (logged, and counted in the
// refused_gpus metric), because a guessed /dev/nvidia<minor> could be
// another GPU's, while the other GPUs are fine to publish.
//
// The NVLink domain (device.GPU.NVLinkDomain, published as
// gpu.drasched.dev/nvlinkDomain) names the set of GPUs connected by NVLink.
// The scheduler's BestFit placement groups devices by it, and a claim with
// matchAttribute on it gets GPUs of one domain. The nvidia-smi backend
// derives it from `nvidia-smi topo -m` (see nvlinkDomainName for the names),
// the inventory backend takes it from the file, and the sysfs backend, which
// cannot see NVLink, leaves it out.
package discovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/drasched/drasched/pkg/driver/gpu/device"
)

// Discoverer finds the GPUs of this node.
type Discoverer interface {
	// Discover returns the node's GPUs, sorted by index and validated with
	// device.Validate. It is safe to call concurrently and repeatedly.
	Discover(ctx context.Context) ([]device.GPU, error)
	// WatchPaths lists the files and directories whose changes mean the
	// devices may have changed. Empty when only a periodic rescan helps.
	WatchPaths() []string
	// Declared reports whether the devices are declared (an inventory
	// file) rather than observed on the host. A device missing from a
	// declared list was removed on purpose; one missing from an observed
	// list may have fallen off the bus, and the driver keeps it published,
	// tainted, until discovery sees it again.
	Declared() bool
	// String names the backend and its input, for logs.
	String() string
}

// Backend names, as accepted by --backend.
const (
	BackendNvidiaSMI = "nvidia-smi"
	BackendSysfs     = "sysfs"
	BackendInventory = "inventory"
)

// Backends lists the backend names.
var Backends = []string{BackendNvidiaSMI, BackendSysfs, BackendInventory}

// ErrInvalidInput is wrapped by errors about malformed backend input
// (nvidia-smi output, inventory files, sysfs contents), as opposed to errors
// running or reading it.
var ErrInvalidInput = errors.New("invalid discovery input")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrInvalidInput)
}

// finish sorts and validates what a backend found.
func finish(gpus []device.GPU) ([]device.GPU, error) {
	slices.SortStableFunc(gpus, func(a, b device.GPU) int { return cmp.Compare(a.Index, b.Index) })
	for i := range gpus {
		device.SortMIG(gpus[i].MIG)
	}
	if err := device.Validate(gpus); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	return gpus, nil
}

// describe summarises GPUs for log lines.
func describe(gpus []device.GPU) string {
	var names []string
	for _, ref := range device.Refs(gpus) {
		names = append(names, ref.Name())
	}
	return strings.Join(names, ",")
}
