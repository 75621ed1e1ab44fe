package tracker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/util/assumecache"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/pkg/tracker"
	"github.com/drasched/drasched/pkg/tracker/trackertest"
)

// The tracker runs on kube-scheduler's own DRA manager, built on the
// informers of a fake clientset that versions claims like the API server.

const (
	driver    = "gpu.example.com"
	namespace = "default"
)

type testEnv struct {
	ctx       context.Context
	client    *fake.Clientset
	tracker   *tracker.Tracker
	activated atomic.Int32
	// manager and claimCache are the DRA manager under the tracker and
	// its claim cache.
	manager    fwk.SharedDRAManager
	claimCache *assumecache.AssumeCache
}

// setup starts a tracker on a fresh fake clientset holding the claims and
// waits until the claim cache has them.
func setup(t *testing.T, grace time.Duration, claims ...*resourceapi.ResourceClaim) *testEnv {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	env := &testEnv{ctx: ctx, client: trackertest.VersionedClientset()}
	for _, claim := range claims {
		env.create(t, claim)
	}
	factory := informers.NewSharedInformerFactory(env.client, 0)
	manager, claimCache, err := trackertest.NewManagerWithCache(ctx, env.client, factory)
	if err != nil {
		t.Fatal(err)
	}
	env.manager, env.claimCache = manager, claimCache
	env.tracker, err = tracker.New(ctx, tracker.Options{
		Manager:      manager,
		Client:       env.client,
		Activate:     func(klog.Logger) { env.activated.Add(1) },
		UnknownGrace: grace,
	})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
	})
	if !cache.WaitForCacheSync(ctx.Done(), factory.Resource().V1().ResourceClaims().Informer().HasSynced) {
		t.Fatal("informers did not sync")
	}
	for _, claim := range claims {
		env.eventually(t, "claim "+claim.Name+" in the cache", func() bool {
			_, err := env.tracker.Claim(namespace, claim.Name)
			return err == nil
		})
	}
	return env
}

// claim is an unallocated claim with one request "req"; allocated
// variants come from withAllocation.
func claim(name string) *resourceapi.ResourceClaim {
	c := builder.MakeClaim(name).Request("req", "gpu", 1).Obj()
	c.Namespace, c.UID = namespace, types.UID("uid-"+name)
	return c
}

// allocation allocates the devices of pool node-0 to request "req".
func allocation(devices ...string) *resourceapi.AllocationResult {
	a := &resourceapi.AllocationResult{}
	for _, d := range devices {
		a.Devices.Results = append(a.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "req", Driver: driver, Pool: "node-0", Device: d,
		})
	}
	return a
}

func withAllocation(c *resourceapi.ResourceClaim, a *resourceapi.AllocationResult) *resourceapi.ResourceClaim {
	c = c.DeepCopy()
	c.Status.Allocation = a
	return c
}

func (env *testEnv) create(t *testing.T, c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	t.Helper()
	created, err := env.client.ResourceV1().ResourceClaims(namespace).Create(context.Background(), c, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// writeStatus writes a claim's status as PreBind does and returns what the
// API server returned.
func (env *testEnv) writeStatus(t *testing.T, c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	t.Helper()
	written, err := env.client.ResourceV1().ResourceClaims(namespace).UpdateStatus(context.Background(), c, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return written
}

func (env *testEnv) get(t *testing.T, name string) *resourceapi.ResourceClaim {
	t.Helper()
	c, err := env.client.ResourceV1().ResourceClaims(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (env *testEnv) allocated(t *testing.T) sets.Set[structured.DeviceID] {
	t.Helper()
	state, err := env.tracker.AllocatedState(env.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return state.AllocatedDevices
}

func ids(devices ...string) sets.Set[structured.DeviceID] {
	s := sets.New[structured.DeviceID]()
	for _, d := range devices {
		s.Insert(structured.MakeDeviceID(driver, "node-0", d))
	}
	return s
}

// eventually polls: informer events and the tracker's worker run
// asynchronously.
func (env *testEnv) eventually(t *testing.T, what string, condition func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !condition() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAllocatedFromClaimCache(t *testing.T) {
	env := setup(t, 0, withAllocation(claim("a"), allocation("gpu-0", "gpu-1")), claim("b"))
	if got := env.allocated(t); !got.Equal(ids("gpu-0", "gpu-1")) {
		t.Fatalf("allocated %v, want gpu-0 and gpu-1", got)
	}
	a := env.get(t, "a")
	a.Status.Allocation = nil
	env.writeStatus(t, a)
	env.eventually(t, "claim a freed", func() bool { return env.allocated(t).Len() == 0 })
}

func TestAdminAccessNotCounted(t *testing.T) {
	admin := allocation("gpu-0")
	admin.Devices.Results[0].AdminAccess = ptr.To(true)
	env := setup(t, 0, withAllocation(claim("admin"), admin), withAllocation(claim("normal"), allocation("gpu-1")))
	if got := env.allocated(t); !got.Equal(ids("gpu-1")) {
		t.Fatalf("allocated %v, want only gpu-1", got)
	}
}

func TestReserveWrittenUnreserve(t *testing.T) {
	env := setup(t, 0, claim("a"), claim("b"))
	tr := env.tracker

	a := withAllocation(env.get(t, "a"), allocation("gpu-0"))
	if err := tr.Reserve(a); err != nil {
		t.Fatal(err)
	}
	if tr.PendingAllocation(a.UID) == nil {
		t.Fatal("no pending allocation after Reserve")
	}
	if got := env.allocated(t); !got.Equal(ids("gpu-0")) {
		t.Fatalf("in-flight device not counted: %v", got)
	}
	if err := tr.Reserve(a); !errors.Is(err, tracker.ErrInFlight) {
		t.Fatalf("second Reserve of an in-flight claim: %v, want ErrInFlight", err)
	}

	// PreBind writes the claim: it leaves flight, stays counted, and
	// Claim returns the written version at once.
	written := env.writeStatus(t, a)
	tr.Written(env.ctx, a.UID, written)
	if tr.PendingAllocation(a.UID) != nil || len(tr.InFlight()) != 0 {
		t.Fatalf("claim still in flight after Written: %v", tr.InFlight())
	}
	if got := env.allocated(t); !got.Equal(ids("gpu-0")) {
		t.Fatalf("written device not counted: %v", got)
	}
	if c, err := tr.Claim(namespace, "a"); err != nil || c.ResourceVersion != written.ResourceVersion {
		t.Fatalf("Claim does not return the written version %s: %v, %v", written.ResourceVersion, c, err)
	}
	if tr.Unreserve(a.UID) {
		t.Fatal("Unreserve found a written claim in flight")
	}
	if got := env.allocated(t); !got.Equal(ids("gpu-0")) {
		t.Fatalf("Unreserve after Written freed the device: %v", got)
	}

	// An allocation that is never written is dropped by Unreserve.
	b := withAllocation(env.get(t, "b"), allocation("gpu-1"))
	if err := tr.Reserve(b); err != nil {
		t.Fatal(err)
	}
	if !tr.Unreserve(b.UID) {
		t.Fatal("Unreserve did not find the in-flight claim")
	}
	if got := env.allocated(t); !got.Equal(ids("gpu-0")) {
		t.Fatalf("dropped allocation still counted: %v", got)
	}
}

// TestShares: pods of one pod group cycle share a claim's allocation in
// flight; it stays in flight until the last share is dropped, and a write
// by any of them ends the flight for all.
func TestShares(t *testing.T) {
	env := setup(t, 0, claim("a"), claim("b"), claim("c"))
	tr := env.tracker
	if held, err := tr.Share(env.get(t, "a")); held || !errors.Is(err, tracker.ErrNotReserved) {
		t.Fatalf("Share of a claim not in flight: %v, %v; want ErrNotReserved", held, err)
	}

	a := withAllocation(env.get(t, "a"), allocation("gpu-0"))
	if err := tr.Reserve(a); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if held, err := tr.Share(a); err != nil || !held {
			t.Fatalf("Share of a reserved allocation: %v, %v; want a share held", held, err)
		}
	}
	for i := range 2 {
		if tr.Unreserve(a.UID) {
			t.Fatalf("Unreserve %d of 3 dropped the shared allocation", i+1)
		}
		if got := env.allocated(t); !got.Equal(ids("gpu-0")) {
			t.Fatalf("after Unreserve %d of 3 the device is not counted: %v", i+1, got)
		}
	}
	if !tr.Unreserve(a.UID) {
		t.Fatal("the last Unreserve did not drop the allocation")
	}
	if got := env.allocated(t); got.Len() != 0 || len(tr.InFlight()) != 0 {
		t.Fatalf("after the last Unreserve: allocated %v, in flight %v", got, tr.InFlight())
	}

	// One write ends the flight for every share; the others' Unreserve
	// must not free the written devices.
	b := withAllocation(env.get(t, "b"), allocation("gpu-1"))
	if err := tr.Reserve(b); err != nil {
		t.Fatal(err)
	}
	if held, err := tr.Share(b); err != nil || !held {
		t.Fatalf("Share of a reserved allocation: %v, %v; want a share held", held, err)
	}
	tr.Written(env.ctx, b.UID, env.writeStatus(t, b))
	if tr.Unreserve(b.UID) || len(tr.InFlight()) != 0 {
		t.Fatalf("Unreserve of a share after the write: in flight %v", tr.InFlight())
	}
	// A pod of the group whose Reserve comes after another's PreBind
	// finds the allocation written: no share to hold, and no error.
	if held, err := tr.Share(b); err != nil || held {
		t.Fatalf("Share of a written allocation: %v, %v; want no share and no error", held, err)
	}
	if got := env.allocated(t); !got.Equal(ids("gpu-1")) {
		t.Fatalf("written shared allocation not counted: %v", got)
	}

	// A write with an unknown outcome keeps the allocation for all shares.
	c := withAllocation(env.get(t, "c"), allocation("gpu-2"))
	if err := tr.Reserve(c); err != nil {
		t.Fatal(err)
	}
	tr.WriteUnknown(env.ctx, c.UID, env.get(t, "c"))
	if held, err := tr.Share(c); err != nil || held {
		t.Fatalf("Share after a write attempt: %v, %v; want no share (the write may have landed) and no error", held, err)
	}
	if tr.Unreserve(c.UID) {
		t.Fatal("Unreserve dropped an allocation whose write may have landed")
	}
}

func TestReserveErrors(t *testing.T) {
	env := setup(t, 0, withAllocation(claim("a"), allocation("gpu-0")), claim("b"))
	stale := claim("a") // the cycle saw it unallocated
	if err := env.tracker.Reserve(withAllocation(stale, allocation("gpu-1"))); !errors.Is(err, tracker.ErrAlreadyAllocated) {
		t.Fatalf("Reserve of an allocated claim: %v, want ErrAlreadyAllocated", err)
	}
	if err := env.tracker.Reserve(claim("b")); err == nil {
		t.Fatal("Reserve without an allocation succeeded")
	}
	if got := env.tracker.InFlight(); len(got) != 0 {
		t.Fatalf("failed Reserves left %v in flight", got)
	}
}

// TestWrittenNoGap: while claims are written one after the other, a
// concurrent reader never sees a reserved or written claim's devices
// missing. Run with -race.
func TestWrittenNoGap(t *testing.T) {
	var claims []*resourceapi.ResourceClaim
	for i := range 30 {
		claims = append(claims, claim(fmt.Sprintf("c%d", i)))
	}
	env := setup(t, 0, claims...)

	var expectedMutex sync.Mutex
	expected := sets.New[structured.DeviceID]()
	stop := make(chan struct{})
	var gaps atomic.Int32
	var wg sync.WaitGroup
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
			state, err := env.tracker.AllocatedState(env.ctx)
			if err != nil || !state.AllocatedDevices.IsSuperset(want) {
				gaps.Add(1)
			}
		}
	})
	for i := range claims {
		a := withAllocation(env.get(t, claims[i].Name), allocation(fmt.Sprintf("gpu-%d", i)))
		if err := env.tracker.Reserve(a); err != nil {
			t.Fatal(err)
		}
		expectedMutex.Lock()
		expected.Insert(ids(fmt.Sprintf("gpu-%d", i)).UnsortedList()...)
		expectedMutex.Unlock()
		env.tracker.Written(env.ctx, a.UID, env.writeStatus(t, a))
	}
	close(stop)
	wg.Wait()
	if n := gaps.Load(); n > 0 {
		t.Fatalf("%d snapshots missed devices of reserved or written claims", n)
	}
}

// TestWriteUnknown: a lost write answer. A status write whose
// response is lost keeps its devices taken, whether it landed or not,
// until the API tells.
func TestWriteUnknown(t *testing.T) {
	for name, tc := range map[string]struct {
		// landed: etcd committed the write whose response was lost.
		landed bool
		// deleted: the claim is deleted after the failed write.
		deleted bool
		// wantAllocated: what stays taken once the entry is settled.
		wantAllocated sets.Set[structured.DeviceID]
		// wantActivate: the tracker requeues waiting pods.
		wantActivate bool
	}{
		"landed": {landed: true, wantAllocated: ids("gpu-0")},
		// Kept for the grace period, then freed, and waiting pods are
		// woken: no event announces it.
		"not landed":    {wantAllocated: ids(), wantActivate: true},
		"claim deleted": {deleted: true, wantAllocated: ids(), wantActivate: true},
	} {
		t.Run(name, func(t *testing.T) {
			env := setup(t, 300*time.Millisecond, claim("a"))
			tr := env.tracker
			base := env.get(t, "a")
			a := withAllocation(base, allocation("gpu-0"))
			if err := tr.Reserve(a); err != nil {
				t.Fatal(err)
			}
			if tc.landed {
				env.writeStatus(t, a)
			}
			tr.WriteUnknown(env.ctx, a.UID, base)
			if tr.Unreserve(a.UID) {
				t.Fatal("Unreserve dropped an allocation whose write may have landed")
			}
			if got := env.allocated(t); !got.Equal(ids("gpu-0")) && !tc.deleted {
				t.Fatalf("right after the failed write: allocated %v, want gpu-0", got)
			}
			if tc.deleted {
				if err := env.client.ResourceV1().ResourceClaims(namespace).Delete(env.ctx, "a", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			env.eventually(t, "the write settled", func() bool { return len(tr.InFlight()) == 0 })
			env.eventually(t, "the cache caught up", func() bool { return env.allocated(t).Equal(tc.wantAllocated) })
			if got := env.activated.Load() > 0; got != tc.wantActivate {
				t.Errorf("pods activated: %v, want %v", got, tc.wantActivate)
			}
		})
	}
}

// TestSettledOnlyOnceCounted: the claim cache's store shows a written claim
// before its handlers, the DRA manager's count of allocated devices among
// them, have seen it. The test holds the delivery of the cache's events
// open (a handler of its own blocks on an event of another claim, delivered
// by a test goroutine, so that the informer's delivery of the written claim
// waits behind it) and checks that the write's devices stay counted while
// the store already shows the claim: the tracker must not let the
// allocation leave flight before the count has it. Before the tracker waited
// for the delivery, the devices were counted nowhere in that window, and
// TestWriteUnknown/landed failed now and then under the race detector.
func TestSettledOnlyOnceCounted(t *testing.T) {
	env := setup(t, time.Hour, claim("a"), claim("b"))
	tr := env.tracker
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	env.claimCache.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) {
		if c, ok := obj.(*resourceapi.ResourceClaim); ok && c.Name == "b" && c.Labels["hold"] == "true" {
			once.Do(func() { close(held) })
			<-release
		}
	}})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})

	base := env.get(t, "a")
	a := withAllocation(base, allocation("gpu-0"))
	if err := tr.Reserve(a); err != nil {
		t.Fatal(err)
	}
	// Another claim's event, delivered by this goroutine: the handler
	// holds the delivery.
	b := env.get(t, "b")
	b.Labels = map[string]string{"hold": "true"}
	go func() { _ = env.manager.ResourceClaims().AssumeClaimAfterAPICall(b) }()
	<-held

	written := env.writeStatus(t, a)
	tr.WriteUnknown(env.ctx, a.UID, base)
	env.eventually(t, "the store shows the written claim", func() bool {
		c, err := tr.Claim(namespace, "a")
		return err == nil && c.ResourceVersion == written.ResourceVersion
	})
	// The worker settles an unknown write from the cache within its first
	// retries (20 ms and up); look for well beyond that.
	for range 50 {
		if got := env.allocated(t); !got.Equal(ids("gpu-0")) {
			t.Fatalf("the store shows the written claim, its event is not delivered: allocated %v, want gpu-0", got)
		}
		time.Sleep(10 * time.Millisecond)
	}

	close(release)
	env.eventually(t, "the write settled", func() bool { return len(tr.InFlight()) == 0 })
	if got := env.allocated(t); !got.Equal(ids("gpu-0")) {
		t.Fatalf("after the write settled: allocated %v, want gpu-0", got)
	}
}

// TestWriteUnknownKeptForGrace: a write that did not land keeps its
// devices for the grace period, in which kube-apiserver might still commit
// it.
func TestWriteUnknownKeptForGrace(t *testing.T) {
	env := setup(t, time.Hour, claim("a"))
	base := env.get(t, "a")
	a := withAllocation(base, allocation("gpu-0"))
	if err := env.tracker.Reserve(a); err != nil {
		t.Fatal(err)
	}
	env.client.ClearActions()
	env.tracker.WriteUnknown(env.ctx, a.UID, base)
	// Several rounds of the worker, which checks the cache and then asks
	// the API server: each round that finds the claim as before keeps the
	// devices.
	const rounds = 3
	env.eventually(t, fmt.Sprintf("%d checks of the claim against the API server", rounds), func() bool {
		gets := 0
		for _, action := range env.client.Actions() {
			if action.GetVerb() == "get" && action.GetResource().Resource == "resourceclaims" {
				gets++
			}
		}
		return gets >= rounds
	})
	if got := env.allocated(t); !got.Equal(ids("gpu-0")) {
		t.Fatalf("devices of a write with an unknown outcome freed within the grace period: %v", got)
	}
	// The write lands late: the tracker settles it as allocated.
	env.writeStatus(t, a)
	env.eventually(t, "the late write settled", func() bool { return len(env.tracker.InFlight()) == 0 })
	if got := env.allocated(t); !got.Equal(ids("gpu-0")) {
		t.Fatalf("after the late write: %v, want gpu-0", got)
	}
}

// TestCreatedClaim: the claim for a pod's extended resources is reserved
// under a placeholder before it exists. After PreBind creates and writes
// it, its devices stay counted through the placeholder until the claim
// cache has the created claim, and exactly once afterwards.
func TestCreatedClaim(t *testing.T) {
	env := setup(t, 0)
	tr := env.tracker
	placeholder := withAllocation(claim("<extended-resources>"), allocation("gpu-0"))
	placeholder.UID, placeholder.GenerateName = "placeholder", "pod-extended-resources-"
	if err := tr.Reserve(placeholder); err != nil {
		t.Fatal(err)
	}
	if got := env.allocated(t); !got.Equal(ids("gpu-0")) {
		t.Fatalf("after Reserve: %v", got)
	}
	fresh := placeholder.DeepCopy()
	fresh.Name, fresh.UID, fresh.Status = "", "", resourceapi.ResourceClaimStatus{}
	created := env.create(t, fresh)
	written := env.writeStatus(t, withAllocation(created, placeholder.Status.Allocation))
	tr.Written(env.ctx, placeholder.UID, written)
	if got := env.allocated(t); !got.Equal(ids("gpu-0")) {
		t.Fatalf("after Written: %v", got)
	}
	env.eventually(t, "the placeholder left flight", func() bool { return len(tr.InFlight()) == 0 })
	if got := env.allocated(t); !got.Equal(ids("gpu-0")) {
		t.Fatalf("after the cache caught up: %v", got)
	}
	if tr.Unreserve(placeholder.UID) {
		t.Fatal("Unreserve found the written placeholder")
	}
}

// TestNoResurrection: a late version of a deleted claim. Once the claim cache
// has seen a claim's deletion, a late allocated version of it (from a
// PreBind that wrote before the deletion) cannot take its devices again.
func TestNoResurrection(t *testing.T) {
	env := setup(t, 0, withAllocation(claim("a"), allocation("gpu-0")))
	late := env.get(t, "a")
	if err := env.client.ResourceV1().ResourceClaims(namespace).Delete(env.ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	env.eventually(t, "deletion seen", func() bool { return env.allocated(t).Len() == 0 })
	env.tracker.Written(env.ctx, "", late)
	if got := env.allocated(t); got.Len() != 0 {
		t.Fatalf("a late version of a deleted claim took its devices again: %v", got)
	}
	if _, err := env.tracker.Claim(namespace, "a"); err == nil {
		t.Fatal("a late version of a deleted claim is back in the claim cache")
	}
	if got := env.tracker.InFlight(); len(got) != 0 {
		t.Fatalf("in flight: %v", got)
	}
}

// TestRecreatedUnderSameName: a claim recreated under its name, as far as
// the tracker goes. A write for the old claim settles by the old UID; the
// new claim of the same name keeps nothing of it.
func TestRecreatedUnderSameName(t *testing.T) {
	env := setup(t, 0, claim("a"))
	old := env.get(t, "a")
	a := withAllocation(old, allocation("gpu-0"))
	if err := env.tracker.Reserve(a); err != nil {
		t.Fatal(err)
	}
	if err := env.client.ResourceV1().ResourceClaims(namespace).Delete(env.ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	recreated := claim("a")
	recreated.UID = "uid-a-2"
	env.create(t, recreated)
	env.eventually(t, "recreated claim in the cache", func() bool {
		c, err := env.tracker.Claim(namespace, "a")
		return err == nil && c.UID == recreated.UID
	})
	// PreBind found the claim replaced: the write's outcome is settled,
	// the old UID's allocation must not linger.
	env.tracker.WriteUnknown(env.ctx, a.UID, old)
	env.eventually(t, "old allocation dropped", func() bool { return len(env.tracker.InFlight()) == 0 })
	if got := env.allocated(t); got.Len() != 0 {
		t.Fatalf("allocated %v after the old claim's allocation was dropped", got)
	}
	if !slices.Equal(env.tracker.InFlight(), nil) {
		t.Fatal("in-flight entries left")
	}
}
