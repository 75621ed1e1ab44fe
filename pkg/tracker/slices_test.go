package tracker

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// shuffledLister lists its slices in a new random order on every call, as
// an informer's store does.
type shuffledLister struct {
	slices []*resourceapi.ResourceSlice
	err    error
}

func (l *shuffledLister) ListWithDeviceTaintRules() ([]*resourceapi.ResourceSlice, error) {
	if l.err != nil {
		return nil, l.err
	}
	list := slices.Clone(l.slices)
	rand.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })
	return list, nil
}

func makeSlices(n int) []*resourceapi.ResourceSlice {
	var list []*resourceapi.ResourceSlice
	for i := range n {
		list = append(list, &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("slice-%d", i)}})
	}
	return list
}

func TestSlicesStableOrder(t *testing.T) {
	lister := &shuffledLister{slices: makeSlices(20)}
	tr := &Tracker{sliceLister: lister}

	first, err := tr.Slices()
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		again, err := tr.Slices()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(first, again) {
			t.Fatal("the same slices were returned in a different order")
		}
	}

	// One more slice: a new list, with all of them.
	lister.slices = append(lister.slices, makeSlices(21)[20])
	grown, err := tr.Slices()
	if err != nil {
		t.Fatal(err)
	}
	if len(grown) != 21 {
		t.Fatalf("got %d slices after adding one, want 21", len(grown))
	}

	// A slice replaced by a new object (an update): same count, but the
	// new object must be returned, not the stale one.
	updated := lister.slices[3].DeepCopy()
	updated.ResourceVersion = "2"
	lister.slices[3] = updated
	after, err := tr.Slices()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(after, updated) {
		t.Fatal("the updated slice object is missing")
	}
	if slices.Contains(after, grown[slices.IndexFunc(grown, func(s *resourceapi.ResourceSlice) bool { return s.Name == updated.Name })]) {
		t.Fatal("the replaced slice object is still returned")
	}

	// Errors pass through and do not disturb the cached list.
	lister.err = errors.New("boom")
	if _, err := tr.Slices(); err == nil {
		t.Fatal("lister error was swallowed")
	}
	lister.err = nil
	again, err := tr.Slices()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(after, again) {
		t.Fatal("order changed after a failed list")
	}
}
