package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// User is the numeric user and group the images run as: distroless' nonroot
// user, the same in the Dockerfiles and the Kubernetes manifests
// (runAsUser: 65532).
const User = "65532:65532"

// BinDir is where an image holds its binary. It is on PATH, so that
// `kubectl exec <pod> -- gpu-kubelet-plugin discover` finds the binary.
const BinDir = "/usr/local/bin"

// path is distroless/static's PATH.
const pathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Spec describes one image: a binary on an empty base, or on a base layer
// with the GNU C library.
type Spec struct {
	// Name is the binary's name under BinDir and the image's title.
	Name string
	// Binary is the binary to put into the image, read from this file.
	Binary string
	// Extra are more binaries for BinDir, by file; their names in the
	// image are their base names.
	Extra []string
	// Libc is a tar of the files of Debian's libc6 package; when set, the
	// image gets the loader and shared libraries of the GNU C library as
	// a layer below the binaries' (see libcLayer), so that it can run
	// dynamically linked programs: nvidia-smi as the NVIDIA runtime
	// mounts it.
	Libc string
	// LibcPackage names the package of Libc (libc6_<version>_<arch>) in
	// the image's history.
	LibcPackage string
	// Version, Revision and Source become the org.opencontainers.image
	// labels of the same names.
	Version  string
	Revision string
	Source   string
	// Created is the image's creation time and the time of every file in
	// it: the commit's time, so that the same commit gives the same image.
	Created time.Time
	// Architecture is a GOARCH (amd64, arm64); the OS is always linux.
	Architecture string
}

func (s Spec) validate() error {
	var errs []error
	for field, v := range map[string]string{"name": s.Name, "binary": s.Binary, "version": s.Version, "architecture": s.Architecture} {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is empty", field))
		}
	}
	if s.Created.IsZero() {
		errs = append(errs, errors.New("created is not set"))
	}
	if (s.Libc == "") != (s.LibcPackage == "") {
		errs = append(errs, errors.New("libc and libc package go together"))
	}
	for _, e := range s.Extra {
		if path.Base(e) == s.Name {
			errs = append(errs, fmt.Errorf("extra binary %s has the name of the image's binary", e))
		}
	}
	return errors.Join(errs...)
}

// Labels returns the image's org.opencontainers.image labels.
func (s Spec) Labels() map[string]string {
	labels := map[string]string{
		"org.opencontainers.image.title":   s.Name,
		"org.opencontainers.image.version": s.Version,
		"org.opencontainers.image.created": s.Created.UTC().Format(time.RFC3339),
	}
	if s.Revision != "" {
		labels["org.opencontainers.image.revision"] = s.Revision
	}
	if s.Source != "" {
		labels["org.opencontainers.image.source"] = s.Source
	}
	return labels
}

// Build returns the image of spec: one layer with the binaries,
// /etc/passwd and /etc/group naming user 65532 (as distroless does, for
// programs that look their user up) and a /tmp, on an empty base or on the
// C library's layer; the binary as entrypoint; user 65532. The same spec
// and files give the same digest.
func Build(spec Spec) (v1.Image, error) {
	if err := spec.validate(); err != nil {
		return nil, fmt.Errorf("image %q: %w", spec.Name, err)
	}
	binary, err := os.ReadFile(spec.Binary)
	if err != nil {
		return nil, err
	}
	binaries := map[string][]byte{spec.Name: binary}
	for _, e := range spec.Extra {
		if binaries[path.Base(e)], err = os.ReadFile(e); err != nil {
			return nil, err
		}
	}
	layerTar, err := rootFS(spec, binaries)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", spec.Name, err)
	}
	layer, err := ociLayer(layerTar)
	if err != nil {
		return nil, fmt.Errorf("image %q: layer: %w", spec.Name, err)
	}

	cfg, err := empty.Image.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS = "linux"
	cfg.Architecture = spec.Architecture
	cfg.Config = v1.Config{
		Entrypoint: []string{path.Join(BinDir, spec.Name)},
		User:       User,
		Env:        []string{pathEnv},
		WorkingDir: "/",
		Labels:     spec.Labels(),
	}
	created := v1.Time{Time: spec.Created.UTC()}
	img, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	var addenda []mutate.Addendum
	if spec.Libc != "" {
		files, err := readLibc(spec.Libc)
		if err != nil {
			return nil, fmt.Errorf("image %q: %w", spec.Name, err)
		}
		libcTar, err := libcLayer(files, spec.Created)
		if err != nil {
			return nil, fmt.Errorf("image %q: %w", spec.Name, err)
		}
		libc, err := ociLayer(libcTar)
		if err != nil {
			return nil, fmt.Errorf("image %q: C library layer: %w", spec.Name, err)
		}
		addenda = append(addenda, mutate.Addendum{
			Layer: libc,
			History: v1.History{
				Created:   created,
				CreatedBy: "hack/images: the dynamic loader and shared libraries of " + spec.LibcPackage,
				Comment:   "Debian's " + spec.LibcPackage + ", the GNU C library (LGPL; usr/share/doc/libc6/copyright)",
			},
		})
	}
	names := []string{path.Join(BinDir, spec.Name)}
	for _, e := range spec.Extra {
		names = append(names, path.Join(BinDir, path.Base(e)))
	}
	addenda = append(addenda, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   created,
			CreatedBy: "hack/images: " + strings.Join(names, ", ") + ", /etc/passwd, /etc/group, /tmp",
			Comment:   "drasched " + spec.Name + " " + spec.Version,
		},
	})
	if img, err = mutate.Append(img, addenda...); err != nil {
		return nil, err
	}
	return mutate.CreatedAt(img, created)
}

// ociLayer is an uncompressed layer tar as an OCI layer.
func ociLayer(layerTar []byte) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// rootFS returns the uncompressed layer of the binaries (by name):
// directories first, every entry owned by root and dated spec.Created, in a
// fixed order.
func rootFS(spec Spec, binaries map[string][]byte) ([]byte, error) {
	passwd := "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group := "root:x:0:\nnonroot:x:65532:\n"
	type entry struct {
		name string
		mode int64
		uid  int
		data []byte
		dir  bool
	}
	entries := []entry{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "home/", mode: 0o755, dir: true},
		{name: "home/nonroot/", mode: 0o700, uid: 65532, dir: true},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: "usr/", mode: 0o755, dir: true},
		{name: "usr/local/", mode: 0o755, dir: true},
		{name: "usr/local/bin/", mode: 0o755, dir: true},
	}
	for _, name := range slices.Sorted(maps.Keys(binaries)) {
		entries = append(entries, entry{name: path.Join(BinDir, name)[1:], mode: 0o755, data: binaries[name]})
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.uid,
			ModTime: spec.Created.UTC(),
			Format:  tar.FormatPAX,
		}
		if e.dir {
			hdr.Typeflag = tar.TypeDir
		} else {
			hdr.Typeflag = tar.TypeReg
			hdr.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
