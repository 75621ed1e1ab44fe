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

	"github.com/drasched/drasched/internal/minor"
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
	stats, sharedGPUs := map[string]int{}, map[string]int{}
	for seed := *diffFirstSeed; seed < *diffFirstSeed+uint64(*diffInstances); seed++ {
		inst := randinst.New(seed)
		outcome, err := compareInstance(inst)
		if err != nil {
			t.Fatalf("seed %d (rerun with -run TestDifferential -diff-seed=%d -diff-instances=1): %v", seed, seed, err)
		}
		stats[outcome]++
		if inst.SharedGPUs {
			sharedGPUs[outcome]++
		}
	}
	t.Logf("outcomes over %d instances: %v, of which shared-GPU problems: %v", *diffInstances, stats, sharedGPUs)
	if timeouts := stats["upstream timeout"] + stats["intractable for both"]; timeouts*100 > *diffInstances {
		t.Errorf("%d instances exceeded upstream's budget of %v, more than 1%%; the corpus compares too little", timeouts, *diffUpstreamBudget)
	}
	if intractable := stats["intractable for both"]; intractable*10000 > *diffInstances {
		t.Errorf("%d instances were intractable for both allocators, more than 1 in 10,000", intractable)
	}
	// The corpus must exercise every kind of outcome, or it tests little;
	// BestFit must choose differently on some instances.
	for _, outcome := range []string{"allocated", "unschedulable", "error", "node error", bestFitDiffers} {
		if stats[outcome] == 0 {
			t.Errorf("no instance ended as %q; the generator lost coverage", outcome)
		}
	}
	// Shared GPUs must both fit and not fit: the capacity bound and the
	// symmetry between shared devices prune only where nothing fits.
	if *diffInstances >= 1000 {
		for _, outcome := range []string{"allocated", "unschedulable"} {
			if sharedGPUs[outcome] == 0 {
				t.Errorf("no shared-GPU problem ended as %q; the generator lost coverage", outcome)
			}
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

// bestFitDiffers is the outcome of an instance where BestFit chose other
// devices than FirstFit.
const bestFitDiffers = "allocated, BestFit differs"

// bestFitAttributes are the generator's topology attributes.
var bestFitAttributes = []resourceapi.FullyQualifiedName{"resource.kubernetes.io/pcieRoot", "a.example.com/numa"}

// compareInstance runs both allocators and describes the first difference.
// The outcome names what happened, for coverage statistics.
//
// It also runs drasched with BestFit, whose invariant is the same outcome
// as upstream (a fit, no fit, the same error) with possibly other devices:
// a fit must be valid, and is compared with FirstFit's to count instances
// where BestFit chose differently.
func compareInstance(inst *randinst.Instance) (string, error) {
	outcome, err := compareFirstFit(inst)
	if err != nil || outcome != "allocated" && outcome != "unschedulable" && outcome != "error" && outcome != "node error" {
		return outcome, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	firstFit, firstErr := runOurs(ctx, inst, allocator.Options{})
	bestFit, bestErr := runOurs(ctx, inst, allocator.Options{Policy: allocator.PolicyBestFit, TopologyAttributes: bestFitAttributes})
	if ctx.Err() != nil {
		return "", fmt.Errorf("BestFit did not finish within a minute: %w", bestErr)
	}
	switch {
	case fmt.Sprint(firstErr) != fmt.Sprint(bestErr):
		return "", fmt.Errorf("BestFit error mismatch:\nFirstFit: %s\nBestFit:  %s", fmt.Sprint(firstErr), fmt.Sprint(bestErr))
	case errors.Is(firstErr, structured.ErrFailedAllocationOnNode) != errors.Is(bestErr, structured.ErrFailedAllocationOnNode):
		return "", fmt.Errorf("BestFit ErrFailedAllocationOnNode mismatch for %s", fmt.Sprint(firstErr))
	case (firstFit == nil) != (bestFit == nil):
		return "", fmt.Errorf("BestFit feasibility differs: FirstFit fit %t, BestFit fit %t", firstFit != nil, bestFit != nil)
	}
	if bestFit == nil {
		return outcome, nil
	}
	if err := validFit(inst, bestFit); err != nil {
		return "", fmt.Errorf("BestFit: %w", err)
	}
	normalizeShareIDs(firstFit)
	normalizeShareIDs(bestFit)
	if !cmp.Equal(firstFit, bestFit, quantityComparer) {
		return bestFitDiffers, nil
	}
	return outcome, nil
}

// validFit checks what can be checked of a fit without a second allocator:
// a result per claim, as many devices per request as it asks for (all
// devices only known to the allocator), no device given twice or given
// while allocated before unless shared, shares only of devices that allow
// them, and every device published on a slice.
func validFit(inst *randinst.Instance, results []resourceapi.AllocationResult) error {
	if len(results) != len(inst.Claims) {
		return fmt.Errorf("%d results for %d claims", len(results), len(inst.Claims))
	}
	devices := map[structured.DeviceID]*resourceapi.Device{}
	for _, s := range inst.Slices {
		for i := range s.Spec.Devices {
			devices[structured.MakeDeviceID(s.Spec.Driver, s.Spec.Pool.Name, s.Spec.Devices[i].Name)] = &s.Spec.Devices[i]
		}
	}
	taken := map[structured.DeviceID]bool{}
	for ci, claim := range inst.Claims {
		counts := map[string]int{}
		for _, r := range results[ci].Devices.Results {
			counts[r.Request]++
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			device, ok := devices[id]
			if !ok {
				return fmt.Errorf("claim %d: device %s is on no slice", ci, id)
			}
			if r.ShareID != nil {
				if !ptr.Deref(device.AllowMultipleAllocations, false) {
					return fmt.Errorf("claim %d: a share of %s, which allows no shares", ci, id)
				}
				continue
			}
			if r.AdminAccess != nil && *r.AdminAccess {
				continue
			}
			if taken[id] || inst.State.AllocatedDevices.Has(id) {
				return fmt.Errorf("claim %d: device %s given twice", ci, id)
			}
			taken[id] = true
		}
		for _, req := range claim.Spec.Devices.Requests {
			if req.Exactly == nil || req.Exactly.AllocationMode == resourceapi.DeviceAllocationModeAll {
				continue
			}
			if got := counts[req.Name]; int64(got) != req.Exactly.Count {
				return fmt.Errorf("claim %d, request %s: %d devices, want %d", ci, req.Name, got, req.Exactly.Count)
			}
		}
	}
	return nil
}

// compareFirstFit runs both allocators and describes the first difference.
// The outcome names what happened, for coverage statistics.
func compareFirstFit(inst *randinst.Instance) (string, error) {
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
		if _, err := runOurs(oursCtx, inst, allocator.Options{}); err != nil && oursCtx.Err() != nil {
			return "intractable for both", nil
		}
		return "upstream timeout", nil
	}
	if panicked != nil {
		// Upstream cannot handle this input. Ours must still not panic.
		if _, err := runOurs(oursCtx, inst, allocator.Options{}); err == nil {
			return "", fmt.Errorf("upstream panicked (%v) but drasched accepted the input", panicked)
		}
		return "upstream panic", nil
	}
	got, gotErr := runOurs(oursCtx, inst, allocator.Options{})
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
	celCache := cel.NewCache(10, minor.CELFeatures(inst.Features.ConsumableCapacity, minor.NewerFeaturesOf(inst.Features).ListTypeAttributes))
	a, err := structured.NewAllocator(ctx, inst.Features, inst.State, allocator.ClassList(inst.Classes), inst.Slices, celCache)
	if err != nil {
		return nil, nil, err
	}
	results, err = a.Allocate(ctx, inst.Node, inst.Claims)
	return results, nil, err
}

func runOurs(ctx context.Context, inst *randinst.Instance, opts allocator.Options) ([]resourceapi.AllocationResult, error) {
	a, err := allocator.New(ctx, inst.Features, inst.State, allocator.ClassList(inst.Classes), inst.Slices, opts)
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
