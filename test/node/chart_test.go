//go:build node

package node

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestChart checks what the chart installed: drasched's Deployment and the
// GPU driver's DaemonSet run on the node from the images `make images`
// built (the same image IDs as the tarballs hack/node.sh imported; nothing
// was pulled), with the values this node needs. The scheduler's image is
// the build for the API server's minor (its tag names it); the driver's is
// one for every cluster.
func TestChart(t *testing.T) {
	c := setup(t)
	version := chartAppVersion(t, c.repo)
	server, err := c.client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	schedulerTag := fmt.Sprintf("%s-k8s%s.%s", version, server.Major, strings.TrimSuffix(server.Minor, "+"))
	for name, tc := range map[string]struct {
		selector string
		image    string
		tarball  string
	}{
		"scheduler": {
			selector: "app.kubernetes.io/name=drasched-scheduler",
			image:    "ghcr.io/drasched/scheduler:" + schedulerTag,
			tarball:  "scheduler-" + schedulerTag + ".tar",
		},
		"gpu-kubelet-plugin": {
			selector: "app.kubernetes.io/name=gpu-kubelet-plugin",
			image:    "ghcr.io/drasched/gpu-kubelet-plugin:" + version,
			tarball:  "gpu-kubelet-plugin-" + version + ".tar",
		},
	} {
		t.Run(name, func(t *testing.T) {
			configDigest := tarballConfigDigest(t, filepath.Join(c.repo, "_output", "images", tc.tarball))
			pods, err := c.client.CoreV1().Pods(releaseNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: tc.selector})
			if err != nil {
				t.Fatal(err)
			}
			if len(pods.Items) == 0 {
				t.Fatalf("no pods %s", tc.selector)
			}
			for _, p := range pods.Items {
				if p.Spec.NodeName != c.nodeName || p.Status.Phase != corev1.PodRunning {
					t.Errorf("pod %s: node %q, phase %s; want Running on %s", p.Name, p.Spec.NodeName, p.Status.Phase, c.nodeName)
				}
				if p.Spec.RuntimeClassName != nil {
					t.Errorf("pod %s: runtimeClassName %q", p.Name, *p.Spec.RuntimeClassName)
				}
				for _, s := range p.Status.ContainerStatuses {
					if s.Image != tc.image || !strings.HasSuffix(s.ImageID, configDigest) || !s.Ready {
						t.Errorf("pod %s container %s: image %s (%s), ready %v; want %s (%s), ready",
							p.Name, s.Name, s.Image, s.ImageID, s.Ready, tc.image, configDigest)
					}
				}
			}
		})
	}
}

// chartAppVersion is charts/drasched's appVersion: the tag of the GPU
// driver's image, and the start of the scheduler's.
func chartAppVersion(t *testing.T, repo string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo, "charts", "drasched", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "appVersion:"); ok {
			return strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	t.Fatal("Chart.yaml has no appVersion")
	return ""
}

// tarballConfigDigest returns the image ID (config digest) of the image in
// a `docker save` tarball, as the container runtime reports it.
func tarballConfigDigest(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("%s has no manifest.json", path)
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Name != "manifest.json" {
			continue
		}
		var manifest []struct{ Config string }
		if err := json.NewDecoder(tr).Decode(&manifest); err != nil {
			t.Fatal(err)
		}
		if len(manifest) != 1 {
			t.Fatalf("%s: %d images, want one", path, len(manifest))
		}
		// "sha256:<hex>" (go-containerregistry) or "blobs/sha256/<hex>".
		return strings.TrimPrefix(strings.ReplaceAll(manifest[0].Config, "/", ":"), "blobs:")
	}
}
