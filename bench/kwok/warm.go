package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The API server sizes the event channel of every new watch from its watch
// cache's capacity (capacity/75 s, at least 10 events): the capacity it
// needed for the last 75 s of events. A fresh cluster's pod watch cache
// holds 100 events, so the scheduler started on it watches pods through a
// channel of 10. When a case then creates thousands of pods at once on 2
// busy cores, the channels of 10 fill, and the API server closes every pod
// watcher whose channel is full (cache_watcher.go: "Forcing pods watcher
// close due to unresponsiveness"), 32-55 times in a 1,000-node noclaims
// run, the scheduler's among them. A rewatch that is closed again before
// its first event makes client-go's reflector back off (0.8-1.6 s) and
// list the pods again: a pause of 1.2-2 s with pods waiting, in 5 of 18
// runs of the two schedulers, which decided the case's p99. Warmed, the
// API server closed 3-5 pod watches per run (those of the controller
// manager and kwok, made before), the scheduler's once in six runs.
// An API server that has been serving such a load has grown its cache
// long before, so the benchmark grows it before the scheduler starts
// (warm), with pods no scheduler takes, created and deleted until the
// cache's capacity (watch_cache_capacity) is warmCapacity.
//
// warmCapacity gives the scheduler's pod watch a channel of 171 events
// (12,800/75 s): the capacity after seven doublings of 100, reached once
// 6,400 pod events are less than 75 s old.
const warmCapacity = 12800

// warmNamespace holds the pods that grow the watch cache; warmScheduler
// is their schedulerName, which no scheduler has.
const (
	warmNamespace = "drasched-warm"
	warmScheduler = "drasched-warm-nobody"
)

// warmer grows the API server's pod watch cache.
type warmer struct {
	client kubernetes.Interface
	// capacity reads the pod watch cache's capacity.
	capacity func(ctx context.Context) (int, error)
	out      io.Writer
	workers  int
	// batch is how many pods a round creates and deletes, rounds how many
	// rounds at most.
	batch, rounds int
}

func newWarmCommand(client func() (kubernetes.Interface, error)) *cobra.Command {
	w := warmer{workers: 32, batch: 1000, rounds: 10}
	target := warmCapacity
	cmd := &cobra.Command{
		Use:   "warm",
		Short: "Grow the API server's pod watch cache to what a busy cluster's has, before the scheduler starts",
		Long: `warm creates and deletes pods that no scheduler takes, in a namespace of
their own, until the API server's pod watch cache has the capacity of one
that has served the benchmark's load (watch_cache_capacity): the
API server sizes each new watch's event channel from it, and the channels of
a fresh cluster (10 events) make it close the scheduler's pod watch when a
case creates its pods at once. Run it after the cluster is up and before the
scheduler starts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			w.client, w.out = c, cmd.OutOrStdout()
			w.capacity = func(ctx context.Context) (int, error) { return podWatchCacheCapacity(ctx, c) }
			return w.warm(cmd.Context(), target)
		},
	}
	cmd.Flags().IntVar(&target, "capacity", target, "The pod watch cache capacity to reach.")
	cmd.Flags().IntVar(&w.batch, "batch", w.batch, "Pods created and deleted per round.")
	cmd.Flags().IntVar(&w.rounds, "rounds", w.rounds, "Rounds at most; the capacity not reached after them is an error.")
	cmd.Flags().IntVar(&w.workers, "workers", w.workers, "Pods created and deleted in parallel.")
	return cmd
}

// warm creates and deletes batches of pods until the pod watch cache's
// capacity is at least target, then deletes the namespace.
func (w *warmer) warm(ctx context.Context, target int) error {
	if w.batch < 1 || w.rounds < 1 {
		return fmt.Errorf("warm: --batch and --rounds must be above 0, not %d and %d", w.batch, w.rounds)
	}
	start := time.Now()
	capacity, err := w.capacity(ctx)
	if err != nil {
		return err
	}
	if capacity >= target {
		_, _ = fmt.Fprintf(w.out, "    pod watch cache: capacity %d already\n", capacity)
		return nil
	}
	if err := w.namespace(ctx); err != nil {
		return err
	}
	pods := 0
	for round := 0; capacity < target; round++ {
		if round == w.rounds {
			return fmt.Errorf("warm: pod watch cache capacity %d after %d pods created and deleted, want %d", capacity, pods, target)
		}
		names := make([]string, w.batch)
		for i := range names {
			names[i] = fmt.Sprintf("warm-%d-%d", round, i)
		}
		if err := parallelize(ctx, w.workers, names, "warm pods not created", func(name string) error {
			_, err := w.client.CoreV1().Pods(warmNamespace).Create(ctx, warmPod(name), metav1.CreateOptions{})
			return err
		}); err != nil {
			return err
		}
		// Not bound, so deleted at once.
		if err := parallelize(ctx, w.workers, names, "warm pods not deleted", func(name string) error {
			err := w.client.CoreV1().Pods(warmNamespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}); err != nil {
			return err
		}
		pods += len(names)
		if capacity, err = w.capacity(ctx); err != nil {
			return err
		}
	}
	if err := w.client.CoreV1().Namespaces().Delete(ctx, warmNamespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("warm: delete namespace %s: %w", warmNamespace, err)
	}
	_, _ = fmt.Fprintf(w.out, "    pod watch cache: capacity %d after %d pods created and deleted in %.1f s\n",
		capacity, pods, time.Since(start).Seconds())
	return nil
}

// namespace creates the warm namespace and its default ServiceAccount,
// without which the ServiceAccount admission plugin refuses pods; the
// controller manager would make it too, a moment later.
func (w *warmer) namespace(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: warmNamespace}}
	if _, err := w.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("warm: create namespace %s: %w", warmNamespace, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: warmNamespace}}
	if _, err := w.client.CoreV1().ServiceAccounts(warmNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("warm: create the default ServiceAccount of namespace %s: %w", warmNamespace, err)
	}
	return nil
}

// warmPod is a pod that no scheduler takes.
func warmPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: warmNamespace},
		Spec: corev1.PodSpec{
			SchedulerName:                warmScheduler,
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
}

// podWatchCacheCapacity reads the capacity of the API server's pod watch
// cache from its metrics.
func podWatchCacheCapacity(ctx context.Context, client kubernetes.Interface) (int, error) {
	data, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the API server's metrics: %w", err)
	}
	return watchCacheCapacity(data, "", "pods")
}

// watchCacheCapacity finds the watch_cache_capacity of a
// resource in metrics in the Prometheus text format.
func watchCacheCapacity(metrics []byte, group, resource string) (int, error) {
	// The watch cache subsystem's, with no apiserver_ prefix.
	const name = "watch_cache_capacity"
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(metrics))
	if err != nil {
		return 0, fmt.Errorf("parse the API server's metrics: %w", err)
	}
	family, ok := families[name]
	if !ok {
		return 0, errors.New("the API server's metrics have no " + name)
	}
	for _, m := range family.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["group"] == group && labels["resource"] == resource {
			return int(m.GetGauge().GetValue()), nil
		}
	}
	return 0, fmt.Errorf("the API server's metrics have no %s of resource %q in group %q", name, resource, group)
}
