package allocator

import (
	"hash/maphash"
	"reflect"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
)

// TestSharedSymmetry checks how the search tells shared GPUs apart: by
// what earlier cycles and the current assignment consume of them, not by
// attributes no claim looks at nor by which request holds a share; and
// that the memo sees states alike that differ only in that.
func TestSharedSymmetry(t *testing.T) {
	// gpu-0 and gpu-1 have 25Gi left, gpu-2 15Gi; each has an index of
	// its own.
	n := newGPUNode([]int{25, 25, 15}, share{1, 10}, share{1, 10})
	ctx, a, s := n.search(t)
	place := func(request, gpu int) *placement {
		t.Helper()
		p, err := s.allocateDevice(pos{request: request}, s.reqs[0][request][0], gpu, false)
		if err != nil || p == nil {
			t.Fatalf("request %d does not take gpu-%d: %v", request, gpu, err)
		}
		return p
	}
	expect := func(what string, a, b int, want bool) {
		t.Helper()
		if got := s.interchangeable(a, b); got != want {
			t.Errorf("%s: gpu-%d and gpu-%d interchangeable: %t, want %t", what, a, b, got, want)
		}
	}

	expect("before", 0, 1, true)
	expect("before", 0, 2, false)

	p0 := place(0, 0)
	expect("r0 on gpu-0", 0, 1, false)
	p1 := place(1, 1)
	expect("r0 on gpu-0, r1 on gpu-1", 0, 1, true)
	crossed := s.sharesHash()
	s.undo(p1)
	s.undo(p0)

	p1 = place(1, 0)
	p0 = place(0, 1)
	if got := s.sharesHash(); got != crossed {
		t.Error("the memo tells apart which request holds an equal share")
	}
	s.undo(p0)
	s.undo(p1)

	p0 = place(0, 0)
	p1 = place(1, 0)
	if got := s.sharesHash(); got == crossed {
		t.Error("the memo does not tell two shares on one GPU from one on each")
	}
	s.undo(p1)
	s.undo(p0)

	// A claim that looks at the index tells all GPUs apart.
	claim := n.claims[0].DeepCopy()
	claim.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{DistinctAttribute: ptr.To(resourceapi.FullyQualifiedName("gpu.example.com/index"))}}
	s2, err := a.newSearch(ctx, n.node, []*resourceapi.ResourceClaim{claim}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.release()
	if s2.interchangeable(0, 1) {
		t.Error("GPUs with a different index are interchangeable for a claim that looks at it")
	}
}

// TestWriteAttributeFields guards writeAttribute against a new field of
// DeviceAttribute that it would not write, which would make devices that
// differ in it interchangeable.
func TestWriteAttributeFields(t *testing.T) {
	known := []string{"IntValue", "BoolValue", "StringValue", "VersionValue"}
	if len(listAttributes()) > 0 {
		known = append(known, "IntValues", "BoolValues", "StringValues", "VersionValues")
	}
	typ := reflect.TypeFor[resourceapi.DeviceAttribute]()
	var fields []string
	for i := range typ.NumField() {
		fields = append(fields, typ.Field(i).Name)
	}
	if !slices.Equal(sets.List(sets.New(fields...)), sets.List(sets.New(known...))) {
		t.Errorf("DeviceAttribute has fields %v, writeAttribute writes %v", fields, known)
	}

	// Attributes that differ in any way write differently.
	attrs := []*resourceapi.DeviceAttribute{
		nil,
		{},
		{StringValue: ptr.To("x")},
		{StringValue: ptr.To("y")},
		{VersionValue: ptr.To("x")},
		{IntValue: ptr.To(int64(0))},
		{BoolValue: ptr.To(false)},
		{BoolValue: ptr.To(true)},
	}
	attrs = append(attrs, listAttributes()...)
	seed := maphash.MakeSeed()
	seen := map[uint64]int{}
	for i, attr := range attrs {
		var h maphash.Hash
		h.SetSeed(seed)
		writeAttribute(&h, attr)
		if j, dup := seen[h.Sum64()]; dup {
			t.Errorf("attributes %d and %d write the same", j, i)
		}
		seen[h.Sum64()] = i
	}
}
