package allocator

import (
	"reflect"
	"testing"

	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2/ktesting"

	"github.com/drasched/drasched/internal/minor"
)

// TestTiersMatchUpstream probes upstream's allocator variants one feature
// at a time: a variant accepts a feature set exactly when our tier of the
// same name supports it.
func TestTiersMatchUpstream(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	defer structured.EnableAllocators("incubating", "experimental")
	fields := reflect.TypeFor[structured.Features]()
	for _, tr := range tiers {
		structured.EnableAllocators(tr.name)
		for i := range fields.NumField() {
			var features structured.Features
			reflect.ValueOf(&features).Elem().Field(i).SetBool(true)
			_, err := structured.NewAllocator(ctx, features, structured.AllocatedState{}, ClassList{}, nil, cel.NewCache(1, cel.Features{}))
			upstream := err == nil
			ours := reflect.ValueOf(tr.supported).Field(i).Bool()
			if upstream != ours {
				t.Errorf("tier %s, feature %s: upstream supports it: %v, ours: %v", tr.name, fields.Field(i).Name, upstream, ours)
			}
		}
	}
}

func TestPickTier(t *testing.T) {
	for name, tc := range map[string]struct {
		features structured.Features
		want     string
	}{
		"none":          {structured.Features{}, "incubating"},
		"1.35 defaults": {structured.Features{PrioritizedList: true, AdminAccess: true}, "incubating"},
		"1.36 and 1.37 defaults": {structured.Features{PrioritizedList: true, DeviceTaints: true, PartitionableDevices: true, ConsumableCapacity: true, DeviceBindingAndStatus: true, AdminAccess: true},
			map[bool]string{true: "incubating", false: "experimental"}[minor.IncubatingBindingAndCapacity]},
		"one alpha feature": {alphaFeature, "experimental"},
		"everything": {minor.NewerFeatures{CompatibilityGroups: true, DerivedAttributes: true, FractionalCapacityRange: true, OptionalNodeOperations: true, ListTypeAttributes: true}.With(
			structured.Features{AdminAccess: true, ConsumableCapacity: true, DeviceBindingAndStatus: true, DeviceTaints: true, PartitionableDevices: true, PrioritizedList: true}), "experimental"},
	} {
		t.Run(name, func(t *testing.T) {
			tr, err := pickTier(tc.features)
			if err != nil {
				t.Fatal(err)
			}
			if tr.name != tc.want {
				t.Errorf("got tier %s, want %s", tr.name, tc.want)
			}
		})
	}
}

// alphaFeature is an allocator feature that is alpha in every minor of
// this build's: list-type attributes, or (1.35 has none) consumable
// capacity, which only its experimental allocator supports.
var alphaFeature = func() structured.Features {
	if f := (minor.NewerFeatures{ListTypeAttributes: true}).With(structured.Features{}); f != (structured.Features{}) {
		return f
	}
	return structured.Features{ConsumableCapacity: true}
}()
