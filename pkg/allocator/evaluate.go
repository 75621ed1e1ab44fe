package allocator

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"

	"github.com/drasched/drasched/internal/minor"
)

// isSelectable checks a candidate against the class and request selectors
// and, for per-device node selection, against the node. Results are cached
// per (sub)request and candidate; errors are not cached, they abort.
//
// Selectors are evaluated in upstream's order and stop at the first
// mismatch, so exactly the same expressions are evaluated and the same
// errors can surface.
func (s *search) isSelectable(nr *nodeRequest, ci int) (bool, error) {
	c := s.cands[ci]
	device := c.device()
	if !s.a.features.DeviceBindingAndStatus && len(device.BindingConditions) > 0 {
		// Devices with binding conditions need the feature.
		return false, nil
	}
	switch nr.selectable[ci] {
	case 1:
		return true, nil
	case 2:
		return false, nil
	}
	ok, err := s.selectable(nr, ci)
	if err != nil {
		return false, err
	}
	nr.selectable[ci] = 2
	if ok {
		nr.selectable[ci] = 1
	}
	return ok, nil
}

func (s *search) selectable(nr *nodeRequest, ci int) (bool, error) {
	c := s.cands[ci]
	ok, err := s.matchesSelectors(nr.rd, c)
	if err != nil || !ok {
		return false, err
	}
	if c.ps.perDeviceNodeSelection {
		match, err := c.ps.deviceMatchesNode(c.i, s.node)
		if err != nil || !match {
			return false, err
		}
	}
	return true, nil
}

// matchesSelectors evaluates the class's, then the request's selectors on
// a device, stopping at the first mismatch.
func (s *search) matchesSelectors(rd *requestData, c cand) (bool, error) {
	claim := s.claims[rd.claimIndex].claim
	for i, expr := range rd.classExprs {
		if expr == nil {
			return false, fmt.Errorf("class %s: selector #%d: CEL expression empty (unsupported selector type?)", rd.class.Name, i)
		}
		match, err := s.a.cache.matches(s.ctx, expr, c.ps, c.i)
		if err != nil {
			if expr.result.Error != nil {
				return false, fmt.Errorf("class %s: selector #%d: CEL compile error: %w", rd.class.Name, i, expr.result.Error)
			}
			return false, minor.SelectorRuntimeError("class "+rd.class.Name, i, c.id().String(), err)
		}
		if !match {
			return false, nil
		}
	}
	for i, expr := range rd.requestExprs {
		match, err := s.a.cache.matches(s.ctx, expr, c.ps, c.i)
		if err != nil {
			if expr.result.Error != nil {
				return false, fmt.Errorf("claim %s: selector #%d: CEL compile error: %w", klog.KObj(claim), i, expr.result.Error)
			}
			return false, minor.SelectorRuntimeError("claim "+klog.KObj(claim).String(), i, c.id().String(), err)
		}
		if !match {
			return false, nil
		}
	}
	return true, nil
}

// attribute resolves a constraint's attribute for a device allocated for
// rd: a derived attribute of the request if it defines one with that name,
// the device's own attribute otherwise.
func (s *search) attribute(rd *requestData, c cand, name resourceapi.FullyQualifiedName) (*resourceapi.DeviceAttribute, error) {
	expression, derived := rd.derived[name]
	if !derived {
		return c.ps.attribute(c.i, name), nil
	}
	expr := s.a.cache.compile(s.a.celFeatures, true, expression)
	if expr.result.Error != nil {
		return nil, fmt.Errorf("compile derived attribute %s failed: %w", name, expr.result.Error)
	}
	results := c.ps.matches.results(expr.id, len(c.ps.slice.Spec.Devices))
	slot := &results.outcomes[c.i]
	if outcome := slot.Load(); outcome != nil {
		s.a.cache.stats.matchHits.Add(1)
		if outcome.err != nil {
			return nil, fmt.Errorf("evaluate derived attribute %s on device %s failed: %w", name, c.id(), outcome.err)
		}
		return outcome.attr, nil
	}
	s.a.cache.stats.matchMisses.Add(1)
	attr, err := minor.EvaluateDerivedAttribute(s.ctx, expr.result, c.ps.celDevice(c.i))
	if err != nil {
		if s.ctx.Err() == nil {
			slot.Store(&evalOutcome{err: err})
		}
		return nil, fmt.Errorf("evaluate derived attribute %s on device %s failed: %w", name, c.id(), err)
	}
	slot.Store(&evalOutcome{attr: attr})
	return attr, nil
}
