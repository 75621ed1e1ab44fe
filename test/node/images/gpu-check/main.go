// Command gpu-check is the workload of the real-node tests
// (hack/build-node.sh builds its image): it prints what a container sees of
// its GPUs, then waits until it is stopped, so that the test reads the
// output with the pod still running (its claim still prepared).
//
// It prints one line per environment variable ("env NAME=VALUE") and per
// character device under /dev ("dev PATH MAJOR:MINOR OPEN"), where OPEN is,
// for the NVIDIA devices (/dev/nvidia*), the result of opening the device
// for reading: "ok", or the error ("-" for other devices, which it leaves
// alone). The simulated GPUs of the tests have no kernel driver, so a
// device the container may use fails with ENXIO ("no such device or
// address") while one the device cgroup denies fails with EPERM.
//
// Then one line per file in the directories where the NVIDIA driver's
// files go ("file PATH SHA256"; the image has none there, so they are what
// the container got from CDI specs), and what cuda-check (next to this
// binary, linked against libcuda.so.1) prints, run twice ("cuda MODE
// RESULT"): as from an image that leaves LD_LIBRARY_PATH alone ("default"),
// and as from one of CUDA's images, which put /usr/local/nvidia/lib64 on
// it ("cuda-image"). Last comes one line "gpu-check {json}" with all of it,
// for the test to parse.
package main

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Report is what the test parses; test/node has its own copy of the type.
type Report struct {
	Env     map[string]string `json:"env"`
	Devices []Device          `json:"devices"`
	// Files are the regular files under driverDirs, by path, with the
	// SHA-256 of their content.
	Files map[string]string `json:"files"`
	// CUDA is what cuda-check printed, or "error: ..." with why it
	// failed, by mode ("default", "cuda-image").
	CUDA map[string]string `json:"cuda"`
}

// driverDirs are where the NVIDIA driver's libraries, binaries and
// firmware go in a container, as the CDI specs put them there.
var driverDirs = []string{
	"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
	"/usr/local/nvidia", "/usr/bin", "/usr/sbin", "/lib/firmware", "/usr/lib/firmware",
}

// cudaLibraryPath is the LD_LIBRARY_PATH of CUDA's images for the
// driver's libraries.
const cudaLibraryPath = "/usr/local/nvidia/lib64"

// Device is a character device under /dev.
type Device struct {
	Path  string `json:"path"`
	Major uint32 `json:"major"`
	Minor uint32 `json:"minor"`
	// Open is "ok" or the error of opening an NVIDIA device read-only,
	// "-" for other devices.
	Open string `json:"open"`
}

func main() {
	report := Report{Env: map[string]string{}}
	env := os.Environ()
	slices.Sort(env)
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		report.Env[name] = value
		fmt.Printf("env %s\n", kv)
	}
	report.Devices = devices("/dev")
	for _, d := range report.Devices {
		fmt.Printf("dev %s %d:%d %s\n", d.Path, d.Major, d.Minor, d.Open)
	}
	report.Files = files(driverDirs)
	for _, p := range slices.Sorted(maps.Keys(report.Files)) {
		fmt.Printf("file %s %s\n", p, report.Files[p])
	}
	report.CUDA = map[string]string{
		"default":    cudaCheck(""),
		"cuda-image": cudaCheck(cudaLibraryPath),
	}
	for _, mode := range slices.Sorted(maps.Keys(report.CUDA)) {
		fmt.Printf("cuda %s %s\n", mode, report.CUDA[mode])
	}
	data, err := json.Marshal(report)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("gpu-check %s\n", data)
	if len(os.Args) > 1 && os.Args[1] == "--exit" {
		return
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	<-signals
}

// devices lists the character devices under dir, not following symbolic
// links, in lexical order.
func devices(dir string) []Device {
	var out []Device
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			// /dev/pts and friends may refuse; what is readable is listed.
			return nil
		}
		if d.Type()&fs.ModeCharDevice == 0 {
			return nil
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil {
			return nil
		}
		dev := Device{Path: path, Major: major(st.Rdev), Minor: minor(st.Rdev), Open: "-"}
		if !strings.HasPrefix(path, "/dev/nvidia") {
			out = append(out, dev)
			return nil
		}
		dev.Open = "ok"
		f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			var errno syscall.Errno
			if errors.As(err, &errno) {
				dev.Open = errno.Error()
			} else {
				dev.Open = err.Error()
			}
		} else {
			_ = f.Close()
		}
		out = append(out, dev)
		return nil
	})
	return out
}

// major and minor decode a Linux dev_t as glibc's gnu_dev_major and
// gnu_dev_minor do.
func major(dev uint64) uint32 {
	return uint32((dev>>8)&0xfff) | uint32((dev>>32)&^0xfff)
}

func minor(dev uint64) uint32 {
	return uint32(dev&0xff) | uint32((dev>>12)&^0xff)
}

// files returns the regular files under dirs (following no links), with
// the SHA-256 of their content.
func files(dirs []string) map[string]string {
	out := map[string]string{}
	for _, dir := range dirs {
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			data, err := os.ReadFile(path)
			if err != nil {
				out[path] = "error: " + err.Error()
				return nil
			}
			out[path] = fmt.Sprintf("%x", sha256.Sum256(data))
			return nil
		})
	}
	return out
}

// cudaCheck runs cuda-check with LD_LIBRARY_PATH set to libraryPath, or
// unset when it is empty, and returns its output or why it failed.
func cudaCheck(libraryPath string) string {
	self, err := os.Executable()
	if err != nil {
		return "error: " + err.Error()
	}
	cmd := exec.Command(filepath.Join(filepath.Dir(self), "cuda-check"))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LD_LIBRARY_PATH=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if libraryPath != "" {
		cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+libraryPath)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("error: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out))
}
