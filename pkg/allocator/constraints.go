package allocator

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/drasched/drasched/internal/minor"
)

// constraintState tracks one claim constraint while the search adds and
// removes devices. Every successful add is undone by exactly one remove with
// the same arguments, in reverse order.
type constraintState struct {
	spec *constraintSpec
	// listSemantics: compare attributes as sets (DRAListTypeAttributes);
	// otherwise only scalar values of the same type compare equal.
	listSemantics bool

	// numDevices counts the devices added for requests the constraint
	// applies to.
	numDevices int

	// matchAttribute, scalar semantics: the first device's attribute.
	first *resourceapi.DeviceAttribute
	// matchAttribute, list semantics: intersections[i] is the intersection
	// of the first i+1 devices' values. Popping on remove restores the state
	// before the add (upstream had a bug here once, kubernetes#140300).
	intersections []*attributeSet

	// distinctAttribute: the attributes of the devices added so far.
	distinct []*resourceapi.DeviceAttribute
}

// check reports whether adding the device keeps the constraint satisfiable.
// It does not change the state; add does.
func (cs *constraintState) check(attr *resourceapi.DeviceAttribute) (ok bool, set *attributeSet) {
	if attr == nil {
		// The device does not have the attribute.
		return false, nil
	}
	if cs.spec.match {
		if cs.listSemantics {
			set := attributeAsSet(attr)
			if set == nil {
				return false, nil
			}
			if cs.numDevices == 0 {
				return true, set
			}
			narrowed := cs.intersections[cs.numDevices-1].intersect(set)
			return narrowed != nil, narrowed
		}
		if cs.numDevices == 0 {
			return true, nil
		}
		return scalarEqual(attr, cs.first), nil
	}

	if cs.listSemantics {
		set := attributeAsSet(attr)
		if set == nil {
			return false, nil
		}
		// Pairwise disjoint with every device added so far.
		for _, existing := range cs.distinct {
			if other := attributeAsSet(existing); other != nil && set.intersect(other) != nil {
				return false, nil
			}
		}
		return true, nil
	}
	for _, existing := range cs.distinct {
		equal, known := scalarCompare(attr, existing)
		if !known || equal {
			return false, nil
		}
	}
	return true, nil
}

// add records a device whose check passed; narrowed is what check returned.
func (cs *constraintState) add(attr *resourceapi.DeviceAttribute, narrowed *attributeSet) {
	if cs.spec.match {
		if cs.listSemantics {
			cs.intersections = append(cs.intersections, narrowed)
		} else if cs.numDevices == 0 {
			cs.first = attr
		}
	} else {
		cs.distinct = append(cs.distinct, attr)
	}
	cs.numDevices++
}

func (cs *constraintState) remove() {
	cs.numDevices--
	if cs.spec.match {
		if cs.listSemantics {
			cs.intersections = cs.intersections[:cs.numDevices]
		}
		return
	}
	cs.distinct = cs.distinct[:len(cs.distinct)-1]
}

// scalarEqual compares the new device's scalar value against the first
// device's, keyed by the new value's type. A different or unknown type never
// matches. Versions are semver in minimal form, so string equality is exact.
func scalarEqual(attr, first *resourceapi.DeviceAttribute) bool {
	switch {
	case attr.StringValue != nil:
		return first.StringValue != nil && *attr.StringValue == *first.StringValue
	case attr.IntValue != nil:
		return first.IntValue != nil && *attr.IntValue == *first.IntValue
	case attr.BoolValue != nil:
		return first.BoolValue != nil && *attr.BoolValue == *first.BoolValue
	case attr.VersionValue != nil:
		return first.VersionValue != nil && *attr.VersionValue == *first.VersionValue
	}
	return false
}

// scalarCompare reports whether two scalar values are equal, keyed by the
// new value's type; known is false if the new value has no scalar type.
func scalarCompare(attr, existing *resourceapi.DeviceAttribute) (equal, known bool) {
	switch {
	case attr.StringValue != nil:
		return existing.StringValue != nil && *attr.StringValue == *existing.StringValue, true
	case attr.IntValue != nil:
		return existing.IntValue != nil && *attr.IntValue == *existing.IntValue, true
	case attr.BoolValue != nil:
		return existing.BoolValue != nil && *attr.BoolValue == *existing.BoolValue, true
	case attr.VersionValue != nil:
		return existing.VersionValue != nil && *attr.VersionValue == *existing.VersionValue, true
	}
	return false, false
}

// scalarKey returns a map key for a scalar attribute value, used to bucket
// candidates by their matchAttribute value.
func scalarKey(attr *resourceapi.DeviceAttribute) (string, bool) {
	switch {
	case attr.StringValue != nil:
		return "s:" + *attr.StringValue, true
	case attr.IntValue != nil:
		return fmt.Sprintf("i:%d", *attr.IntValue), true
	case attr.BoolValue != nil:
		return fmt.Sprintf("b:%t", *attr.BoolValue), true
	case attr.VersionValue != nil:
		return "v:" + *attr.VersionValue, true
	}
	return "", false
}

// attributeSet is the set form of a scalar or list attribute. Exactly one
// of the fields is set.
type attributeSet struct {
	ints     sets.Set[int64]
	bools    sets.Set[bool]
	strings  sets.Set[string]
	versions sets.Set[string]
}

// attributeAsSet converts an attribute into a set; lists take precedence
// over scalars. It returns nil for an attribute without a value.
func attributeAsSet(attr *resourceapi.DeviceAttribute) *attributeSet {
	ints, bools, strs, versions := minor.AttributeLists(attr)
	switch {
	case len(ints) > 0:
		return &attributeSet{ints: sets.New(ints...)}
	case len(bools) > 0:
		return &attributeSet{bools: sets.New(bools...)}
	case len(strs) > 0:
		return &attributeSet{strings: sets.New(strs...)}
	case len(versions) > 0:
		return &attributeSet{versions: sets.New(versions...)}
	case attr.IntValue != nil:
		return &attributeSet{ints: sets.New(*attr.IntValue)}
	case attr.BoolValue != nil:
		return &attributeSet{bools: sets.New(*attr.BoolValue)}
	case attr.StringValue != nil:
		return &attributeSet{strings: sets.New(*attr.StringValue)}
	case attr.VersionValue != nil:
		return &attributeSet{versions: sets.New(*attr.VersionValue)}
	}
	return nil
}

// intersect returns the non-empty intersection of two sets of the same type,
// or nil.
func (s *attributeSet) intersect(o *attributeSet) *attributeSet {
	switch {
	case s.ints != nil && o.ints != nil:
		if i := s.ints.Intersection(o.ints); i.Len() > 0 {
			return &attributeSet{ints: i}
		}
	case s.bools != nil && o.bools != nil:
		if i := s.bools.Intersection(o.bools); i.Len() > 0 {
			return &attributeSet{bools: i}
		}
	case s.strings != nil && o.strings != nil:
		if i := s.strings.Intersection(o.strings); i.Len() > 0 {
			return &attributeSet{strings: i}
		}
	case s.versions != nil && o.versions != nil:
		if i := s.versions.Intersection(o.versions); i.Len() > 0 {
			return &attributeSet{versions: i}
		}
	}
	return nil
}

// staticAttribute looks up a device attribute by its fully qualified name;
// an attribute in the driver's own domain may also be stored unqualified.
func staticAttribute(device *resourceapi.Device, driver string, name resourceapi.FullyQualifiedName) *resourceapi.DeviceAttribute {
	if attr, ok := device.Attributes[resourceapi.QualifiedName(name)]; ok {
		return &attr
	}
	domain, id, found := strings.Cut(string(name), "/")
	if !found || domain != driver {
		return nil
	}
	if attr, ok := device.Attributes[resourceapi.QualifiedName(id)]; ok {
		return &attr
	}
	return nil
}
