package tracker

import (
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Nomination is a preemptor's claim nomination (KEP-5690): the devices
// that its preemption freed for it on the node it was nominated to. Until
// the nomination ends, every other pod of its priority or lower counts
// those devices as in use; the nominee itself sees them as free once its
// victims' claims are gone, and takes them.
//
// A Nomination is immutable once added.
type Nomination struct {
	// Pod is the nominee, by UID; Namespace and Name name it.
	Pod             types.UID
	Namespace, Name string
	// Group is the nominee's PodGroup ("namespace/name"), if pod-group
	// preemption nominated it with the other pods of the group: their
	// nominations are held as one, and when one can no longer be honoured
	// they all end.
	Group string
	// Node is the node the pod is nominated to.
	Node string
	// Priority is the nominee's priority: pods of higher priority do not
	// count the nomination, as the scheduler lets them take any resources
	// freed for a nominee of lower priority.
	Priority int32
	// Allocations are what the nominee's claims get on Node, as
	// preemption's dry run found them after removing the victims.
	Allocations []resourceapi.AllocationResult
	// Victims are the allocated claims that the evicted pods free: the
	// nominee waits for them, and only for them.
	Victims []VictimClaim
	// VictimPods are the evicted pods, by UID. As consumers of a victim's
	// claim they do not hold it, even while the pod informer still shows
	// them running: preemption deletes them after it nominated the pod,
	// and the nominee's next cycle may come before the informer hears of
	// the deletion. If a deletion fails, the nominee waits until Expires.
	VictimPods []types.UID
	// Expires is when the nomination ends unless it ended before: the
	// victims' termination grace period plus a margin after it was made.
	Expires time.Time
}

// VictimClaim is a claim that a preemption's victims free, as it was when
// the victims were chosen.
type VictimClaim struct {
	UID             types.UID
	Namespace, Name string
	// Allocation is the claim's allocation then.
	Allocation *resourceapi.AllocationResult
}

// EndReason says why a nomination ended.
type EndReason string

const (
	// EndBound: the nominee was bound (or its devices written).
	EndBound EndReason = "Bound"
	// EndPodGone: the nominee was deleted.
	EndPodGone EndReason = "PodGone"
	// EndRenominated: preemption nominated the pod again, to this node or
	// another.
	EndRenominated EndReason = "Renominated"
	// EndLost: the pod is no longer nominated to the node: the scheduler
	// cleared its nomination (a preemptor of higher priority did).
	EndLost EndReason = "NominationLost"
	// EndUnusable: the nomination can no longer be honoured: a pod of
	// higher priority took a nominated device, a victim's claim gained a
	// consumer, a nominated device is held by a claim that is not a
	// victim's, or the victims are gone and the pod still does not fit.
	EndUnusable EndReason = "Unusable"
	// EndExpired: the victims did not go within the bound.
	EndExpired EndReason = "Expired"
)

// endsGroup: a nomination that ends for this reason ends those of the
// nominee's PodGroup too. A bound or deleted pod leaves the others of its
// group their devices; a group whose nomination cannot be honoured, or
// expired, preempts again as a whole.
func (r EndReason) endsGroup() bool {
	return r == EndUnusable || r == EndExpired || r == EndLost
}

// NominationOptions configure Nominations.
type NominationOptions struct {
	// Ended is called, without locks held, for every nomination that
	// ends, with the reason: for metrics and, for expired ones, to
	// requeue the pods that wait for devices. Optional.
	Ended func(n *Nomination, reason EndReason)
	// Clock times expiry; the real clock if nil.
	Clock clock.WithDelayedExecution
}

// Nominations holds the preemptors' nominated allocations, one per
// nominee. All methods are safe for concurrent use.
type Nominations struct {
	clock clock.WithDelayedExecution
	ended func(*Nomination, EndReason)

	// mutex guards byPod.
	mutex sync.Mutex
	byPod map[types.UID]*nominated
}

type nominated struct {
	*Nomination
	timer clock.Timer
}

// NewNominations returns an empty store.
func NewNominations(opts NominationOptions) *Nominations {
	n := &Nominations{clock: opts.Clock, ended: opts.Ended, byPod: map[types.UID]*nominated{}}
	if n.clock == nil {
		n.clock = clock.RealClock{}
	}
	return n
}

// Add records a nomination; one the pod had before ends as Renominated.
// It ends by itself when it expires.
func (n *Nominations) Add(nom *Nomination) {
	var ended []*nominated
	n.mutex.Lock()
	if old := n.byPod[nom.Pod]; old != nil {
		ended = append(ended, old)
	}
	entry := &nominated{Nomination: nom}
	entry.timer = n.clock.AfterFunc(nom.Expires.Sub(n.clock.Now()), func() { n.expire(entry) })
	n.byPod[nom.Pod] = entry
	n.mutex.Unlock()
	n.finish(ended, EndRenominated, true)
}

// expire ends a nomination whose time is up, unless it ended or was
// replaced since. Its own timer has fired; the other timers of its group
// are left to fire and find their entries gone (a timer's callback must
// not stop timers: a fake clock runs it under its lock).
func (n *Nominations) expire(entry *nominated) {
	n.mutex.Lock()
	if n.byPod[entry.Pod] != entry {
		n.mutex.Unlock()
		return
	}
	ended := n.endLocked(entry.Pod, EndExpired)
	n.mutex.Unlock()
	n.finish(ended, EndExpired, false)
}

// Get returns the pod's nomination, nil if it has none.
func (n *Nominations) Get(pod types.UID) *Nomination {
	n.mutex.Lock()
	defer n.mutex.Unlock()
	if entry := n.byPod[pod]; entry != nil {
		return entry.Nomination
	}
	return nil
}

// List returns all nominations, in no particular order.
func (n *Nominations) List() []*Nomination {
	n.mutex.Lock()
	defer n.mutex.Unlock()
	out := make([]*Nomination, 0, len(n.byPod))
	for _, entry := range n.byPod {
		out = append(out, entry.Nomination)
	}
	return out
}

// Len returns how many nominations there are.
func (n *Nominations) Len() int {
	n.mutex.Lock()
	defer n.mutex.Unlock()
	return len(n.byPod)
}

// End ends the pod's nomination, if it has one, and for reasons that end
// groups those of its PodGroup too. It reports whether the pod had one.
func (n *Nominations) End(pod types.UID, reason EndReason) bool {
	n.mutex.Lock()
	ended := n.endLocked(pod, reason)
	n.mutex.Unlock()
	n.finish(ended, reason, true)
	return len(ended) > 0
}

// EndIf ends the pod's nomination for the reason if it is still the given
// one: a check that found it unusable does not end a nomination made since.
func (n *Nominations) EndIf(nom *Nomination, reason EndReason) bool {
	n.mutex.Lock()
	if entry := n.byPod[nom.Pod]; entry == nil || entry.Nomination != nom {
		n.mutex.Unlock()
		return false
	}
	ended := n.endLocked(nom.Pod, reason)
	n.mutex.Unlock()
	n.finish(ended, reason, true)
	return true
}

func (n *Nominations) endLocked(pod types.UID, reason EndReason) []*nominated {
	entry := n.byPod[pod]
	if entry == nil {
		return nil
	}
	delete(n.byPod, pod)
	ended := []*nominated{entry}
	if entry.Group != "" && reason.endsGroup() {
		for uid, other := range n.byPod {
			if other.Group == entry.Group {
				delete(n.byPod, uid)
				ended = append(ended, other)
			}
		}
	}
	return ended
}

// finish stops the timers of ended nominations (unless called from a
// timer) and reports them, without the lock.
func (n *Nominations) finish(ended []*nominated, reason EndReason, stop bool) {
	for _, entry := range ended {
		if stop {
			entry.timer.Stop()
		}
		if n.ended != nil {
			n.ended(entry.Nomination, reason)
		}
	}
}
