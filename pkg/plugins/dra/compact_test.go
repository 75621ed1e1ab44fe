package dra

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/randfill"

	"github.com/drasched/drasched/internal/kwokcluster"
)

// fleetSlices are the ResourceSlices of the kwok fleet on nodes (at least
// one of each kind), as the GPU driver publishes them, with the
// managedFields entry that the API server adds.
func fleetSlices(tb testing.TB, nodes int) []*resourceapi.ResourceSlice {
	tb.Helper()
	_, slices, err := kwokcluster.FleetSlices(context.Background(), "../../../config/inventory", "node", nodes)
	if err != nil {
		tb.Fatal(err)
	}
	// Decoded, as the informer's are (and so in every minor: 1.37 hides
	// FieldsV1's bytes behind NewFieldsV1, which 1.35 lacks).
	fields := &metav1.FieldsV1{}
	if err := fields.UnmarshalJSON([]byte(`{"f:spec":{"f:devices":{}}}`)); err != nil {
		tb.Fatal(err)
	}
	for _, slice := range slices {
		slice.ManagedFields = []metav1.ManagedFieldsEntry{{
			Manager: "gpu-kubelet-plugin", Operation: metav1.ManagedFieldsOperationUpdate,
			APIVersion: "resource.k8s.io/v1", FieldsType: "FieldsV1",
			FieldsV1: fields.DeepCopy(),
		}}
	}
	return slices
}

// The compacted slice is the slice without its managedFields, for the
// fleet's slices (counters and MIG devices among them) and for random
// ones, and compacting it again changes nothing.
func TestCompactSlice(t *testing.T) {
	slices := fleetSlices(t, 10)
	filler := randfill.NewWithSeed(1).NilChance(0.2).NumElements(0, 4)
	for range 200 {
		var slice resourceapi.ResourceSlice
		filler.Fill(&slice)
		slices = append(slices, &slice)
	}
	for _, slice := range slices {
		want := slice.DeepCopy()
		want.ManagedFields = nil
		got, err := compactSlice(slice.DeepCopy())
		if err != nil {
			t.Fatalf("slice %s: %v", slice.Name, err)
		}
		if !apiequality.Semantic.DeepEqual(want, got) {
			t.Fatalf("slice %s compacted (-want +got):\n%s", slice.Name, cmp.Diff(want, got))
		}
		again, err := compactSlice(got.(*resourceapi.ResourceSlice).DeepCopy())
		if err != nil {
			t.Fatalf("slice %s: %v", slice.Name, err)
		}
		if !apiequality.Semantic.DeepEqual(got, again) {
			t.Fatalf("slice %s compacted twice (-once +twice):\n%s", slice.Name, cmp.Diff(got, again))
		}
	}
}

// Two nodes' slices, compacted each on its own as the informer does,
// share the memory of their equal names and values.
func TestCompactSliceShares(t *testing.T) {
	slices := fleetSlices(t, 20)
	a, b := slices[0], slices[1]
	if a.Spec.NodeName == nil || b.Spec.NodeName == nil || *a.Spec.NodeName == *b.Spec.NodeName {
		t.Fatalf("want the slices of two nodes, got %s and %s", a.Name, b.Name)
	}
	for _, slice := range []*resourceapi.ResourceSlice{a, b} {
		if _, err := compactSlice(slice); err != nil {
			t.Fatal(err)
		}
	}
	same := func(what, x, y string) {
		t.Helper()
		if x != y {
			t.Fatalf("%s: %q and %q differ", what, x, y)
		}
		if unsafe.StringData(x) != unsafe.StringData(y) {
			t.Errorf("%s %q: two copies", what, x)
		}
	}
	da, db := a.Spec.Devices[0], b.Spec.Devices[0]
	same("driver", a.Spec.Driver, b.Spec.Driver)
	same("device name", da.Name, db.Name)
	keys := func(m map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) map[string]string {
		out := map[string]string{}
		for k := range m {
			out[string(k)] = string(k)
		}
		return out
	}
	ka, kb := keys(da.Attributes), keys(db.Attributes)
	for name, x := range ka {
		same("attribute name", x, kb[name])
	}
	product := resourceapi.QualifiedName("productName")
	if da.Attributes[product].StringValue == nil {
		t.Fatalf("device %s has no attribute %s", da.Name, product)
	}
	same("attribute value", *da.Attributes[product].StringValue, *db.Attributes[product].StringValue)
	for name, attribute := range da.Attributes {
		other := db.Attributes[name]
		switch {
		case attribute.StringValue != nil && *attribute.StringValue == *other.StringValue && attribute.StringValue != other.StringValue,
			attribute.VersionValue != nil && *attribute.VersionValue == *other.VersionValue && attribute.VersionValue != other.VersionValue,
			attribute.IntValue != nil && *attribute.IntValue == *other.IntValue && attribute.IntValue != other.IntValue,
			attribute.BoolValue != nil && *attribute.BoolValue == *other.BoolValue && attribute.BoolValue != other.BoolValue:
			t.Errorf("attribute %s: equal values, two copies", name)
		}
	}
	uuid := resourceapi.QualifiedName("uuid")
	if *da.Attributes[uuid].StringValue == *db.Attributes[uuid].StringValue {
		t.Errorf("two GPUs have the UUID %s", *da.Attributes[uuid].StringValue)
	}
	if len(da.Capacity) == 0 || reflect.ValueOf(da.Capacity).UnsafePointer() != reflect.ValueOf(db.Capacity).UnsafePointer() {
		t.Errorf("the equal capacities of two H100s are two maps: %v, %v", da.Capacity, db.Capacity)
	}
	// The A100s' memory slices: counter sets and what MIG devices consume.
	var counters []map[string]resourceapi.Counter
	for _, slice := range slices {
		if len(slice.Spec.SharedCounters) > 0 {
			if _, err := compactSlice(slice); err != nil {
				t.Fatal(err)
			}
			counters = append(counters, slice.Spec.SharedCounters[0].Counters)
		}
	}
	if len(counters) < 2 || reflect.ValueOf(counters[0]).UnsafePointer() != reflect.ValueOf(counters[1]).UnsafePointer() {
		t.Errorf("the equal counter sets of two A100s are not one map (%d sets)", len(counters))
	}
}

// Maps whose values print alike but differ (1000m and 1) are not shared:
// a slice keeps its own values exactly as decoded.
func TestCompactSliceSharesEqualMapsOnly(t *testing.T) {
	device := func(memory string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Devices: []resourceapi.Device{{
			Name:     "gpu-0",
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse(memory)}},
		}}}}
	}
	a, b := device("1000m"), device("1")
	ma, mb := a.Spec.Devices[0].Capacity["memory"].Value, b.Spec.Devices[0].Capacity["memory"].Value
	if ma.String() != mb.String() {
		t.Fatal("want two quantities that print alike")
	}
	want := b.DeepCopy()
	for _, slice := range []*resourceapi.ResourceSlice{a, b} {
		if _, err := compactSlice(slice); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(want, b) {
		t.Errorf("the second slice took the first one's capacity (-want +got):\n%s", cmp.Diff(want, b))
	}
}

// Informers of several schedulers in one process compact at once, while
// readers use slices compacted before: under -race this fails if the
// transform writes into anything another slice can share.
func TestCompactSliceConcurrent(t *testing.T) {
	fleet := fleetSlices(t, 20)
	var done []*resourceapi.ResourceSlice
	for _, slice := range fleet {
		compacted, err := compactSlice(slice.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		done = append(done, compacted.(*resourceapi.ResourceSlice))
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for _, slice := range fleet {
				if _, err := compactSlice(slice.DeepCopy()); err != nil {
					t.Error(err)
				}
			}
		})
		wg.Go(func() {
			for _, slice := range done {
				for _, device := range slice.Spec.Devices {
					for _, attribute := range device.Attributes {
						if attribute.StringValue != nil {
							_ = len(*attribute.StringValue)
						}
						if attribute.IntValue != nil {
							_ = *attribute.IntValue
						}
					}
					for _, capacity := range device.Capacity {
						_ = capacity.Value.Value()
					}
				}
				for _, set := range slice.Spec.SharedCounters {
					for _, counter := range set.Counters {
						_ = counter.Value.Value()
					}
				}
			}
		})
	}
	wg.Wait()
	for i, slice := range done {
		want := fleet[i].DeepCopy()
		want.ManagedFields = nil
		if !apiequality.Semantic.DeepEqual(want, slice) {
			t.Fatalf("slice %s changed while others were compacted (-want +got):\n%s", slice.Name, cmp.Diff(want, slice))
		}
	}
}

// A full table starts over: what it returns is still the value asked for,
// and it never holds more than its limit.
func TestTableStartsOver(t *testing.T) {
	tbl := table[int, *int]{limit: 4}
	for round := range 3 {
		for i := range 10 {
			value := i
			got := tbl.share(i, nil, func() *int { return &value })
			if *got != i {
				t.Fatalf("round %d: share(%d) = %d", round, i, *got)
			}
			if len(tbl.entries) > tbl.limit {
				t.Fatalf("round %d: %d entries, limit %d", round, len(tbl.entries), tbl.limit)
			}
		}
	}
	// The last ones asked for are shared.
	nine := 9
	if got := tbl.share(9, nil, func() *int { return &nine }); got == &nine {
		t.Error("9 was just shared, got a new copy")
	}
}

// Objects other than slices pass as they are: tombstones never reach a
// transform, but another informer's objects could.
func TestCompactSliceOthers(t *testing.T) {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}}}
	tombstone := cache.DeletedFinalStateUnknown{Key: "slice", Obj: &resourceapi.ResourceSlice{}}
	for _, obj := range []any{node, tombstone, nil} {
		got, err := compactSlice(obj)
		if err != nil {
			t.Fatal(err)
		}
		if !apiequality.Semantic.DeepEqual(got, obj) {
			t.Errorf("%T changed: %v", obj, got)
		}
	}
	if len(node.ManagedFields) != 1 {
		t.Errorf("the node lost its managedFields")
	}
}

// The informer's copies are compacted; on an informer that runs already
// compactSlices says so and changes nothing.
func TestCompactSlicesInformer(t *testing.T) {
	slice := fleetSlices(t, 1)[0]
	client := fake.NewClientset(slice.DeepCopy())
	factory := informers.NewSharedInformerFactory(client, 0)
	informer := factory.Resource().V1().ResourceSlices().Informer()
	if err := compactSlices(informer); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		factory.Shutdown()
	}()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("informer did not sync")
	}
	cached, err := factory.Resource().V1().ResourceSlices().Lister().Get(slice.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(cached.ManagedFields) != 0 {
		t.Errorf("cached slice has managedFields %v", cached.ManagedFields)
	}
	want := slice.DeepCopy()
	want.ManagedFields = nil
	if !apiequality.Semantic.DeepEqual(want, cached) {
		t.Errorf("cached slice (-want +got):\n%s", cmp.Diff(want, cached))
	}
	if err := compactSlices(informer); err == nil || !strings.Contains(err.Error(), "already started") {
		t.Errorf("compactSlices on a running informer: got %v, want an error that it has started", err)
	}
}

// BenchmarkSliceMemory measures the live heap that the ResourceSlices of
// the kwok fleet on 1,000 nodes take once decoded from protobuf, as an
// informer decodes them, as decoded and compacted (B/device).
//
//	go test ./pkg/plugins/dra -run '^$' -bench BenchmarkSliceMemory -benchtime 3x
func BenchmarkSliceMemory(b *testing.B) {
	var raw [][]byte
	devices := 0
	for _, slice := range fleetSlices(b, 1000) {
		data, err := slice.Marshal()
		if err != nil {
			b.Fatal(err)
		}
		raw = append(raw, data)
		devices += len(slice.Spec.Devices)
	}
	for _, compact := range []bool{false, true} {
		b.Run(fmt.Sprintf("compact=%v", compact), func(b *testing.B) {
			var retained uint64
			for b.Loop() {
				before := liveHeap()
				slices := make([]*resourceapi.ResourceSlice, len(raw))
				for i, data := range raw {
					slices[i] = &resourceapi.ResourceSlice{}
					if err := slices[i].Unmarshal(data); err != nil {
						b.Fatal(err)
					}
					if compact {
						if _, err := compactSlice(slices[i]); err != nil {
							b.Fatal(err)
						}
					}
				}
				if after := liveHeap(); after > before {
					retained += after - before
				}
				runtime.KeepAlive(slices)
			}
			b.ReportMetric(float64(retained)/float64(b.N)/float64(devices), "B/device")
		})
	}
}

// liveHeap is the live heap after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var stats runtime.MemStats
	runtime.ReadMemStats(&stats)
	return stats.HeapAlloc
}
