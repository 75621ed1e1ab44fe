package tracker

import (
	"errors"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
)

// placeholderClaim is a claim that the plugin allocates before it exists,
// like the claim for a pod's extended resources: an invalid name and a
// placeholder UID, one exclusive device and a 4G share of a NIC.
func (env *testEnv) placeholderClaim() *resourceapi.ResourceClaim {
	c := builder.MakeClaim("<extended-resources>").Request("req", "gpu", 1).Obj()
	c.Namespace, c.UID, c.GenerateName = env.namespace, "placeholder", "pod-extended-resources-"
	c.Status.Allocation = allocation("gpu-0", "nic")
	nic := &c.Status.Allocation.Devices.Results[1]
	nic.ShareID = ptr.To(types.UID("6e0e2c8e-4f3a-4a6b-9a57-2d1c0d8f5a10"))
	nic.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"bandwidth": resource.MustParse("4G")}
	return c
}

// createFrom creates the placeholder's claim in the API server, as PreBind
// does: the server picks name, UID and resourceVersion; no status.
func (env *testEnv) createFrom(t *testing.T, placeholder *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	t.Helper()
	c := placeholder.DeepCopy()
	c.Name, c.UID = "", ""
	c.Status = resourceapi.ResourceClaimStatus{}
	created, err := env.client.ResourceV1().ResourceClaims(env.namespace).Create(env.ctx, c, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// checkState fails unless exactly gpu-0 is taken and 4G of the NIC's
// bandwidth is consumed: counted once, whether in flight or allocated.
func checkState(t *testing.T, tr *Tracker, when string) {
	t.Helper()
	state := tr.AllocatedState()
	if got := state.AllocatedDevices; !got.Equal(ids("gpu-0")) {
		t.Errorf("%s: allocated devices %v, want gpu-0", when, got)
	}
	nic := structured.MakeDeviceID(driver, "node-0", "nic")
	if got := state.AggregatedCapacity[nic]["bandwidth"]; got == nil || got.Cmp(resource.MustParse("4G")) != 0 {
		t.Errorf("%s: consumed bandwidth %v, want 4G", when, got)
	}
}

// isFree: nothing taken, nothing in flight.
func isFree(tr *Tracker) bool {
	state := tr.AllocatedState()
	return state.AllocatedDevices.Len() == 0 && len(state.AggregatedCapacity) == 0 && len(tr.InFlight()) == 0
}

// TestCreatedClaim follows a claim that PreBind creates through Reserve,
// Created, Commit and the informer's late events: its devices are counted
// exactly once at every step, and nothing stays in flight.
func TestCreatedClaim(t *testing.T) {
	env := newEnv(t)
	tr := env.start(t, Options{ConsumableCapacity: true})
	placeholder := env.placeholderClaim()

	if err := tr.Reserve(placeholder); err != nil {
		t.Fatal(err)
	}
	checkState(t, tr, "after Reserve")

	// PreBind creates the claim; the API server gives it a UID.
	v1 := env.createFrom(t, placeholder)
	if err := tr.Created(placeholder.UID, v1); err != nil {
		t.Fatal(err)
	}
	if got := tr.InFlight(); !slices.Equal(got, []types.UID{v1.UID}) {
		t.Errorf("in flight after Created: %v, want %s only", got, v1.UID)
	}
	if tr.PendingAllocation(placeholder.UID) != nil {
		t.Error("allocation still pending under the placeholder UID")
	}
	checkState(t, tr, "after Created")

	// PreBind writes allocation and reservation and commits.
	v2 := env.writeStatus(t, withAllocation(v1, placeholder.Status.Allocation))
	tr.Commit(env.ctx, v2)
	if got := tr.InFlight(); len(got) > 0 {
		t.Errorf("in flight after Commit: %v", got)
	}
	checkState(t, tr, "after Commit")

	// The informer reports the created version, without allocation, only
	// now: the devices stay taken.
	tr.observe(v1)
	checkState(t, tr, "after the informer's older version")
	tr.observe(v2)
	checkState(t, tr, "after the informer's written version")

	// Unreserve after a failed binding finds nothing in flight; deleting
	// the claim frees the devices.
	if tr.Unreserve(v2) || tr.Unreserve(placeholder) {
		t.Error("Unreserve found a committed claim in flight")
	}
	checkState(t, tr, "after Unreserve")
	if err := env.client.ResourceV1().ResourceClaims(env.namespace).Delete(env.ctx, v2.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "devices freed after deletion", func() bool { return isFree(tr) })
}

// TestCreatedClaimUnreserved: an allocation for a claim that is never
// created, or created but never written, leaks nothing.
func TestCreatedClaimUnreserved(t *testing.T) {
	env := newEnv(t)
	tr := env.start(t, Options{ConsumableCapacity: true})

	placeholder := env.placeholderClaim()
	if err := tr.Reserve(placeholder); err != nil {
		t.Fatal(err)
	}
	if !tr.Unreserve(placeholder) {
		t.Error("Unreserve did not find the allocation under the placeholder UID")
	}
	if !isFree(tr) {
		t.Error("devices taken after unreserving before creation")
	}

	if err := tr.Reserve(placeholder); err != nil {
		t.Fatal(err)
	}
	c := env.createFrom(t, placeholder)
	if err := tr.Created(placeholder.UID, c); err != nil {
		t.Fatal(err)
	}
	if tr.Unreserve(placeholder) {
		t.Error("Unreserve found the allocation under the placeholder UID after Created")
	}
	checkState(t, tr, "after Unreserve with the placeholder")
	if !tr.Unreserve(c) {
		t.Error("Unreserve did not find the allocation of the created claim")
	}
	if !isFree(tr) {
		t.Error("devices taken after unreserving the created claim")
	}
}

func TestCreatedErrors(t *testing.T) {
	env := newEnv(t)
	tr := env.start(t, Options{ConsumableCapacity: true})
	placeholder := env.placeholderClaim()
	c := env.createFrom(t, placeholder)
	if err := tr.Created(placeholder.UID, c); err == nil {
		t.Error("Created without an allocation in flight succeeded")
	}

	other := withAllocation(c, allocation("gpu-1"))
	if err := tr.Reserve(other); err != nil {
		t.Fatal(err)
	}
	if err := tr.Reserve(placeholder); err != nil {
		t.Fatal(err)
	}
	if err := tr.Created(placeholder.UID, c); !errors.Is(err, ErrInFlight) {
		t.Errorf("Created onto a UID in flight: got %v, want ErrInFlight", err)
	}
}
