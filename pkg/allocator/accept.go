package allocator

import (
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/minor"
)

// accepts is the one rule for whether a candidate device can take a device
// slot of a (sub)request. The search (allocateDevice), its bounds
// (couldAccept) and Explain (blockedBy) all ask it; copies of the rule drift
// apart, and a bound or an explanation that disagrees with the search prunes
// a solution or tells the user the wrong thing.

// checkMode says how accepts is asked. It is a set of flags rather than a
// struct so that it travels in one register: accepts runs for every
// candidate the search or a bound looks at.
type checkMode uint8

const (
	// checkAll: the candidate is the next device of an "All" request.
	// Upstream checks those without its candidate loop: selectors and the
	// device's own capacity were checked when the list was built, and
	// capacity in use is checked last, after the constraints, so that a
	// device that violates a constraint is reported as an error even when
	// it is busy.
	checkAll checkMode = 1 << iota
	// checkOptimisticShares: a device that allows multiple allocations is
	// assumed to skip the counter check, as it will once it has a share.
	// Bounds for requests that the search reaches later need this (see
	// couldAcceptLater); the search itself never sets it.
	checkOptimisticShares
	// checkIgnoreConstraints: leave out the claim's constraints. Explain
	// looks at each request on its own first and at the constraints
	// separately.
	checkIgnoreConstraints
)

// constraintValue is what accepts found for one constraint of the claim
// that applies to the request: the device's attribute value and, for
// matchAttribute with list semantics, the narrowed intersection.
// allocateDevice adds exactly these to the constraint, so that the value
// checked is the value recorded, and neither is computed twice.
type constraintValue struct {
	attr     *resourceapi.DeviceAttribute
	narrowed *attributeSet
}

// accepts reports whether candidate ci can take a device slot of the
// (sub)request nr of the claim with index claim, in the current state of
// the search, and if not, the Reason of the first check that rules it out. An error is one that upstream's search
// would return on reaching this candidate: a selector or derived attribute
// that fails to evaluate, a capacity request that cannot be resolved.
//
// The checks run in upstream's order (its candidate loop, then
// allocateDevice), which decides which error surfaces and which reason is
// reported:
//
//   - in use: allocated before this cycle or by this assignment; with admin
//     access only the claim's own devices count (ReasonDevicesInUse);
//   - class and request selectors, binding conditions without
//     DeviceBindingAndStatus, per-device node selection
//     (ReasonNoMatchingDevice);
//   - consumable capacity left on the device (ReasonCapacityExhausted);
//   - SkipNodeOperations of the device's slice: only with
//     OptionalNodeOperations on a node that declares it
//     (ReasonNodeOperationsUnsupported);
//   - consuming counters without PartitionableDevices
//     (ReasonNoMatchingDevice: such devices are not there for this
//     scheduler);
//   - compatibility groups of the devices drawing from the same counter
//     sets (ReasonDevicesIncompatible), then the counters themselves
//     (ReasonCountersExhausted), both skipped for a further share of a
//     shared device;
//   - untolerated NoSchedule and NoExecute taints (ReasonDevicesTainted);
//   - the claim's matchAttribute and distinctAttribute constraints
//     (ReasonConstraintUnsatisfiable).
//
// accepts changes nothing the outcome of the search depends on: it only
// fills caches (selector results, capacity evaluations, pool usage created
// empty on first use). If values is not nil (at least one entry per
// constraint of the claim), it receives what allocateDevice must add to each
// constraint that applies. It allocates nothing in the common cases; allocateDevice calls
// it for every candidate it tries.
func (s *search) accepts(claim int, nr *nodeRequest, ci int, mode checkMode, values []constraintValue) (bool, Reason, error) {
	c := s.cands[ci]
	device := c.device()
	rd := nr.rd
	if rd.adminAccess {
		// Admin access may share a device with other claims, but a claim
		// still gets each device once. Devices that allow multiple
		// allocations are never marked.
		if s.markedBy(ci, claim) {
			return false, ReasonDevicesInUse, nil
		}
	} else if s.inUse(ci) {
		return false, ReasonDevicesInUse, nil
	}
	if mode&checkAll == 0 {
		selectable, err := s.isSelectable(nr, ci)
		if err != nil {
			return false, "", err
		}
		if !selectable {
			return false, ReasonNoMatchingDevice, nil
		}
		if s.a.features.ConsumableCapacity {
			fits, err := s.capacityFits(nr, ci)
			if err != nil {
				return s.capacityFailure(claim, nr, ci, err)
			}
			if !fits {
				return false, ReasonCapacityExhausted, nil
			}
		}
	}
	if s.a.tier.honorsSkipNodeOperations && len(minor.SkipNodeOperations(&c.ps.slice.Spec)) > 0 && !s.optionalNodeOperations() {
		return false, ReasonNodeOperationsUnsupported, nil
	}
	if len(device.ConsumesCounters) > 0 {
		if !s.a.features.PartitionableDevices {
			return false, ReasonNoMatchingDevice, nil
		}
		// A further share of a shared device draws nothing more; a bound
		// may assume that a shared device has a share by then.
		assumedShared := mode&checkOptimisticShares != 0 && s.allowsMultiple(device)
		if !assumedShared && !s.furtherShare(ci, device) {
			if s.a.newer.CompatibilityGroups && !s.compatFor(c.pool).admits(device) {
				return false, ReasonDevicesIncompatible, nil
			}
			if usage, consumption := s.counterDraw(ci); !usage.fits(consumption) {
				return false, ReasonCountersExhausted, nil
			}
		}
	}
	if s.a.features.DeviceTaints && taintPrevents(device, rd.tolerations) {
		return false, ReasonDevicesTainted, nil
	}
	if mode&checkIgnoreConstraints == 0 {
		for i := range s.constraints[claim] {
			cs := &s.constraints[claim][i]
			if !cs.spec.appliesTo(rd) {
				continue
			}
			attr, err := s.attribute(rd, c, cs.spec.attribute)
			if err != nil {
				return false, "", err
			}
			ok, narrowed := cs.check(attr)
			if !ok {
				return false, ReasonConstraintUnsatisfiable, nil
			}
			if values != nil {
				values[i] = constraintValue{attr: attr, narrowed: narrowed}
			}
		}
	}
	if mode&checkAll != 0 && s.a.features.ConsumableCapacity {
		fits, err := s.capacityFits(nr, ci)
		if err != nil {
			return s.capacityFailure(claim, nr, ci, err)
		}
		if !fits {
			return false, ReasonCapacityExhausted, nil
		}
	}
	return true, "", nil
}

// capacityFailure: a capacity that cannot be resolved fails the search
// with an error that says which request and device it belongs to; in a
// minor whose upstream skips such a device, the device does not fit.
func (s *search) capacityFailure(claim int, nr *nodeRequest, ci int, err error) (bool, Reason, error) {
	if minor.CapacityErrorSkipsDevice {
		return false, ReasonCapacityExhausted, nil
	}
	return false, "", fmt.Errorf("claim %s, request %s: checking capacity for device %s: %w", klog.KObj(s.claims[claim].claim), nr.rd.name, s.cands[ci].id(), err)
}

// optionalNodeOperations: devices whose slices skip node operations can be
// used on this node, which needs the feature and a node that declares it.
func (s *search) optionalNodeOperations() bool {
	return s.a.newer.OptionalNodeOperations &&
		slices.Contains(s.node.Status.DeclaredFeatures, minor.OptionalNodeOperationsFeature)
}

// allowsMultiple: the device can be shared by several requests, each
// consuming part of its capacity.
func (s *search) allowsMultiple(device *resourceapi.Device) bool {
	return s.a.features.ConsumableCapacity && ptr.Deref(device.AllowMultipleAllocations, false)
}

// couldAccept is allocateDevice's decision without its effects, for the
// bounds: accepts in the current state, with mode saying what a bound may
// assume. trap reports an evaluation error, which a bound must leave to the
// search to find. values, if not nil, receives the constraint values.
func (s *search) couldAccept(claim int, nr *nodeRequest, ci int, mode checkMode, values []constraintValue) (ok, trap bool) {
	ok, _, err := s.accepts(claim, nr, ci, mode, values)
	return ok, err != nil
}
