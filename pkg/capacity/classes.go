package capacity

import (
	"cmp"
	"context"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/minor"
	"github.com/drasched/drasched/pkg/allocator"
)

// ClassCount is what a DeviceClass's devices are doing, as the scheduler
// sees them.
type ClassCount struct {
	Class string
	// Counts count the devices of allocated claims as allocated; Available
	// leaves out those in flight too.
	Counts
	// InFlight are devices, not allocated to a claim yet, that the
	// scheduler has put in flight for a pod (Reserve to PreBind).
	InFlight int32
}

// CountByClass counts, per DeviceClass, the devices of complete pools that
// the class's selectors match (a device counts for every class that
// matches it), with the rules of Top and one more state: in flight, the
// devices of inFlight allocations that no claim has allocated yet. The
// cache evaluates the selectors, as the allocator does. When ctx ends
// first, it returns the context's error.
func CountByClass(ctx context.Context, resourceSlices []*resourceapi.ResourceSlice, claims []*resourceapi.ResourceClaim, classes []*resourceapi.DeviceClass,
	inFlight []*resourceapi.AllocationResult, cache *allocator.Cache, features structured.Features) ([]ClassCount, error) {
	pending := sets.New[structured.DeviceID]()
	for _, a := range inFlight {
		if a == nil {
			continue
		}
		for _, r := range a.Devices.Results {
			if !ptr.Deref(r.AdminAccess, false) {
				pending.Insert(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
			}
		}
	}
	m := &matcher{cache: cache, features: minor.CELFeatures(features.ConsumableCapacity, minor.NewerFeaturesOf(features).ListTypeAttributes)}
	all := pools(resourceSlices, claims, "")
	out := make([]ClassCount, 0, len(classes))
	for _, class := range classes {
		var flight int32
		match, err := m.matches(ctx, class, all)
		if err != nil {
			return nil, err
		}
		c := tally(all, func(d *device) bool {
			if !match(d) {
				return false
			}
			if !d.inUse && pending.Has(d.id()) {
				flight++
			}
			return true
		})
		c.Available = max(0, c.Available-flight)
		out = append(out, ClassCount{Class: class.Name, Counts: c, InFlight: flight})
	}
	slices.SortFunc(out, func(a, b ClassCount) int { return cmp.Compare(a.Class, b.Class) })
	return out, nil
}
