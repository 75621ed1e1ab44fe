// Package driverroot finds the user-space files of the NVIDIA driver that a
// container needs to use a GPU: its versioned libraries (libcuda.so.<version>,
// libnvidia-ml.so.<version>, ...) with the symbolic links the loader uses to
// find them (libcuda.so.1), its binaries (nvidia-smi, ...) and its GSP
// firmware. They are found as NVIDIA's container toolkit finds them, by
// reading a driver root: the host's / where the driver is installed on the
// host, the driver container's root (/run/nvidia/driver) with NVIDIA's GPU
// operator.
//
// Paths under the root are resolved as if the root were /: an absolute
// symbolic link (lib64 -> /usr/lib64) stays inside it, and ".." cannot
// leave it. A file's path in a container is where it was found (the
// directory searched, /usr/lib/x86_64-linux-gnu); its host path is the
// resolved file under the root, what a bind mount takes as its source.
//
// Why not the toolkit's own code: its file lookup is in internal packages
// (internal/lookup of github.com/NVIDIA/nvidia-container-toolkit), and its
// public CDI generator, pkg/nvcdi, asks NVML for the driver through
// go-nvml, which needs cgo and libnvidia-ml at run time; the plugin is a
// static binary (CGO_ENABLED=0). The directories searched here are the
// toolkit's.
//
// The package reads files and holds no state; Find is safe for concurrent
// use.
package driverroot

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"

	"github.com/drasched/drasched/pkg/driver/gpu/device"
)

// ErrMissing is wrapped by Find's error when the driver's libraries of the
// version are not under the root: the root is wrong, or the driver's
// libraries and its kernel module (whose version discovery reports) differ.
var ErrMissing = errors.New("NVIDIA driver libraries not found")

// Directories searched under the root, as NVIDIA's container toolkit
// searches them: the multiarch directories of Debian and Ubuntu, those of
// Red Hat and SUSE, and Debian's packaged driver (nvidia/current).
var (
	libraryDirs = []string{
		"usr/lib/x86_64-linux-gnu",
		"usr/lib/aarch64-linux-gnu",
		"usr/lib64",
		"usr/lib/x86_64-linux-gnu/nvidia/current",
		"usr/lib/aarch64-linux-gnu/nvidia/current",
		"lib/x86_64-linux-gnu",
		"lib/aarch64-linux-gnu",
		"lib64",
	}
	binaryDirs   = []string{"usr/bin", "usr/sbin", "usr/local/bin", "usr/local/sbin", "bin", "sbin"}
	firmwareDirs = []string{"lib/firmware", "usr/lib/firmware"}
)

// Binaries are the driver's programs a container gets, by name.
var Binaries = []string{
	"nvidia-smi",              // management and monitoring
	"nvidia-debugdump",        // GPU state dumps for bug reports
	"nvidia-persistenced",     // persistence daemon
	"nvidia-cuda-mps-control", // MPS control daemon and client
	"nvidia-cuda-mps-server",  // MPS server
}

// RequiredLibraries are the libraries without which a container cannot use
// the GPU at all (CUDA, NVML); Find fails when either is missing. The other
// versioned libraries differ between driver packages and are taken as found.
var RequiredLibraries = []string{"libcuda.so", "libnvidia-ml.so"}

// versionedLibrary matches a library named with a driver version:
// libnvidia-ml.so.550.54.15 → libnvidia-ml.so, 550.54.15.
var versionedLibrary = regexp.MustCompile(`^(lib[^/]*\.so)\.([0-9]+(?:\.[0-9]+){1,2})$`)

// Root is a driver root.
type Root struct {
	// Host is the root on the host: what the container runtime mounts
	// files from.
	Host string
	// Local is where this process sees Host (a read-only mount in the
	// plugin's container); default Host.
	Local string
}

// File is one file of the driver.
type File struct {
	// Path is where a container gets it: the path under the root where
	// it was found, e.g. /usr/bin/nvidia-smi.
	Path string
	// HostPath is the file on the host, symbolic links resolved under
	// the root.
	HostPath string
}

// Library is a versioned library.
type Library struct {
	File
	// Links are the names of the symbolic links in the library's
	// directory that resolve to it (libcuda.so, libcuda.so.1), sorted:
	// the names under which the loader and dlopen find it. The NVIDIA
	// installer and ldconfig create them.
	Links []string
}

// Files are the driver's files of one version.
type Files struct {
	// Version is the driver version as the files are named
	// (535.104.05, where discovery reports 535.104.5).
	Version   string
	Libraries []Library
	Binaries  []File
	Firmware  []File
}

// Find returns the driver's files of this version (MAJOR.MINOR[.PATCH],
// compared as numbers). It fails, wrapping ErrMissing, when a required
// library of the version is missing; a missing binary or firmware file is
// left out.
func (r Root) Find(version string) (*Files, error) {
	if strings.TrimSpace(version) == "" {
		return nil, fmt.Errorf("%w: the GPUs report no driver version to choose them by", ErrMissing)
	}
	want, err := device.NormalizeVersion(version)
	if err != nil {
		return nil, fmt.Errorf("%w: driver version %q: %w", ErrMissing, version, err)
	}
	local := r.local()
	if _, err := os.Stat(local); err != nil {
		return nil, fmt.Errorf("%w: driver root %s: %w", ErrMissing, r.Host, err)
	}
	files := &Files{}
	seen := map[string]bool{} // resolved directories
	others := map[string]bool{}
	for _, dir := range libraryDirs {
		resolved, ok, err := r.resolveDir(dir, seen)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		libs, other, err := r.libraries(dir, resolved, want)
		if err != nil {
			return nil, err
		}
		files.Libraries = append(files.Libraries, libs...)
		for _, v := range other {
			others[v] = true
		}
	}
	var missing []string
	for _, name := range RequiredLibraries {
		lib := slices.IndexFunc(files.Libraries, func(l Library) bool { return strings.HasPrefix(path.Base(l.Path), name+".") })
		if lib < 0 {
			missing = append(missing, name+"."+version)
		} else if files.Version == "" {
			files.Version = strings.TrimPrefix(path.Base(files.Libraries[lib].Path), name+".")
		}
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("%s under %s in %s", strings.Join(missing, ", "), r.Host, strings.Join(libraryDirs, ", "))
		if len(others) > 0 {
			msg += fmt.Sprintf(" (there are libraries of version %s: the driver's libraries and its kernel module differ)",
				strings.Join(slices.Sorted(maps.Keys(others)), ", "))
		}
		return nil, fmt.Errorf("%w: %s", ErrMissing, msg)
	}
	if files.Binaries, err = r.binaries(); err != nil {
		return nil, err
	}
	if files.Firmware, err = r.firmware(files.Version); err != nil {
		return nil, err
	}
	return files, nil
}

func (r Root) local() string {
	if r.Local != "" {
		return filepath.Clean(r.Local)
	}
	return filepath.Clean(r.Host)
}

// resolve resolves a path under the root, which it cannot leave, and
// returns it relative to the root ("usr/lib64/libcuda.so.1").
func (r Root) resolve(rel string) (string, error) {
	local := r.local()
	full, err := securejoin.SecureJoin(local, rel)
	if err != nil {
		return "", fmt.Errorf("resolve %s under %s: %w", rel, r.Host, err)
	}
	out, err := filepath.Rel(local, full)
	if err != nil {
		return "", err
	}
	return filepath.ToSlash(out), nil
}

// localPath is where this process sees a resolved path.
func (r Root) localPath(resolved string) string { return filepath.Join(r.local(), resolved) }

// hostPath is a resolved path on the host.
func (r Root) hostPath(resolved string) string { return path.Join(r.Host, resolved) }

// resolveDir resolves a searched directory; ok is false when it does not
// exist or was searched already under another name (lib64 -> usr/lib64).
func (r Root) resolveDir(dir string, seen map[string]bool) (string, bool, error) {
	resolved, err := r.resolve(dir)
	if err != nil {
		return "", false, err
	}
	info, err := os.Stat(r.localPath(resolved))
	if errors.Is(err, fs.ErrNotExist) || (err == nil && !info.IsDir()) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("driver root %s: %w", r.Host, err)
	}
	if seen[resolved] {
		return "", false, nil
	}
	seen[resolved] = true
	return resolved, true, nil
}

// regularFile resolves a path under the root and reports whether it is a
// regular file; a missing or dangling path is not an error.
func (r Root) regularFile(rel string) (string, fs.FileInfo, bool, error) {
	resolved, err := r.resolve(rel)
	if err != nil {
		return "", nil, false, err
	}
	info, err := os.Lstat(r.localPath(resolved))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil, false, nil
	}
	if err != nil {
		return "", nil, false, fmt.Errorf("driver root %s: %w", r.Host, err)
	}
	return resolved, info, info.Mode().IsRegular(), nil
}

// libraries returns the libraries of version want in one directory (dir as
// searched, resolved as found), and the versions of the required libraries
// of other versions there.
func (r Root) libraries(dir, resolved, want string) ([]Library, []string, error) {
	entries, err := os.ReadDir(r.localPath(resolved))
	if err != nil {
		return nil, nil, fmt.Errorf("driver root %s: %w", r.Host, err)
	}
	var libs []Library
	var others []string
	byTarget := map[string]int{} // resolved library → index in libs
	bases := map[string]bool{}
	for _, e := range entries {
		m := versionedLibrary.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		v, err := device.NormalizeVersion(m[2])
		if err != nil {
			continue
		}
		if v != want {
			if slices.Contains(RequiredLibraries, m[1]) {
				others = append(others, m[2])
			}
			continue
		}
		target, _, ok, err := r.regularFile(path.Join(resolved, e.Name()))
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			continue // dangling or not a file: nothing to mount
		}
		if _, dup := byTarget[target]; dup {
			continue
		}
		byTarget[target] = len(libs)
		bases[m[1]] = true
		libs = append(libs, Library{File: File{Path: "/" + path.Join(dir, e.Name()), HostPath: r.hostPath(target)}})
	}
	// The links by which the libraries are loaded: libcuda.so.1 and
	// libcuda.so next to libcuda.so.<version>.
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink == 0 || !bases[linkBase(e.Name())] {
			continue
		}
		target, _, ok, err := r.regularFile(path.Join(resolved, e.Name()))
		if err != nil {
			return nil, nil, err
		}
		if i, found := byTarget[target]; ok && found && path.Base(libs[i].Path) != e.Name() {
			libs[i].Links = append(libs[i].Links, e.Name())
		}
	}
	for i := range libs {
		slices.Sort(libs[i].Links)
	}
	return libs, others, nil
}

// linkBase is the library name a link name starts with: libcuda.so for
// libcuda.so.1 and libcuda.so.
func linkBase(name string) string {
	if i := strings.Index(name, ".so"); i >= 0 {
		return name[:i+len(".so")]
	}
	return ""
}

// binaries returns the first executable of each of Binaries found.
func (r Root) binaries() ([]File, error) {
	var out []File
	for _, name := range Binaries {
		for _, dir := range binaryDirs {
			target, info, ok, err := r.regularFile(path.Join(dir, name))
			if err != nil {
				return nil, err
			}
			if ok && info.Mode().Perm()&0o111 != 0 {
				out = append(out, File{Path: "/" + path.Join(dir, name), HostPath: r.hostPath(target)})
				break
			}
		}
	}
	return out, nil
}

// firmware returns the GSP firmware files (gsp*.bin) of this version,
// under nvidia/<version> of the firmware directories.
func (r Root) firmware(version string) ([]File, error) {
	var out []File
	seen := map[string]bool{}
	for _, base := range firmwareDirs {
		dir := path.Join(base, "nvidia", version)
		resolved, ok, err := r.resolveDir(dir, seen)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		entries, err := os.ReadDir(r.localPath(resolved))
		if err != nil {
			return nil, fmt.Errorf("driver root %s: %w", r.Host, err)
		}
		for _, e := range entries {
			if ok, _ := path.Match("gsp*.bin", e.Name()); !ok {
				continue
			}
			target, _, ok, err := r.regularFile(path.Join(resolved, e.Name()))
			if err != nil {
				return nil, err
			}
			if ok {
				out = append(out, File{Path: "/" + path.Join(dir, e.Name()), HostPath: r.hostPath(target)})
			}
		}
	}
	return out, nil
}
