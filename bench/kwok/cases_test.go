package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestBatches(t *testing.T) {
	for _, tc := range []struct {
		cases []string
		want  [][]string
	}{
		{nil, [][]string{{caseFill}, {caseNoClaims}, {caseChurn}, {caseMatch}, {caseMIG}, {casePreempt}, {caseFragmentation, caseFragmentationMIG}, {caseGang}, {casePreemptGang}, {caseQueue}}},
		{[]string{caseQueue, caseFill}, [][]string{{caseFill}, {caseQueue}}},
		{[]string{caseGang}, [][]string{{caseGang}}},
		{[]string{casePreemptGang, caseGang}, [][]string{{caseGang}, {casePreemptGang}}},
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

// The cases that hack/bench-kwok.sh runs on a cluster with GenericWorkload
// are cases, and measure no cost (they run with a fill, or alone there).
func TestWorkloadCases(t *testing.T) {
	for _, name := range workloadCases {
		if !slices.Contains(caseNames, name) {
			t.Errorf("workload case %s is not a case", name)
		}
	}
	if slices.Contains(costCases, casePreemptGang) {
		t.Errorf("%s is a cost case, but shares its run with the unmeasured fill", casePreemptGang)
	}
}

func TestCasesCommand(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want []string
	}{
		"all":              {want: caseNames},
		"generic workload": {args: []string{"--generic-workload"}, want: []string{caseGang, casePreemptGang}},
	} {
		t.Run(name, func(t *testing.T) {
			cmd := newCasesCommand()
			var out strings.Builder
			cmd.SetOut(&out)
			cmd.SetArgs(tc.args)
			if err := cmd.Execute(); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, strings.Fields(out.String())); diff != "" {
				t.Errorf("cases (-want +got):\n%s", diff)
			}
		})
	}
}
