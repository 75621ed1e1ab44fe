package main

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// libcTar is a tar laid out as `dpkg-deb --fsys-tarfile` prints Debian's
// libc6 package, with a few files of each kind.
func libcTar(t *testing.T, loader bool) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, typ byte, link string) {
		hdr := &tar.Header{Name: "./" + name, Typeflag: typ, Mode: 0o644, Linkname: link, ModTime: time.Unix(1700000000, 0), Uid: 1000}
		var data []byte
		if typ == tar.TypeReg {
			data = []byte(name)
			hdr.Size = int64(len(data))
		}
		if typ == tar.TypeDir {
			hdr.Mode = 0o755
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	add("", tar.TypeDir, "")
	add("etc/", tar.TypeDir, "")
	add("etc/ld.so.conf.d/x86_64-linux-gnu.conf", tar.TypeReg, "")
	add("lib/", tar.TypeDir, "")
	add("lib/x86_64-linux-gnu/", tar.TypeDir, "")
	if loader {
		add("lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", tar.TypeReg, "")
	}
	add("lib/x86_64-linux-gnu/libc.so.6", tar.TypeReg, "")
	add("lib/x86_64-linux-gnu/libmemusage.so", tar.TypeReg, "")
	add("lib64/", tar.TypeDir, "")
	add("lib64/ld-linux-x86-64.so.2", tar.TypeSymlink, "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
	add("sbin/ldconfig", tar.TypeReg, "")
	add("usr/bin/ldd", tar.TypeReg, "")
	add("usr/lib/x86_64-linux-gnu/gconv/UTF-16.so", tar.TypeReg, "")
	add("usr/share/doc/libc6/copyright", tar.TypeReg, "")
	add("usr/share/doc/libc6/changelog.Debian.gz", tar.TypeReg, "")
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "libc6.tar")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestImageWithLibc: an image built with --libc has the loader and the
// C library's shared libraries (and its copyright) in a layer below the
// binaries, owned by root and dated like the rest; nothing else of the
// package. The extra binaries go next to the entrypoint.
func TestImageWithLibc(t *testing.T) {
	binary, _ := fakeBinary(t)
	extra := filepath.Join(t.TempDir(), "cuda-check")
	if err := os.WriteFile(extra, []byte("cuda-check"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := testSpec(binary)
	spec.Libc, spec.LibcPackage = libcTar(t, true), "libc6_2.36-9+deb12u14_amd64"
	spec.Extra = []string{extra}
	img, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 {
		t.Fatalf("%d layers, want the C library's and the binaries'", len(layers))
	}
	libc := layerFiles(t, layers[0])
	var names []string
	for name, f := range libc {
		names = append(names, name)
		if f.hdr.Uid != 0 || f.hdr.Gid != 0 || !f.hdr.ModTime.Equal(spec.Created) {
			t.Errorf("%s: owner %d:%d, time %v; want root, %v", name, f.hdr.Uid, f.hdr.Gid, f.hdr.ModTime, spec.Created)
		}
	}
	slices.Sort(names)
	want := []string{
		"lib/", "lib/x86_64-linux-gnu/",
		"lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "lib/x86_64-linux-gnu/libc.so.6", "lib/x86_64-linux-gnu/libmemusage.so",
		"lib64/", "lib64/ld-linux-x86-64.so.2",
		"usr/", "usr/share/", "usr/share/doc/", "usr/share/doc/libc6/", "usr/share/doc/libc6/copyright",
	}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("files of the C library's layer (-want +got):\n%s", diff)
	}
	if l := libc["lib64/ld-linux-x86-64.so.2"].hdr; l.Typeflag != tar.TypeSymlink || l.Linkname != "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" {
		t.Errorf("the loader's link: %+v", l)
	}
	bins := layerFiles(t, layers[1])
	for _, name := range []string{"usr/local/bin/scheduler", "usr/local/bin/cuda-check"} {
		if f, ok := bins[name]; !ok || f.hdr.Mode != 0o755 {
			t.Errorf("%s missing or not executable in the binaries' layer", name)
		}
	}

	// The same package gives the same layer, whatever the binary: the
	// images that have it share it.
	other := spec
	other.Name, other.Extra = "gpu-kubelet-plugin", nil
	otherImg, err := Build(other)
	if err != nil {
		t.Fatal(err)
	}
	otherLayers, err := otherImg.Layers()
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := layers[0].Digest()
	d2, _ := otherLayers[0].Digest()
	if d1 != d2 {
		t.Errorf("the C library's layer differs between images: %s, %s", d1, d2)
	}
}

func TestImageLibcErrors(t *testing.T) {
	binary, _ := fakeBinary(t)
	for name, modify := range map[string]func(*Spec){
		"no loader in the package": func(s *Spec) { s.Libc, s.LibcPackage = libcTar(t, false), "libc6" },
		"not a tar":                func(s *Spec) { s.Libc, s.LibcPackage = binary, "libc6" },
		"no package name":          func(s *Spec) { s.Libc = libcTar(t, true) },
		"missing file":             func(s *Spec) { s.Libc, s.LibcPackage = filepath.Join(t.TempDir(), "libc6.tar"), "libc6" },
		"extra named as the image": func(s *Spec) { s.Extra = []string{binary} },
	} {
		t.Run(name, func(t *testing.T) {
			spec := testSpec(binary)
			modify(&spec)
			if _, err := Build(spec); err == nil {
				t.Error("no error")
			}
		})
	}
}
