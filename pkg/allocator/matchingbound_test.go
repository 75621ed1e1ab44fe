package allocator

import "testing"

// TestMatchingLimits checks the matching with shared devices of limited
// capacity: a full device makes room by moving one of its demands to
// another device, and the matching fails where the limits leave too few.
func TestMatchingLimits(t *testing.T) {
	// Candidates: 0 a shared device of the given limit, 1 and 2 devices
	// that cannot be shared.
	for name, tc := range map[string]struct {
		limit   int
		demands []demand
		want    bool
	}{
		"room by moving": {
			limit: 2,
			// a takes 0, b takes 0, c moves a to 1.
			demands: []demand{{need: 1, cands: []int{0, 1}}, {need: 1, cands: []int{0}}, {need: 1, cands: []int{0}}},
			want:    true,
		},
		"full": {
			limit:   2,
			demands: []demand{{need: 2, cands: []int{0, 1}}, {need: 1, cands: []int{0}}, {need: 1, cands: []int{0, 1}}},
			want:    false,
		},
		"each demand once per device": {
			limit:   unlimited,
			demands: []demand{{need: 2, cands: []int{0}}},
			want:    false,
		},
		"unlimited": {
			limit:   unlimited,
			demands: []demand{{need: 1, cands: []int{0}}, {need: 1, cands: []int{0}}, {need: 1, cands: []int{0}}, {need: 2, cands: []int{0, 2}}},
			want:    true,
		},
		"no room at all": {
			limit:   0,
			demands: []demand{{need: 1, cands: []int{0}}},
			want:    false,
		},
	} {
		t.Run(name, func(t *testing.T) {
			m := newMatching(3, func(c int) int {
				if c == 0 {
					return tc.limit
				}
				return 1
			})
			got := true
			for _, d := range tc.demands {
				got = got && m.add(d)
			}
			if got != tc.want {
				t.Errorf("matching succeeded: %t, want %t", got, tc.want)
			}
		})
	}
}
