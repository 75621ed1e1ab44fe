package allocator_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/pkg/allocator"
	"github.com/drasched/drasched/pkg/allocator/internal/randinst"
)

var (
	diffInstances = flag.Int("diff-instances", 10000, "number of random instances TestDifferential compares")
	diffFirstSeed = flag.Uint64("diff-seed", 1, "seed of the first instance TestDifferential compares")
	// Some random instances are exponential for upstream's search. They
	// cannot be compared within a test's time; the count is reported, and
	// a run with a long budget compares them too.
	diffUpstreamBudget = flag.Duration("diff-upstream-budget", 250*time.Millisecond, "how long upstream may search one instance before it is left out")
)

func TestMain(m *testing.M) {
	// The reference: upstream with Kubernetes 1.37's default allocators.
	structured.EnableAllocators("incubating", "experimental")
	os.Exit(m.Run())
}

// TestDifferential compares pkg/allocator with structured.NewAllocator on a
// fixed corpus of random instances: the same results (devices, order,
// configs, node selector, capacity, binding conditions) and the same errors.
func TestDifferential(t *testing.T) {
	stats := map[string]int{}
	for seed := *diffFirstSeed; seed < *diffFirstSeed+uint64(*diffInstances); seed++ {
		outcome, err := compareInstance(randinst.New(seed))
		if err != nil {
			t.Fatalf("seed %d (rerun with -run TestDifferential -diff-seed=%d -diff-instances=1): %v", seed, seed, err)
		}
		stats[outcome]++
	}
	t.Logf("outcomes over %d instances: %v", *diffInstances, stats)
	if timeouts := stats["upstream timeout"] + stats["intractable for both"]; timeouts*100 > *diffInstances {
		t.Errorf("%d instances exceeded upstream's budget of %v, more than 1%%; the corpus compares too little", timeouts, *diffUpstreamBudget)
	}
	if intractable := stats["intractable for both"]; intractable*10000 > *diffInstances {
		t.Errorf("%d instances were intractable for both allocators, more than 1 in 10,000", intractable)
	}
	// The corpus must exercise every kind of outcome, or it tests little.
	for _, outcome := range []string{"allocated", "unschedulable", "error", "node error"} {
		if stats[outcome] == 0 {
			t.Errorf("no instance ended as %q; the generator lost coverage", outcome)
		}
	}
}

// FuzzDifferential searches for instances where the allocators disagree:
//
//	go test ./pkg/allocator -run '^$' -fuzz FuzzDifferential -fuzztime 5m
func FuzzDifferential(f *testing.F) {
	for seed := range uint64(16) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		if _, err := compareInstance(randinst.New(seed)); err != nil {
			t.Fatal(err)
		}
	})
}

var fixedShareID = types.UID("fixed-share-id")

// compareInstance runs both allocators and describes the first difference.
// The outcome names what happened, for coverage statistics.
func compareInstance(inst *randinst.Instance) (string, error) {
	ctx := context.Background()
	upstreamCtx, cancel := context.WithTimeout(ctx, *diffUpstreamBudget)
	defer cancel()

	want, panicked, wantErr := runUpstream(upstreamCtx, inst)
	// drasched must never need a timeout; a generous deadline only keeps a
	// regression from hanging the test.
	oursCtx, cancelOurs := context.WithTimeout(ctx, time.Minute)
	defer cancelOurs()
	if wantErr != nil && upstreamCtx.Err() != nil {
		// Upstream did not finish; nothing to compare with. A few random
		// instances (all with a request that fails with an error when
		// upstream's search reaches it) are exponential for any search
		// that must reproduce which error upstream reaches first; those
		// are counted, not compared.
		if _, err := runOurs(oursCtx, inst); err != nil && oursCtx.Err() != nil {
			return "intractable for both", nil
		}
		return "upstream timeout", nil
	}
	if panicked != nil {
		// Upstream cannot handle this input. Ours must still not panic.
		if _, err := runOurs(oursCtx, inst); err == nil {
			return "", fmt.Errorf("upstream panicked (%v) but drasched accepted the input", panicked)
		}
		return "upstream panic", nil
	}
	got, gotErr := runOurs(oursCtx, inst)
	if oursCtx.Err() != nil {
		return "", fmt.Errorf("drasched did not finish within a minute: %w", gotErr)
	}

	switch {
	case (wantErr == nil) != (gotErr == nil):
		return "", fmt.Errorf("error mismatch:\nupstream: %s\ndrasched: %s", fmt.Sprint(wantErr), fmt.Sprint(gotErr))
	case wantErr != nil:
		if wantErr.Error() != gotErr.Error() {
			return "", fmt.Errorf("error text mismatch:\nupstream: %s\ndrasched: %s", wantErr.Error(), gotErr.Error())
		}
		if errors.Is(wantErr, structured.ErrFailedAllocationOnNode) != errors.Is(gotErr, structured.ErrFailedAllocationOnNode) {
			return "", fmt.Errorf("ErrFailedAllocationOnNode mismatch for %s", wantErr.Error())
		}
		if errors.Is(wantErr, structured.ErrFailedAllocationOnNode) {
			return "node error", nil
		}
		return "error", nil
	}
	normalizeShareIDs(want)
	normalizeShareIDs(got)
	if diff := cmp.Diff(want, got, quantityComparer); diff != "" {
		return "", fmt.Errorf("results differ (-upstream +drasched):\n%s", diff)
	}
	if want == nil {
		return "unschedulable", nil
	}
	return "allocated", nil
}

func runUpstream(ctx context.Context, inst *randinst.Instance) (results []resourceapi.AllocationResult, panicked any, err error) {
	defer func() {
		if r := recover(); r != nil {
			panicked = r
		}
	}()
	celCache := cel.NewCache(10, cel.Features{
		EnableConsumableCapacity: inst.Features.ConsumableCapacity,
		EnableListTypeAttributes: inst.Features.ListTypeAttributes,
	})
	a, err := structured.NewAllocator(ctx, inst.Features, inst.State, randinst.ClassLister(inst.Classes), inst.Slices, celCache)
	if err != nil {
		return nil, nil, err
	}
	results, err = a.Allocate(ctx, inst.Node, inst.Claims)
	return results, nil, err
}

func runOurs(ctx context.Context, inst *randinst.Instance) ([]resourceapi.AllocationResult, error) {
	a, err := allocator.New(ctx, inst.Features, inst.State, randinst.ClassLister(inst.Classes), inst.Slices, allocator.Options{})
	if err != nil {
		return nil, err
	}
	return a.Allocate(ctx, inst.Node, inst.Claims)
}

func normalizeShareIDs(results []resourceapi.AllocationResult) {
	for i := range results {
		for j := range results[i].Devices.Results {
			if results[i].Devices.Results[j].ShareID != nil {
				results[i].Devices.Results[j].ShareID = ptr.To(fixedShareID)
			}
		}
	}
}

// quantityComparer compares quantities by value and canonical form, not by
// their internal caches.
var quantityComparer = cmp.Comparer(func(a, b resource.Quantity) bool {
	return a.Cmp(b) == 0 && a.String() == b.String()
})
