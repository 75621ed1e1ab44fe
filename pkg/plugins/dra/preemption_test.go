package dra

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/drasched/drasched/internal/builder"
)

// TestPreemptionsRecord: the victims of a preemptor on a node are those of
// its last attempt's dry run there, after the dry run reprieved pods; a
// new attempt replaces the old one and drops the attempts of pods that are
// no longer pending; forget drops the pod's.
func TestPreemptionsRecord(t *testing.T) {
	pod := func(name string) *v1.Pod {
		p := builder.MakePod(name).Obj()
		p.UID = types.UID(name)
		return p
	}
	preemptor, other := pod("preemptor"), pod("other")
	a, b, c := pod("a"), pod("b"), pod("c")
	pending := sets.New[types.UID](preemptor.UID, other.UID)
	isPending := func(_, _ string, uid types.UID) bool { return pending.Has(uid) }
	names := func(pods map[types.UID]*v1.Pod) []types.UID { return sets.List(sets.KeySet(pods)) }
	var p preemptions

	// The first attempt: DefaultPreemption removes a, b and c on node-1,
	// then reprieves b; on node-2 it removes a only.
	first := &filterResults{}
	d1 := (*dryRun)(nil).clone()
	for _, victim := range []*v1.Pod{a, b, c} {
		d1.removed[victim.UID] = victim
		p.record(preemptor, first, "node-1", d1, isPending)
	}
	delete(d1.removed, b.UID)
	d2 := (*dryRun)(nil).clone()
	d2.removed[a.UID] = a
	p.record(preemptor, first, "node-2", d2, isPending)
	p.record(other, &filterResults{}, "node-1", (*dryRun)(nil).clone(), isPending)

	if got, want := names(p.victims(preemptor.UID, "node-1")), []types.UID{"a", "c"}; !slices.Equal(got, want) {
		t.Errorf("victims on node-1: %v, want %v", got, want)
	}
	if got, want := names(p.victims(preemptor.UID, "node-2")), []types.UID{"a"}; !slices.Equal(got, want) {
		t.Errorf("victims on node-2: %v, want %v", got, want)
	}
	if got := p.victims(preemptor.UID, "node-3"); got != nil {
		t.Errorf("victims on a node without a dry run: %v, want none", got)
	}

	// A second attempt of the preemptor replaces the first; the other pod
	// was bound in between and is dropped.
	pending.Delete(other.UID)
	d3 := (*dryRun)(nil).clone()
	d3.removed[b.UID] = b
	p.record(preemptor, &filterResults{}, "node-2", d3, isPending)
	if got := p.victims(preemptor.UID, "node-1"); got != nil {
		t.Errorf("victims of the first attempt on node-1 after the second: %v, want none", got)
	}
	if got, want := names(p.victims(preemptor.UID, "node-2")), []types.UID{"b"}; !slices.Equal(got, want) {
		t.Errorf("victims on node-2 after the second attempt: %v, want %v", got, want)
	}
	if _, ok := p.byPod[other.UID]; ok {
		t.Errorf("the attempt of a pod that is no longer pending was kept")
	}

	p.forget(preemptor.UID)
	if got := p.victims(preemptor.UID, "node-2"); got != nil {
		t.Errorf("victims after forget: %v, want none", got)
	}
}
