package core

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
)

const margin = 30 * time.Second

// victimsWorld is pods and the claims they hold, by pod UID.
type victimsWorld struct {
	pods   map[types.UID]*v1.Pod
	claims map[types.UID][]*resourceapi.ResourceClaim
}

func newWorld() *victimsWorld {
	return &victimsWorld{pods: map[types.UID]*v1.Pod{}, claims: map[types.UID][]*resourceapi.ResourceClaim{}}
}

func (w *victimsWorld) pod(name string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name)}}
	w.pods[p.UID] = p
	return p
}

// claim allocates the results to a claim reserved for the pods.
func (w *victimsWorld) claim(name string, results []resourceapi.DeviceRequestAllocationResult, pods ...*v1.Pod) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("claim-" + name)}}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
		w.claims[p.UID] = append(w.claims[p.UID], c)
	}
	return c
}

func (w *victimsWorld) claimsOf(p *v1.Pod) []*resourceapi.ResourceClaim { return w.claims[p.UID] }

func device(name string) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: "gpu.example.com", Pool: "node-a", Device: name}
}

func share(name string, id types.UID, memory string) resourceapi.DeviceRequestAllocationResult {
	r := device(name)
	r.ShareID = ptr.To(id)
	r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}
	return r
}

func stuck(p *v1.Pod, now time.Time) {
	p.DeletionTimestamp = &metav1.Time{Time: now.Add(-2 * margin)}
}

func names(state []*resourceapi.ResourceClaim) []string {
	out := []string{}
	for _, c := range state {
		out = append(out, c.Name)
	}
	return out
}

// A claim is freed when every pod it is reserved for is removed and one
// of them is not stuck; claims of other consumers, and unallocated ones,
// are never freed.
func TestVictimsFrees(t *testing.T) {
	now := time.Now()
	for name, tc := range map[string]struct {
		build  func(w *victimsWorld) (*resourceapi.ResourceClaim, []*v1.Pod)
		frees  bool
		reason string
	}{
		"its pod removed": {frees: true, build: func(w *victimsWorld) (*resourceapi.ResourceClaim, []*v1.Pod) {
			a := w.pod("a")
			return w.claim("c", []resourceapi.DeviceRequestAllocationResult{device("gpu-0")}, a), []*v1.Pod{a}
		}},
		"shared with a pod that stays": {build: func(w *victimsWorld) (*resourceapi.ResourceClaim, []*v1.Pod) {
			a, b := w.pod("a"), w.pod("b")
			return w.claim("c", []resourceapi.DeviceRequestAllocationResult{device("gpu-0")}, a, b), []*v1.Pod{a}
		}},
		"shared, both removed": {frees: true, build: func(w *victimsWorld) (*resourceapi.ResourceClaim, []*v1.Pod) {
			a, b := w.pod("a"), w.pod("b")
			return w.claim("c", []resourceapi.DeviceRequestAllocationResult{device("gpu-0")}, a, b), []*v1.Pod{a, b}
		}},
		"its only pod stuck": {build: func(w *victimsWorld) (*resourceapi.ResourceClaim, []*v1.Pod) {
			a := w.pod("a")
			stuck(a, now)
			return w.claim("c", []resourceapi.DeviceRequestAllocationResult{device("gpu-0")}, a), []*v1.Pod{a}
		}},
		"one pod stuck, one going": {frees: true, build: func(w *victimsWorld) (*resourceapi.ResourceClaim, []*v1.Pod) {
			a, b := w.pod("a"), w.pod("b")
			stuck(a, now)
			return w.claim("c", []resourceapi.DeviceRequestAllocationResult{device("gpu-0")}, a, b), []*v1.Pod{a, b}
		}},
		"reserved for a pod group too": {build: func(w *victimsWorld) (*resourceapi.ResourceClaim, []*v1.Pod) {
			a := w.pod("a")
			c := w.claim("c", []resourceapi.DeviceRequestAllocationResult{device("gpu-0")}, a)
			c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{APIGroup: "scheduling.k8s.io", Resource: "podgroups", Name: "g", UID: "g"})
			return c, []*v1.Pod{a}
		}},
		"not allocated": {build: func(w *victimsWorld) (*resourceapi.ResourceClaim, []*v1.Pod) {
			a := w.pod("a")
			c := w.claim("c", nil, a)
			c.Status.Allocation = nil
			return c, []*v1.Pod{a}
		}},
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld()
			claim, removed := tc.build(w)
			v := NewVictims(margin, true)
			pods := map[types.UID]*v1.Pod{}
			for _, p := range removed {
				pods[p.UID] = p
			}
			v.Remove(pods, w.claimsOf, now)
			if got := v.Frees(claim, now); got != tc.frees {
				t.Errorf("Frees %v, want %v", got, tc.frees)
			}
			want := []string{}
			if tc.frees {
				want = []string{claim.Name}
			}
			if diff := cmp.Diff(want, names(v.Freed())); diff != "" {
				t.Errorf("freed (-want +got):\n%s", diff)
			}
		})
	}
}

// What is freed, kept as pods are removed and put back in any order, is
// what counting from scratch gives, shares of one device and admin access
// among them.
func TestVictimsIncremental(t *testing.T) {
	now := time.Now()
	w := newWorld()
	var pods []*v1.Pod
	for i := range 8 {
		pods = append(pods, w.pod(fmt.Sprintf("p%d", i)))
	}
	stuck(pods[7], now)
	admin := device("gpu-9")
	admin.AdminAccess = ptr.To(true)
	claims := []*resourceapi.ResourceClaim{
		w.claim("own-0", []resourceapi.DeviceRequestAllocationResult{device("gpu-0")}, pods[0]),
		w.claim("shared-01", []resourceapi.DeviceRequestAllocationResult{device("gpu-1"), device("gpu-2")}, pods[0], pods[1]),
		w.claim("share-a", []resourceapi.DeviceRequestAllocationResult{share("gpu-3", "a", "10Gi")}, pods[2]),
		w.claim("share-b", []resourceapi.DeviceRequestAllocationResult{share("gpu-3", "b", "20Gi")}, pods[3]),
		w.claim("admin", []resourceapi.DeviceRequestAllocationResult{admin}, pods[4]),
		w.claim("stuck-and-5", []resourceapi.DeviceRequestAllocationResult{device("gpu-5")}, pods[5], pods[7]),
		w.claim("stuck-only", []resourceapi.DeviceRequestAllocationResult{device("gpu-6")}, pods[7]),
		w.claim("three", []resourceapi.DeviceRequestAllocationResult{device("gpu-7")}, pods[1], pods[5], pods[6]),
	}
	v := NewVictims(margin, true)
	scratch := func() (structured.AllocatedState, []string) {
		s := NewAllocatedState()
		freed := []string{}
		for _, c := range claims {
			if v.Frees(c, now) {
				AddAllocation(&s, c.Status.Allocation, true)
				freed = append(freed, c.Name)
			}
		}
		slices.Sort(freed)
		return s, freed
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for step := range 500 {
		p := pods[rng.IntN(len(pods))]
		if rng.IntN(2) == 0 {
			v.Remove(map[types.UID]*v1.Pod{p.UID: p}, w.claimsOf, now)
		} else {
			v.Restore(p.UID, now)
		}
		want, wantFreed := scratch()
		if diff := cmp.Diff(wantFreed, sortedNames(v.Freed())); diff != "" {
			t.Fatalf("step %d: freed claims (-scratch +kept):\n%s", step, diff)
		}
		if diff := cmp.Diff(want, v.FreedState()); diff != "" {
			t.Fatalf("step %d: freed devices (-scratch +kept):\n%s", step, diff)
		}
	}
	// With all removed, the stuck pod's own claim is not freed, and the
	// claim with admin access is, but it frees no device.
	all := map[types.UID]*v1.Pod{}
	for _, p := range pods {
		all[p.UID] = p
	}
	v.Remove(all, w.claimsOf, now)
	if diff := cmp.Diff([]string{"admin", "own-0", "share-a", "share-b", "shared-01", "stuck-and-5", "three"}, sortedNames(v.Freed())); diff != "" {
		t.Errorf("all removed: freed (-want +got):\n%s", diff)
	}
	freed := v.FreedState()
	if freed.AllocatedDevices.Has(structured.MakeDeviceID("gpu.example.com", "node-a", "gpu-9")) || freed.AllocatedDevices.Has(structured.MakeDeviceID("gpu.example.com", "node-a", "gpu-6")) {
		t.Errorf("all removed: frees %v, want neither the admin's gpu-9 nor the stuck pod's gpu-6", freed.AllocatedDevices.UnsortedList())
	}
	if got := freed.AllocatedSharedDeviceIDs.Len(); got != 2 {
		t.Errorf("all removed: %d shares of gpu-3 freed, want 2", got)
	}
}

func sortedNames(claims []*resourceapi.ResourceClaim) []string {
	out := names(claims)
	slices.Sort(out)
	return out
}

// A clone's edits leave the Victims it was cloned from as it was; Restore
// of a pod that was not removed changes nothing.
func TestVictimsClone(t *testing.T) {
	now := time.Now()
	w := newWorld()
	a, b := w.pod("a"), w.pod("b")
	w.claim("ca", []resourceapi.DeviceRequestAllocationResult{device("gpu-0")}, a)
	w.claim("cb", []resourceapi.DeviceRequestAllocationResult{device("gpu-1")}, b)
	v := NewVictims(margin, false)
	v.Remove(map[types.UID]*v1.Pod{a.UID: a, b.UID: b}, w.claimsOf, now)

	c := v.Clone()
	if !c.Restore(a.UID, now) {
		t.Fatal("Restore of a removed pod: false")
	}
	c.Remove(map[types.UID]*v1.Pod{"x": {ObjectMeta: metav1.ObjectMeta{Name: "x", UID: "x"}}}, w.claimsOf, now)
	if diff := cmp.Diff([]string{"cb"}, names(c.Freed())); diff != "" {
		t.Errorf("clone (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"ca", "cb"}, names(v.Freed())); diff != "" {
		t.Errorf("original after the clone's edits (-want +got):\n%s", diff)
	}
	if got := len(v.Removed()); got != 2 {
		t.Errorf("original has %d removed pods, want 2", got)
	}
	if got := v.FreedState().AllocatedDevices.Len(); got != 2 {
		t.Errorf("original frees %d devices, want 2", got)
	}
	if c.Restore("nobody", now) {
		t.Error("Restore of a pod that was not removed: true")
	}
}

// A pod is stuck once it has terminated for longer than margin past its
// deletion timestamp (the end of its grace period); a pod that is not
// terminating never is.
func TestStuck(t *testing.T) {
	now := time.Now()
	pod := &v1.Pod{}
	if Stuck(pod, margin, now) || !StuckFrom(pod, margin).IsZero() {
		t.Error("a running pod is stuck")
	}
	pod.DeletionTimestamp = &metav1.Time{Time: now.Add(-margin / 2)}
	if Stuck(pod, margin, now) {
		t.Error("stuck within the margin")
	}
	if got, want := StuckFrom(pod, margin), pod.DeletionTimestamp.Add(margin); !got.Equal(want) {
		t.Errorf("StuckFrom %v, want %v", got, want)
	}
	if !Stuck(pod, margin, now.Add(margin)) {
		t.Error("not stuck after the margin")
	}
}
