package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestBatches(t *testing.T) {
	for _, tc := range []struct {
		cases []string
		want  [][]string
	}{
		{nil, [][]string{{caseFill}, {caseNoClaims}, {caseChurn}, {caseMatch}, {caseMIG}, {casePreempt}, {caseFragmentation, caseFragmentationMIG}, {caseGang}}},
		{[]string{caseGang}, [][]string{{caseGang}}},
		{[]string{caseFragmentationMIG, caseFragmentation}, [][]string{{caseFragmentation, caseFragmentationMIG}}},
		{[]string{caseFragmentationMIG, caseFill}, [][]string{{caseFill}, {caseFragmentationMIG}}},
	} {
		got, err := batches(tc.cases)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("batches(%v) (-want +got):\n%s", tc.cases, diff)
		}
	}
	if _, err := batches([]string{"fragmentation-mig"}); err == nil {
		t.Error("unknown case: no error")
	}
}
