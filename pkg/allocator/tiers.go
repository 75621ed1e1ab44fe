package allocator

import (
	"fmt"

	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drasched/drasched/internal/minor"
)

// tier describes one of upstream's allocator variants: which features it
// supports and the few places where its behaviour differs. All tiers share
// one search core; a tier is only a set of switches on it.
//
// Upstream keeps three copies of its allocator ("stable", "incubating",
// "experimental") and picks the first whose supported features cover the
// requested ones. kube-scheduler enables all three, and under 1.37's
// default feature gates (binding conditions on) "stable" is never picked:
// the reference for drasched's default policy is "incubating" and
// "experimental". So it is under 1.36's (binding conditions are beta and on
// there too); the features that only 1.37 has are minor.NewerFeatures,
// which the 1.36 build drops from both tiers, leaving upstream 1.36's
// sets. The old stable copy neither sorts pools and slices by
// name nor supports distinctAttribute, and is deliberately not
// reproduced.
type tier struct {
	name      string
	supported structured.Features

	// honorsSkipNodeOperations: devices from slices with SkipNodeOperations
	// are only allocated when the OptionalNodeOperations feature is on and the
	// node declares DRAOptionalNodeOperations, and results carry the slice's
	// SkipNodeOperations. The incubating tier ignores the field entirely.
	honorsSkipNodeOperations bool
}

var tiers = []*tier{
	{
		name: "incubating",
		supported: minor.NewerFeatures{FractionalCapacityRange: true}.With(structured.Features{
			AdminAccess:            true,
			PrioritizedList:        true,
			PartitionableDevices:   true,
			DeviceTaints:           true,
			DeviceBindingAndStatus: minor.IncubatingBindingAndCapacity,
			ConsumableCapacity:     minor.IncubatingBindingAndCapacity,
		}),
	},
	{
		name: "experimental",
		supported: minor.NewerFeatures{
			FractionalCapacityRange: true,
			OptionalNodeOperations:  true,
			DerivedAttributes:       true,
			CompatibilityGroups:     true,
			ListTypeAttributes:      true,
		}.With(structured.Features{
			AdminAccess:            true,
			PrioritizedList:        true,
			PartitionableDevices:   true,
			DeviceTaints:           true,
			DeviceBindingAndStatus: true,
			ConsumableCapacity:     true,
		}),
		honorsSkipNodeOperations: true,
	},
}

// pickTier returns the first tier whose supported features cover the
// requested ones, as upstream's NewAllocator does.
func pickTier(features structured.Features) (*tier, error) {
	for _, t := range tiers {
		if t.supported.Set().IsSuperset(features.Set()) {
			return t, nil
		}
	}
	return nil, fmt.Errorf("no allocator tier supports feature set %+v", features)
}
