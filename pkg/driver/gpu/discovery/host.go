package discovery

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Defaults for the host paths the sysfs and nvidia-smi backends read.
const (
	DefaultSysfsRoot     = "/sys" // deviceattribute.SysfsRoot, which 1.35's lacks
	DefaultNvidiaProcDir = "/proc/driver/nvidia"
)

// maxHostFileSize bounds what is read from one /proc or /sys file; real ones
// are a few hundred bytes.
const maxHostFileSize = 64 << 10

// procInfo is what /proc/driver/nvidia/gpus/<bdf>/information says about a
// GPU bound to the NVIDIA driver.
type procInfo struct {
	Model string
	UUID  string
	Minor int
}

// ProcFiles reads files of the NVIDIA driver's /proc directory by their
// name in it, e.g. "gpus/0000:18:00.0/information". A missing file is an
// error wrapping fs.ErrNotExist.
type ProcFiles interface {
	ReadProcFile(name string) ([]byte, error)
}

// ProcDir reads the driver's /proc files from a directory, normally
// /proc/driver/nvidia.
type ProcDir string

// ReadProcFile implements ProcFiles.
func (d ProcDir) ReadProcFile(name string) ([]byte, error) {
	return readHostFile(filepath.Join(string(d), filepath.FromSlash(name)))
}

// procInfoName is the name of a GPU's information file in the driver's
// /proc directory.
func procInfoName(busID string) string { return path.Join("gpus", busID, "information") }

// readProcInfo parses the driver's information file of one GPU. It returns
// an error wrapping fs.ErrNotExist when the driver has no entry for it, and
// one wrapping ErrInvalidInput when the entry has no usable UUID or minor
// number.
func readProcInfo(files ProcFiles, busID string) (procInfo, error) {
	name := procInfoName(busID)
	data, err := files.ReadProcFile(name)
	if err != nil {
		return procInfo{}, err
	}
	info := procInfo{Minor: -1}
	scanner := bufio.NewScanner(bytes.NewReader(data))
	for scanner.Scan() {
		key, value, ok := strings.Cut(scanner.Text(), ":")
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		switch strings.TrimSpace(key) {
		case "Model":
			info.Model = value
		case "GPU UUID":
			info.UUID = value
		case "Device Minor":
			minor, err := strconv.Atoi(value)
			if err != nil || minor < 0 {
				return procInfo{}, invalidf("%s: Device Minor %q is not a number", name, value)
			}
			info.Minor = minor
		}
	}
	if info.UUID == "" || info.Minor < 0 {
		return procInfo{}, invalidf("%s: no GPU UUID or Device Minor", name)
	}
	return info, nil
}

var kernelModuleVersion = regexp.MustCompile(`Kernel Module\s+([0-9]+(?:\.[0-9]+){1,2})\s`)

// readDriverVersion reads the kernel module version from
// /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX x86_64 Kernel
// Module  550.54.15  ..."). It returns "" when the file does not exist.
func readDriverVersion(procDir string) (string, error) {
	path := filepath.Join(procDir, "version")
	data, err := readHostFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	m := kernelModuleVersion.FindSubmatch(data)
	if m == nil {
		return "", invalidf("%s: no kernel module version", path)
	}
	return string(m[1]), nil
}

func readHostFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read-only: a close error loses nothing
	data, err := io.ReadAll(io.LimitReader(f, maxHostFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > maxHostFileSize {
		return nil, invalidf("%s is larger than %d bytes", path, maxHostFileSize)
	}
	return data, nil
}

// topology holds the standard attributes read from sysfs for one PCI device.
type topology struct {
	PCIeRoot string
	NUMANode *int
}

// readTopology resolves the PCIe root and NUMA node of a PCI device through
// deviceattribute. Both are optional: a device without NUMA affinity or a
// sysfs tree without the device (dry runs of recorded nvidia-smi output)
// just leaves them out.
func readTopology(sysfsRoot, busID string) (topology, []error) {
	var t topology
	var errs []error
	root, err := pcieRootOf(busID, sysfsRoot)
	if err != nil {
		errs = append(errs, fmt.Errorf("PCIe root of %s: %w", busID, err))
	} else {
		t.PCIeRoot = root
	}
	numa, err := numaNodeOf(busID, sysfsRoot)
	if err != nil {
		errs = append(errs, fmt.Errorf("NUMA node of %s: %w", busID, err))
	} else if numa != nil {
		node := int(*numa)
		t.NUMANode = &node
	}
	return t, errs
}
