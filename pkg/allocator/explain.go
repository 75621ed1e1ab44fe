package allocator

import (
	"context"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
)

// Reason says why a request, or a claim as a whole, does not fit on a node.
type Reason string

const (
	// ReasonNoMatchingDevice: no device on the node matches the request's
	// DeviceClass and selectors.
	ReasonNoMatchingDevice Reason = "NoMatchingDevice"
	// ReasonPoolIncomplete: nothing matches, and some resource pool of the
	// node is being updated by its driver.
	ReasonPoolIncomplete Reason = "PoolIncomplete"
	// ReasonDevicesInUse: matching devices exist, but too many are
	// allocated already.
	ReasonDevicesInUse Reason = "DevicesInUse"
	// ReasonDevicesTainted: too many matching devices carry taints the
	// request does not tolerate.
	ReasonDevicesTainted Reason = "DevicesTainted"
	// ReasonCountersExhausted: the shared counters of partitionable devices
	// are used up.
	ReasonCountersExhausted Reason = "CountersExhausted"
	// ReasonCapacityExhausted: the consumable capacity of shareable devices
	// does not cover the request.
	ReasonCapacityExhausted Reason = "CapacityExhausted"
	// ReasonDevicesIncompatible: too many matching devices draw from
	// counter sets whose allocated devices declare compatibility groups
	// that exclude them.
	ReasonDevicesIncompatible Reason = "DevicesIncompatible"
	// ReasonNodeOperationsUnsupported: too many matching devices come from
	// slices that skip node operations (SkipNodeOperations), which the node
	// does not support: it does not declare DRAOptionalNodeOperations, or
	// the scheduler's feature is off.
	ReasonNodeOperationsUnsupported Reason = "NodeOperationsUnsupported"
	// ReasonConstraintUnsatisfiable: every request could be served on its
	// own, but no choice satisfies one of the claim's constraints.
	ReasonConstraintUnsatisfiable Reason = "ConstraintUnsatisfiable"
	// ReasonContention: the requests (of one claim, or of all the pod's
	// claims) could each be served, but not all at once: they compete for
	// the same devices.
	ReasonContention Reason = "Contention"
)

// Failure explains why claims do not fit on a node. The numbers describe
// the node as it is, before this pod.
type Failure struct {
	// Claim is "namespace/name"; empty when all claims together fail.
	Claim string
	// Request is the request's name; empty for claim-level reasons.
	Request string
	// DeviceClass is the request's DeviceClass (for subrequests, that of
	// the alternative that came closest); empty for claim-level reasons.
	DeviceClass string
	Reason      Reason
	// Need is how many devices the request needs (for subrequests, the
	// alternative that came closest).
	Need int
	// Matching is how many devices on the node match class and selectors.
	Matching int
	// Free is how many of the matching devices could be used now.
	Free int
	// The matching devices that are not free, by the first check that
	// rules them out.
	InUse, Tainted, CountersExhausted, CapacityExhausted, Incompatible, NodeOperations int
	// Constraint describes the unsatisfiable constraint, e.g.
	// `matchAttribute "resource.kubernetes.io/pcieRoot"`.
	Constraint string
	// Pool names a pool that is being updated.
	Pool string
}

// Message is a short, human-readable form, fit for a pod condition.
func (f Failure) Message() string {
	var b strings.Builder
	if f.Request != "" {
		fmt.Fprintf(&b, "request %q: ", f.Request)
	} else if f.Claim != "" {
		fmt.Fprintf(&b, "claim %s: ", f.Claim)
	}
	switch f.Reason {
	case ReasonNoMatchingDevice:
		b.WriteString("no device matches the class and selectors")
	case ReasonPoolIncomplete:
		fmt.Fprintf(&b, "no matching device; resource pool %s is being updated", f.Pool)
	case ReasonDevicesInUse, ReasonDevicesTainted, ReasonCountersExhausted, ReasonCapacityExhausted,
		ReasonDevicesIncompatible, ReasonNodeOperationsUnsupported:
		fmt.Fprintf(&b, "%d of %d matching devices free, need %d", f.Free, f.Matching, f.Need)
		var why []string
		for _, part := range []struct {
			n    int
			what string
		}{
			{f.InUse, "in use"}, {f.Tainted, "tainted"}, {f.CountersExhausted, "counters exhausted"}, {f.CapacityExhausted, "capacity exhausted"},
			{f.Incompatible, "incompatible with allocated devices"}, {f.NodeOperations, "need optional node operations"},
		} {
			if part.n > 0 {
				why = append(why, fmt.Sprintf("%d %s", part.n, part.what))
			}
		}
		if len(why) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(why, ", "))
		}
	case ReasonConstraintUnsatisfiable:
		fmt.Fprintf(&b, "constraint %s unsatisfiable", f.Constraint)
	case ReasonContention:
		if f.Claim == "" {
			b.WriteString("claims compete for the same devices")
		} else {
			b.WriteString("requests compete for the same devices")
		}
	default:
		b.WriteString(string(f.Reason))
	}
	return b.String()
}

// Explain tells why the claims do not fit on the node, for a node where
// Allocate found no allocation (nil results, nil error). It looks at each
// request on its own first; if all could be served, at each claim with and
// without its constraints; and otherwise reports contention between the
// claims. It returns nil if the claims do fit, and an error where Allocate
// would return one.
//
// Explain judges each device with the same check as Allocate's search, so
// the two cannot disagree about a device. It costs up to a few searches per
// claim, each as hard as Allocate's, so callers bound it like Allocate:
// cancelling ctx, or its deadline passing, makes Explain return an error
// wrapping the context's error.
func (a *Allocator) Explain(ctx context.Context, node *v1.Node, claims []*resourceapi.ResourceClaim) ([]Failure, error) {
	s, err := a.newSearch(ctx, node, claims, false)
	if err != nil {
		return nil, err
	}
	defer s.release()
	// Without a search to run, a context that is done already would go
	// unnoticed when every answer comes from the per-request pass.
	if err := s.aborted(); err != nil {
		return nil, err
	}
	var incomplete string
	for _, p := range s.pools {
		if p.incomplete {
			incomplete = p.id.String()
			break
		}
	}

	var failures []Failure
	for ci, cd := range s.claims {
		for ri := range s.reqs[ci] {
			f, err := s.explainRequest(ci, ri)
			if err != nil {
				return nil, err
			}
			if f == nil {
				continue
			}
			if f.Reason == ReasonNoMatchingDevice && incomplete != "" {
				f.Reason, f.Pool = ReasonPoolIncomplete, incomplete
			}
			f.Claim = klog.KObj(cd.claim).String()
			failures = append(failures, *f)
		}
	}
	if len(failures) > 0 {
		return failures, nil
	}

	// Every request could be served on its own. Try each claim alone.
	for _, claim := range claims {
		f, err := a.explainClaim(ctx, node, claim)
		if err != nil {
			return nil, err
		}
		if f != nil {
			failures = append(failures, *f)
		}
	}
	if len(failures) > 0 {
		return failures, nil
	}
	ok, err := a.fits(ctx, node, claims, -1)
	if err != nil || ok {
		return nil, err
	}
	return []Failure{{Reason: ReasonContention}}, nil
}

// explainRequest checks one request on its own against the node as it is.
// For a request with subrequests it reports the alternative closest to
// fitting, or nil if any alternative fits.
func (s *search) explainRequest(ci, ri int) (*Failure, error) {
	var best *Failure
	for _, nr := range s.reqs[ci][ri] {
		f := Failure{Request: s.claims[ci].requests[ri].name, Need: nr.numDevices}
		if nr.rd.class != nil {
			f.DeviceClass = nr.rd.class.Name
		}
		all := nr.rd.allocationMode == resourceapi.DeviceAllocationModeAll
		count := func(c int) error {
			// Each candidate may evaluate CEL expressions for the first
			// time; a node with many devices must not outlast the
			// caller's deadline.
			if err := s.aborted(); err != nil {
				return err
			}
			selectable, err := s.isSelectable(nr, c)
			if err != nil || !selectable {
				return err
			}
			reason, err := s.blockedBy(ci, nr, c)
			if err != nil {
				return err
			}
			if reason == ReasonNoMatchingDevice {
				// Not there for this scheduler (a feature it needs is
				// off), whatever the selectors say.
				return nil
			}
			f.Matching++
			switch reason {
			case ReasonDevicesInUse:
				f.InUse++
			case ReasonDevicesTainted:
				f.Tainted++
			case ReasonCountersExhausted:
				f.CountersExhausted++
			case ReasonCapacityExhausted:
				f.CapacityExhausted++
			case ReasonDevicesIncompatible:
				f.Incompatible++
			case ReasonNodeOperationsUnsupported:
				f.NodeOperations++
			default:
				f.Free++
			}
			return nil
		}
		if all {
			for _, c := range nr.all {
				if err := count(c); err != nil {
					return nil, err
				}
			}
			// "All" needs every device of its list, and at least one.
			f.Need = max(len(nr.all), 1)
		} else {
			for c := range s.cands {
				if err := count(c); err != nil {
					return nil, err
				}
			}
		}
		if f.Free >= f.Need && f.Need > 0 {
			return nil, nil
		}
		switch f.Matching {
		case 0:
			f.Reason = ReasonNoMatchingDevice
		default:
			f.Reason = ReasonDevicesInUse
			largest := f.InUse
			for _, c := range []struct {
				n int
				r Reason
			}{
				{f.Tainted, ReasonDevicesTainted}, {f.CountersExhausted, ReasonCountersExhausted}, {f.CapacityExhausted, ReasonCapacityExhausted},
				{f.Incompatible, ReasonDevicesIncompatible}, {f.NodeOperations, ReasonNodeOperationsUnsupported},
			} {
				if c.n > largest {
					largest, f.Reason = c.n, c.r
				}
			}
		}
		if best == nil || f.Free-f.Need > best.Free-best.Need {
			best = &f
		}
	}
	return best, nil
}

// blockedBy returns why a device that matches the request cannot serve it
// on the node as it is, or "" if it can. It is the search's own check,
// without the claim's constraints, which Explain looks at per claim.
func (s *search) blockedBy(claim int, nr *nodeRequest, ci int) (Reason, error) {
	mode := checkIgnoreConstraints
	if nr.rd.allocationMode == resourceapi.DeviceAllocationModeAll {
		mode |= checkAll
	}
	ok, reason, err := s.accepts(claim, nr, ci, mode, nil)
	if err != nil || ok {
		return "", err
	}
	return reason, nil
}

// explainClaim checks one claim alone: without its constraints, then with
// one constraint at a time.
func (a *Allocator) explainClaim(ctx context.Context, node *v1.Node, claim *resourceapi.ResourceClaim) (*Failure, error) {
	claims := []*resourceapi.ResourceClaim{claim}
	ok, err := a.fits(ctx, node, claims, -1)
	if err != nil || ok {
		return nil, err
	}
	name := klog.KObj(claim).String()
	ok, err = a.fits(ctx, node, claims, 0)
	if err != nil {
		return nil, err
	}
	if !ok {
		return &Failure{Claim: name, Reason: ReasonContention}, nil
	}
	for i, constraint := range claim.Spec.Devices.Constraints {
		ok, err := a.fits(ctx, node, claims, i+1)
		if err != nil {
			return nil, err
		}
		if ok {
			continue
		}
		description := ""
		switch {
		case constraint.MatchAttribute != nil:
			description = fmt.Sprintf("matchAttribute %q", *constraint.MatchAttribute)
		case constraint.DistinctAttribute != nil:
			description = fmt.Sprintf("distinctAttribute %q", *constraint.DistinctAttribute)
		}
		return &Failure{Claim: name, Reason: ReasonConstraintUnsatisfiable, Constraint: description}, nil
	}
	// Only the constraints together fail.
	return &Failure{Claim: name, Reason: ReasonConstraintUnsatisfiable, Constraint: "combination of the claim's constraints"}, nil
}

// fits runs the search for the claims. keep selects constraints: -1 keeps
// all, 0 none, i > 0 only the i-th constraint of the single claim.
func (a *Allocator) fits(ctx context.Context, node *v1.Node, claims []*resourceapi.ResourceClaim, keep int) (bool, error) {
	s, err := a.newSearch(ctx, node, claims, false)
	if err != nil {
		return false, err
	}
	defer s.release()
	if keep >= 0 {
		for ci := range s.constraints {
			var kept []constraintState
			if keep > 0 {
				kept = s.constraints[ci][keep-1 : keep]
			}
			s.constraints[ci] = kept
		}
	}
	ok, err := s.allocateOne(pos{}, false, 0)
	if err != nil {
		return false, err
	}
	return ok, nil
}
