package tracker_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	resourceslicetracker "k8s.io/dynamic-resource-allocation/resourceslice/tracker"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/util/assumecache"

	"github.com/drasched/drasched/pkg/tracker"
	"github.com/drasched/drasched/pkg/tracker/trackertest"
)

// The event-order fuzz drives the tracker through claim lifecycles (create,
// allocate through Reserve and a write that succeeds, has a lost response
// or never lands, Unreserve, deletionTimestamp, deallocation, deletion,
// recreation under the same name, a late Written of an old version) while
// the claim cache's informer delivers the API's events late, by a random
// lag, interleaved with the tracker's own writes into the cache. After
// every step no device that an API claim holds may look free; at the end,
// with every event delivered, the tracker must hold exactly the API's
// devices and nothing in flight.

// laggingInformer hands the events of a watch to the claim cache only when
// told, in the watch's order.
type laggingInformer struct {
	mutex   sync.Mutex
	handler cache.ResourceEventHandler
	pending []watch.Event
	// delivered is the last version handed over, per key, for OnUpdate's
	// old object.
	delivered map[string]*resourceapi.ResourceClaim
}

func (l *laggingInformer) AddEventHandler(handler cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	l.mutex.Lock()
	defer l.mutex.Unlock()
	l.handler = handler
	return syncedRegistration{}, nil
}

func (l *laggingInformer) queue(e watch.Event) {
	l.mutex.Lock()
	defer l.mutex.Unlock()
	l.pending = append(l.pending, e)
}

// deliver hands over up to n pending events; it reports how many are left.
func (l *laggingInformer) deliver(n int) int {
	for ; n > 0; n-- {
		l.mutex.Lock()
		if len(l.pending) == 0 {
			l.mutex.Unlock()
			return 0
		}
		e := l.pending[0]
		l.pending = l.pending[1:]
		handler := l.handler
		claim := e.Object.(*resourceapi.ResourceClaim)
		key := claim.Namespace + "/" + claim.Name
		old := l.delivered[key]
		if e.Type == watch.Deleted {
			delete(l.delivered, key)
		} else {
			l.delivered[key] = claim
		}
		l.mutex.Unlock()
		switch {
		case e.Type == watch.Deleted:
			handler.OnDelete(claim)
		case old == nil:
			handler.OnAdd(claim, false)
		default:
			handler.OnUpdate(old, claim)
		}
	}
	l.mutex.Lock()
	defer l.mutex.Unlock()
	return len(l.pending)
}

type syncedRegistration struct{}

func (syncedRegistration) HasSynced() bool { return true }

// sim is one fuzz run: the API (a fake clientset), the lagging informer,
// and the tracker on kube-scheduler's DRA manager over it.
type sim struct {
	t        *testing.T
	ctx      context.Context
	client   *fake.Clientset
	informer *laggingInformer
	tracker  *tracker.Tracker
	rand     *rand.Rand
	// versions are every version of every claim the API returned, for
	// late Written calls.
	versions []*resourceapi.ResourceClaim
	uids     int
	// awaitEvents waits until the watch has queued the last write's event.
	awaitEvents func()
}

const fuzzDevices = 6

var fuzzNames = []string{"a", "b", "c", "d"}

func newSim(t *testing.T, seed uint64) *sim {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	client := trackertest.VersionedClientset()
	informer := &laggingInformer{delivered: map[string]*resourceapi.ResourceClaim{}}
	w, err := client.ResourceV1().ResourceClaims(namespace).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The fake's watch hands events out in a goroutine; wait for each
	// write's event before going on (sim.sync), so that the informer's
	// queue is in API order.
	events := make(chan struct{}, 1000)
	go func() {
		for e := range w.ResultChan() {
			informer.queue(e)
			events <- struct{}{}
		}
	}()
	factory := informers.NewSharedInformerFactory(client, 0)
	claims := assumecache.NewAssumeCache(klog.FromContext(ctx), informer, "ResourceClaim", "", nil)
	slices, err := resourceslicetracker.StartTracker(ctx, resourceslicetracker.Options{SliceInformer: factory.Resource().V1().ResourceSlices(), KubeClient: client})
	if err != nil {
		t.Fatal(err)
	}
	factory.Resource().V1().DeviceClasses().Informer()
	manager := dynamicresources.NewDRAManager(ctx, claims, slices, factory)
	tr, err := tracker.New(ctx, tracker.Options{Manager: manager, Client: client, UnknownGrace: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	t.Cleanup(func() {
		cancel()
		w.Stop()
		factory.Shutdown()
	})
	s := &sim{t: t, ctx: ctx, client: client, informer: informer, tracker: tr, rand: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	s.awaitEvents = func() {
		select {
		case <-events:
		case <-time.After(5 * time.Second):
			t.Fatal("watch event did not arrive")
		}
	}
	return s
}

// apiClaims lists the claims in the API.
func (s *sim) apiClaims() []resourceapi.ResourceClaim {
	list, err := s.client.ResourceV1().ResourceClaims(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	return list.Items
}

// apiDevices are the devices held by claims in the API.
func (s *sim) apiDevices() sets.Set[structured.DeviceID] {
	devices := sets.New[structured.DeviceID]()
	for _, claim := range s.apiClaims() {
		if claim.Status.Allocation != nil {
			for _, r := range claim.Status.Allocation.Devices.Results {
				devices.Insert(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
			}
		}
	}
	return devices
}

func (s *sim) state() sets.Set[structured.DeviceID] {
	state, err := s.tracker.AllocatedState(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	return state.AllocatedDevices
}

// freeDevice returns a device that neither the API nor the tracker counts
// as taken, as the allocator would pick it.
func (s *sim) freeDevice() (string, bool) {
	taken := s.state().Union(s.apiDevices())
	for i := range fuzzDevices {
		name := fmt.Sprintf("gpu-%d", i)
		if !taken.Has(structured.MakeDeviceID(driver, "node-0", name)) {
			return name, true
		}
	}
	return "", false
}

// written records a version the API returned and waits for its watch
// event.
func (s *sim) written(claim *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	s.versions = append(s.versions, claim)
	s.awaitEvents()
	return claim
}

// cached is the claim as the scheduler's cycle would see it: from the
// claim cache, only if the API still has the same object.
func (s *sim) cached(name string) *resourceapi.ResourceClaim {
	c, err := s.tracker.Claim(namespace, name)
	if err != nil {
		return nil
	}
	return c
}

func (s *sim) api(name string) *resourceapi.ResourceClaim {
	c, err := s.client.ResourceV1().ResourceClaims(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return c
}

// step runs one random operation; it returns its name for failure reports.
func (s *sim) step() string {
	name := fuzzNames[s.rand.IntN(len(fuzzNames))]
	current := s.api(name)
	switch op := s.rand.IntN(11); op {
	case 0: // create, or recreate after a deletion
		if current != nil {
			return "create (exists)"
		}
		s.uids++
		c := claim(name)
		c.UID = types.UID(fmt.Sprintf("uid-%s-%d", name, s.uids))
		created, err := s.client.ResourceV1().ResourceClaims(namespace).Create(context.Background(), c, metav1.CreateOptions{})
		if err != nil {
			s.t.Fatal(err)
		}
		s.written(created)
		return "create " + name
	case 1, 2, 3, 4: // allocate through the scheduler's path
		seen := s.cached(name)
		if current == nil || seen == nil || seen.UID != current.UID || seen.Status.Allocation != nil || current.Status.Allocation != nil || current.DeletionTimestamp != nil {
			return "allocate (not possible)"
		}
		device, ok := s.freeDevice()
		if !ok {
			return "allocate (no device)"
		}
		reserved := withAllocation(seen, allocation(device))
		if err := s.tracker.Reserve(reserved); err != nil {
			return "allocate (reserve: " + err.Error() + ")"
		}
		switch op {
		case 1: // written
			written, err := s.client.ResourceV1().ResourceClaims(namespace).UpdateStatus(context.Background(), withAllocation(current, reserved.Status.Allocation), metav1.UpdateOptions{})
			if err != nil {
				s.t.Fatal(err)
			}
			s.tracker.Written(s.ctx, reserved.UID, s.written(written))
			return "allocate+write " + name
		case 2: // the response is lost, the write landed
			written, err := s.client.ResourceV1().ResourceClaims(namespace).UpdateStatus(context.Background(), withAllocation(current, reserved.Status.Allocation), metav1.UpdateOptions{})
			if err != nil {
				s.t.Fatal(err)
			}
			s.written(written)
			s.tracker.WriteUnknown(s.ctx, reserved.UID, current)
			s.tracker.Unreserve(reserved.UID)
			return "allocate+lost response " + name
		case 3: // the write never landed
			s.tracker.WriteUnknown(s.ctx, reserved.UID, current)
			s.tracker.Unreserve(reserved.UID)
			return "allocate+write lost " + name
		default: // the binding failed before PreBind
			s.tracker.Unreserve(reserved.UID)
			return "allocate+unreserve " + name
		}
	case 5: // deletionTimestamp
		if current == nil || current.DeletionTimestamp != nil {
			return "mark deleted (not possible)"
		}
		marked := current.DeepCopy()
		marked.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		updated, err := s.client.ResourceV1().ResourceClaims(namespace).Update(context.Background(), marked, metav1.UpdateOptions{})
		if err != nil {
			s.t.Fatal(err)
		}
		s.written(updated)
		return "mark deleted " + name
	case 6: // deallocation by the claim controller
		if current == nil || current.Status.Allocation == nil {
			return "deallocate (not possible)"
		}
		freed := current.DeepCopy()
		freed.Status = resourceapi.ResourceClaimStatus{}
		updated, err := s.client.ResourceV1().ResourceClaims(namespace).UpdateStatus(context.Background(), freed, metav1.UpdateOptions{})
		if err != nil {
			s.t.Fatal(err)
		}
		s.written(updated)
		return "deallocate " + name
	case 7: // deletion
		if current == nil {
			return "delete (not possible)"
		}
		if err := s.client.ResourceV1().ResourceClaims(namespace).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			s.t.Fatal(err)
		}
		s.awaitEvents()
		return "delete " + name
	case 8: // a late Written of an old version, as a slow PreBind's
		if len(s.versions) == 0 {
			return "late written (none)"
		}
		old := s.versions[s.rand.IntN(len(s.versions))]
		s.tracker.Written(s.ctx, "", old)
		return fmt.Sprintf("late written %s@%s", old.Name, old.ResourceVersion)
	default: // the informer catches up a little
		n := 1 + s.rand.IntN(3)
		s.informer.deliver(n)
		return fmt.Sprintf("deliver %d", n)
	}
}

func (s *sim) run(steps int) {
	var history []string
	for range steps {
		history = append(history, s.step())
		// Safety: a device an API claim holds never looks free. Claims
		// deallocated in the API but not yet in the cache may still look
		// taken; that is late, not wrong.
		if missing := s.apiDevices().Difference(s.state()); missing.Len() > 0 {
			s.t.Fatalf("devices held in the API look free: %v\nsteps: %v", missing.UnsortedList(), history)
		}
	}
	// Quiescence: every event delivered, every write settled.
	s.informer.deliver(1 << 30)
	deadline := time.Now().Add(10 * time.Second)
	for len(s.tracker.InFlight()) > 0 || !s.state().Equal(s.apiDevices()) {
		if time.Now().After(deadline) {
			s.t.Fatalf("not settled: in flight %v, tracker %v, API %v\nsteps: %v", s.tracker.InFlight(), s.state().UnsortedList(), s.apiDevices().UnsortedList(), history)
		}
		time.Sleep(5 * time.Millisecond)
		s.informer.deliver(1 << 30)
	}
	// Bounded: what stays is what lives.
	if n, live := len(s.tracker.InFlight()), len(s.apiClaims()); n > live {
		s.t.Fatalf("%d entries for %d live claims", n, live)
	}
}

func TestEventOrderFuzz(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			newSim(t, seed).run(80)
		})
	}
}

// FuzzEventOrder: go test ./pkg/tracker -run '^$' -fuzz FuzzEventOrder.
func FuzzEventOrder(f *testing.F) {
	for _, seed := range []uint64{1, 7, 42} {
		f.Add(binary.LittleEndian.AppendUint64(nil, seed), uint8(60))
	}
	f.Fuzz(func(t *testing.T, seed []byte, steps uint8) {
		if len(seed) < 8 {
			return
		}
		newSim(t, binary.LittleEndian.Uint64(seed)).run(int(steps))
	})
}
