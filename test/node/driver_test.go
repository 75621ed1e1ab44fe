//go:build node

package node

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
)

// The node's fake NVIDIA driver installation (gpuDriver.driverRoot): files
// named and laid out as NVIDIA's installer lays them out on a Debian host,
// with the links ldconfig makes. libcuda is a real shared library and
// nvidia-smi a real program (hack/build-node.sh builds both from
// test/node/driver); the other files only stand for theirs. Beside them
// are files a claim's containers must not get: a library of an older
// driver, the host's own C library, a program that is not the driver's,
// the firmware of the older driver.

// driverVersion is the version the inventory's GPUs report.
const driverVersion = "570.86.15"

// driverFile is a file or link of the fake driver root.
type driverFile struct {
	// path is under the driver root.
	path string
	// link makes it a symbolic link to this target.
	link string
	// built is a file of hack/build-node.sh's driver/ to copy; otherwise
	// the file holds its own path.
	built string
	mode  os.FileMode
	// in are the paths at which a claim's containers get the file: the
	// mounts of its CDI spec. None for links (the mounts are of their
	// targets) and for files they must not get.
	in []string
}

const (
	hostLib      = "usr/lib/x86_64-linux-gnu"
	containerLib = "/usr/lib/x86_64-linux-gnu"
	// cudaImageLib is where CUDA's images look for the driver's
	// libraries (LD_LIBRARY_PATH).
	cudaImageLib = "/usr/local/nvidia/lib64"
)

// link is a symbolic link next to a library.
type link struct{ name, target string }

// fakeDriverRoot returns the files of the fake driver root.
func fakeDriverRoot() []driverFile {
	var files []driverFile
	library := func(name string, built string, links ...link) {
		versioned := name + "." + driverVersion
		f := driverFile{path: hostLib + "/" + versioned, built: built, mode: 0o644, in: []string{containerLib + "/" + versioned}}
		for _, l := range links {
			files = append(files, driverFile{path: hostLib + "/" + l.name, link: l.target})
			f.in = append(f.in, containerLib+"/"+l.name, cudaImageLib+"/"+l.name)
		}
		files = append(files, f)
	}
	library("libcuda.so", "libcuda.so.1", link{"libcuda.so.1", "libcuda.so." + driverVersion}, link{"libcuda.so", "libcuda.so.1"})
	library("libnvidia-ml.so", "", link{"libnvidia-ml.so.1", "libnvidia-ml.so." + driverVersion})
	library("libnvidia-ptxjitcompiler.so", "", link{"libnvidia-ptxjitcompiler.so.1", "libnvidia-ptxjitcompiler.so." + driverVersion})
	for _, name := range []string{"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"} {
		f := driverFile{path: "usr/bin/" + name, mode: 0o755, in: []string{"/usr/bin/" + name}}
		if name == "nvidia-smi" {
			f.built = "nvidia-smi"
		}
		files = append(files, f)
	}
	for _, name := range []string{"gsp_ga10x.bin", "gsp_tu10x.bin"} {
		p := "usr/lib/firmware/nvidia/" + driverVersion + "/" + name
		files = append(files, driverFile{path: p, mode: 0o644, in: []string{"/" + p}})
	}
	return append(files,
		driverFile{path: "lib", link: "usr/lib"},
		driverFile{path: hostLib + "/libnvidia-ml.so.560.35.03", mode: 0o644},
		driverFile{path: hostLib + "/libc.so.6", mode: 0o644},
		driverFile{path: "usr/bin/ls", mode: 0o755},
		driverFile{path: "usr/lib/firmware/nvidia/560.35.03/gsp_ga10x.bin", mode: 0o644},
	)
}

// createDriverRoot installs the fake driver under root, taking the built
// files from nodeBin's driver/, and returns what a claim's containers must
// see of it: the SHA-256 of the file at each path.
func createDriverRoot(root, nodeBin string) (map[string]string, error) {
	want := map[string]string{}
	for _, f := range fakeDriverRoot() {
		p := filepath.Join(root, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if f.link != "" {
			if err := os.Symlink(f.link, p); err != nil && !os.IsExist(err) {
				return nil, err
			}
			continue
		}
		data := []byte(f.path + "\n")
		if f.built != "" {
			var err error
			if data, err = os.ReadFile(filepath.Join(nodeBin, "driver", f.built)); err != nil {
				return nil, fmt.Errorf("%w (hack/build-node.sh builds it)", err)
			}
		}
		if err := os.WriteFile(p, data, f.mode); err != nil {
			return nil, err
		}
		for _, in := range f.in {
			want[in] = fmt.Sprintf("%x", sha256.Sum256(data))
		}
	}
	return want, nil
}
