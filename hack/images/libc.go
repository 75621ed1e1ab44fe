package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"
)

// The GPU plugin runs nvidia-smi, which the NVIDIA container runtime mounts
// from the host without the C library it is linked against or the dynamic
// loader: an image with nothing but a static binary cannot exec it ("no
// such file or directory", the missing loader). Such an image gets a base
// layer with the loader and the shared libraries of the GNU C library,
// taken from Debian's libc6 package (hack/libc6.sh downloads it, checked
// against hack/images/libc6.sha256, and unpacks its files as a tar).

// libcLibrary matches the files of the package that a dynamically linked
// program needs: the loader and the libraries, in the directories the
// loader searches. Not the gconv modules, the auditing and profiling
// libraries' helpers, ldconfig, ldd or the other programs, nor
// /etc/ld.so.conf.d (ldconfig's, and there is no ldconfig).
var libcLibrary = regexp.MustCompile(`^(usr/)?lib(64|32|x32)?/([a-z0-9_]+-linux-gnu[a-z0-9_]*/)?(ld-linux[^/]*|lib[^/]*)\.so(\.[0-9]+)*$`)

// libcCopyright is the package's copyright file, which goes along: the
// GNU C library is under the LGPL.
var libcCopyright = regexp.MustCompile(`^usr/share/doc/libc6/copyright$`)

// libcLayer returns the uncompressed layer of the C library's files in
// data, a tar of the package's files (`dpkg-deb --fsys-tarfile`): regular
// files and symbolic links only, parent directories added, in the tar's
// order, every entry owned by root and dated created.
func libcLayer(data []byte, created time.Time) ([]byte, error) {
	tr := tar.NewReader(bytes.NewReader(data))
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	found := false
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read the C library's files: %w", err)
		}
		name := strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")
		if !libcLibrary.MatchString(name) && !libcCopyright.MatchString(name) {
			continue
		}
		out := &tar.Header{Name: name, Mode: hdr.Mode & 0o777, ModTime: created.UTC(), Format: tar.FormatPAX}
		switch hdr.Typeflag {
		case tar.TypeReg:
			out.Typeflag, out.Size = tar.TypeReg, hdr.Size
		case tar.TypeSymlink:
			out.Typeflag, out.Linkname = tar.TypeSymlink, hdr.Linkname
		default:
			continue
		}
		for _, dir := range parents(name) {
			if dirs[dir] {
				continue
			}
			dirs[dir] = true
			if err := tw.WriteHeader(&tar.Header{Name: dir + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: created.UTC(), Format: tar.FormatPAX}); err != nil {
				return nil, err
			}
		}
		if err := tw.WriteHeader(out); err != nil {
			return nil, err
		}
		if out.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, tr); err != nil {
				return nil, err
			}
		}
		found = found || (out.Typeflag == tar.TypeReg && strings.HasPrefix(path.Base(name), "ld-linux"))
	}
	if !found {
		return nil, errors.New("the C library's files have no dynamic loader (ld-linux*.so*): not a tar of Debian's libc6 package?")
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// parents lists the directories above a path, outermost first.
func parents(name string) []string {
	var dirs []string
	for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
		dirs = append(dirs, dir)
	}
	slices.Reverse(dirs)
	return dirs
}

// readLibc reads the tar of the C library's files.
func readLibc(file string) ([]byte, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("the C library's files: %w", err)
	}
	return data, nil
}
