// Command images builds drasched's container images without a container
// engine or a registry: each is a static binary on an empty base (with
// --libc, on a layer with the GNU C library: see libc.go), written as a
// tarball in the format of `docker save`, which `docker load`, `podman
// load`, `ctr images import`, `kind load image-archive` and `crane push`
// read. `make images` runs it; see the Makefile for the version, the
// revision and the creation time it passes.
//
//	go run . --name=scheduler --binary=../../_output/images/bin/linux_amd64/scheduler \
//	  --repository=ghcr.io/drasched --version=v0.1.0 --revision=$(git rev-parse HEAD) \
//	  --created=2026-11-24T12:00:00Z --output=../../_output/images/scheduler-v0.1.0.tar
//
// It lives in its own module (hack/images/go.mod) so that
// go-containerregistry's dependencies stay out of drasched's own module.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	var spec Spec
	var repository, created, output string
	fs.StringVar(&spec.Name, "name", "", "binary and image name (scheduler, gpu-kubelet-plugin)")
	fs.StringVar(&spec.Binary, "binary", "", "static linux binary to put into the image")
	fs.StringVar(&spec.Version, "version", "", "image tag and org.opencontainers.image.version")
	fs.StringVar(&spec.Revision, "revision", "", "org.opencontainers.image.revision: the commit")
	fs.StringVar(&spec.Source, "source", "https://github.com/drasched/drasched", "org.opencontainers.image.source")
	fs.StringVar(&spec.Architecture, "arch", runtime.GOARCH, "GOARCH of the binary")
	fs.StringVar(&repository, "repository", "ghcr.io/drasched", "repository the image is named in: <repository>/<name>:<version>")
	fs.StringVar(&created, "created", "", "creation time, RFC 3339 (the commit's time, for reproducible images)")
	fs.StringVar(&output, "output", "", "tarball to write")
	fs.Func("extra-binary", "another binary for "+BinDir+" (repeatable)", func(v string) error {
		spec.Extra = append(spec.Extra, v)
		return nil
	})
	fs.StringVar(&spec.Libc, "libc", "", "tar of the files of Debian's libc6 package (hack/libc6.sh): a base layer with the dynamic loader and the C library")
	fs.StringVar(&spec.LibcPackage, "libc-package", "", "the package of --libc, libc6_<version>_<arch>, for the image's history")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if output == "" {
		return fmt.Errorf("--output is empty")
	}
	t, err := time.Parse(time.RFC3339, created)
	if err != nil {
		return fmt.Errorf("--created: %w", err)
	}
	spec.Created = t
	tag, err := name.NewTag(repository+"/"+spec.Name+":"+spec.Version, name.StrictValidation)
	if err != nil {
		return err
	}
	img, err := Build(spec)
	if err != nil {
		return err
	}
	if err := tarball.WriteToFile(output, tag, img); err != nil {
		return fmt.Errorf("write %s: %w", output, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s %s\n", output, tag, digest)
	return nil
}
