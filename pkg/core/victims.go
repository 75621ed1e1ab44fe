package core

import (
	"maps"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Victims is what evicting a set of pods frees: the edits of one state of
// preemption's dry run (or of pod-group preemption's simulation), as pods
// are removed and put back. A claim is freed once it is allocated and
// reserved only for removed pods, one of which is not stuck terminating;
// a claim shared with a pod that stays frees nothing. The freed devices
// are counted by AddAllocation, the rule by which the cycle counted them
// as taken, so partitionable devices give back exactly the victims'
// counters and consumable capacity, and admin access frees nothing.
//
// What is freed is kept as pods come and go, never recomputed from all
// removed pods: pod-group preemption removes thousands of candidate
// victims and then puts them back one by one. A Victims is not safe for
// concurrent use.
type Victims struct {
	// margin: a pod terminating for longer than its grace period and
	// margin is stuck (Stuck).
	margin time.Duration
	// consumableCapacity: the DRAConsumableCapacity feature, by which
	// AddAllocation counts shares.
	consumableCapacity bool

	// removed are the removed pods, by UID.
	removed map[types.UID]*v1.Pod
	// claims are the claims of each removed pod as they were when it was
	// removed, by pod UID.
	claims map[types.UID][]*resourceapi.ResourceClaim
	// freed are the claims that the removed pods free, by UID, and
	// freedState the devices they take.
	freed      map[types.UID]*resourceapi.ResourceClaim
	freedState structured.AllocatedState
	// shared: the maps and freedState are also another Victims', copied
	// before this one changes them (own).
	shared bool
}

// NewVictims returns an empty set of edits. margin is how long past its
// grace period a terminating pod may take before it counts as stuck;
// consumableCapacity whether DRAConsumableCapacity is on.
func NewVictims(margin time.Duration, consumableCapacity bool) *Victims {
	return &Victims{
		margin:             margin,
		consumableCapacity: consumableCapacity,
		removed:            map[types.UID]*v1.Pod{},
		claims:             map[types.UID][]*resourceapi.ResourceClaim{},
		freed:              map[types.UID]*resourceapi.ResourceClaim{},
		freedState:         NewAllocatedState(),
	}
}

// Clone returns a copy that shares the edits with v until it changes
// them: the framework clones a state for every Filter call on a node with
// nominated pods, and pod-group preemption's states hold thousands of
// victims. v itself must not change while the clone is in use (v keeps
// editing in place, so that putting thousands of victims back one by one
// copies nothing): the framework's clones live within one call on the
// state they were cloned from.
func (v *Victims) Clone() *Victims {
	c := *v
	c.shared = true
	return &c
}

// own copies the edits v shares with a clone, before v changes them.
func (v *Victims) own() {
	if !v.shared {
		return
	}
	v.removed, v.claims, v.freed = maps.Clone(v.removed), maps.Clone(v.claims), maps.Clone(v.freed)
	freedState := NewAllocatedState()
	AddState(&freedState, v.freedState)
	v.freedState, v.shared = freedState, false
}

// Remove takes pods off, each with its claims as claimsOf gives them now,
// and updates what the removed pods free at now.
func (v *Victims) Remove(pods map[types.UID]*v1.Pod, claimsOf func(*v1.Pod) []*resourceapi.ResourceClaim, now time.Time) {
	v.own()
	for uid, pod := range pods {
		v.removed[uid] = pod
		v.claims[uid] = claimsOf(pod)
	}
	for uid := range pods {
		v.update(v.claims[uid], now)
	}
}

// Restore puts back a pod that Remove took off; false (and nothing
// changed) if it was not removed.
func (v *Victims) Restore(uid types.UID, now time.Time) bool {
	if _, ok := v.removed[uid]; !ok {
		return false
	}
	v.own()
	claims := v.claims[uid]
	delete(v.removed, uid)
	delete(v.claims, uid)
	v.update(claims, now)
	return true
}

// update adds the claims that the removed pods now free to the freed ones,
// and takes out those they no longer free.
func (v *Victims) update(claims []*resourceapi.ResourceClaim, now time.Time) {
	for _, claim := range claims {
		frees := v.Frees(claim, now)
		old, freed := v.freed[claim.UID]
		switch {
		case frees && !freed:
			v.freed[claim.UID] = claim
			AddAllocation(&v.freedState, claim.Status.Allocation, v.consumableCapacity)
		case !frees && freed:
			delete(v.freed, claim.UID)
			RemoveAllocation(&v.freedState, old.Status.Allocation, v.consumableCapacity)
		}
	}
}

// Frees reports whether the claim is allocated and reserved only for
// removed pods, so the claim controller deallocates (or deletes) it once
// they are gone, and one of them is not stuck terminating at now.
func (v *Victims) Frees(claim *resourceapi.ResourceClaim, now time.Time) bool {
	if claim.Status.Allocation == nil || len(claim.Status.ReservedFor) == 0 {
		return false
	}
	going := false
	for _, consumer := range claim.Status.ReservedFor {
		if consumer.APIGroup != "" || consumer.Resource != "pods" {
			return false
		}
		pod, ok := v.removed[consumer.UID]
		if !ok {
			return false
		}
		going = going || !Stuck(pod, v.margin, now)
	}
	return going
}

// Removed returns the removed pods, by UID; the caller must not change
// the map.
func (v *Victims) Removed() map[types.UID]*v1.Pod {
	if v == nil {
		return nil
	}
	return v.removed
}

// Freed returns the claims that the removed pods free, in UID order.
func (v *Victims) Freed() []*resourceapi.ResourceClaim {
	if v == nil {
		return nil
	}
	uids := slices.Sorted(maps.Keys(v.freed))
	freed := make([]*resourceapi.ResourceClaim, 0, len(uids))
	for _, uid := range uids {
		freed = append(freed, v.freed[uid])
	}
	return freed
}

// FreedState returns the devices, shares and capacity that the freed
// claims take; the caller must not change it, and it changes with the
// next Remove or Restore.
func (v *Victims) FreedState() structured.AllocatedState {
	return v.freedState
}

// Stuck reports whether the pod has been terminating for longer than its
// grace period and margin at now (StuckFrom). Evicting it again frees nothing that
// will come: whatever holds it (a kubelet that is gone, a finalizer)
// holds its devices too, so preemption must find other victims instead of
// waiting for it again.
func Stuck(pod *v1.Pod, margin time.Duration, now time.Time) bool {
	from := StuckFrom(pod, margin)
	return !from.IsZero() && now.After(from)
}

// StuckFrom is when a terminating pod counts as stuck: margin after its
// deletion timestamp, which the API server sets to the end of the grace
// period; zero if the pod is not terminating.
func StuckFrom(pod *v1.Pod, margin time.Duration) time.Time {
	if pod.DeletionTimestamp == nil {
		return time.Time{}
	}
	return pod.DeletionTimestamp.Add(margin)
}
