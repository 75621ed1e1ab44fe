package tracker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/test/integration/controlplane"
)

// The tracker runs on informers of a real kube-apiserver (one per test
// binary), as in the scheduler. Paths that depend on the order in which
// events arrive (a listener lagging behind the scheduler's) are driven by
// calling Sync and the listener's handler with real objects in a chosen
// order.
func TestMain(m *testing.M) { controlplane.Main(m) }

const driver = "gpu.example.com"

type testEnv struct {
	ctx       context.Context
	client    kubernetes.Interface
	namespace string
}

// newEnv creates a namespace for the test.
func newEnv(t *testing.T) *testEnv {
	t.Helper()
	cp := controlplane.Shared(t)
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	ns, err := cp.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "tracker-",
		// Admin access needs the namespace to allow it.
		Labels: map[string]string{"resource.kubernetes.io/admin-access": "true"},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cp.Client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return &testEnv{ctx: ctx, client: cp.Client, namespace: ns.Name}
}

// start starts a tracker with its own informer factory and waits until it
// has synced.
func (env *testEnv) start(t *testing.T, opts Options) *Tracker {
	t.Helper()
	factory := informers.NewSharedInformerFactoryWithOptions(env.client, 0, informers.WithNamespace(env.namespace))
	tr := env.newTracker(t, factory, opts)
	env.startFactory(t, factory)
	if !cache.WaitForCacheSync(env.ctx.Done(), tr.HasSynced) {
		t.Fatal("tracker did not sync")
	}
	return tr
}

// startFactory starts factory; cleanup stops its informers and waits for
// them (Shutdown blocks until the stop channel closes, and cleanups run in
// reverse order, so the test context's cancel would come too late).
func (env *testEnv) startFactory(t *testing.T, factory informers.SharedInformerFactory) {
	t.Helper()
	ctx, cancel := context.WithCancel(env.ctx)
	factory.Start(ctx.Done())
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
	})
}

func (env *testEnv) newTracker(t *testing.T, factory informers.SharedInformerFactory, opts Options) *Tracker {
	t.Helper()
	opts.InformerFactory = factory
	opts.KubeClient = env.client
	tr, err := New(env.ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Stop)
	return tr
}

// create creates an unallocated claim with one request "req".
func (env *testEnv) create(t *testing.T, name string, modify ...func(*builder.ClaimWrapper)) *resourceapi.ResourceClaim {
	t.Helper()
	w := builder.MakeClaim(name).Request("req", "gpu", 1)
	for _, m := range modify {
		m(w)
	}
	claim := w.Obj()
	claim.Namespace, claim.UID = env.namespace, ""
	created, err := env.client.ResourceV1().ResourceClaims(env.namespace).Create(env.ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// allocation allocates the given devices of pool node-0 to request "req".
func allocation(devices ...string) *resourceapi.AllocationResult {
	a := &resourceapi.AllocationResult{}
	for _, d := range devices {
		a.Devices.Results = append(a.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "req", Driver: driver, Pool: "node-0", Device: d,
		})
	}
	return a
}

// withAllocation returns a copy of the claim with the allocation set, as
// Reserve gets it.
func withAllocation(claim *resourceapi.ResourceClaim, a *resourceapi.AllocationResult) *resourceapi.ResourceClaim {
	claim = claim.DeepCopy()
	claim.Status.Allocation = a
	return claim
}

// writeStatus writes the claim's status, as PreBind or the claim controller
// do, and returns the written version.
func (env *testEnv) writeStatus(t *testing.T, claim *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	t.Helper()
	written, err := env.client.ResourceV1().ResourceClaims(env.namespace).UpdateStatus(env.ctx, claim, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return written
}

func ids(devices ...string) sets.Set[structured.DeviceID] {
	s := sets.New[structured.DeviceID]()
	for _, d := range devices {
		s.Insert(structured.MakeDeviceID(driver, "node-0", d))
	}
	return s
}

// eventually polls until the condition holds: informer events arrive
// asynchronously.
func eventually(t *testing.T, what string, condition func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !condition() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAllocatedFromInformer(t *testing.T) {
	env := newEnv(t)
	a := env.writeStatus(t, withAllocation(env.create(t, "a"), allocation("gpu-0", "gpu-1")))
	env.create(t, "b")
	// The initial list is complete once HasSynced says so.
	tr := env.start(t, Options{})
	if got := tr.AllocatedState().AllocatedDevices; !got.Equal(ids("gpu-0", "gpu-1")) {
		t.Fatalf("after sync: allocated %v, want gpu-0 and gpu-1", got)
	}

	// Deallocation frees the devices.
	a.Status.Allocation = nil
	env.writeStatus(t, a)
	eventually(t, "claim a freed", func() bool { return tr.AllocatedState().AllocatedDevices.Len() == 0 })
}

func TestAdminAccessNotCounted(t *testing.T) {
	env := newEnv(t)
	admin := allocation("gpu-0")
	admin.Devices.Results[0].AdminAccess = ptr.To(true)
	env.writeStatus(t, withAllocation(env.create(t, "admin", func(w *builder.ClaimWrapper) { w.AdminAccess() }), admin))
	env.writeStatus(t, withAllocation(env.create(t, "normal"), allocation("gpu-1")))
	tr := env.start(t, Options{})
	if got := tr.AllocatedState().AllocatedDevices; !got.Equal(ids("gpu-1")) {
		t.Fatalf("allocated %v, want only gpu-1", got)
	}
}

func TestReserveCommitUnreserve(t *testing.T) {
	env := newEnv(t)
	claimA, claimB := env.create(t, "a"), env.create(t, "b")
	tr := env.start(t, Options{})

	a := withAllocation(claimA, allocation("gpu-0"))
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
	// Claim returns the written version at once.
	written := env.writeStatus(t, a)
	tr.Commit(env.ctx, written)
	if tr.PendingAllocation(a.UID) != nil {
		t.Fatal("claim still in flight after Commit")
	}
	if got := tr.AllocatedState().AllocatedDevices; !got.Equal(ids("gpu-0")) {
		t.Fatalf("committed device not counted: %v", got)
	}
	if c, err := tr.Claim(env.namespace, "a"); err != nil || c.ResourceVersion != written.ResourceVersion {
		t.Fatalf("Claim does not return the written version %s: %v, %v", written.ResourceVersion, c, err)
	}
	// Unreserve after Commit leaves the allocation alone: it is in the API.
	if tr.Unreserve(written) {
		t.Fatal("Unreserve found a committed claim in flight")
	}
	if got := tr.AllocatedState().AllocatedDevices; !got.Equal(ids("gpu-0")) {
		t.Fatalf("Unreserve after Commit freed the device: %v", got)
	}

	// An allocation that is never written is dropped by Unreserve.
	b := withAllocation(claimB, allocation("gpu-1"))
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
	env := newEnv(t)
	a := env.writeStatus(t, withAllocation(env.create(t, "a"), allocation("gpu-0")))
	tr := env.start(t, Options{})
	a.Status.Allocation = nil
	if err := tr.Reserve(withAllocation(a, allocation("gpu-1"))); err == nil {
		t.Fatal("Reserve of an allocated claim succeeded")
	}
}

// TestConsumableCapacityNotCountedTwice: a claim both in flight and
// already observed as allocated counts its capacity once.
func TestConsumableCapacityNotCountedTwice(t *testing.T) {
	env := newEnv(t)
	claimA := env.create(t, "a")
	tr := env.start(t, Options{ConsumableCapacity: true})
	shared := allocation("nic")
	shared.Devices.Results[0].ShareID = ptr.To(types.UID("6e0e2c8e-4f3a-4a6b-9a57-2d1c0d8f5a10"))
	shared.Devices.Results[0].ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"bandwidth": resource.MustParse("4G")}
	a := withAllocation(claimA, shared)
	if err := tr.Reserve(a); err != nil {
		t.Fatal(err)
	}
	// The informer may report the write before PreBind commits it.
	written := env.writeStatus(t, a)
	eventually(t, "write observed", func() bool {
		c, err := tr.Claim(env.namespace, "a")
		return err == nil && c.Status.Allocation != nil
	})
	nic := structured.MakeDeviceID(driver, "node-0", "nic")
	check := func(when string) {
		t.Helper()
		state := tr.AllocatedState()
		if got := state.AggregatedCapacity[nic]["bandwidth"]; got == nil || got.Cmp(resource.MustParse("4G")) != 0 {
			t.Fatalf("%s: consumed capacity %v, want 4G", when, got)
		}
		if state.AllocatedDevices.Has(nic) {
			t.Fatalf("%s: a share counts as an exclusive allocation", when)
		}
	}
	check("in flight and observed")
	tr.Commit(env.ctx, written)
	check("committed")
}

// TestNoGapBetweenInFlightAndAllocated: while PreBind commits claims, a
// concurrent reader never sees a claim's devices missing from the
// snapshot. Run with -race.
func TestNoGapBetweenInFlightAndAllocated(t *testing.T) {
	env := newEnv(t)
	var claims []*resourceapi.ResourceClaim
	for i := range 30 {
		claims = append(claims, env.create(t, fmt.Sprintf("c%d", i)))
	}
	tr := env.start(t, Options{})

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
		a := withAllocation(c, allocation(fmt.Sprintf("gpu-%d", i)))
		if err := tr.Reserve(a); err != nil {
			t.Fatal(err)
		}
		expectedMutex.Lock()
		expected.Insert(ids(fmt.Sprintf("gpu-%d", i)).UnsortedList()...)
		expectedMutex.Unlock()
		tr.Commit(env.ctx, env.writeStatus(t, a))
	}
	close(stop)
	wg.Wait()
	if gaps > 0 {
		t.Fatalf("%d snapshots missed devices of reserved or committed claims", gaps)
	}
}

// TestSyncAheadOfListener: the scheduler saw a deallocation before the
// tracker's listener; after Sync the devices are free at once, and the
// older version arriving late on the listener does not take them again.
func TestSyncAheadOfListener(t *testing.T) {
	env := newEnv(t)
	allocated := env.writeStatus(t, withAllocation(env.create(t, "a"), allocation("gpu-0")))
	tr := env.start(t, Options{})
	if got := tr.AllocatedState().AllocatedDevices; !got.Equal(ids("gpu-0")) {
		t.Fatalf("allocated %v, want gpu-0", got)
	}

	freed := allocated.DeepCopy()
	freed.Status.Allocation = nil
	freed = env.writeStatus(t, freed)
	tr.Sync(allocated, freed)
	if got := tr.AllocatedState().AllocatedDevices; got.Len() != 0 {
		t.Fatalf("after Sync: allocated %v, want none", got)
	}
	tr.observe(allocated) // late, older
	if got := tr.AllocatedState().AllocatedDevices; got.Len() != 0 {
		t.Fatalf("an older version applied after a newer one: allocated %v", got)
	}
	if c, err := tr.Claim(env.namespace, "a"); err != nil || c.Status.Allocation != nil {
		t.Fatalf("Claim after Sync: %v, %v; want the deallocated version", c, err)
	}

	// A deletion seen first by the scheduler wins over late versions too.
	reallocated := env.writeStatus(t, withAllocation(freed, allocation("gpu-1")))
	eventually(t, "reallocation observed", func() bool { return tr.AllocatedState().AllocatedDevices.Equal(ids("gpu-1")) })
	tr.Sync(reallocated, nil)
	tr.observe(reallocated)
	if got := tr.AllocatedState().AllocatedDevices; got.Len() != 0 {
		t.Fatalf("a version applied after the claim's deletion: allocated %v", got)
	}
}

// lister adapts an informer's lister to ClaimGetter, as the scheduler's
// claim cache is.
type lister struct {
	informers.SharedInformerFactory
}

func (l lister) Get(namespace, name string) (*resourceapi.ResourceClaim, error) {
	return l.Resource().V1().ResourceClaims().Lister().ResourceClaims(namespace).Get(name)
}

// TestClaimFallback: a claim that the tracker's own listener has not
// delivered yet is found through the scheduler's cache, and its devices
// count at once.
func TestClaimFallback(t *testing.T) {
	env := newEnv(t)
	env.writeStatus(t, withAllocation(env.create(t, "a"), allocation("gpu-0")))

	// The scheduler's cache is up to date.
	theirs := informers.NewSharedInformerFactoryWithOptions(env.client, 0, informers.WithNamespace(env.namespace))
	theirs.Resource().V1().ResourceClaims().Informer()
	env.startFactory(t, theirs)
	theirs.WaitForCacheSync(env.ctx.Done())

	// The tracker's factory is never started: its listener lags forever.
	ours := informers.NewSharedInformerFactoryWithOptions(env.client, 0, informers.WithNamespace(env.namespace))
	tr := env.newTracker(t, ours, Options{ClaimFallback: lister{theirs}})
	if tr.HasSynced() {
		t.Fatal("HasSynced before the initial list")
	}
	c, err := tr.Claim(env.namespace, "a")
	if err != nil || c.Status.Allocation == nil {
		t.Fatalf("Claim through the fallback: %v, %v", c, err)
	}
	if got := tr.AllocatedState().AllocatedDevices; !got.Equal(ids("gpu-0")) {
		t.Fatalf("allocated %v, want gpu-0 from the fallback's version", got)
	}
	if _, err := tr.Claim(env.namespace, "missing"); err == nil {
		t.Fatal("Claim of a missing claim succeeded")
	}
}
