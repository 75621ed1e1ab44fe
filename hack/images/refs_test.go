package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// repoRoot is the drasched checkout this module lives in.
const repoRoot = "../.."

// makeImageRefs returns what `make images` builds, as `make image-refs`
// prints it, with the Makefile's defaults: no VERSION or IMAGE_REPOSITORY
// from the environment or from a `make test VERSION=...` above us.
func makeImageRefs(t *testing.T) []string {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	cmd := exec.Command("make", "--no-print-directory", "-s", "-C", repoRoot, "image-refs")
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "VERSION", "IMAGE_REPOSITORY", "MAKEFLAGS", "MFLAGS", "MAKELEVEL":
		default:
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make image-refs: %v\n%s", err, stderr.String())
	}
	refs := strings.Fields(string(out))
	if len(refs) == 0 {
		t.Fatal("make image-refs printed nothing")
	}
	return refs
}

var (
	resourceLine = regexp.MustCompile(`^- (\S+\.yaml)\s*$`)
	imageLine    = regexp.MustCompile(`^\s*(?:- )?image:\s*"?([^"\s]+)"?\s*$`)
)

// kustomizationImages returns the images that the manifests of a
// kustomization directory under config/ name. The manifests are plain YAML
// whose image fields are on lines of their own; config/*_test.go decode them
// strictly.
func kustomizationImages(t *testing.T, dir string) []string {
	t.Helper()
	kustomization, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var images []string
	for _, line := range strings.Split(string(kustomization), "\n") {
		m := resourceLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		f, err := os.Open(filepath.Join(dir, m[1]))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if m := imageLine.FindStringSubmatch(sc.Text()); m != nil {
				images = append(images, m[1])
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
	}
	return images
}

// TestManifestsNameBuiltImages checks that the images config/ deploys are
// exactly those `make images` builds, with the same tags. (The chart is
// checked against config/ by the chart's own test.)
func TestManifestsNameBuiltImages(t *testing.T) {
	built := makeImageRefs(t)
	var deployed []string
	for _, dir := range []string{"config/scheduler", "config/gpu-driver"} {
		images := kustomizationImages(t, filepath.Join(repoRoot, dir))
		if len(images) == 0 {
			t.Errorf("%s: no images", dir)
		}
		deployed = append(deployed, images...)
	}
	slices.Sort(built)
	slices.Sort(deployed)
	if diff := cmp.Diff(built, deployed); diff != "" {
		t.Errorf("images built by make images (-) and deployed by config/ (+):\n%s", diff)
	}
}

// TestDockerfiles checks that each image's Dockerfile builds what `make
// images` builds: the same default version, binary path, user and
// entrypoint.
func TestDockerfiles(t *testing.T) {
	for _, ref := range makeImageRefs(t) {
		repo, tag, _ := strings.Cut(ref[strings.LastIndex(ref, "/")+1:], ":")
		// The scheduler's tag names its Kubernetes minor (v0.1.0-k8s1.37).
		version, minor, scheduler := strings.Cut(tag, "-k8s")
		t.Run(repo, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(repoRoot, "cmd", repo, "Dockerfile"))
			if err != nil {
				t.Fatal(err)
			}
			dockerfile := string(data)
			bin := BinDir + "/" + repo
			for _, want := range []string{
				"ARG VERSION=" + version + "\n",
				"org.opencontainers.image.title=" + repo + " ",
				"COPY --from=builder /out/images/bin/linux_${TARGETARCH}/" + repo + " " + bin + "\n",
				"USER " + User + "\n",
				`ENTRYPOINT ["` + bin + `"]` + "\n",
			} {
				if !strings.Contains(dockerfile, want) {
					t.Errorf("Dockerfile lacks %q", want)
				}
			}
			if n := strings.Count(dockerfile, "ARG VERSION="); n != 2 {
				t.Errorf("Dockerfile has %d ARG VERSION= lines, want 2 (builder and image)", n)
			}
			if scheduler && strings.Count(dockerfile, "ARG KUBE_MINOR="+minor+"\n") != 2 {
				t.Errorf("Dockerfile lacks ARG KUBE_MINOR=%s in the builder and the image", minor)
			}
		})
	}
}
