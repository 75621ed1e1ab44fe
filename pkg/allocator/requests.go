package allocator

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/minor"
)

// claimData is the node-independent preprocessing of one claim. It is
// computed once per Allocator and claim object and shared by all nodes.
type claimData struct {
	claim    *resourceapi.ResourceClaim
	requests []requestSpec
	// constraints are the claim's constraints in order; constraintErr is set
	// instead if one of them is of an unknown type.
	constraints   []constraintSpec
	constraintErr error
}

// requestSpec is one entry of claim.Spec.Devices.Requests.
type requestSpec struct {
	name string
	// err is set if the request cannot be handled at all (a feature it needs
	// is disabled). It is reported before any alternative is looked at.
	err error
	// alternatives has one entry per FirstAvailable subrequest, or exactly
	// one entry for a plain request.
	alternatives   []*requestData
	hasSubRequests bool
}

// requestData describes a request or subrequest that devices get allocated
// for.
type requestData struct {
	claimIndex, requestIndex, subRequestIndex int
	name                                      string // request or subrequest name
	parentName                                string // name of the request containing a subrequest, "" otherwise
	fullName                                  string // "request" or "request/subrequest"

	// err is a validation error independent of the node. It is reported when
	// the search reaches this (sub)request's validation, as upstream does.
	err error

	class          *resourceapi.DeviceClass
	allocationMode resourceapi.DeviceAllocationMode
	count          int64
	adminAccess    bool
	selectors      []resourceapi.DeviceSelector
	tolerations    []resourceapi.DeviceToleration
	capacity       *resourceapi.CapacityRequirements
	// derived maps derived attribute names to their CEL expression.
	derived map[resourceapi.FullyQualifiedName]string

	// classExprs and requestExprs are the compiled selectors, in order.
	classExprs   []*compiled
	requestExprs []*compiled
	// trapID identifies the selectors for sliceTrapFree's cache; 0 when
	// a selector has no compiled expression.
	trapID int64
	// capacityID identifies the capacity requirements for the slices'
	// capacity evaluations (preparedSlice.capacityEval); 0 for none.
	capacityID int64
}

// constraintSpec is one claim constraint.
type constraintSpec struct {
	match     bool // matchAttribute; otherwise distinctAttribute
	attribute resourceapi.FullyQualifiedName
	requests  sets.Set[string]
}

// appliesTo reports whether the constraint covers devices allocated for the
// (sub)request: an empty list covers all, otherwise the request's name or,
// for a subrequest, "request/subrequest".
func (c *constraintSpec) appliesTo(rd *requestData) bool {
	if c.requests.Len() == 0 {
		return true
	}
	if rd.parentName != "" {
		return c.requests.Has(rd.parentName) || c.requests.Has(rd.fullName)
	}
	return c.requests.Has(rd.name)
}

// claimData returns the preprocessing of a claim, computing it on first use.
func (a *Allocator) claimData(claimIndex int, claim *resourceapi.ResourceClaim) *claimData {
	key := claimKey{claim: claim, index: claimIndex}
	if cd, ok := a.claims.Load(key); ok {
		return cd.(*claimData)
	}
	cd := a.prepareClaim(claimIndex, claim)
	actual, _ := a.claims.LoadOrStore(key, cd)
	return actual.(*claimData)
}

type claimKey struct {
	claim *resourceapi.ResourceClaim
	index int
}

func (a *Allocator) prepareClaim(claimIndex int, claim *resourceapi.ResourceClaim) *claimData {
	cd := &claimData{claim: claim}
	for requestIndex := range claim.Spec.Devices.Requests {
		request := &claim.Spec.Devices.Requests[requestIndex]
		spec := requestSpec{name: request.Name, hasSubRequests: len(request.FirstAvailable) > 0}
		switch {
		case spec.hasSubRequests && !a.features.PrioritizedList:
			spec.err = fmt.Errorf("claim %s, request %s: has subrequests, but the DRAPrioritizedList feature is disabled", klog.KObj(claim), request.Name)
		case !a.features.ConsumableCapacity && request.Exactly != nil && request.Exactly.Capacity != nil:
			spec.err = fmt.Errorf("claim %s, request %s: has capacity requests, but the DRAConsumableCapacity feature is disabled", klog.KObj(claim), request.Name)
		case !a.features.ConsumableCapacity:
			for _, sub := range request.FirstAvailable {
				if sub.Capacity != nil {
					spec.err = fmt.Errorf("claim %s, subrequest %s: has capacity requests, but the DRAConsumableCapacity feature is disabled", klog.KObj(claim), sub.Name)
					break
				}
			}
		}
		if spec.hasSubRequests {
			for subIndex := range request.FirstAvailable {
				sub := &request.FirstAvailable[subIndex]
				rd := &requestData{
					claimIndex: claimIndex, requestIndex: requestIndex, subRequestIndex: subIndex,
					name: sub.Name, parentName: request.Name, fullName: request.Name + "/" + sub.Name,
					allocationMode: sub.AllocationMode,
					count:          sub.Count,
					selectors:      sub.Selectors,
					tolerations:    sub.Tolerations,
					capacity:       sub.Capacity,
				}
				a.validateRequest(claim, rd, sub.DeviceClassName, minor.SubRequestDerivedAttributes(sub), false)
				spec.alternatives = append(spec.alternatives, rd)
			}
		} else {
			rd := &requestData{
				claimIndex: claimIndex, requestIndex: requestIndex,
				name: request.Name, fullName: request.Name,
			}
			if exactly := request.Exactly; exactly != nil {
				rd.allocationMode = exactly.AllocationMode
				rd.count = exactly.Count
				rd.adminAccess = ptr.Deref(exactly.AdminAccess, false)
				rd.selectors = exactly.Selectors
				rd.tolerations = exactly.Tolerations
				rd.capacity = exactly.Capacity
				a.validateRequest(claim, rd, exactly.DeviceClassName, minor.ExactDerivedAttributes(exactly), exactly.AdminAccess != nil)
			} else if rd.err == nil {
				// API validation requires exactly one of "exactly" and
				// "firstAvailable". Upstream's allocator dereferences nil
				// here; reject the claim instead.
				rd.err = fmt.Errorf("claim %s, request %s: neither exactly nor firstAvailable is set (unsupported request type?)", klog.KObj(claim), request.Name)
			}
			spec.alternatives = []*requestData{rd}
		}
		cd.requests = append(cd.requests, spec)
	}

	for i, constraint := range claim.Spec.Devices.Constraints {
		switch {
		case constraint.MatchAttribute != nil:
			cd.constraints = append(cd.constraints, constraintSpec{match: true, attribute: *constraint.MatchAttribute, requests: sets.New(constraint.Requests...)})
		case constraint.DistinctAttribute != nil:
			cd.constraints = append(cd.constraints, constraintSpec{attribute: *constraint.DistinctAttribute, requests: sets.New(constraint.Requests...)})
		default:
			cd.constraintErr = fmt.Errorf("claim %s, constraint #%d: empty constraint (unsupported constraint type?)", klog.KObj(claim), i)
		}
		if cd.constraintErr != nil {
			break
		}
	}
	return cd
}

// validateRequest performs upstream's node-independent request checks in
// upstream's order and records the first failure in rd.err.
func (a *Allocator) validateRequest(claim *resourceapi.ResourceClaim, rd *requestData, className string, derived []minor.DerivedAttribute, hasAdminAccess bool) {
	fail := func(format string, args ...any) {
		rd.err = fmt.Errorf("claim %s, request %s"+format, append([]any{klog.KObj(claim), rd.name}, args...)...)
	}
	if len(derived) > 0 {
		// Rejected explicitly when the feature is off, so that constraints
		// are not silently ignored.
		if !a.newer.DerivedAttributes {
			fail(": cannot handle request with derived attributes, the feature is disabled")
			return
		}
		rd.derived = make(map[resourceapi.FullyQualifiedName]string, len(derived))
		for _, attr := range derived {
			rd.derived[attr.Name] = attr.Expression
		}
	}
	for i, selector := range rd.selectors {
		if selector.CEL == nil {
			fail(", selector #%d: CEL expression empty (unsupported selector type?)", i)
			return
		}
	}
	if !a.features.AdminAccess && hasAdminAccess {
		fail(": admin access is requested, but the feature is disabled")
		return
	}
	if className == "" {
		fail(": missing device class name (unsupported request type?)")
		return
	}
	class, err := a.classes.Get(className)
	if err != nil {
		fail(": could not retrieve device class %s: %w", className, err)
		return
	}
	rd.class = class
	switch rd.allocationMode {
	case resourceapi.DeviceAllocationModeExactCount:
		if rd.count > math.MaxInt {
			fail(": exact count %d is too large", rd.count)
			return
		}
	case resourceapi.DeviceAllocationModeAll:
	default:
		fail(": unsupported count mode %s", rd.allocationMode)
		return
	}

	// Compile now; compile errors are only reported when a device is
	// evaluated, exactly where upstream would compile.
	for _, selector := range class.Spec.Selectors {
		if selector.CEL == nil {
			// A class selector of an unknown type never matches a CEL
			// evaluation; upstream dereferences nil here. Report it when
			// evaluated, like a compile error.
			rd.classExprs = append(rd.classExprs, nil)
			continue
		}
		rd.classExprs = append(rd.classExprs, a.cache.compile(a.celFeatures, false, selector.CEL.Expression))
	}
	for _, selector := range rd.selectors {
		rd.requestExprs = append(rd.requestExprs, a.cache.compile(a.celFeatures, false, selector.CEL.Expression))
	}
	if key := trapKey(rd.classExprs, rd.requestExprs); key != "" {
		rd.trapID = a.cache.trapIDs.id(key)
	}
	if key := capacityRequestKey(rd.capacity); key != "" {
		rd.capacityID = a.cache.capacityIDs.id(key)
	}
}

// trapKey joins the expression IDs: class selectors, a separator, request
// selectors. Expression IDs are unique per compiled expression and
// features for the cache's lifetime, as are the slices keyed by it.
func trapKey(class, request []*compiled) string {
	b := make([]byte, 0, 8*(len(class)+len(request)+1))
	for _, exprs := range [][]*compiled{class, request} {
		for _, e := range exprs {
			if e == nil {
				return ""
			}
			b = binary.LittleEndian.AppendUint64(b, uint64(e.id))
		}
		b = append(b, '|')
	}
	return string(b)
}

// capacityRequestKey encodes capacity requirements exactly: the requested
// names in order, each with its exact decimal value and format, which is all
// that evaluateCapacity reads of them. Requirements without requests give
// "", the same as none.
func capacityRequestKey(capacity *resourceapi.CapacityRequirements) string {
	if capacity == nil || len(capacity.Requests) == 0 {
		return ""
	}
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(capacity.Requests)) {
		// AsDec changes the representation of its receiver; the claim's
		// quantity stays as it is.
		q := capacity.Requests[name].DeepCopy()
		b.WriteString(string(name))
		b.WriteByte(0)
		b.WriteString(q.AsDec().String())
		b.WriteByte(0)
		b.WriteString(string(q.Format))
		b.WriteByte(0)
	}
	return b.String()
}
