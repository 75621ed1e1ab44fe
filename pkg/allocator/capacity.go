package allocator

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Consumable capacity (DRAConsumableCapacity): a device with
// AllowMultipleAllocations can be shared by several requests, each
// consuming part of its capacity. What a request consumes follows the
// device's request policy: a default when nothing is requested, requests
// rounded up to the next valid value or step of a valid range.

var (
	// errNotRepresentable: the request, or what it rounds up to, does not fit
	// the device's range arithmetic. Such a request is rejected outright
	// rather than retried device by device.
	errNotRepresentable = errors.New("capacity request cannot be represented in the device's range arithmetic")
	// errNegativeCapacity: a resolved consumption is negative, which would
	// under-count the device. Only objects stored before stricter validation
	// can carry such values.
	errNegativeCapacity = errors.New("capacity value is negative")
)

// capacityEval is what a request would consume of a device, which only
// depends on the two; preparedSlice.capacityEval keeps it with the slice.
// It is shared and must not be changed: arithmetic on its amounts works on
// copies (Quantity.Cmp may change its receiver's representation).
type capacityEval struct {
	// missing: the request asks for a capacity the device does not have.
	missing bool
	// err: the request cannot be resolved (not representable, negative);
	// this aborts allocation rather than skipping the device.
	err error
	// violates: a resolved consumption breaks the capacity's request policy.
	violates bool
	names    []resourceapi.QualifiedName
	amounts  []resource.Quantity
	// fitsUnused: the request fits the device while none of its capacity
	// is consumed, the common case.
	fitsUnused bool
}

// evaluateCapacity resolves what a request consumes of every capacity of a
// device. Every capacity is resolved before any policy check, so that an
// unrepresentable request fails regardless of map order.
func evaluateCapacity(request *resourceapi.CapacityRequirements, capacity map[resourceapi.QualifiedName]resourceapi.DeviceCapacity, fractional bool) capacityEval {
	var e capacityEval
	if request != nil {
		for name := range request.Requests {
			if _, ok := capacity[name]; !ok {
				// Another device may define it; skip this one.
				e.missing = true
				return e
			}
		}
	}
	// Sorted names give every evaluation for a device the same order, so
	// that sums of shares line up.
	e.names = slices.Sorted(maps.Keys(capacity))
	e.amounts = make([]resource.Quantity, 0, len(capacity))
	for _, name := range e.names {
		c := capacity[name]
		q, err := resolveConsumption(requested(request, name), c, fractional)
		if err != nil {
			e.err = fmt.Errorf("capacity %q: %w", name, err)
			return e
		}
		if q.Sign() < 0 {
			e.err = fmt.Errorf("capacity %q: %w", name, errNegativeCapacity)
			return e
		}
		e.amounts = append(e.amounts, q)
	}
	for i, name := range e.names {
		if violatesPolicy(e.amounts[i], capacity[name].RequestPolicy, fractional) {
			e.violates = true
		}
	}
	return e
}

// fits checks the consumption against what is left of each capacity after
// earlier cycles (allocated) and the current search (allocating, aligned with
// names; nil if the device has no share now).
func (e *capacityEval) fits(capacity map[resourceapi.QualifiedName]resourceapi.DeviceCapacity, allocated structured.ConsumedCapacity, allocating []resource.Quantity) (bool, error) {
	if e.missing {
		return false, nil
	}
	if e.err != nil {
		return false, e.err
	}
	if e.violates {
		return false, nil
	}
	for i, name := range e.names {
		a, inAllocated := allocated[name]
		if !inAllocated && allocating == nil {
			// Cmp may change its receiver's representation; the amount ends
			// up in results, so compare a copy.
			amount := e.amounts[i]
			if amount.Cmp(capacity[name].Value) > 0 {
				return false, nil
			}
			continue
		}
		total := e.amounts[i].DeepCopy()
		if inAllocated {
			total.Add(*a)
		}
		if allocating != nil {
			total.Add(allocating[i])
		}
		if total.Cmp(capacity[name].Value) > 0 {
			return false, nil
		}
	}
	return true, nil
}

// consumed returns the consumption as a map, for the allocation result.
func (e *capacityEval) consumed() map[resourceapi.QualifiedName]resource.Quantity {
	result := make(map[resourceapi.QualifiedName]resource.Quantity, len(e.names))
	for i, name := range e.names {
		result[name] = e.amounts[i].DeepCopy()
	}
	return result
}

func requested(request *resourceapi.CapacityRequirements, name resourceapi.QualifiedName) *resource.Quantity {
	if request == nil || request.Requests == nil {
		return nil
	}
	if q, ok := request.Requests[name]; ok {
		return &q
	}
	return nil
}

// resolveConsumption resolves what a request consumes of one capacity: the policy
// default (or the whole capacity) when nothing is requested, otherwise the
// request rounded up according to the policy.
func resolveConsumption(req *resource.Quantity, c resourceapi.DeviceCapacity, fractional bool) (resource.Quantity, error) {
	policy := c.RequestPolicy
	if req == nil {
		if policy != nil && policy.Default != nil {
			return policy.Default.DeepCopy(), nil
		}
		return c.Value.DeepCopy(), nil
	}
	if policy == nil {
		return req.DeepCopy(), nil
	}
	switch {
	case policy.ValidRange != nil && policy.ValidRange.Min != nil:
		return roundUpToRange(req, policy.ValidRange, fractional)
	case policy.ValidValues != nil:
		for _, v := range policy.ValidValues {
			// Valid values are sorted ascending (API validation).
			if req.Cmp(v) <= 0 {
				return v.DeepCopy(), nil
			}
		}
	}
	return *req, nil
}

// roundUpToRange rounds a request up to the range's minimum or the next
// step above it. With fractional ranges enabled and all bounds exact in
// milli-units, the arithmetic is done in milli-units, else in whole units.
func roundUpToRange(req *resource.Quantity, r *resourceapi.CapacityRequestPolicyRange, fractional bool) (resource.Quantity, error) {
	if req.Cmp(*r.Min) < 0 {
		return r.Min.DeepCopy(), nil
	}
	if r.Step == nil {
		return *req, nil
	}
	if useMilliUnits(r, fractional) {
		reqMilli, ok := exactMilli(*req)
		if !ok {
			return resource.Quantity{}, fmt.Errorf("%w: request %s is not a representable milli value", errNotRepresentable, req.String())
		}
		step, low := r.Step.MilliValue(), r.Min.MilliValue()
		n, ok := stepsAbove(reqMilli-low, step, low, true)
		if !ok {
			return resource.Quantity{}, fmt.Errorf("%w: rounding request %s up to the next step passes the milli-value range", errNotRepresentable, req.String())
		}
		value := low + step*n
		if value%1000 == 0 {
			return *resource.NewQuantity(value/1000, r.Step.Format), nil
		}
		return *resource.NewMilliQuantity(value, r.Step.Format), nil
	}
	// A value above MaxInt64 cannot be read without wrapping.
	if req.CmpInt64(math.MaxInt64) > 0 {
		return resource.Quantity{}, fmt.Errorf("%w: request %s exceeds MaxInt64", errNotRepresentable, req.String())
	}
	step, low := r.Step.Value(), r.Min.Value()
	n, ok := stepsAbove(req.Value()-low, step, low, low >= 0)
	if !ok {
		return resource.Quantity{}, fmt.Errorf("%w: rounding request %s up to the next step passes MaxInt64", errNotRepresentable, req.String())
	}
	return *resource.NewQuantity(low+step*n, r.Step.Format), nil
}

// stepsAbove returns ceil(delta/step) and, if guard is set, whether
// low+step*n stays within int64. Upstream guards the whole-unit path only
// for a non-negative minimum (a negative one is outside the API contract)
// and the milli-unit path always; callers pass guard accordingly.
func stepsAbove(delta, step, low int64, guard bool) (int64, bool) {
	if step == 0 {
		// API validation requires a positive step; without one no rounding
		// is possible (upstream would divide by zero).
		return 0, false
	}
	n := delta / step
	if delta%step != 0 {
		n++
	}
	if guard && n > (math.MaxInt64-low)/step {
		return 0, false
	}
	return n, true
}

// useMilliUnits reports whether a range is computed in milli-units: only
// with fractional ranges enabled, when every bound is exact in milli-units
// and the step is at least 1m.
func useMilliUnits(r *resourceapi.CapacityRequestPolicyRange, fractional bool) bool {
	if !fractional {
		return false
	}
	for _, q := range []*resource.Quantity{r.Min, r.Max, r.Step} {
		if q == nil {
			continue
		}
		if _, ok := exactMilli(*q); !ok {
			return false
		}
	}
	if r.Step != nil {
		if step, _ := exactMilli(*r.Step); step < 1 {
			return false
		}
	}
	return true
}

// exactMilli returns q in milli-units if that loses nothing.
func exactMilli(q resource.Quantity) (int64, bool) {
	milli := q.MilliValue()
	return milli, q.Cmp(*resource.NewMilliQuantity(milli, q.Format)) == 0
}

// violatesPolicy checks a resolved consumption against the request policy.
func violatesPolicy(q resource.Quantity, policy *resourceapi.CapacityRequestPolicy, fractional bool) bool {
	if policy == nil {
		return false
	}
	// Upstream compares the Quantity structs here, not their values: the
	// default, copied unchanged, always passes.
	if policy.Default != nil && q == *policy.Default {
		return false
	}
	switch {
	case policy.ValidRange != nil:
		r := policy.ValidRange
		if r.Max != nil && q.Cmp(*r.Max) > 0 {
			return true
		}
		if r.Step == nil || r.Min == nil {
			return false
		}
		var value, step, low int64
		if useMilliUnits(r, fractional) {
			var ok bool
			if value, ok = exactMilli(q); !ok {
				return true
			}
			step, low = r.Step.MilliValue(), r.Min.MilliValue()
		} else {
			value, step, low = q.Value(), r.Step.Value(), r.Min.Value()
		}
		if step == 0 {
			return true
		}
		// Must be a whole number of steps above the minimum.
		return (value-low)%step != 0
	case len(policy.ValidValues) > 0:
		for _, v := range policy.ValidValues {
			if q.Cmp(v) == 0 {
				return false
			}
		}
		return true
	}
	return false
}
