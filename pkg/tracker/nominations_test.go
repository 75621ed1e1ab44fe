package tracker

import (
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
)

// endings records the nominations that ended, as "pod reason".
type endings struct {
	mutex sync.Mutex
	ended []string
}

func (e *endings) record(n *Nomination, reason EndReason) {
	e.mutex.Lock()
	defer e.mutex.Unlock()
	e.ended = append(e.ended, string(n.Pod)+" "+string(reason))
}

func (e *endings) take() []string {
	e.mutex.Lock()
	defer e.mutex.Unlock()
	out := e.ended
	e.ended = nil
	slices.Sort(out)
	return out
}

func TestNominations(t *testing.T) {
	now := time.Now()
	clock := testingclock.NewFakeClock(now)
	var e endings
	n := NewNominations(NominationOptions{Ended: e.record, Clock: clock})
	nom := func(pod, group string, ttl time.Duration) *Nomination {
		return &Nomination{Pod: types.UID(pod), Name: pod, Group: group, Node: "node", Expires: now.Add(ttl)}
	}
	check := func(what string, want ...string) {
		t.Helper()
		if got := e.take(); !slices.Equal(got, want) {
			t.Errorf("%s: ended %q, want %q", what, got, want)
		}
	}

	first := nom("a", "", time.Minute)
	n.Add(first)
	n.Add(nom("b", "g", time.Hour))
	n.Add(nom("c", "g", time.Hour))
	n.Add(nom("d", "g", time.Hour))
	if n.Len() != 4 {
		t.Fatalf("%d nominations, want 4", n.Len())
	}
	check("added")

	// A new nomination of a pod replaces its old one.
	second := nom("a", "", 2*time.Minute)
	n.Add(second)
	check("renominated", "a Renominated")
	if n.EndIf(first, EndUnusable) {
		t.Errorf("EndIf ended the nomination that replaced the one it was given")
	}
	if got := n.Get("a"); got != second {
		t.Errorf("Get: %v, want the new nomination", got)
	}

	// The old nomination's expiry does not end the new one.
	clock.Step(90 * time.Second)
	check("the replaced nomination's expiry")
	clock.Step(time.Minute)
	check("the new nomination's expiry", "a Expired")
	if n.Get("a") != nil {
		t.Errorf("expired nomination still there")
	}

	// A bound member of a group leaves the others their nominations; one
	// that can no longer be honoured ends the group's.
	n.End("b", EndBound)
	check("member bound", "b Bound")
	n.End("c", EndUnusable)
	check("member unusable", "c Unusable", "d Unusable")
	if n.Len() != 0 {
		t.Errorf("%d nominations left, want none", n.Len())
	}
	if n.End("c", EndUnusable) {
		t.Errorf("End of a pod without a nomination reported one")
	}
	// Ended nominations no longer expire.
	clock.Step(2 * time.Hour)
	check("after the group's expiry")
}
