package allocator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2/ktesting"

	"github.com/drasched/drasched/internal/builder"
)

// cycle runs one scheduling cycle: New, then Allocate on every node.
func cycle(t *testing.T, cache *Cache, slices []*resourceapi.ResourceSlice, nodes int, claim *resourceapi.ResourceClaim) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	class := builder.MakeClass("gpu", `device.driver == "gpu.example.com"`)
	a, err := New(ctx, structured.Features{}, structured.AllocatedState{}, ClassList{class}, slices, Options{Cache: cache})
	if err != nil {
		t.Fatal(err)
	}
	for n := range nodes {
		if _, err := a.Allocate(ctx, builder.MakeNode(fmt.Sprintf("node-%d", n)), []*resourceapi.ResourceClaim{claim}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCacheReuse(t *testing.T) {
	var slices []*resourceapi.ResourceSlice
	for n := range 4 {
		name := fmt.Sprintf("node-%d", n)
		slices = append(slices, builder.MakeSlice(name).Node(name).Devices(builder.Devices("gpu", 4, func(i int, d *builder.DeviceWrapper) { d.Int("index", int64(i)) })...).Obj())
	}
	shared := builder.MakeSlice("shared").AllNodes().Devices(builder.Devices("nic", 2, nil)...).Obj()
	slices = append(slices, shared)
	// All five devices per node must be looked at: ask for more than exist.
	claim := builder.MakeClaim("c").Request("gpu", "gpu", 6).Obj()

	cache := NewCache(0)
	cycle(t, cache, slices, 4, claim)
	first := cache.Stats()
	// One expression (the class selector), evaluated once per device: the
	// shared slice's two devices only once for all four nodes.
	if want := int64(4*4 + 2); first.MatchMisses != want {
		t.Errorf("first cycle: %d CEL evaluations, want %d", first.MatchMisses, want)
	}
	if first.MatchHits == 0 {
		t.Error("first cycle: shared slice results were not reused across nodes")
	}

	cycle(t, cache, slices, 4, claim)
	second := cache.Stats()
	if second.MatchMisses != first.MatchMisses {
		t.Errorf("second cycle with unchanged slices evaluated CEL %d more times", second.MatchMisses-first.MatchMisses)
	}
	if second.SlicesPrepared != first.SlicesPrepared {
		t.Errorf("second cycle prepared %d slices again", second.SlicesPrepared-first.SlicesPrepared)
	}

	// Copies with the same UID and resourceVersion (as a DeviceTaintRule
	// tracker hands out) are prepared again but keep their CEL results.
	copies := make([]*resourceapi.ResourceSlice, len(slices))
	for i, s := range slices {
		copies[i] = s.DeepCopy()
	}
	cycle(t, cache, copies, 4, claim)
	third := cache.Stats()
	if third.MatchMisses != second.MatchMisses {
		t.Errorf("copies of unchanged slices evaluated CEL %d more times", third.MatchMisses-second.MatchMisses)
	}
	if third.SlicesPrepared != second.SlicesPrepared+int64(len(slices)) {
		t.Errorf("copies: %d slices prepared, want %d", third.SlicesPrepared-second.SlicesPrepared, len(slices))
	}

	// A new resourceVersion invalidates the slice's results.
	changed := make([]*resourceapi.ResourceSlice, len(copies))
	copy(changed, copies)
	changed[0] = copies[0].DeepCopy()
	changed[0].ResourceVersion = "2"
	cycle(t, cache, changed, 4, claim)
	fourth := cache.Stats()
	if got := fourth.MatchMisses - third.MatchMisses; got != 4 {
		t.Errorf("after one slice changed, %d CEL evaluations, want 4", got)
	}
	if ratio := fourth.MatchHitRatio(); ratio <= 0.5 {
		t.Errorf("hit ratio %.2f after four cycles", ratio)
	}
}

func TestCacheSweep(t *testing.T) {
	cache := NewCache(0)
	claim := builder.MakeClaim("c").Request("gpu", "gpu", 1).Obj()
	// Every cycle replaces all slices: the old ones must not accumulate.
	for round := range 50 {
		var slices []*resourceapi.ResourceSlice
		for n := range 4 {
			name := fmt.Sprintf("node-%d", n)
			s := builder.MakeSlice(name).Node(name).Devices(builder.Devices("gpu", 2, nil)...).Obj()
			s.ResourceVersion = fmt.Sprint(round)
			slices = append(slices, s)
		}
		cycle(t, cache, slices, 4, claim)
	}
	cache.mutex.Lock()
	defer cache.mutex.Unlock()
	if n := len(cache.prepared); n > 2*4+64 {
		t.Errorf("%d prepared slices kept for 4 live slices", n)
	}
	if n := len(cache.matchTables); n > 2*4+64 {
		t.Errorf("%d match tables kept for 4 live slices", n)
	}
}

func TestCompileCacheBounded(t *testing.T) {
	cache := NewCache(2)
	features := cel.Features{}
	a := cache.compile(features, false, "true")
	cache.compile(features, false, "false")
	if again := cache.compile(features, false, "true"); again != a {
		t.Error("a cached expression was compiled again")
	}
	cache.compile(features, false, `device.driver == "x"`) // evicts "false"
	misses := cache.Stats().CompileMisses
	cache.compile(features, false, "false")
	if cache.Stats().CompileMisses != misses+1 {
		t.Error("the least recently used expression was not evicted")
	}
	// Compile errors are deterministic and cached too.
	bad := cache.compile(features, false, "device.attributes[")
	if bad.result.Error == nil {
		t.Fatal("broken expression compiled")
	}
	if cache.compile(features, false, "device.attributes[") != bad {
		t.Error("compile error was not cached")
	}
}

func TestMatchTableBounded(t *testing.T) {
	table := &matchTable{}
	for id := range int64(maxExpressionsPerSlice * 3) {
		r := table.results(id, 4)
		if table.results(id, 4) != r {
			t.Fatalf("expression %d: a second lookup returned other results", id)
		}
	}
	if n := len(*table.byExpr.current.Load()); n > maxExpressionsPerSlice {
		t.Errorf("%d expressions kept for one slice, bound is %d", n, maxExpressionsPerSlice)
	}
}

// TestReadMostlyMapConcurrent runs readers and writers at once (meant for
// -race): every reader sees either no value or the one value stored for a
// key, never another.
func TestReadMostlyMapConcurrent(t *testing.T) {
	var m readMostlyMap[int, *int]
	const keys = 50
	var wg sync.WaitGroup
	stored := make([]atomic.Pointer[int], keys)
	for w := range 4 {
		wg.Go(func() {
			for k := range keys {
				v := m.loadOrStore((k+w)%keys, math.MaxInt, func() *int { return new((k + w) % keys) })
				if prev := stored[(k+w)%keys].Swap(v); prev != nil && prev != v {
					t.Errorf("key %d: two different values stored", (k+w)%keys)
				}
			}
		})
		wg.Go(func() {
			for k := range keys {
				if v, ok := m.load(k); ok && *v != k {
					t.Errorf("key %d: loaded the value %d", k, *v)
				}
			}
		})
	}
	wg.Wait()
	for k := range keys {
		if v, ok := m.load(k); !ok || *v != k {
			t.Errorf("key %d missing after all writers finished", k)
		}
	}
}

func TestSliceIndexReused(t *testing.T) {
	cache := NewCache(0)
	list := []*resourceapi.ResourceSlice{
		builder.MakeSlice("node-a").Node("node-a").Obj(),
		builder.MakeSlice("node-b").Node("node-b").Obj(),
	}
	idx := cache.sliceIndex(list)
	if got := idx.byNode["node-a"]; len(got) != 1 || got[0] != list[0] {
		t.Fatalf("byNode[node-a] = %v", got)
	}
	if cache.sliceIndex(slices.Clone(list)) != idx {
		t.Error("an identical list did not reuse the index")
	}
	// The caller reuses its array for other slices: the index must follow.
	list[1] = builder.MakeSlice("node-c").Node("node-c").Obj()
	changed := cache.sliceIndex(list)
	if changed == idx {
		t.Fatal("a changed list reused the old index")
	}
	if _, ok := changed.byNode["node-b"]; ok {
		t.Error("node-b's slice is gone but still indexed")
	}
	if got := changed.byNode["node-c"]; len(got) != 1 || got[0] != list[1] {
		t.Errorf("byNode[node-c] = %v", got)
	}
}

// TestMatchesWithin: a budget pays for evaluations, not for results the
// cache holds. With the budget spent, a result the cache does not hold is
// ErrBudgetSpent and nothing is evaluated; a new budget resumes where the
// old one stopped, and a nil budget is unlimited.
func TestMatchesWithin(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	cache := NewCache(0)
	slice := builder.MakeSlice("node-0").Node("node-0").Devices(builder.Devices("gpu", 4, func(i int, d *builder.DeviceWrapper) { d.Int("index", int64(i)) })...).Obj()
	const expr = `device.attributes["gpu.example.com"].index >= 1`
	matches := func(budget *CostBudget, i int) (bool, error) {
		return cache.MatchesWithin(ctx, budget, cel.Features{}, slice, i, expr)
	}
	misses := func() int64 { return cache.Stats().MatchMisses }

	budget := NewCostBudget(1_000)
	if match, err := matches(budget, 1); err != nil || !match {
		t.Fatalf("device 1: %v, %v; want a match", match, err)
	}
	if spent := 1_000 - budget.left; spent == 0 || spent > 100 {
		t.Errorf("one evaluation of %s cost %d units, want what cel-go counts for it (a few)", expr, spent)
	}

	budget = NewCostBudget(1)
	if match, err := matches(budget, 0); err != nil || match {
		t.Fatalf("device 0: %v, %v; want no match", match, err)
	}
	if !budget.Spent() {
		t.Fatalf("%d units left of 1 after an evaluation", budget.left)
	}
	before := misses()
	if _, err := matches(budget, 2); !errors.Is(err, ErrBudgetSpent) {
		t.Errorf("device 2 with the budget spent: %v, want ErrBudgetSpent", err)
	}
	if misses() != before {
		t.Errorf("device 2 was evaluated with the budget spent")
	}
	for i, want := range []bool{false, true} {
		if match, err := matches(budget, i); err != nil || match != want {
			t.Errorf("device %d, cached, with the budget spent: %v, %v; want %v", i, match, err, want)
		}
	}

	if match, err := matches(NewCostBudget(1), 2); err != nil || !match {
		t.Errorf("device 2 with a new budget: %v, %v; want a match", match, err)
	}
	if match, err := matches(nil, 3); err != nil || !match {
		t.Errorf("device 3 without a budget: %v, %v; want a match", match, err)
	}
	if got := misses(); got != 4 {
		t.Errorf("%d evaluations, want 4: one per device", got)
	}
}

// TestMatchesCancelled: a context that ends stops an evaluation, even one
// of a selector that takes most of a second (builder.SlowSelector); the
// error wraps the context's, and no result is kept for the device.
func TestMatchesCancelled(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	cache := NewCache(0)
	slice := builder.MakeSlice("node-0").Node("node-0").Devices(builder.Devices("gpu", 1, func(_ int, d *builder.DeviceWrapper) { d.Int("index", -1) })...).Obj()
	expr := builder.SlowSelector("gpu.example.com", "index")
	for range 2 {
		if _, err := cache.Matches(ctx, cel.Features{}, slice, 0, expr); !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want the context's error", err)
		}
	}
	if stats := cache.Stats(); stats.MatchMisses != 2 || stats.MatchHits != 0 {
		t.Errorf("%d evaluations and %d cached results, want 2 evaluations: an interrupted one is not kept", stats.MatchMisses, stats.MatchHits)
	}
}
