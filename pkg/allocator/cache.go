package allocator

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/keymutex"
	"k8s.io/utils/lru"

	"github.com/drasched/drasched/internal/minor"
)

const (
	// DefaultCompileCacheSize is how many compiled CEL expressions a Cache
	// keeps. Upstream's scheduler plugin keeps 10; selectors come from a
	// handful of DeviceClasses plus whatever claims add, so a few hundred
	// entries cover a large cluster.
	DefaultCompileCacheSize = 512

	// maxExpressionsPerSlice bounds the device-match results kept per
	// ResourceSlice. Claims can carry arbitrary selectors; without a bound a
	// stream of unique expressions would grow the cache forever. When the
	// bound is hit the slice's results are dropped and recomputed on demand.
	maxExpressionsPerSlice = 64
)

// Cache holds what the allocator reuses across scheduling cycles: compiled
// CEL expressions (bounded LRU), per-ResourceSlice preprocessing, and the
// results of CEL selectors per device. A Cache is safe for concurrent use and
// is meant to be shared by all allocators of one scheduler, as Options.Cache.
//
// Device-match results are keyed by the slice's UID and resourceVersion
// together with the compiled expression, so they stay valid as long as
// neither the slice object nor the expression changes, across nodes (shared
// and network-attached slices) and across cycles. Slices without a UID (as in
// unit tests) are keyed by object identity instead.
type Cache struct {
	compiler compileCache

	// mutex guards prepared and matchTables. Entries are immutable once
	// created (matchTable has its own locking), so the lock is held only for
	// map access, never while computing.
	mutex       sync.Mutex
	prepared    map[*resourceapi.ResourceSlice]*preparedSlice
	matchTables map[sliceVersion]*matchTable
	// views holds the last nodeView per node name.
	views map[string]*nodeView
	// index is the slice index of indexSlices, the list of the last
	// allocator that built one: the next allocator with an identical
	// list (the same objects in the same order) reuses it.
	index       *sliceIndex
	indexSlices []*resourceapi.ResourceSlice

	// trapIDs numbers the selector lists of requests (trapKey) for the
	// slices' trap verdicts.
	trapIDs interner
	// capacityIDs numbers the capacity requirements of requests
	// (capacityRequestKey) for the slices' capacity evaluations.
	capacityIDs interner

	stats cacheStats
}

// interner numbers strings, so that per-slice caches can be keyed by a
// number instead of hashing the string on every lookup. last only grows, so
// that an ID is never given to another string, also after ids started over:
// an entry a slice keeps under an old ID stays right.
type interner struct {
	ids  readMostlyMap[string, int64]
	last atomic.Int64
}

// maxInternedIDs bounds the strings an interner remembers.
const maxInternedIDs = 4096

// id returns the ID of a string, non-zero.
func (in *interner) id(key string) int64 {
	if id, ok := in.ids.load(key); ok {
		return id
	}
	return in.ids.loadOrStore(key, maxInternedIDs, func() int64 { return in.last.Add(1) })
}

// NewCache returns an empty cache that keeps up to compileCacheSize compiled
// CEL expressions; 0 means DefaultCompileCacheSize.
func NewCache(compileCacheSize int) *Cache {
	if compileCacheSize <= 0 {
		compileCacheSize = DefaultCompileCacheSize
	}
	return &Cache{
		compiler: compileCache{
			lock:    keymutex.NewHashed(0),
			entries: lru.New(compileCacheSize),
		},
		prepared:    make(map[*resourceapi.ResourceSlice]*preparedSlice),
		matchTables: make(map[sliceVersion]*matchTable),
		views:       make(map[string]*nodeView),
	}
}

// sliceIndex returns the index of slices, reusing the last one if it was
// built from an identical list. Comparing the lists costs a pointer
// comparison per slice; building an index, a few map operations per slice.
func (c *Cache) sliceIndex(list []*resourceapi.ResourceSlice) *sliceIndex {
	c.mutex.Lock()
	if c.index != nil && slices.Equal(c.indexSlices, list) {
		idx := c.index
		c.mutex.Unlock()
		return idx
	}
	c.mutex.Unlock()
	idx := newSliceIndex(list)
	c.mutex.Lock()
	// A copy: the caller may reuse its array for other slices later.
	c.index, c.indexSlices = idx, slices.Clone(list)
	c.mutex.Unlock()
	return idx
}

func (c *Cache) nodeView(node string) *nodeView {
	c.mutex.Lock()
	defer c.mutex.Unlock()
	return c.views[node]
}

func (c *Cache) storeNodeView(node string, v *nodeView) {
	c.mutex.Lock()
	defer c.mutex.Unlock()
	c.views[node] = v
}

// CacheStats are cumulative counters of a Cache.
type CacheStats struct {
	// CompileHits and CompileMisses count lookups of compiled expressions.
	CompileHits, CompileMisses int64
	// MatchHits counts device/expression evaluations answered from the cache,
	// MatchMisses those that ran CEL.
	MatchHits, MatchMisses int64
	// SlicesPrepared counts ResourceSlice objects preprocessed; a slice is
	// prepared once for as long as it stays in the cache.
	SlicesPrepared int64
}

// MatchHitRatio is MatchHits / (MatchHits + MatchMisses), or 0 without lookups.
func (s CacheStats) MatchHitRatio() float64 {
	total := s.MatchHits + s.MatchMisses
	if total == 0 {
		return 0
	}
	return float64(s.MatchHits) / float64(total)
}

// Stats returns a snapshot of the cache's counters.
func (c *Cache) Stats() CacheStats {
	return CacheStats{
		CompileHits:    c.stats.compileHits.Load(),
		CompileMisses:  c.stats.compileMisses.Load(),
		MatchHits:      c.stats.matchHits.Load(),
		MatchMisses:    c.stats.matchMisses.Load(),
		SlicesPrepared: c.stats.slicesPrepared.Load(),
	}
}

type cacheStats struct {
	compileHits, compileMisses atomic.Int64
	matchHits, matchMisses     atomic.Int64
	slicesPrepared             atomic.Int64
}

// sliceVersion identifies the content of a ResourceSlice: the same UID and
// resourceVersion always mean the same spec. obj is set instead for slices
// without a UID, whose content is then only known by object identity.
type sliceVersion struct {
	uid             types.UID
	resourceVersion string
	obj             *resourceapi.ResourceSlice
}

func versionOf(slice *resourceapi.ResourceSlice) sliceVersion {
	if slice.UID == "" || slice.ResourceVersion == "" {
		return sliceVersion{obj: slice}
	}
	return sliceVersion{uid: slice.UID, resourceVersion: slice.ResourceVersion}
}

// slice returns the preprocessed form of a slice, preparing it on first use.
func (c *Cache) slice(s *resourceapi.ResourceSlice) *preparedSlice {
	c.mutex.Lock()
	ps := c.prepared[s]
	c.mutex.Unlock()
	if ps != nil {
		return ps
	}

	// Prepare outside the lock; two goroutines may race to prepare the same
	// slice, which wastes a little work but yields equal results.
	ps = prepareSlice(s)
	c.stats.slicesPrepared.Add(1)

	c.mutex.Lock()
	defer c.mutex.Unlock()
	if existing := c.prepared[s]; existing != nil {
		return existing
	}
	version := versionOf(s)
	table := c.matchTables[version]
	if table == nil {
		table = &matchTable{}
		c.matchTables[version] = table
	}
	ps.matches = table
	c.prepared[s] = ps
	return ps
}

// sweep drops entries for slices that are no longer in the cluster. It runs
// only when the cache holds clearly more slices than the current cycle has,
// so its cost is amortized over many cycles.
func (c *Cache) sweep(current []*resourceapi.ResourceSlice) {
	c.mutex.Lock()
	defer c.mutex.Unlock()
	if len(c.prepared) <= 2*len(current)+64 {
		return
	}
	keep := make(map[*resourceapi.ResourceSlice]struct{}, len(current))
	versions := make(map[sliceVersion]struct{}, len(current))
	for _, s := range current {
		keep[s] = struct{}{}
		versions[versionOf(s)] = struct{}{}
	}
	for s := range c.prepared {
		if _, ok := keep[s]; !ok {
			delete(c.prepared, s)
		}
	}
	for v := range c.matchTables {
		if _, ok := versions[v]; !ok {
			delete(c.matchTables, v)
		}
	}
	// Views of nodes without slices now are dropped: they may belong to
	// deleted nodes. Others stay; they revalidate on use.
	nodes := make(map[string]struct{})
	for _, s := range current {
		if s.Spec.NodeName != nil {
			nodes[*s.Spec.NodeName] = struct{}{}
		}
	}
	for name := range c.views {
		if _, ok := nodes[name]; !ok {
			delete(c.views, name)
		}
	}
}

// matchTable holds CEL results for the devices of one slice version, per
// compiled expression.
type matchTable struct {
	// byExpr maps expression IDs to results. Filter looks it up for every
	// device of every node, concurrently; new expressions are rare.
	byExpr readMostlyMap[int64, *exprResults]
}

// exprResults holds, per device index, the outcome of one expression. A nil
// entry means not evaluated yet. Outcomes are deterministic, so concurrent
// writers store equal values and the last write wins harmlessly.
type exprResults struct {
	outcomes []atomic.Pointer[evalOutcome]
}

// evalOutcome is the cached result of evaluating one expression on one
// device: a selector match, a derived attribute, or an error.
type evalOutcome struct {
	match bool
	attr  *resourceapi.DeviceAttribute
	err   error
}

var (
	outcomeTrue  = &evalOutcome{match: true}
	outcomeFalse = &evalOutcome{match: false}
)

func (t *matchTable) results(exprID int64, numDevices int) *exprResults {
	if r, ok := t.byExpr.load(exprID); ok {
		return r
	}
	return t.byExpr.loadOrStore(exprID, maxExpressionsPerSlice, func() *exprResults {
		return &exprResults{outcomes: make([]atomic.Pointer[evalOutcome], numDevices)}
	})
}

// readMostlyMap is a map for many concurrent readers and rare writers:
// readers load an immutable map without locking, a writer copies it.
type readMostlyMap[K comparable, V any] struct {
	// mutex serializes writers.
	mutex   sync.Mutex
	current atomic.Pointer[map[K]V]
}

func (m *readMostlyMap[K, V]) load(key K) (V, bool) {
	if current := m.current.Load(); current != nil {
		value, ok := (*current)[key]
		return value, ok
	}
	var zero V
	return zero, false
}

// loadOrStore returns the value of key, storing newValue() first if there
// is none. A map that holds limit entries already starts over empty.
func (m *readMostlyMap[K, V]) loadOrStore(key K, limit int, newValue func() V) V {
	m.mutex.Lock()
	defer m.mutex.Unlock()
	current := m.current.Load()
	if current != nil {
		if value, ok := (*current)[key]; ok {
			return value
		}
	}
	var next map[K]V
	if current == nil || len(*current) >= limit {
		next = make(map[K]V, 1)
	} else {
		next = make(map[K]V, len(*current)+1)
		maps.Copy(next, *current)
	}
	value := newValue()
	next[key] = value
	m.current.Store(&next)
	return value
}

// compileCache is a bounded LRU of compiled CEL expressions. Unlike
// cel.Cache it also keeps compile errors, which are deterministic, and gives
// every entry an ID that keys the device-match results.
type compileCache struct {
	// lock serializes compilation per expression: compiling is expensive
	// enough that waiting for a concurrent compile of the same expression is
	// cheaper than doing it twice.
	lock    keymutex.KeyMutex
	entries *lru.Cache // compileKey -> *compiled
	nextID  atomic.Int64
}

type compileKey struct {
	features cel.Features
	derived  bool
	expr     string
}

type compiled struct {
	id     int64
	result cel.CompilationResult
}

func (c *Cache) compile(features cel.Features, derived bool, expr string) *compiled {
	key := compileKey{features: features, derived: derived, expr: expr}
	if v, ok := c.compiler.entries.Get(key); ok {
		c.stats.compileHits.Add(1)
		return v.(*compiled)
	}
	lockKey := expr
	c.compiler.lock.LockKey(lockKey)
	defer func() { _ = c.compiler.lock.UnlockKey(lockKey) }()
	if v, ok := c.compiler.entries.Get(key); ok {
		c.stats.compileHits.Add(1)
		return v.(*compiled)
	}
	c.stats.compileMisses.Add(1)
	result := cel.GetCompiler(features).CompileCELExpression(expr, minor.CELOptions(derived))
	entry := &compiled{id: c.compiler.nextID.Add(1), result: result}
	c.compiler.entries.Add(key, entry)
	return entry
}

// Matches evaluates a CEL selector on device i of a slice through the
// cache: the result is shared with allocations and kept while the slice
// version and the expression are unchanged. Tools that count devices per
// class use it. An evaluation that ctx interrupts returns an error
// wrapping the context's error and leaves nothing in the cache.
func (c *Cache) Matches(ctx context.Context, features cel.Features, slice *resourceapi.ResourceSlice, i int, expression string) (bool, error) {
	return c.MatchesWithin(ctx, nil, features, slice, i, expression)
}

// ErrBudgetSpent is MatchesWithin's error when the cache has no result for
// the device and the budget has nothing left to evaluate the selector with.
var ErrBudgetSpent = errors.New("budget for CEL evaluations spent")

// CostBudget is what a series of MatchesWithin calls may spend on CEL
// evaluations, in CEL cost units: those of the API server's limit for one
// selector on one device (resourceapi.CELSelectorExpressionMaxCost,
// 1,000,000), which cel-go counts as it evaluates. The units measure work,
// not time, so whether a budget suffices does not depend on the machine.
// A CostBudget is not safe for concurrent use.
type CostBudget struct {
	left uint64
}

// NewCostBudget returns a budget of units.
func NewCostBudget(units uint64) *CostBudget { return &CostBudget{left: units} }

// Spent reports whether nothing is left.
func (b *CostBudget) Spent() bool { return b.left == 0 }

func (b *CostBudget) charge(details interface{ ActualCost() *uint64 }) {
	cost := b.left
	if c := details.ActualCost(); c != nil {
		cost = min(*c, b.left)
	}
	b.left -= cost
}

// MatchesWithin is Matches on a budget, for callers that must not wait for
// whatever the selectors cost: queueing hints, which kube-scheduler runs
// under its queue's lock. A result in the cache costs nothing. Without
// one, the selector is evaluated if the budget has anything left, and its
// actual cost is charged (all that is left, when cel-go reports none);
// otherwise MatchesWithin returns ErrBudgetSpent. One call therefore
// spends at most what one evaluation can cost, the cost limit, beyond the
// budget. A nil budget is unlimited. Results stay in the cache, so a later
// call with a new budget resumes where an earlier one stopped.
func (c *Cache) MatchesWithin(ctx context.Context, budget *CostBudget, features cel.Features, slice *resourceapi.ResourceSlice, i int, expression string) (bool, error) {
	expr := c.compile(features, false, expression)
	if expr.result.Error != nil {
		return false, expr.result.Error
	}
	return c.evaluate(ctx, budget, expr, c.slice(slice), i)
}

// matches evaluates a compiled selector on device i of a prepared slice
// through the match table of the slice's version: the one evaluation that
// the search and Matches share. A compile error is returned as is; runtime
// errors are enhanced like upstream's and cached like results, except
// when ctx ended meanwhile: an interrupted evaluation says nothing about
// the device.
func (c *Cache) matches(ctx context.Context, expr *compiled, ps *preparedSlice, i int) (bool, error) {
	return c.evaluate(ctx, nil, expr, ps, i)
}

// evaluate is matches, charging evaluations to budget unless it is nil.
func (c *Cache) evaluate(ctx context.Context, budget *CostBudget, expr *compiled, ps *preparedSlice, i int) (bool, error) {
	if expr.result.Error != nil {
		return false, expr.result.Error
	}
	slot := &ps.matches.results(expr.id, len(ps.slice.Spec.Devices)).outcomes[i]
	if outcome := slot.Load(); outcome != nil {
		c.stats.matchHits.Add(1)
		return outcome.match, outcome.err
	}
	if budget != nil && budget.Spent() {
		return false, ErrBudgetSpent
	}
	c.stats.matchMisses.Add(1)
	match, details, err := expr.result.DeviceMatches(ctx, ps.celDevice(i))
	if budget != nil {
		budget.charge(details)
	}
	if err != nil {
		err = minor.EnhanceRuntimeError(err)
		if ctx.Err() == nil {
			slot.Store(&evalOutcome{err: err})
		}
		return false, err
	}
	if match {
		slot.Store(outcomeTrue)
	} else {
		slot.Store(outcomeFalse)
	}
	return match, nil
}
