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
)

// placeholderClaim is a claim that the plugin allocates before it exists,
// like the claim for a pod's extended resources: an invalid name and a
// placeholder UID, one exclusive device and a 4G share of a NIC.
func placeholderClaim() *resourceapi.ResourceClaim {
	c := allocated(&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{
		Namespace: "default", Name: "<extended-resources>", UID: "placeholder", GenerateName: "pod-extended-resources-",
	}}, "gpu-0", "nic")
	nic := &c.Status.Allocation.Devices.Results[1]
	nic.ShareID = ptr.To(types.UID("share-1"))
	nic.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"bandwidth": resource.MustParse("4G")}
	return c
}

// created is the claim as the API server returns it from Create: a name,
// a UID, a resourceVersion, no status.
func created(placeholder *resourceapi.ResourceClaim, name, version string) *resourceapi.ResourceClaim {
	c := placeholder.DeepCopy()
	c.Name, c.UID, c.ResourceVersion = name, types.UID("uid-"+name), version
	c.Status = resourceapi.ResourceClaimStatus{}
	return c
}

// checkState fails unless exactly gpu-0 is taken and 4G of the NIC's
// bandwidth is consumed: counted once, whether in flight or allocated.
func checkState(t *testing.T, tr *Tracker, when string) {
	t.Helper()
	state := tr.AllocatedState()
	if got := state.AllocatedDevices; !got.Equal(ids("gpu-0")) {
		t.Errorf("%s: allocated devices %v, want gpu-0", when, got)
	}
	nic := structured.MakeDeviceID("gpu.example.com", "node-0", "nic")
	if got := state.AggregatedCapacity[nic]["bandwidth"]; got == nil || got.Cmp(resource.MustParse("4G")) != 0 {
		t.Errorf("%s: consumed bandwidth %v, want 4G", when, got)
	}
}

func checkFree(t *testing.T, tr *Tracker, when string) {
	t.Helper()
	state := tr.AllocatedState()
	if state.AllocatedDevices.Len() > 0 || len(state.AggregatedCapacity) > 0 {
		t.Errorf("%s: devices still taken: %v, %v", when, state.AllocatedDevices, state.AggregatedCapacity)
	}
	if inFlight := tr.InFlight(); len(inFlight) > 0 {
		t.Errorf("%s: in flight: %v", when, inFlight)
	}
}

// TestCreatedClaim follows a claim that PreBind creates through Reserve,
// Created, Commit and the informer's late events: its devices are counted
// exactly once at every step, and nothing stays in flight.
func TestCreatedClaim(t *testing.T) {
	ctx, tr, client := setup(t, true)
	placeholder := placeholderClaim()

	if err := tr.Reserve(placeholder); err != nil {
		t.Fatal(err)
	}
	checkState(t, tr, "after Reserve")

	// PreBind creates the claim; the API server gives it a UID.
	v1 := created(placeholder, "pod-extended-resources-abcde", "10")
	if _, err := client.ResourceV1().ResourceClaims("default").Create(ctx, v1, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
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
	v2 := v1.DeepCopy()
	v2.ResourceVersion = "11"
	v2.Status.Allocation = placeholder.Status.Allocation.DeepCopy()
	tr.Commit(ctx, v2)
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
	tr.forget(v2)
	checkFree(t, tr, "after deletion")
}

// TestCreatedClaimUnreserved: an allocation for a claim that is never
// created, or created but never written, leaks nothing.
func TestCreatedClaimUnreserved(t *testing.T) {
	_, tr, _ := setup(t, true)

	placeholder := placeholderClaim()
	if err := tr.Reserve(placeholder); err != nil {
		t.Fatal(err)
	}
	if !tr.Unreserve(placeholder) {
		t.Error("Unreserve did not find the allocation under the placeholder UID")
	}
	checkFree(t, tr, "unreserved before creation")

	if err := tr.Reserve(placeholder); err != nil {
		t.Fatal(err)
	}
	c := created(placeholder, "pod-extended-resources-fghij", "20")
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
	checkFree(t, tr, "unreserved after creation")
}

func TestCreatedErrors(t *testing.T) {
	_, tr, _ := setup(t, false)
	placeholder := placeholderClaim()
	c := created(placeholder, "c", "1")
	if err := tr.Created(placeholder.UID, c); err == nil {
		t.Error("Created without an allocation in flight succeeded")
	}

	other := allocated(claim("c"), "gpu-1")
	other.UID = c.UID
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
