package allocator_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drasched/drasched/pkg/allocator"
	"github.com/drasched/drasched/pkg/allocator/internal/randinst"
)

// TestWithEdits checks that an allocator edited for preemption's dry run
// answers exactly as a new one built on the edited state would: for random
// instances, the instance's state is split into a state before the edits
// (with devices, shares and capacity that the edits free, and without some
// that the edits add) and the edits that turn it back. Upstream's answers
// for the edited state are those of TestDifferential.
func TestWithEdits(t *testing.T) {
	outcomes := map[string]int{}
	for seed := uint64(1); seed <= 3000; seed++ {
		inst := randinst.New(seed)
		before, edits := splitState(seed, inst)
		if err := compareEdited(inst, before, edits); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if len(edits.Freed.AllocatedDevices)+len(edits.Freed.AllocatedSharedDeviceIDs)+len(edits.Freed.AggregatedCapacity) > 0 {
			outcomes["freed"]++
		}
		if len(edits.Added.AllocatedDevices)+len(edits.Added.AllocatedSharedDeviceIDs)+len(edits.Added.AggregatedCapacity) > 0 {
			outcomes["added"]++
		}
		if len(edits.AlsoAdded.AllocatedDevices)+len(edits.AlsoAdded.AllocatedSharedDeviceIDs)+len(edits.AlsoAdded.AggregatedCapacity) > 0 {
			outcomes["also added"]++
		}
		if len(edits.Freed.AggregatedCapacity)+len(edits.Added.AggregatedCapacity) > 0 {
			outcomes["capacity"]++
		}
	}
	t.Logf("instances with edits: %v", outcomes)
	for _, o := range []string{"freed", "added", "also added", "capacity"} {
		if outcomes[o] == 0 {
			t.Errorf("no instance had %s edits; the test lost coverage", o)
		}
	}
}

func compareEdited(inst *randinst.Instance, before structured.AllocatedState, edits allocator.Edits) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	want, wantErr := runOurs(ctx, inst, allocator.Options{})
	base, err := allocator.New(ctx, inst.Features, before, allocator.ClassList(inst.Classes), inst.Slices, allocator.Options{})
	if err != nil {
		return err
	}
	got, gotErr := base.WithEdits(edits).Allocate(ctx, inst.Node, inst.Claims)
	if fmt.Sprint(wantErr) != fmt.Sprint(gotErr) {
		return fmt.Errorf("error mismatch:\nfresh:  %s\nedited: %s", fmt.Sprint(wantErr), fmt.Sprint(gotErr))
	}
	normalizeShareIDs(want)
	normalizeShareIDs(got)
	if diff := cmp.Diff(want, got, quantityComparer); diff != "" {
		return fmt.Errorf("results differ (-fresh +edited):\n%s", diff)
	}
	// The base allocator is unchanged by its edited copy.
	again, err := allocator.New(ctx, inst.Features, before, allocator.ClassList(inst.Classes), inst.Slices, allocator.Options{})
	if err != nil {
		return err
	}
	want2, want2Err := again.Allocate(ctx, inst.Node, inst.Claims)
	got2, got2Err := base.Allocate(ctx, inst.Node, inst.Claims)
	normalizeShareIDs(want2)
	normalizeShareIDs(got2)
	if fmt.Sprint(want2Err) != fmt.Sprint(got2Err) || !cmp.Equal(want2, got2, quantityComparer) {
		return fmt.Errorf("WithEdits changed the allocator it was made from")
	}
	return nil
}

// splitState returns a state and edits whose result is inst.State.
func splitState(seed uint64, inst *randinst.Instance) (structured.AllocatedState, allocator.Edits) {
	r := rand.New(rand.NewPCG(seed, 42))
	newState := func() structured.AllocatedState {
		return structured.AllocatedState{
			AllocatedDevices:         sets.New[structured.DeviceID](),
			AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
			AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
		}
	}
	before := newState()
	edits := allocator.Edits{Freed: newState(), Added: newState(), AlsoAdded: newState()}
	// added is Added or AlsoAdded, by chance; a device or share may be in
	// both, and counts once.
	added := func() []*structured.AllocatedState {
		switch x := r.Float64(); {
		case x < 0.4:
			return []*structured.AllocatedState{&edits.Added}
		case x < 0.8:
			return []*structured.AllocatedState{&edits.AlsoAdded}
		default:
			return []*structured.AllocatedState{&edits.Added, &edits.AlsoAdded}
		}
	}
	state := inst.State
	for id := range state.AllocatedDevices {
		if r.Float64() < 0.3 {
			for _, a := range added() {
				a.AllocatedDevices.Insert(id)
			}
		} else {
			before.AllocatedDevices.Insert(id)
		}
	}
	for id := range state.AllocatedSharedDeviceIDs {
		if r.Float64() < 0.3 {
			for _, a := range added() {
				a.AllocatedSharedDeviceIDs.Insert(id)
			}
		} else {
			before.AllocatedSharedDeviceIDs.Insert(id)
		}
	}
	for id, consumed := range state.AggregatedCapacity {
		switch x := r.Float64(); {
		case x < 0.15:
			edits.Added.AggregatedCapacity[id] = consumed.Clone()
		case x < 0.3:
			edits.AlsoAdded.AggregatedCapacity[id] = consumed.Clone()
		case x < 0.6:
			// Twice before, once freed.
			before.AggregatedCapacity.Insert(structured.DeviceConsumedCapacity{DeviceID: id, ConsumedCapacity: consumed})
			before.AggregatedCapacity.Insert(structured.DeviceConsumedCapacity{DeviceID: id, ConsumedCapacity: consumed})
			edits.Freed.AggregatedCapacity[id] = consumed.Clone()
		default:
			before.AggregatedCapacity[id] = consumed.Clone()
		}
	}
	// Devices free in inst.State that were taken before the edits: as a
	// whole, or as a share with the capacity it consumed.
	for _, slice := range inst.Slices {
		for _, device := range slice.Spec.Devices {
			id := structured.MakeDeviceID(slice.Spec.Driver, slice.Spec.Pool.Name, device.Name)
			if state.AllocatedDevices.Has(id) || r.Float64() >= 0.15 {
				continue
			}
			if device.AllowMultipleAllocations == nil || !*device.AllowMultipleAllocations {
				before.AllocatedDevices.Insert(id)
				edits.Freed.AllocatedDevices.Insert(id)
				continue
			}
			share := types.UID(fmt.Sprintf("freed-%d", r.IntN(1000)))
			shareID := structured.MakeSharedDeviceID(id, &share)
			before.AllocatedSharedDeviceIDs.Insert(shareID)
			edits.Freed.AllocatedSharedDeviceIDs.Insert(shareID)
			if _, ok := state.AggregatedCapacity[id]; !ok && len(device.Capacity) > 0 {
				consumed := structured.ConsumedCapacity{}
				for name, c := range device.Capacity { // all of it
					q := c.Value.DeepCopy()
					consumed[name] = &q
				}
				before.AggregatedCapacity[id] = consumed
				edits.Freed.AggregatedCapacity[id] = consumed.Clone()
			}
		}
	}
	return before, edits
}
