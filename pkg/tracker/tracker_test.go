package tracker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
)

// setup starts a tracker on informers of a fake clientset (the tracker's
// own logic is what is tested here; test/integration runs it against a
// real apiserver).
func setup(t *testing.T, consumableCapacity bool, objects ...*resourceapi.ResourceClaim) (context.Context, *Tracker, *fake.Clientset) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	client := fake.NewClientset()
	for _, claim := range objects {
		if _, err := client.ResourceV1().ResourceClaims(claim.Namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	tr, err := New(ctx, Options{InformerFactory: factory, KubeClient: client, ConsumableCapacity: consumableCapacity})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
		tr.Stop()
	})
	if !cache.WaitForCacheSync(ctx.Done(), factory.Resource().V1().ResourceClaims().Informer().HasSynced, tr.HasSynced) {
		t.Fatal("caches did not sync")
	}
	return ctx, tr, client
}

func claim(name string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), ResourceVersion: "1"}}
}

func allocated(c *resourceapi.ResourceClaim, devices ...string) *resourceapi.ResourceClaim {
	c = c.DeepCopy()
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "req", Driver: "gpu.example.com", Pool: "node-0", Device: d,
		})
	}
	return c
}

func ids(devices ...string) sets.Set[structured.DeviceID] {
	s := sets.New[structured.DeviceID]()
	for _, d := range devices {
		s.Insert(structured.MakeDeviceID("gpu.example.com", "node-0", d))
	}
	return s
}

// eventually polls until the condition holds: informer events arrive
// asynchronously.
func eventually(t *testing.T, what string, condition func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !condition() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAllocatedFromInformer(t *testing.T) {
	ctx, tr, client := setup(t, false, allocated(claim("a"), "gpu-0", "gpu-1"), claim("b"))
	eventually(t, "claim a counted", func() bool { return tr.AllocatedState().AllocatedDevices.Equal(ids("gpu-0", "gpu-1")) })

	// Deallocation frees the devices.
	c, err := client.ResourceV1().ResourceClaims("default").Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Status.Allocation = nil
	c.ResourceVersion = "2"
	if _, err := client.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "claim a freed", func() bool { return tr.AllocatedState().AllocatedDevices.Len() == 0 })
}

func TestAdminAccessNotCounted(t *testing.T) {
	c := allocated(claim("admin"), "gpu-0")
	c.Status.Allocation.Devices.Results[0].AdminAccess = ptr.To(true)
	_, tr, _ := setup(t, false, c, allocated(claim("normal"), "gpu-1"))
	eventually(t, "normal claim counted", func() bool { return tr.AllocatedState().AllocatedDevices.Equal(ids("gpu-1")) })
}

func TestReserveCommitUnreserve(t *testing.T) {
	ctx, tr, _ := setup(t, false, claim("a"), claim("b"))
	eventually(t, "claims known", func() bool { _, err := tr.Claim("default", "b"); return err == nil })

	a := allocated(claim("a"), "gpu-0")
	if err := tr.Reserve(a); err != nil {
		t.Fatal(err)
	}
	if tr.PendingAllocation(a.UID) == nil {
		t.Fatal("no pending allocation after Reserve")
	}
	if got := tr.AllocatedState().AllocatedDevices; !got.Equal(ids("gpu-0")) {
		t.Fatalf("in-flight device not counted: %v", got)
	}
	// A second pod cannot reserve the same claim while it is in flight.
	if err := tr.Reserve(a); err == nil {
		t.Fatal("second Reserve of an in-flight claim succeeded")
	}

	// PreBind writes the claim: it moves from in flight to allocated and
	// the assume cache has the written version at once.
	written := a.DeepCopy()
	written.ResourceVersion = "2"
	tr.Commit(ctx, written)
	if tr.PendingAllocation(a.UID) != nil {
		t.Fatal("claim still in flight after Commit")
	}
	if got := tr.AllocatedState().AllocatedDevices; !got.Equal(ids("gpu-0")) {
		t.Fatalf("committed device not counted: %v", got)
	}
	if c, err := tr.Claim("default", "a"); err != nil || c.Status.Allocation == nil {
		t.Fatalf("assume cache does not have the written claim: %v, %v", c, err)
	}
	// Unreserve after Commit leaves the allocation alone: it is in the API.
	if tr.Unreserve(written) {
		t.Fatal("Unreserve found a committed claim in flight")
	}
	if got := tr.AllocatedState().AllocatedDevices; !got.Equal(ids("gpu-0")) {
		t.Fatalf("Unreserve after Commit freed the device: %v", got)
	}

	// An allocation that is never written is dropped by Unreserve.
	b := allocated(claim("b"), "gpu-1")
	if err := tr.Reserve(b); err != nil {
		t.Fatal(err)
	}
	if !tr.Unreserve(b) {
		t.Fatal("Unreserve did not find the in-flight claim")
	}
	if got := tr.AllocatedState().AllocatedDevices; !got.Equal(ids("gpu-0")) {
		t.Fatalf("dropped allocation still counted: %v", got)
	}
}

func TestReserveAlreadyAllocated(t *testing.T) {
	_, tr, _ := setup(t, false, allocated(claim("a"), "gpu-0"))
	eventually(t, "claim known", func() bool { c, err := tr.Claim("default", "a"); return err == nil && c.Status.Allocation != nil })
	if err := tr.Reserve(allocated(claim("a"), "gpu-1")); err == nil {
		t.Fatal("Reserve of an allocated claim succeeded")
	}
}

// TestConsumableCapacityNotCountedTwice: a claim both in flight and
// already observed as allocated counts its capacity once.
func TestConsumableCapacityNotCountedTwice(t *testing.T) {
	ctx, tr, _ := setup(t, true, claim("a"))
	eventually(t, "claim known", func() bool { _, err := tr.Claim("default", "a"); return err == nil })
	a := allocated(claim("a"), "nic")
	a.Status.Allocation.Devices.Results[0].ShareID = ptr.To(types.UID("share-1"))
	a.Status.Allocation.Devices.Results[0].ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"bandwidth": resource.MustParse("4G")}
	if err := tr.Reserve(a); err != nil {
		t.Fatal(err)
	}
	// The informer may report the write before PreBind commits it.
	tr.observe(a)
	state := tr.AllocatedState()
	nic := structured.MakeDeviceID("gpu.example.com", "node-0", "nic")
	if got := state.AggregatedCapacity[nic]["bandwidth"]; got == nil || got.Cmp(resource.MustParse("4G")) != 0 {
		t.Fatalf("consumed capacity %v, want 4G", got)
	}
	if state.AllocatedDevices.Has(nic) {
		t.Fatal("a share counts as an exclusive allocation")
	}
	tr.Commit(ctx, a)
	if got := tr.AllocatedState().AggregatedCapacity[nic]["bandwidth"]; got == nil || got.Cmp(resource.MustParse("4G")) != 0 {
		t.Fatalf("consumed capacity after commit %v, want 4G", got)
	}
}

// TestNoGapBetweenInFlightAndAllocated: while PreBind commits claims, a
// concurrent observer never sees a claim's devices missing from the
// snapshot. Run with -race.
func TestNoGapBetweenInFlightAndAllocated(t *testing.T) {
	var claims []*resourceapi.ResourceClaim
	for i := range 50 {
		claims = append(claims, claim(fmt.Sprintf("c%d", i)))
	}
	ctx, tr, _ := setup(t, false, claims...)
	eventually(t, "claims known", func() bool { _, err := tr.Claim("default", "c49"); return err == nil })

	stop := make(chan struct{})
	var wg sync.WaitGroup
	gaps := 0
	expected := sets.New[structured.DeviceID]()
	var expectedMutex sync.Mutex
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			expectedMutex.Lock()
			want := expected.Clone()
			expectedMutex.Unlock()
			if got := tr.AllocatedState().AllocatedDevices; !got.IsSuperset(want) {
				gaps++
			}
		}
	})
	for i, c := range claims {
		a := allocated(c, fmt.Sprintf("gpu-%d", i))
		if err := tr.Reserve(a); err != nil {
			t.Fatal(err)
		}
		expectedMutex.Lock()
		expected.Insert(ids(fmt.Sprintf("gpu-%d", i)).UnsortedList()...)
		expectedMutex.Unlock()
		written := a.DeepCopy()
		written.ResourceVersion = "2"
		tr.Commit(ctx, written)
	}
	close(stop)
	wg.Wait()
	if gaps > 0 {
		t.Fatalf("%d snapshots missed devices of reserved or committed claims", gaps)
	}
}
