package v1

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/apis/config"
)

// newScheme returns a scheme with the internal and v1 types, as the
// scheduler's has them.
func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := config.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func defaultAllocation() *AllocationArgs {
	return &AllocationArgs{Policy: ptr.To(AllocationPolicyFirstFit), TopologyAttributes: DefaultTopologyAttributes()}
}

func defaultPreemption() *PreemptionArgs {
	return &PreemptionArgs{NominationMargin: duration(30 * time.Second)}
}

func duration(d time.Duration) *metav1.Duration {
	return &metav1.Duration{Duration: d}
}

func TestDefaults(t *testing.T) {
	testCases := map[string]struct {
		in   *StructuredDRAArgs
		want *StructuredDRAArgs
	}{
		"empty": {
			in: &StructuredDRAArgs{},
			want: &StructuredDRAArgs{
				FilterTimeout:  duration(10 * time.Second),
				BindingTimeout: duration(600 * time.Second),
				Allocator:      ptr.To(AllocatorBuiltin),
				Scoring:        &ScoringArgs{DeviceStrategy: ptr.To(DeviceScoringMostAllocated)},
				Allocation:     defaultAllocation(),
				Preemption:     defaultPreemption(),
			},
		},
		"everything set is kept": {
			in: &StructuredDRAArgs{
				FilterTimeout:  duration(3 * time.Second),
				BindingTimeout: duration(time.Minute),
				Allocator:      ptr.To(AllocatorUpstream),
				Scoring:        &ScoringArgs{DeviceStrategy: ptr.To(DeviceScoringNone)},
			},
			want: &StructuredDRAArgs{
				FilterTimeout:  duration(3 * time.Second),
				BindingTimeout: duration(time.Minute),
				Allocator:      ptr.To(AllocatorUpstream),
				Scoring:        &ScoringArgs{DeviceStrategy: ptr.To(DeviceScoringNone)},
				Allocation:     defaultAllocation(),
				Preemption:     defaultPreemption(),
			},
		},
		"zero filter timeout is kept: it disables the timeout": {
			in: &StructuredDRAArgs{FilterTimeout: duration(0)},
			want: &StructuredDRAArgs{
				FilterTimeout:  duration(0),
				BindingTimeout: duration(600 * time.Second),
				Allocator:      ptr.To(AllocatorBuiltin),
				Scoring:        &ScoringArgs{DeviceStrategy: ptr.To(DeviceScoringMostAllocated)},
				Allocation:     defaultAllocation(),
				Preemption:     defaultPreemption(),
			},
		},
		"empty scoring gets the default strategy": {
			in: &StructuredDRAArgs{Scoring: &ScoringArgs{}},
			want: &StructuredDRAArgs{
				FilterTimeout:  duration(10 * time.Second),
				BindingTimeout: duration(600 * time.Second),
				Allocator:      ptr.To(AllocatorBuiltin),
				Scoring:        &ScoringArgs{DeviceStrategy: ptr.To(DeviceScoringMostAllocated)},
				Allocation:     defaultAllocation(),
				Preemption:     defaultPreemption(),
			},
		},
		"explicitly empty values are kept for validation to reject": {
			in: &StructuredDRAArgs{
				Allocator: ptr.To(AllocatorName("")),
				Scoring:   &ScoringArgs{DeviceStrategy: ptr.To(DeviceScoringStrategy(""))},
			},
			want: &StructuredDRAArgs{
				FilterTimeout:  duration(10 * time.Second),
				BindingTimeout: duration(600 * time.Second),
				Allocator:      ptr.To(AllocatorName("")),
				Scoring:        &ScoringArgs{DeviceStrategy: ptr.To(DeviceScoringStrategy(""))},
				Allocation:     defaultAllocation(),
				Preemption:     defaultPreemption(),
			},
		},
		"BestFit and its attributes are kept": {
			in: &StructuredDRAArgs{Allocation: &AllocationArgs{
				Policy:             ptr.To(AllocationPolicyBestFit),
				TopologyAttributes: []resourceapi.FullyQualifiedName{"example.com/clique"},
			}},
			want: &StructuredDRAArgs{
				FilterTimeout:  duration(10 * time.Second),
				BindingTimeout: duration(600 * time.Second),
				Allocator:      ptr.To(AllocatorBuiltin),
				Scoring:        &ScoringArgs{DeviceStrategy: ptr.To(DeviceScoringMostAllocated)},
				Allocation: &AllocationArgs{
					Policy:             ptr.To(AllocationPolicyBestFit),
					TopologyAttributes: []resourceapi.FullyQualifiedName{"example.com/clique"},
				},
				Preemption: defaultPreemption(),
			},
		},
		"a nomination margin of zero is kept": {
			in: &StructuredDRAArgs{Preemption: &PreemptionArgs{NominationMargin: duration(0)}},
			want: &StructuredDRAArgs{
				FilterTimeout:  duration(10 * time.Second),
				BindingTimeout: duration(600 * time.Second),
				Allocator:      ptr.To(AllocatorBuiltin),
				Scoring:        &ScoringArgs{DeviceStrategy: ptr.To(DeviceScoringMostAllocated)},
				Allocation:     defaultAllocation(),
				Preemption:     &PreemptionArgs{NominationMargin: duration(0)},
			},
		},
		"an empty attribute list is kept: it turns grouping off": {
			in: &StructuredDRAArgs{Allocation: &AllocationArgs{TopologyAttributes: []resourceapi.FullyQualifiedName{}}},
			want: &StructuredDRAArgs{
				FilterTimeout:  duration(10 * time.Second),
				BindingTimeout: duration(600 * time.Second),
				Allocator:      ptr.To(AllocatorBuiltin),
				Scoring:        &ScoringArgs{DeviceStrategy: ptr.To(DeviceScoringMostAllocated)},
				Allocation: &AllocationArgs{
					Policy:             ptr.To(AllocationPolicyFirstFit),
					TopologyAttributes: []resourceapi.FullyQualifiedName{},
				},
				Preemption: defaultPreemption(),
			},
		},
	}
	s := newScheme(t)
	for name, tc := range testCases {
		t.Run(name, func(t *testing.T) {
			// Through the scheme, as the scheduler defaults plugin args:
			// this also checks that the generated defaulter is registered.
			got := tc.in.DeepCopy()
			s.Default(got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("defaults (-want +got):\n%s", diff)
			}
		})
	}
}
