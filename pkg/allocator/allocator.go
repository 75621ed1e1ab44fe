package allocator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"

	"github.com/drasched/drasched/internal/minor"
)

// Options tune an Allocator. The zero value is valid and gives the default
// policy: results identical to upstream's allocator, with a cache private to
// this Allocator.
type Options struct {
	// Cache is shared by the allocators of successive scheduling cycles so
	// that compiled CEL expressions, preprocessed ResourceSlices and selector
	// results survive from one cycle to the next. Nil means a private cache.
	Cache *Cache

	// Policy chooses among the fits of a node: PolicyFirstFit (or empty,
	// upstream's answer) or PolicyBestFit.
	Policy Policy

	// TopologyAttributes group devices for PolicyBestFit, most important
	// first (for example resource.kubernetes.io/pcieRoot). They change no
	// choice of PolicyFirstFit; WholeFree and TopologyGroups count the
	// groups with either policy.
	TopologyAttributes []resourceapi.FullyQualifiedName
}

// Allocator allocates devices for the claims of one pod, on one node per
// call. It is created once per scheduling cycle with the cluster state of
// that cycle; Allocate is safe to call concurrently for different nodes.
type Allocator struct {
	features structured.Features
	// newer are the features of features that only some minors have.
	newer       minor.NewerFeatures
	celFeatures cel.Features
	tier        *tier
	state       structured.AllocatedState
	classes     structured.DeviceClassLister
	slices      []*resourceapi.ResourceSlice
	cache       *Cache
	bestFit     bool
	topoAttrs   []resourceapi.FullyQualifiedName
	topoKey     string

	// Lazily built, then read-only; safe for concurrent Allocate calls.
	indexOnce  sync.Once
	idx        *sliceIndex
	sharedOnce sync.Once
	shared     sets.Set[structured.DeviceID]

	// claims caches claimData per (claim object, index); counters caches
	// *poolCounters per poolID. Both are computed once per cycle.
	claims   sync.Map
	counters sync.Map

	// edits change state for preemption's dry run (WithEdits), nil
	// otherwise; capacity holds the consumed capacity of the devices they
	// touch, nil for none left.
	edits    *Edits
	capacity map[structured.DeviceID]structured.ConsumedCapacity

	steps atomic.Int64
}

// New returns an allocator for one scheduling cycle. state holds the devices
// allocated before this cycle; classes and slices are the cluster's
// DeviceClasses and ResourceSlices. Nothing is computed before it is needed.
func New(ctx context.Context, features structured.Features, state structured.AllocatedState,
	classes structured.DeviceClassLister, slices []*resourceapi.ResourceSlice, opts Options) (*Allocator, error) {
	t, err := pickTier(features)
	if err != nil {
		return nil, err
	}
	if classes == nil {
		return nil, errors.New("no DeviceClass lister")
	}
	var bestFit bool
	switch opts.Policy {
	case "", PolicyFirstFit:
	case PolicyBestFit:
		bestFit = true
	default:
		return nil, fmt.Errorf("unknown allocation policy %q", opts.Policy)
	}
	cache := opts.Cache
	if cache == nil {
		cache = NewCache(0)
	} else {
		cache.sweep(slices)
	}
	a := &Allocator{
		features:    features,
		newer:       minor.NewerFeaturesOf(features),
		celFeatures: minor.CELFeatures(features.ConsumableCapacity, minor.NewerFeaturesOf(features).ListTypeAttributes),
		tier:        t,
		state:       state,
		classes:     classes,
		slices:      slices,
		cache:       cache,
		bestFit:     bestFit,
	}
	a.topoAttrs = append([]resourceapi.FullyQualifiedName(nil), opts.TopologyAttributes...)
	a.topoKey = topologyKey(a.topoAttrs)
	klog.FromContext(ctx).V(5).Info("Created allocator", "tier", t.name, "numSlices", len(slices), "numAllocatedDevices", len(state.AllocatedDevices))
	return a, nil
}

// Tier names the upstream allocator variant whose behaviour this allocator
// reproduces for its features ("incubating" or "experimental").
func (a *Allocator) Tier() string { return a.tier.name }

// Steps is the number of search steps all Allocate calls of this allocator
// took so far: calls of the recursive step that upstream counts as
// allocateOne invocations.
func (a *Allocator) Steps() int64 { return a.steps.Load() }

// Allocate finds devices on the node for all claims, which must not be
// allocated yet. It returns one AllocationResult per claim, in order.
//
// The contract is upstream's (structured.Allocator): nil results and a nil
// error mean the claims do not fit on this node (including while pools are
// being updated); an error wrapping structured.ErrFailedAllocationOnNode
// fails only this node; any other error is fatal for the pod, e.g. a CEL
// runtime error or a missing DeviceClass. Cancelling ctx makes Allocate
// return an error wrapping the context's error.
func (a *Allocator) Allocate(ctx context.Context, node *v1.Node, claims []*resourceapi.ResourceClaim) ([]resourceapi.AllocationResult, error) {
	if a.bestFit {
		if results, decided, err := a.allocateBestFit(ctx, node, claims); decided {
			return results, err
		}
	}
	s, err := a.newSearch(ctx, node, claims, false)
	if err != nil || s == nil {
		return nil, err
	}
	// Filter calls Allocate for every node of every pod: the arguments of a
	// disabled log call would still be allocated, so check first.
	loggerV := s.logger.V(5)
	if loggerV.Enabled() {
		loggerV.Info("Starting allocation", "numClaims", len(claims), "numCandidates", len(s.cands))
	}
	defer s.release()
	ok, err := s.allocateOne(pos{}, false, 0)
	a.steps.Add(s.stats.steps)
	if loggerV.Enabled() {
		loggerV.Info("Done with allocation", "success", ok, "err", err,
			"steps", s.stats.steps, "feasibilityPrunes", s.stats.feasibilityPrunes, "symmetrySkips", s.stats.symmetrySkips, "memoHits", s.stats.memoHits)
	}
	if err != nil {
		return nil, err
	}
	if !ok {
		for _, p := range s.pools {
			if p.invalid {
				// Not fatal: other nodes may have usable pools.
				return nil, fmt.Errorf("invalid resource pools were encountered%w", structured.ErrFailedAllocationOnNode)
			}
		}
		return nil, nil
	}
	return s.buildResults()
}

// newSearch gathers the node's pools and validates the claims in upstream's
// order. With bestFit, the candidates are in BestFit's order. A nil search
// with a nil error cannot happen; errors are returned as Allocate returns
// them.
func (a *Allocator) newSearch(ctx context.Context, node *v1.Node, claims []*resourceapi.ResourceClaim, bestFit bool) (*search, error) {
	if node == nil {
		// As upstream: no node is one that only the slices for all nodes
		// serve (upstream 1.35's suite allocates so).
		node = &v1.Node{}
	}
	logger := klog.FromContext(ctx)
	view := a.view(node)
	if view.err != nil {
		return nil, fmt.Errorf("gather pool information: %w", view.err)
	}
	s := searchPool.Get().(*search)
	s.a, s.ctx, s.logger, s.node = a, ctx, logger, node
	s.pools, s.cands = view.pools, view.cands
	poolStart := view.poolStart

	// Size the reusable buffers: one nodeRequest per (sub)request.
	s.claims = grow(s.claims, len(claims))
	numRequests, numAlternatives, numConstraints, maxConstraints := 0, 0, 0, 0
	for ci, claim := range claims {
		cd := a.claimData(ci, claim)
		s.claims[ci] = cd
		numRequests += len(cd.requests)
		numConstraints += len(cd.constraints)
		maxConstraints = max(maxConstraints, len(cd.constraints))
		for ri := range cd.requests {
			numAlternatives += len(cd.requests[ri].alternatives)
		}
	}
	var position []int
	if bestFit {
		s.cands, position = s.bestFitOrder(view, requestSize(s.claims))
	}
	s.requestBuf = grow(s.requestBuf, numRequests)
	s.selectedBuf = grow(s.selectedBuf, numRequests)
	s.alternativeBuf = grow(s.alternativeBuf, numAlternatives)
	s.nodeRequestBuf = grow(s.nodeRequestBuf, numAlternatives)
	s.selectableBuf = grow(s.selectableBuf, numAlternatives*len(s.cands))
	s.constraintBuf = grow(s.constraintBuf, numConstraints)
	s.values = grow(s.values, maxConstraints)
	s.reqs = grow(s.reqs, len(claims))
	s.selectedSub = grow(s.selectedSub, len(claims))
	s.constraints = grow(s.constraints, len(claims))
	s.results = growKeep(s.results, len(claims))

	nextRequest, nextAlternative, nextConstraint := 0, 0, 0
	for ci, cd := range s.claims {
		claim := cd.claim
		s.reqs[ci] = s.requestBuf[nextRequest : nextRequest+len(cd.requests)]
		s.selectedSub[ci] = s.selectedBuf[nextRequest : nextRequest+len(cd.requests)]
		nextRequest += len(cd.requests)
		minClaim, overLimit := 0, false
		for ri := range cd.requests {
			spec := &cd.requests[ri]
			if spec.err != nil {
				s.release()
				return nil, spec.err
			}
			minRequest := 0
			if spec.hasSubRequests {
				// Seeded high so the loop can take the minimum.
				minRequest = math.MaxInt
			}
			alternatives := s.alternativeBuf[nextAlternative : nextAlternative+len(spec.alternatives)]
			for ai, rd := range spec.alternatives {
				if rd.err != nil {
					s.release()
					return nil, rd.err
				}
				k := nextAlternative + ai
				nr := &s.nodeRequestBuf[k]
				*nr = nodeRequest{rd: rd, selectable: s.selectableBuf[k*len(s.cands) : (k+1)*len(s.cands)]}
				if rd.allocationMode == resourceapi.DeviceAllocationModeAll {
					if err := s.enumerateAll(nr, poolStart, position); err != nil {
						s.release()
						return nil, err
					}
					nr.numDevices = len(nr.all)
				} else {
					nr.numDevices = int(rd.count)
				}
				alternatives[ai] = nr
				minRequest = min(minRequest, nr.numDevices)
			}
			nextAlternative += len(spec.alternatives)
			if !spec.hasSubRequests {
				minRequest = alternatives[0].numDevices
			}
			s.reqs[ci][ri] = alternatives
			// Compare against the remaining room, so a large count cannot
			// overflow the sum.
			if minRequest > resourceapi.AllocationResultsMaxSize-minClaim {
				if minor.ClaimLimitPerRequest {
					s.release()
					return nil, fmt.Errorf("claim %s, request %s: adding %d devices exceeds the claim limit of %d, with %d already accounted for",
						klog.KObj(claim), spec.name, minRequest, resourceapi.AllocationResultsMaxSize, minClaim)
				}
				// Checked for the whole claim below; a later request's
				// error comes first, as in the minor's upstream.
				overLimit = true
			}
			minClaim += min(minRequest, math.MaxInt/2-minClaim)
		}
		if overLimit {
			s.release()
			return nil, fmt.Errorf("claim %s: number of requested devices %d exceeds the claim limit of %d", klog.KObj(claim), minClaim, resourceapi.AllocationResultsMaxSize)
		}
		if cd.constraintErr != nil {
			s.release()
			return nil, cd.constraintErr
		}
		states := s.constraintBuf[nextConstraint : nextConstraint+len(cd.constraints)]
		nextConstraint += len(cd.constraints)
		for i := range cd.constraints {
			states[i] = constraintState{spec: &cd.constraints[i], listSemantics: a.newer.ListTypeAttributes}
		}
		s.constraints[ci] = states
	}

	s.marks = growKeep(s.marks, len(s.cands))
	s.allocated = grow(s.allocated, len(s.cands))
	return s, nil
}

// searchPool recycles searches: their buffers are sized for the largest
// problem seen and reused, so that a search on one node allocates next to
// nothing.
var searchPool = sync.Pool{New: func() any { return new(search) }}

// release returns the search to the pool. It must not be used afterwards;
// results built from it do not share its memory.
func (s *search) release() {
	s.a, s.ctx, s.node, s.pools, s.cands = nil, nil, nil, nil, nil
	clear(s.claims)
	clear(s.nodeRequestBuf)
	clear(s.alternativeBuf)
	clear(s.constraintBuf)
	clear(s.values)
	for i := range s.shares {
		s.shares[i] = shareUse{sums: s.shares[i].sums[:0]}
	}
	s.sharesSized, s.anyShared = false, 0
	s.memoClassesSized = false
	s.searchClassesSized = false
	clear(s.counters)
	clear(s.compat)
	clear(s.memo)
	s.placements.reset()
	clear(s.draws)
	s.drawsSized = false
	clear(s.scratchPools[:cap(s.scratchPools)])
	clear(s.scratchDemands[:cap(s.scratchDemands)])
	s.hash, s.failures, s.stats, s.suffix, s.budget = stateHash{}, 0, searchStats{}, nil, 0
	searchPool.Put(s)
}

// grow returns a zeroed slice of length n, reusing b's memory if it fits.
func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	b = b[:n]
	clear(b)
	return b
}

// growEntries returns a slice of length n that keeps b's elements, which
// the caller resets, and zero elements beyond them.
func growEntries[T any](b []T, n int) []T {
	if cap(b) < n {
		return append(b[:cap(b)], make([]T, n-cap(b))...)[:n]
	}
	return b[:n]
}

// growKeep returns a slice of length n whose elements are emptied slices
// that keep their memory.
func growKeep[T any](b [][]T, n int) [][]T {
	if cap(b) < n {
		b = append(b[:cap(b)], make([][]T, n-cap(b))...)
	}
	b = b[:n]
	for i := range b {
		b[i] = b[i][:0]
	}
	return b
}

// enumerateAll determines the devices of an "All" request: every selectable
// device of every pool. An incomplete or invalid pool makes "all" unknowable,
// which is an error. position maps the view's candidate indexes to the
// search's, nil for the same.
func (s *search) enumerateAll(nr *nodeRequest, poolStart, position []int) error {
	rd := nr.rd
	claim := s.claims[rd.claimIndex].claim
	for pi, p := range s.pools {
		if p.incomplete {
			return fmt.Errorf("claim %s, request %s: asks for all devices, but resource pool %s is currently being updated", klog.KObj(claim), rd.name, p.id)
		}
		if p.invalid {
			return fmt.Errorf("claim %s, request %s: asks for all devices, but resource pool %s is currently invalid", klog.KObj(claim), rd.name, p.id)
		}
		vi := poolStart[pi]
		for _, ps := range p.slices {
			for d := range ps.slice.Spec.Devices {
				ci := vi
				if position != nil {
					ci = position[vi]
				}
				selectable, err := s.isSelectable(nr, ci)
				if err != nil {
					return err
				}
				if selectable && s.a.features.ConsumableCapacity {
					// Only the device's own capacity counts here; what is in
					// use is checked when allocating, so that a busy device
					// makes "all" fail instead of being skipped. In 1.36 a
					// device that is busy, or whose capacity cannot be
					// resolved, is left out of "all".
					if minor.CapacityErrorSkipsDevice {
						fits, err := s.capacityFits(nr, ci)
						selectable = err == nil && fits
					} else {
						eval := s.capacityOf(nr, ci)
						if eval.err != nil {
							return fmt.Errorf("claim %s, request %s: checking capacity for device %s: %w", klog.KObj(claim), rd.name, ps.slice.Spec.Devices[d].Name, eval.err)
						}
						selectable = eval.fitsUnused
					}
				}
				if selectable {
					nr.all = append(nr.all, ci)
				}
				vi++
			}
		}
	}
	return nil
}

// isAllocated reports whether a device was allocated before this cycle, in
// whole or as a share.
func (a *Allocator) isAllocated(id structured.DeviceID) bool {
	if a.allocatedWhole(id) {
		return true
	}
	if a.sharedDevices().Has(id) {
		return true
	}
	_, ok := a.consumedCapacity(id)
	return ok
}

// DeviceUsage returns how many devices the node can use and how many of
// them are allocated, in whole or as a share, before this cycle. Scoring
// uses it to pack or spread device usage.
func (a *Allocator) DeviceUsage(node *v1.Node) (total, used int) {
	v := a.view(node)
	if v.err != nil {
		return 0, 0
	}
	for _, c := range v.cands {
		total++
		if a.isAllocated(c.id()) {
			used++
		}
	}
	return total, used
}
