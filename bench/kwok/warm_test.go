package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/drasched/drasched/test/integration/controlplane"
)

func TestMain(m *testing.M) {
	controlplane.Main(m)
}

func TestWatchCacheCapacity(t *testing.T) {
	const metrics = `# HELP watch_cache_capacity [ALPHA] Total capacity of watch cache broken by resource type.
# TYPE watch_cache_capacity gauge
watch_cache_capacity{group="",resource="nodes"} 200
watch_cache_capacity{group="",resource="pods"} 12800
watch_cache_capacity{group="resource.k8s.io",resource="resourceslices"} 400
`
	for name, tc := range map[string]struct {
		metrics, group, resource string
		want                     int
		err                      string
	}{
		"pods":           {metrics: metrics, resource: "pods", want: 12800},
		"group":          {metrics: metrics, group: "resource.k8s.io", resource: "resourceslices", want: 400},
		"no such":        {metrics: metrics, resource: "services", err: `no watch_cache_capacity of resource "services"`},
		"group differs":  {metrics: metrics, group: "resource.k8s.io", resource: "pods", err: `of resource "pods" in group "resource.k8s.io"`},
		"no such metric": {metrics: "# TYPE other gauge\nother 1\n", resource: "pods", err: "have no watch_cache_capacity"},
		"not the format": {metrics: "watch_cache_capacity{resource=pods 1\n", resource: "pods", err: "parse the API server's metrics"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := watchCacheCapacity([]byte(tc.metrics), tc.group, tc.resource)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

// TestWarm grows the pod watch cache of a real API server (the shared
// control plane's, which caches pods as kube-apiserver does by default)
// and reads it back from its metrics.
func TestWarm(t *testing.T) {
	client, err := kubernetes.NewForConfig(controlplane.Shared(t).Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	capacity := func(ctx context.Context) (int, error) { return podWatchCacheCapacity(ctx, client) }
	before, err := capacity(ctx)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("not reached", func(t *testing.T) {
		w := warmer{client: client, capacity: capacity, out: &bytes.Buffer{}, workers: 8, batch: 5, rounds: 1}
		err := w.warm(ctx, before*1000)
		if err == nil || !strings.Contains(err.Error(), "after 5 pods created and deleted") {
			t.Fatalf("error %v, want the capacity not reached after 5 pods", err)
		}
	})

	t.Run("bad flags", func(t *testing.T) {
		w := warmer{client: client, capacity: capacity, out: &bytes.Buffer{}, workers: 8, batch: 0, rounds: 1}
		if err := w.warm(ctx, before*4); err == nil || !strings.Contains(err.Error(), "must be above 0") {
			t.Fatalf("error %v, want one about --batch", err)
		}
	})

	t.Run("grows", func(t *testing.T) {
		var out bytes.Buffer
		w := warmer{client: client, capacity: capacity, out: &out, workers: 8, batch: before, rounds: 10}
		target := before * 4
		if err := w.warm(ctx, target); err != nil {
			t.Fatal(err)
		}
		got, err := capacity(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got < target {
			t.Errorf("pod watch cache capacity %d after warm, want at least %d", got, target)
		}
		pods, err := client.CoreV1().Pods(warmNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) > 0 {
			t.Errorf("%d warm pods left", len(pods.Items))
		}
		ns, err := client.CoreV1().Namespaces().Get(ctx, warmNamespace, metav1.GetOptions{})
		if err == nil && ns.DeletionTimestamp == nil {
			t.Errorf("namespace %s left", warmNamespace)
		} else if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "pod watch cache: capacity") {
			t.Errorf("output %q says nothing of the capacity", out.String())
		}

		// Warm again: the capacity is there, nothing is created.
		out.Reset()
		if err := w.warm(ctx, target); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "already") {
			t.Errorf("output %q, want the capacity already reached", out.String())
		}
	})
}
