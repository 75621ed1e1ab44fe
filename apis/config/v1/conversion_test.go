package v1

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/randfill"

	"github.com/drasched/drasched/apis/config"
)

func TestConversion(t *testing.T) {
	testCases := map[string]struct {
		versioned *StructuredDRAArgs
		internal  *config.StructuredDRAArgs
		// oneWay: only versioned -> internal; nil pointers have no internal
		// counterpart, so they come back as pointers to zero values.
		oneWay bool
	}{
		"every field set": {
			versioned: &StructuredDRAArgs{
				FilterTimeout:  duration(2 * time.Second),
				BindingTimeout: duration(5 * time.Minute),
				Allocator:      ptr.To(AllocatorUpstream),
				Scoring:        &ScoringArgs{DeviceStrategy: ptr.To(DeviceScoringLeastAllocated)},
				Allocation: &AllocationArgs{
					Policy:             ptr.To(AllocationPolicyBestFit),
					TopologyAttributes: []resourceapi.FullyQualifiedName{"example.com/clique"},
				},
				Preemption: &PreemptionArgs{NominationMargin: duration(45 * time.Second)},
			},
			internal: &config.StructuredDRAArgs{
				FilterTimeout:  metav1.Duration{Duration: 2 * time.Second},
				BindingTimeout: metav1.Duration{Duration: 5 * time.Minute},
				Allocator:      config.AllocatorUpstream,
				Scoring:        config.ScoringArgs{DeviceStrategy: config.DeviceScoringLeastAllocated},
				Allocation: config.AllocationArgs{
					Policy:             config.AllocationPolicyBestFit,
					TopologyAttributes: []resourceapi.FullyQualifiedName{"example.com/clique"},
				},
				Preemption: config.PreemptionArgs{NominationMargin: metav1.Duration{Duration: 45 * time.Second}},
			},
		},
		"zero values": {
			versioned: &StructuredDRAArgs{
				FilterTimeout:  duration(0),
				BindingTimeout: duration(0),
				Allocator:      ptr.To(AllocatorName("")),
				Scoring:        &ScoringArgs{DeviceStrategy: ptr.To(DeviceScoringStrategy(""))},
				Allocation:     &AllocationArgs{Policy: ptr.To(AllocationPolicy(""))},
				Preemption:     &PreemptionArgs{NominationMargin: duration(0)},
			},
			internal: &config.StructuredDRAArgs{},
		},
		"nothing set": {
			versioned: &StructuredDRAArgs{},
			internal:  &config.StructuredDRAArgs{},
			oneWay:    true,
		},
		"nil strategy": {
			versioned: &StructuredDRAArgs{Scoring: &ScoringArgs{}},
			internal:  &config.StructuredDRAArgs{},
			oneWay:    true,
		},
	}
	s := newScheme(t)
	for name, tc := range testCases {
		t.Run(name, func(t *testing.T) {
			internal := &config.StructuredDRAArgs{}
			if err := s.Convert(tc.versioned, internal, nil); err != nil {
				t.Fatalf("v1 to internal: %v", err)
			}
			if diff := cmp.Diff(tc.internal, internal); diff != "" {
				t.Errorf("v1 to internal (-want +got):\n%s", diff)
			}
			if tc.oneWay {
				return
			}
			versioned := &StructuredDRAArgs{}
			if err := s.Convert(tc.internal, versioned, nil); err != nil {
				t.Fatalf("internal to v1: %v", err)
			}
			if diff := cmp.Diff(tc.versioned, versioned); diff != "" {
				t.Errorf("internal to v1 (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRoundTrip: internal -> v1 -> internal is the identity for any value,
// and so is v1 -> internal -> v1 for any value with every field set, so no
// field is lost when a new one is added without a working conversion.
func TestRoundTrip(t *testing.T) {
	s := newScheme(t)
	filler := randfill.NewWithSeed(1).NilChance(0)
	for range 200 {
		var internal config.StructuredDRAArgs
		filler.Fill(&internal)
		internal.TypeMeta = metav1.TypeMeta{}
		roundTrip(t, s, &internal, &StructuredDRAArgs{}, &config.StructuredDRAArgs{})

		var versioned StructuredDRAArgs
		filler.Fill(&versioned)
		versioned.TypeMeta = metav1.TypeMeta{}
		roundTrip(t, s, &versioned, &config.StructuredDRAArgs{}, &StructuredDRAArgs{})
	}
}

func roundTrip[T any](t *testing.T, s *runtime.Scheme, original *T, other any, back *T) {
	t.Helper()
	if err := s.Convert(original, other, nil); err != nil {
		t.Fatalf("convert %T to %T: %v", original, other, err)
	}
	if err := s.Convert(other, back, nil); err != nil {
		t.Fatalf("convert %T to %T: %v", other, back, err)
	}
	if diff := cmp.Diff(original, back); diff != "" {
		t.Fatalf("round trip through %T (-original +round-tripped):\n%s", other, diff)
	}
}
