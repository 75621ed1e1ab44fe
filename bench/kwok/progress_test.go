package main

import "testing"

func TestBar(t *testing.T) {
	for _, tc := range []struct {
		done, total int
		want        string
	}{
		{0, 10, "[....]"},
		{5, 10, "[##..]"},
		{10, 10, "[####]"},
		{12, 10, "[####]"},
		{0, 0, "[####]"},
	} {
		if got := bar(tc.done, tc.total, 4); got != tc.want {
			t.Errorf("bar(%d, %d) = %q, want %q", tc.done, tc.total, got, tc.want)
		}
	}
}
