package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// fakeBinary stands in for a real binary: the image does not run it, so its
// bytes do not matter, and building a real one would take minutes cold.
func fakeBinary(t *testing.T) (string, []byte) {
	t.Helper()
	data := []byte("\x7fELF not really a binary\n")
	p := filepath.Join(t.TempDir(), "scheduler")
	if err := os.WriteFile(p, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return p, data
}

func testSpec(binary string) Spec {
	return Spec{
		Name:         "scheduler",
		Binary:       binary,
		Version:      "v0.1.0",
		Revision:     "0123456789abcdef0123456789abcdef01234567",
		Source:       "https://github.com/drasched/drasched",
		Created:      time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC),
		Architecture: "arm64",
	}
}

func TestImageRoundTrip(t *testing.T) {
	binary, data := fakeBinary(t)
	spec := testSpec(binary)
	tarPath := filepath.Join(t.TempDir(), "scheduler-v0.1.0.tar")
	if err := run([]string{
		"--name=scheduler", "--binary=" + binary, "--version=v0.1.0", "--revision=" + spec.Revision,
		"--arch=arm64", "--created=2026-11-24T12:00:00Z", "--output=" + tarPath,
	}); err != nil {
		t.Fatal(err)
	}

	tag, err := name.NewTag("ghcr.io/drasched/scheduler:v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(tarPath, &tag)
	if err != nil {
		t.Fatalf("load the tarball back: %v", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	created := v1.Time{Time: spec.Created}
	want := v1.Config{
		Entrypoint: []string{"/usr/local/bin/scheduler"},
		User:       "65532:65532",
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		WorkingDir: "/",
		Labels: map[string]string{
			"org.opencontainers.image.title":    "scheduler",
			"org.opencontainers.image.version":  "v0.1.0",
			"org.opencontainers.image.revision": spec.Revision,
			"org.opencontainers.image.source":   "https://github.com/drasched/drasched",
			"org.opencontainers.image.created":  "2026-11-24T12:00:00Z",
		},
	}
	if diff := cmp.Diff(want, cfg.Config); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	if cfg.OS != "linux" || cfg.Architecture != "arm64" {
		t.Errorf("platform %s/%s, want linux/arm64", cfg.OS, cfg.Architecture)
	}
	if !cfg.Created.Equal(created.Time) {
		t.Errorf("created %v, want %v", cfg.Created, created)
	}

	// The tarball holds the image that was built: same config, same layers.
	built, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	builtCfg, err := built.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	loadedCfg, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if builtCfg != loadedCfg {
		t.Errorf("config digest in the tarball %s, built %s", loadedCfg, builtCfg)
	}

	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	files := layerFiles(t, layers[0])
	bin, ok := files["usr/local/bin/scheduler"]
	if !ok {
		t.Fatalf("no usr/local/bin/scheduler in the layer; it has %v", slices.Sorted(maps.Keys(files)))
	}
	if !bytes.Equal(bin.data, data) || bin.hdr.Mode != 0o755 || bin.hdr.Uid != 0 {
		t.Errorf("usr/local/bin/scheduler: mode %o, uid %d, %d bytes; want the binary, mode 755, uid 0", bin.hdr.Mode, bin.hdr.Uid, len(bin.data))
	}
	if tmp := files["tmp/"]; tmp.hdr == nil || tmp.hdr.Mode != 0o1777 {
		t.Errorf("tmp/ missing or not mode 1777")
	}
	for n, f := range files {
		if !f.hdr.ModTime.Equal(spec.Created) {
			t.Errorf("%s: time %v, want %v", n, f.hdr.ModTime, spec.Created)
		}
	}
}

func TestImageReproducible(t *testing.T) {
	binary, _ := fakeBinary(t)
	digest := func(spec Spec) v1.Hash {
		t.Helper()
		img, err := Build(spec)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	spec := testSpec(binary)
	first := digest(spec)
	if second := digest(spec); first != second {
		t.Errorf("two builds of the same spec: %s and %s", first, second)
	}
	spec.Created = spec.Created.Add(time.Second)
	if other := digest(spec); other == first {
		t.Errorf("another creation time gave the same digest %s", first)
	}
}

func TestImageInvalidSpec(t *testing.T) {
	for name, args := range map[string][]string{
		"no created":   {"--name=scheduler", "--binary=x", "--version=v0.1.0", "--output=x.tar"},
		"bad tag":      {"--name=scheduler", "--binary=x", "--version=v0.1.0+dirty", "--created=2026-11-24T12:00:00Z", "--output=x.tar"},
		"no output":    {"--name=scheduler", "--binary=x", "--version=v0.1.0", "--created=2026-11-24T12:00:00Z"},
		"no binary":    {"--name=scheduler", "--binary=", "--version=v0.1.0", "--created=2026-11-24T12:00:00Z", "--output=x.tar"},
		"extra args":   {"--name=scheduler", "--output=x.tar", "extra"},
		"missing file": {"--name=scheduler", "--binary=/nonexistent", "--version=v0.1.0", "--created=2026-11-24T12:00:00Z", "--output=" + filepath.Join(t.TempDir(), "x.tar")},
	} {
		t.Run(name, func(t *testing.T) {
			if err := run(args); err == nil {
				t.Error("no error")
			}
		})
	}
}

type layerFile struct {
	hdr  *tar.Header
	data []byte
}

func layerFiles(t *testing.T, layer v1.Layer) map[string]layerFile {
	t.Helper()
	rc, err := layer.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	files := map[string]layerFile{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[hdr.Name] = layerFile{hdr: hdr, data: data}
	}
}
