//go:build !kube1.35 && !kube1.36

package capacity_test

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	resourcev1alpha3 "k8s.io/api/resource/v1alpha3"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/controller/resourcepoolstatusrequest"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/randcluster"
	"github.com/drasched/drasched/pkg/capacity"
)

var clusters = flag.Int("clusters", 8, "random clusters TestPoolStatusAsController compares")

// PoolStatusOptions compare pool statuses as the API does: quantities by
// value, an empty list as none.
var PoolStatusOptions = cmp.Options{
	cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 }),
	cmpopts.EquateEmpty(),
}

// startController runs kube-controller-manager's ResourcePoolStatusRequest
// controller on the client.
func startController(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactory(client, 0)
	c, err := resourcepoolstatusrequest.NewController(ctx, client,
		factory.Resource().V1alpha3().ResourcePoolStatusRequests(),
		factory.Resource().V1().ResourceSlices(),
		factory.Resource().V1().ResourceClaims(),
		factory.Resource().V1().DeviceTaintRules())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx, 1)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		factory.Shutdown()
	})
}

// TestPoolStatusAsController: on random clusters (fake clientset), Top's
// status of every pool equals what kube-controller-manager's
// ResourcePoolStatusRequest controller answers, with and without a default
// partition type attribute. test/integration/capacity does the same
// through a real API server.
func TestPoolStatusAsController(t *testing.T) {
	// seen counts what the statuses compared had, so that a generator
	// that stops producing something shows.
	seen := map[string]int{}
	t.Cleanup(func() {
		t.Logf("compared: %v", seen)
		for _, what := range []string{"partition summary", "shareable summary", "validation error", "unavailable", "allocated", "allocated beyond the slices"} {
			if seen[what] == 0 && !t.Failed() {
				t.Errorf("no pool with %s among the clusters", what)
			}
		}
	})
	for seed := range uint64(*clusters) {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			t.Cleanup(cancel)
			c, err := randcluster.New(randcluster.Options{Seed: seed, AdminNamespace: "admin", DeclarePartitionType: true})
			if err != nil {
				t.Fatal(err)
			}
			client := fake.NewClientset(c.Objects()...)
			startController(ctx, t, client)

			snap, err := capacity.Read(ctx, client, capacity.ReadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, attr := range []string{"", c.PartitionAttribute} {
				want, _, err := capacity.PoolStatusesFromAPI(ctx, client, []string{"gpu.example.com"},
					capacity.APIOptions{PartitionAttribute: attr, Poll: 10 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				report, err := capacity.Top(ctx, snap, capacity.Options{View: capacity.ViewPools, PartitionAttribute: attr})
				if err != nil {
					t.Fatal(err)
				}
				var got []resourcev1alpha3.PoolStatus
				for _, p := range report.Pools {
					got = append(got, p.Status)
					st := p.Status
					for what, ok := range map[string]bool{
						"partition summary":           len(st.PartitionSummary) > 0,
						"shareable summary":           st.ShareableSummary != nil,
						"validation error":            st.ValidationError != nil,
						"unavailable":                 ptr.Deref(st.UnavailableDevices, 0) > 0,
						"allocated":                   ptr.Deref(st.AllocatedDevices, 0) > 0,
						"allocated beyond the slices": ptr.Deref(st.AllocatedDevices, 0) > 0 && p.Counts != nil && p.Counts.Total < ptr.Deref(st.AllocatedDevices, 0)+ptr.Deref(st.AvailableDevices, 0),
					} {
						if ok {
							seen[what]++
						}
					}
				}
				if diff := cmp.Diff(want, got, PoolStatusOptions); diff != "" {
					t.Errorf("partition attribute %q: pool statuses (-controller +top):\n%s", attr, diff)
				}
				// top --source=api shows the same counts, per pool and per
				// node.
				for _, view := range []capacity.View{capacity.ViewPools, capacity.ViewNodes} {
					fromAPI, err := capacity.TopFromAPI(ctx, client, capacity.Options{View: view, PartitionAttribute: attr},
						capacity.APIOptions{PartitionAttribute: attr, Poll: 10 * time.Millisecond})
					if err != nil {
						t.Fatal(err)
					}
					local, err := capacity.Top(ctx, snap, capacity.Options{View: view, PartitionAttribute: attr})
					if err != nil {
						t.Fatal(err)
					}
					if diff := cmp.Diff(countsOf(local), countsOf(fromAPI)); diff != "" {
						t.Errorf("top %s --source=api (-top +api):\n%s", view, diff)
					}
				}
			}
		})
	}
}

// countsOf maps the rows of a report to their counts.
func countsOf(r *capacity.Report) map[string]capacity.Counts {
	m := map[string]capacity.Counts{}
	for _, p := range r.Pools {
		if p.Counts != nil {
			m[p.Name] = *p.Counts
		}
	}
	for _, n := range r.Nodes {
		m[n.Name] = n.Counts
	}
	return m
}
