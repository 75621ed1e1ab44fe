// Package trackertest helps test code that uses pkg/tracker: NewManager
// builds kube-scheduler's own SharedDRAManager on an informer factory (a
// fake clientset's, say), as the scheduler does, and Fake is an in-memory
// tracker.Interface for unit tests of the plugin's extension points.
package trackertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	resourceslicetracker "k8s.io/dynamic-resource-allocation/resourceslice/tracker"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/util/assumecache"

	"github.com/drasched/drasched/pkg/core"
	"github.com/drasched/drasched/pkg/tracker"
)

// NewManager builds kube-scheduler's DefaultDRAManager on the factory's
// informers, as scheduler.New does: an assume cache on the claim informer
// and a ResourceSlice tracker (without DeviceTaintRules). Call it before
// starting the factory.
func NewManager(ctx context.Context, client kubernetes.Interface, factory informers.SharedInformerFactory) (fwk.SharedDRAManager, error) {
	manager, _, err := NewManagerWithCache(ctx, client, factory)
	return manager, err
}

// NewManagerWithCache is NewManager that also returns the manager's claim
// cache, for tests that hold the delivery of its events with a handler of
// their own.
func NewManagerWithCache(ctx context.Context, client kubernetes.Interface, factory informers.SharedInformerFactory) (fwk.SharedDRAManager, *assumecache.AssumeCache, error) {
	resource := factory.Resource().V1()
	claims := assumecache.NewAssumeCache(klog.FromContext(ctx), resource.ResourceClaims().Informer(), "ResourceClaim", "", nil)
	slices, err := resourceslicetracker.StartTracker(ctx, resourceslicetracker.Options{
		SliceInformer: resource.ResourceSlices(),
		KubeClient:    client,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("start ResourceSlice tracker: %w", err)
	}
	// The class lister must exist before the factory starts.
	resource.DeviceClasses().Informer()
	return dynamicresources.NewDRAManager(ctx, claims, slices, factory), claims, nil
}

// VersionedClientset returns a fake clientset that names, identifies and
// versions ResourceClaims as the API server does: a name from
// GenerateName, a UID on create, a new resourceVersion on every write, and
// a conflict for an update based on an older resourceVersion.
// The claim cache compares resourceVersions, which the plain fake leaves
// empty.
func VersionedClientset(objects ...runtime.Object) *fake.Clientset {
	client := fake.NewClientset(objects...)
	var version atomic.Int64
	version.Store(100)
	client.PrependReactor("*", "resourceclaims", func(action k8stesting.Action) (bool, runtime.Object, error) {
		write, ok := action.(interface{ GetObject() runtime.Object })
		if !ok {
			return false, nil, nil
		}
		claim, ok := write.GetObject().(*resourceapi.ResourceClaim)
		if !ok {
			return false, nil, nil
		}
		switch action.GetVerb() {
		case "create":
			if claim.Name == "" {
				claim.Name = claim.GenerateName + "x1y2z"
			}
			if claim.UID == "" {
				claim.UID = types.UID("uid-" + claim.Name)
			}
		case "update":
			// Optimistic concurrency: an update based on an older
			// version conflicts.
			current, err := client.Tracker().Get(action.GetResource(), action.GetNamespace(), claim.Name)
			if err == nil && claim.ResourceVersion != "" && current.(*resourceapi.ResourceClaim).ResourceVersion != claim.ResourceVersion {
				return true, nil, apierrors.NewConflict(action.GetResource().GroupResource(), claim.Name, errors.New("the object has been modified"))
			}
		}
		claim.ResourceVersion = strconv.FormatInt(version.Add(1), 10)
		return false, nil, nil
	})
	return client
}

// Fake is an in-memory tracker.Interface. Claims, slices and classes are
// what the test puts in; allocated devices are those of the allocated
// claims plus the allocations in flight. Calls are recorded in Calls.
type Fake struct {
	// mutex guards everything below.
	mutex    sync.Mutex
	claims   map[string]*resourceapi.ResourceClaim
	slices   []*resourceapi.ResourceSlice
	classes  map[string]*resourceapi.DeviceClass
	inFlight map[types.UID]*fakeEntry
	// Calls lists the mutating calls, e.g. "Reserve ns/claim",
	// "Written ns/claim", "WriteUnknown ns/claim".
	calls []string
	// nominations is a real store: it has no dependencies to fake.
	nominations *tracker.Nominations
}

type fakeEntry struct {
	claim *resourceapi.ResourceClaim
	// kept: a write was attempted; Unreserve leaves it.
	kept bool
	// shares: the pods holding the allocation.
	shares int
}

var _ tracker.Interface = &Fake{}

// NewFake returns a Fake holding the objects (claims, slices, classes).
func NewFake(objects ...runtime.Object) *Fake {
	f := &Fake{
		claims:      make(map[string]*resourceapi.ResourceClaim),
		classes:     make(map[string]*resourceapi.DeviceClass),
		inFlight:    make(map[types.UID]*fakeEntry),
		nominations: tracker.NewNominations(tracker.NominationOptions{}),
	}
	for _, obj := range objects {
		f.Add(obj)
	}
	return f
}

// Add adds or replaces a claim, slice or class.
func (f *Fake) Add(obj runtime.Object) {
	f.mutex.Lock()
	defer f.mutex.Unlock()
	switch o := obj.(type) {
	case *resourceapi.ResourceClaim:
		f.claims[o.Namespace+"/"+o.Name] = o
	case *resourceapi.ResourceSlice:
		f.slices = slices.DeleteFunc(f.slices, func(s *resourceapi.ResourceSlice) bool { return s.Name == o.Name })
		f.slices = append(f.slices, o)
	case *resourceapi.DeviceClass:
		f.classes[o.Name] = o
	default:
		panic(fmt.Sprintf("trackertest: cannot hold %T", obj))
	}
}

// Calls returns the mutating calls so far.
func (f *Fake) Calls() []string {
	f.mutex.Lock()
	defer f.mutex.Unlock()
	return slices.Clone(f.calls)
}

func (f *Fake) record(call string, claim *resourceapi.ResourceClaim) {
	f.calls = append(f.calls, call+" "+klog.KObj(claim).String())
}

// Claim returns a claim or a NotFound error.
func (f *Fake) Claim(namespace, name string) (*resourceapi.ResourceClaim, error) {
	f.mutex.Lock()
	defer f.mutex.Unlock()
	claim, ok := f.claims[namespace+"/"+name]
	if !ok {
		return nil, apierrors.NewNotFound(resourceapi.Resource("resourceclaims"), name)
	}
	return claim, nil
}

// Claims lists the claims.
func (f *Fake) Claims() ([]*resourceapi.ResourceClaim, error) {
	f.mutex.Lock()
	defer f.mutex.Unlock()
	claims := make([]*resourceapi.ResourceClaim, 0, len(f.claims))
	for _, claim := range f.claims {
		claims = append(claims, claim)
	}
	return claims, nil
}

// Slices returns the slices.
func (f *Fake) Slices() ([]*resourceapi.ResourceSlice, error) {
	f.mutex.Lock()
	defer f.mutex.Unlock()
	return slices.Clone(f.slices), nil
}

// DeviceClasses lists and gets the classes.
func (f *Fake) DeviceClasses() structured.DeviceClassLister { return fakeClasses{f} }

type fakeClasses struct{ f *Fake }

func (c fakeClasses) List() ([]*resourceapi.DeviceClass, error) {
	c.f.mutex.Lock()
	defer c.f.mutex.Unlock()
	var list []*resourceapi.DeviceClass
	for _, class := range c.f.classes {
		list = append(list, class)
	}
	return list, nil
}

func (c fakeClasses) Get(name string) (*resourceapi.DeviceClass, error) {
	c.f.mutex.Lock()
	defer c.f.mutex.Unlock()
	class, ok := c.f.classes[name]
	if !ok {
		return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
	}
	return class, nil
}

// AllocatedState counts the devices of allocated and in-flight claims,
// by core.AddAllocation's rule with consumable capacity enabled.
func (f *Fake) AllocatedState(context.Context) (*structured.AllocatedState, error) {
	f.mutex.Lock()
	defer f.mutex.Unlock()
	state := core.NewAllocatedState()
	add := func(claim *resourceapi.ResourceClaim) {
		core.AddAllocation(&state, claim.Status.Allocation, true)
	}
	for _, claim := range f.claims {
		add(claim)
	}
	for _, e := range f.inFlight {
		add(e.claim)
	}
	return &state, nil
}

// PendingAllocation returns the allocation in flight under uid.
func (f *Fake) PendingAllocation(uid types.UID) *resourceapi.AllocationResult {
	f.mutex.Lock()
	defer f.mutex.Unlock()
	if e := f.inFlight[uid]; e != nil {
		return e.claim.Status.Allocation
	}
	return nil
}

// Reserve puts the claim in flight, or fails as the tracker does.
func (f *Fake) Reserve(claim *resourceapi.ResourceClaim) error {
	f.mutex.Lock()
	defer f.mutex.Unlock()
	f.record("Reserve", claim)
	if claim.Status.Allocation == nil {
		return errors.New("no allocation")
	}
	if f.inFlight[claim.UID] != nil {
		return tracker.ErrInFlight
	}
	if current := f.claims[claim.Namespace+"/"+claim.Name]; current != nil && current.UID == claim.UID && current.Status.Allocation != nil {
		return tracker.ErrAlreadyAllocated
	}
	f.inFlight[claim.UID] = &fakeEntry{claim: claim, shares: 1}
	return nil
}

// Share adds a share to an allocation in flight that no write touched;
// one that was written counts without a share.
func (f *Fake) Share(claim *resourceapi.ResourceClaim) (bool, error) {
	f.mutex.Lock()
	defer f.mutex.Unlock()
	e := f.inFlight[claim.UID]
	if e == nil {
		if current := f.claims[claim.Namespace+"/"+claim.Name]; current != nil && current.UID == claim.UID && current.Status.Allocation != nil {
			return false, nil
		}
		return false, tracker.ErrNotReserved
	}
	if e.kept {
		return false, nil
	}
	f.record("Share", e.claim)
	e.shares++
	return true, nil
}

// Unreserve drops a share of an allocation in flight that no write
// touched, and the allocation with the last one.
func (f *Fake) Unreserve(key types.UID) bool {
	f.mutex.Lock()
	defer f.mutex.Unlock()
	e := f.inFlight[key]
	if e == nil || e.kept {
		return false
	}
	f.record("Unreserve", e.claim)
	if e.shares--; e.shares > 0 {
		return false
	}
	delete(f.inFlight, key)
	return true
}

// Written stores the written claim and ends its flight.
func (f *Fake) Written(_ context.Context, key types.UID, written *resourceapi.ResourceClaim) {
	f.mutex.Lock()
	defer f.mutex.Unlock()
	f.record("Written", written)
	f.claims[written.Namespace+"/"+written.Name] = written
	delete(f.inFlight, key)
}

// WriteUnknown keeps the allocation in flight.
func (f *Fake) WriteUnknown(_ context.Context, key types.UID, base *resourceapi.ResourceClaim) {
	f.mutex.Lock()
	defer f.mutex.Unlock()
	f.record("WriteUnknown", base)
	if e := f.inFlight[key]; e != nil {
		e.kept = true
	}
}

// InFlight returns the keys in flight.
func (f *Fake) InFlight() []types.UID {
	f.mutex.Lock()
	defer f.mutex.Unlock()
	return sets.List(sets.KeySet(f.inFlight))
}

// Nominations are the preemptors' nominated allocations.
func (f *Fake) Nominations() *tracker.Nominations { return f.nominations }
