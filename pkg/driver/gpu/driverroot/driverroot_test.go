package driverroot

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const version = "570.86.15"

// entry is a file or symbolic link of a fake driver root.
type entry struct {
	path string
	link string // symbolic link target; a file when empty
	mode os.FileMode
}

func file(path string) entry            { return entry{path: path, mode: 0o644} }
func executable(path string) entry      { return entry{path: path, mode: 0o755} }
func symlink(path, target string) entry { return entry{path: path, link: target} }
func libraryWithLinks(dir, name string) []entry {
	return []entry{
		file(dir + "/" + name + "." + version),
		symlink(dir+"/"+name+".1", name+"."+version),
	}
}

// debianRoot is a driver installed by NVIDIA's installer on a Debian host
// with merged /usr: libraries in the multiarch directory with their
// links, binaries in /usr/bin, firmware under /lib/firmware.
func debianRoot() []entry {
	lib := "usr/lib/x86_64-linux-gnu"
	entries := []entry{
		symlink("lib", "usr/lib"),
		symlink("lib64", "usr/lib64"),
		symlink("bin", "usr/bin"),
		file(lib + "/libc.so.6"),
		symlink(lib+"/libcuda.so", "libcuda.so.1"),
		executable("usr/bin/nvidia-smi"),
		executable("usr/bin/nvidia-cuda-mps-control"),
		file("usr/bin/nvidia-debugdump"), // not executable: left out
		file("usr/lib/firmware/nvidia/" + version + "/gsp_ga10x.bin"),
		file("usr/lib/firmware/nvidia/" + version + "/gsp_tu10x.bin"),
		file("usr/lib/firmware/nvidia/" + version + "/README"),
		file("usr/lib/firmware/nvidia/560.35.03/gsp_ga10x.bin"),
	}
	for _, name := range []string{"libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so"} {
		entries = append(entries, libraryWithLinks(lib, name)...)
	}
	return entries
}

// makeRoot creates a driver root with these entries.
func makeRoot(t *testing.T, entries []entry) string {
	t.Helper()
	root := t.TempDir()
	for _, e := range entries {
		p := filepath.Join(root, e.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if e.link != "" {
			if err := os.Symlink(e.link, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(e.path), e.mode); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// hostRoot is where the tests say the root is on the host; Local is the
// temporary directory.
const hostRoot = "/run/nvidia/driver"

func debianFiles() *Files {
	lib := "/usr/lib/x86_64-linux-gnu/"
	host := hostRoot + lib
	library := func(name string, links ...string) Library {
		return Library{File: File{Path: lib + name + "." + version, HostPath: host + name + "." + version}, Links: links}
	}
	return &Files{
		Version: version,
		Libraries: []Library{
			library("libcuda.so", "libcuda.so", "libcuda.so.1"),
			library("libnvidia-ml.so", "libnvidia-ml.so.1"),
			library("libnvidia-ptxjitcompiler.so", "libnvidia-ptxjitcompiler.so.1"),
		},
		Binaries: []File{
			{Path: "/usr/bin/nvidia-smi", HostPath: hostRoot + "/usr/bin/nvidia-smi"},
			{Path: "/usr/bin/nvidia-cuda-mps-control", HostPath: hostRoot + "/usr/bin/nvidia-cuda-mps-control"},
		},
		Firmware: []File{
			{Path: "/lib/firmware/nvidia/" + version + "/gsp_ga10x.bin", HostPath: hostRoot + "/usr/lib/firmware/nvidia/" + version + "/gsp_ga10x.bin"},
			{Path: "/lib/firmware/nvidia/" + version + "/gsp_tu10x.bin", HostPath: hostRoot + "/usr/lib/firmware/nvidia/" + version + "/gsp_tu10x.bin"},
		},
	}
}

func TestFind(t *testing.T) {
	tests := map[string]struct {
		entries []entry
		version string
		want    func() *Files
		wantErr []string // substrings of an ErrMissing error
	}{
		"Debian layout with merged /usr": {
			entries: debianRoot(),
			want:    debianFiles,
		},
		"version as discovery reports it (semver)": {
			entries: func() []entry {
				var out []entry
				for _, e := range debianRoot() {
					e.path = strings.ReplaceAll(e.path, version, "535.104.05")
					e.link = strings.ReplaceAll(e.link, version, "535.104.05")
					out = append(out, e)
				}
				return out
			}(),
			version: "535.104.5",
			want: func() *Files {
				f := debianFiles()
				f.Version = "535.104.05"
				fix := func(file *File) {
					file.Path = strings.ReplaceAll(file.Path, version, "535.104.05")
					file.HostPath = strings.ReplaceAll(file.HostPath, version, "535.104.05")
				}
				for i := range f.Libraries {
					fix(&f.Libraries[i].File)
				}
				for i := range f.Firmware {
					fix(&f.Firmware[i])
				}
				return f
			},
		},
		"libraries of another version left behind by an upgrade": {
			entries: append(debianRoot(),
				file("usr/lib/x86_64-linux-gnu/libcuda.so.560.35.03"),
				file("usr/lib/x86_64-linux-gnu/libnvidia-cfg.so.560.35.03")),
			want: debianFiles,
		},
		"Red Hat layout: /usr/lib64, reached through an absolute /lib64 link too": {
			entries: []entry{
				symlink("lib64", "/usr/lib64"),
				file("usr/lib64/libcuda.so." + version),
				symlink("usr/lib64/libcuda.so.1", "/usr/lib64/libcuda.so."+version),
				file("usr/lib64/libnvidia-ml.so." + version),
				symlink("usr/lib64/libnvidia-ml.so.1", "libnvidia-ml.so."+version),
			},
			want: func() *Files {
				return &Files{Version: version, Libraries: []Library{
					{File: File{Path: "/usr/lib64/libcuda.so." + version, HostPath: hostRoot + "/usr/lib64/libcuda.so." + version}, Links: []string{"libcuda.so.1"}},
					{File: File{Path: "/usr/lib64/libnvidia-ml.so." + version, HostPath: hostRoot + "/usr/lib64/libnvidia-ml.so." + version}, Links: []string{"libnvidia-ml.so.1"}},
				}}
			},
		},
		"versioned names that are links into another directory": {
			// Debian's packaged driver: the files live in nvidia/current.
			entries: []entry{
				file("usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so." + version),
				symlink("usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.1", "libcuda.so."+version),
				file("usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so." + version),
				symlink("usr/lib/x86_64-linux-gnu/libnvidia-ml.so."+version, "nvidia/current/libnvidia-ml.so."+version),
				symlink("usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "libnvidia-ml.so."+version),
			},
			want: func() *Files {
				lib := "/usr/lib/x86_64-linux-gnu/"
				return &Files{Version: version, Libraries: []Library{
					{File: File{Path: lib + "libnvidia-ml.so." + version, HostPath: hostRoot + lib + "nvidia/current/libnvidia-ml.so." + version}, Links: []string{"libnvidia-ml.so.1"}},
					{File: File{Path: lib + "nvidia/current/libcuda.so." + version, HostPath: hostRoot + lib + "nvidia/current/libcuda.so." + version}, Links: []string{"libcuda.so.1"}},
					{File: File{Path: lib + "nvidia/current/libnvidia-ml.so." + version, HostPath: hostRoot + lib + "nvidia/current/libnvidia-ml.so." + version}},
				}}
			},
		},
		"links that escape the root stay inside it": {
			entries: []entry{
				file("usr/lib64/libcuda.so." + version),
				// Resolved under the root, ../../.. stops at its /.
				symlink("usr/lib64/libnvidia-ml.so."+version, "../../../../../../../etc/secret"),
				file("etc/secret"),
				symlink("usr/lib64/libcuda.so.1", "/../../usr/lib64/libcuda.so."+version),
			},
			want: func() *Files {
				return &Files{Version: version, Libraries: []Library{
					{File: File{Path: "/usr/lib64/libcuda.so." + version, HostPath: hostRoot + "/usr/lib64/libcuda.so." + version}, Links: []string{"libcuda.so.1"}},
					// A link named as a library may point anywhere in
					// the root: the host path says where, never
					// outside it.
					{File: File{Path: "/usr/lib64/libnvidia-ml.so." + version, HostPath: hostRoot + "/etc/secret"}},
				}}
			},
		},
		"dangling link in place of a required library": {
			entries: []entry{
				file("usr/lib64/libcuda.so." + version),
				symlink("usr/lib64/libnvidia-ml.so."+version, "libnvidia-ml.so.gone"),
			},
			wantErr: []string{"libnvidia-ml.so." + version},
		},
		"no libcuda": {
			entries: []entry{file("usr/lib64/libnvidia-ml.so." + version)},
			wantErr: []string{"libcuda.so." + version + " under " + hostRoot},
		},
		"only another version": {
			entries: []entry{file("usr/lib64/libcuda.so.560.35.03"), file("usr/lib64/libnvidia-ml.so.560.35.03")},
			wantErr: []string{"libcuda.so." + version + ", libnvidia-ml.so." + version, "there are libraries of version 560.35.03", "kernel module differ"},
		},
		"empty root": {
			wantErr: []string{"libcuda.so." + version},
		},
		"version unknown": {
			entries: debianRoot(),
			version: "[N/A]",
			wantErr: []string{`driver version "[N/A]"`},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			root := Root{Host: hostRoot, Local: makeRoot(t, tc.entries)}
			v := tc.version
			if v == "" {
				v = version
			}
			got, err := root.Find(v)
			if tc.wantErr != nil {
				if !errors.Is(err, ErrMissing) {
					t.Fatalf("Find: %v, %+v; want an ErrMissing error", err, got)
				}
				for _, want := range tc.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not say %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Find: %v", err)
			}
			if diff := cmp.Diff(tc.want(), got); diff != "" {
				t.Errorf("files (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFindWithoutRoot(t *testing.T) {
	root := Root{Host: "/driver", Local: filepath.Join(t.TempDir(), "not-mounted")}
	if _, err := root.Find(version); !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), "driver root /driver") {
		t.Errorf("Find: %v, want ErrMissing naming the root", err)
	}
}
