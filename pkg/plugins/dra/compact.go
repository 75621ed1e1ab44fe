package dra

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"unique"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/tools/cache"
)

// compactSlices makes the scheduler's copies of ResourceSlices smaller:
// the shared informer's transform drops their managedFields, which no
// scheduler reads, and makes equal parts of devices one copy, shared by all
// the slices that have them: names and string values (interned), the
// values of attributes (a GPU's model, index or NUMA node), and whole
// capacity and counter maps (every H100 has the same capacity, every A100
// the same memory slices). The slices are the largest objects a DRA
// scheduler holds; on the kwok benchmark's fleet this keeps a third less
// of them (BenchmarkSliceMemory).
//
// Sharing is safe because an informer's objects are read-only to everyone:
// the scheduler's listers hand the same object to every plugin and every
// goroutine, so a writer would race with all the readers of that slice
// already, shared parts or not; whoever needs to change one (the
// ResourceSlice tracker adding the taints of DeviceTaintRules) works on a
// DeepCopy, which copies the shared parts too.
//
// A transform can only be set before the informer starts; on one that has
// started (a scheduler whose informers run before its profiles are built)
// the slices stay as decoded and this says why.
func compactSlices(informer cache.SharedIndexInformer) error {
	if err := informer.SetTransform(compactSlice); err != nil {
		return fmt.Errorf("compact the ResourceSlices in the scheduler's cache: %w", err)
	}
	return nil
}

// compactSlice is compactSlices' transform. It changes the slice in place,
// which client-go allows: a transform sees a decoded object before anyone
// else. It never writes through a pointer or into a map of the slice (those
// may be shared with other slices once compacted): it replaces them. It is
// idempotent, as a transform must be, and leaves other objects alone.
func compactSlice(obj any) (any, error) {
	slice, ok := obj.(*resourceapi.ResourceSlice)
	if !ok {
		return obj, nil
	}
	slice.ManagedFields = nil
	spec := &slice.Spec
	spec.Driver = intern(spec.Driver)
	for i := range spec.SharedCounters {
		set := &spec.SharedCounters[i]
		set.Name = intern(set.Name)
		set.Counters = sharedCounters.share(set.Counters)
	}
	for i := range spec.Devices {
		device := &spec.Devices[i]
		device.Name = intern(device.Name)
		device.Attributes = shareAttributes(device.Attributes)
		device.Capacity = sharedCapacities.share(device.Capacity)
		for j := range device.ConsumesCounters {
			consumed := &device.ConsumesCounters[j]
			consumed.CounterSet = intern(consumed.CounterSet)
			consumed.Counters = sharedCounters.share(consumed.Counters)
		}
	}
	return slice, nil
}

// intern returns the process's one copy of s. unique drops its entry once
// no string refers to it, so names of devices that are gone are not kept.
func intern(s string) string {
	if s == "" {
		return s
	}
	return unique.Make(s).Value()
}

// internKeys returns a copy of m with interned keys, sized for its entries
// (a decoded map has grown one entry at a time).
func internKeys[K ~string, V any](m map[K]V) map[K]V {
	if len(m) == 0 {
		return m
	}
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[K(intern(string(k)))] = v
	}
	return out
}

// shareAttributes returns a copy of m with interned names whose values
// point to shared copies: the attribute maps themselves differ between
// devices (a GPU's UUID), most of their values do not.
func shareAttributes(m map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	if len(m) == 0 {
		return m
	}
	out := make(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, len(m))
	for name, attribute := range m {
		if p := attribute.IntValue; p != nil {
			attribute.IntValue = sharedInts.share(*p, nil, func() *int64 { return p })
		}
		if p := attribute.BoolValue; p != nil {
			attribute.BoolValue = sharedBools.share(*p, nil, func() *bool { return p })
		}
		if attribute.StringValue != nil {
			attribute.StringValue = shareString(attribute.StringValue)
		}
		if attribute.VersionValue != nil {
			attribute.VersionValue = shareString(attribute.VersionValue)
		}
		out[resourceapi.QualifiedName(intern(string(name)))] = attribute
	}
	return out
}

// shareString returns the shared pointer to an interned copy of *s.
func shareString(s *string) *string {
	value := intern(*s)
	return sharedStrings.share(value, nil, func() *string {
		p := new(string)
		*p = value
		return p
	})
}

// The tables of shared values. sharedCapacities and sharedCounters hold
// maps by the text of their entries (their text functions); the maps are
// compared whole before one is shared, so the text only has to tell most
// maps apart.
var (
	sharedInts       = table[int64, *int64]{limit: 1024}
	sharedBools      = table[bool, *bool]{limit: 2}
	sharedStrings    = table[string, *string]{limit: 1024}
	sharedCapacities = mapTable[resourceapi.QualifiedName, resourceapi.DeviceCapacity]{
		table: table[string, map[resourceapi.QualifiedName]resourceapi.DeviceCapacity]{limit: 256},
		text: func(c resourceapi.DeviceCapacity) (string, bool) {
			// A request policy is rare and has lists: not worth a text.
			return c.Value.String(), c.RequestPolicy == nil
		},
	}
	sharedCounters = mapTable[string, resourceapi.Counter]{
		table: table[string, map[string]resourceapi.Counter]{limit: 256},
		text:  func(c resourceapi.Counter) (string, bool) { return c.Value.String(), true },
	}
)

// A table keeps one value per key for sharing, at most limit of them:
// when full it starts over, which costs sharing (values met later get new
// copies) and never correctness. It holds its values strongly rather than
// weakly because most values that do not repeat (a GPU's UUID, its PCI
// address) would otherwise cost an entry each for as long as they live; so
// bounded, a table holds at most limit values of slices that are gone.
type table[K comparable, V any] struct {
	limit   int
	mutex   sync.Mutex
	entries map[K]V
}

// share returns the shared value of key if there is one and equal accepts
// it (nil: values of equal keys are equal); otherwise build's value, which
// becomes the shared one. build runs only then, so a value found costs no
// copy.
func (t *table[K, V]) share(key K, equal func(shared V) bool, build func() V) V {
	t.mutex.Lock()
	defer t.mutex.Unlock()
	if shared, ok := t.entries[key]; ok && (equal == nil || equal(shared)) {
		return shared
	}
	if t.entries == nil || len(t.entries) >= t.limit {
		t.entries = make(map[K]V, t.limit)
	}
	value := build()
	t.entries[key] = value
	return value
}

// A mapTable shares maps with equal entries, keyed by their sorted names
// and the text of their values.
type mapTable[K ~string, V any] struct {
	table table[string, map[K]V]
	// text is a value's text, false if maps with it are not shared.
	text func(V) (string, bool)
}

// share returns the shared map equal to m, m with interned keys if there
// is none (it becomes the shared one), or m's copy with interned keys if
// maps like it are not shared.
func (t *mapTable[K, V]) share(m map[K]V) map[K]V {
	if len(m) == 0 {
		return m
	}
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, string(name))
	}
	slices.Sort(names)
	var key strings.Builder
	for _, name := range names {
		text, ok := t.text(m[K(name)])
		if !ok {
			return internKeys(m)
		}
		key.WriteString(name)
		key.WriteByte('=')
		key.WriteString(text)
		key.WriteByte(0)
	}
	equal := func(shared map[K]V) bool { return reflect.DeepEqual(shared, m) }
	return t.table.share(key.String(), equal, func() map[K]V { return internKeys(m) })
}
