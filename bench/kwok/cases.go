package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/drasched/drasched/bench/internal/results"
)

// Case names.
const (
	caseFill    = results.KwokFill
	caseChurn   = results.KwokChurn
	caseMatch   = "match"
	caseMIG     = "mig"
	casePreempt = "preempt"
	// caseNoClaims is fill's pods without their claims, on the same
	// cluster: what a plain pod costs the scheduler, beside a DRA pod.
	caseNoClaims = results.KwokNoClaims
	// caseFragmentation and caseFragmentationMIG: see fragmentation.go;
	// caseGang: see gang.go; casePreemptGang: see preemptgang.go;
	// caseQueue: see queue.go.
)

// caseNames are the cases, in the order in which a run measures them.
// queue comes last: it installs Kueue, whose CustomResourceDefinitions and
// objects stay on the cluster once its manager has stopped.
var caseNames = []string{caseFill, caseNoClaims, caseChurn, caseMatch, caseMIG, casePreempt, caseFragmentation, caseFragmentationMIG, caseGang, casePreemptGang, caseQueue}

// workloadCases are the cases with PodGroups: they need the GenericWorkload
// feature gate and the scheduling.k8s.io/v1beta1 API, which
// hack/bench-kwok.sh gives a cluster of their own (kwok cases
// --generic-workload lists them).
var workloadCases = []string{caseGang, casePreemptGang}

// costCases are the cases whose scheduler cost (CPU seconds per pod bound,
// peak RSS) a run measures: each runs alone and measures every pod the
// scheduler binds while it runs. The others share their run with pods that
// they do not measure (the low-priority fill of preempt and preempt_gang)
// or with another case (the fragmentation churns).
var costCases = []string{caseFill, caseNoClaims, caseChurn, caseMatch, caseMIG, caseGang, caseQueue}

// batches groups the cases to run (all if none are named) into what runs
// at once, in the order of caseNames: each case alone, but the
// fragmentation cases together.
func batches(cases []string) ([][]string, error) {
	for _, name := range cases {
		if !slices.Contains(caseNames, name) {
			return nil, fmt.Errorf("unknown case %q (cases: %s)", name, strings.Join(caseNames, ", "))
		}
	}
	var out [][]string
	frag := -1 // the batch of the fragmentation cases
	for _, name := range caseNames {
		if len(cases) > 0 && !slices.Contains(cases, name) {
			continue
		}
		if fragmentationCase(name) && frag >= 0 {
			out[frag] = append(out[frag], name)
			continue
		}
		if fragmentationCase(name) {
			frag = len(out)
		}
		out = append(out, []string{name})
	}
	return out, nil
}

// variantPQH is a run whose scheduler has the feature gate
// SchedulerPreQueueingHints on (alpha in 1.37, off by default): upstream at
// its best. Its cases are reported as <case>+pqh.
const variantPQH = "pqh"

// variantBatch is a run whose scheduler's profile has no PodTopologySpread
// system default constraints (defaultingType: List): kube-scheduler's
// opportunistic batching (beta, on by default) needs every filter and score
// plugin to sign a pod, and PodTopologySpread signs none while it has
// default constraints. Its cases are reported as <case>+batch.
const variantBatch = "batch"

// checkVariant accepts the variants of a run: none, one of them, or both
// joined by "+" (batch+pqh).
func checkVariant(variant string) error {
	if variant == "" {
		return nil
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(variant, "+") {
		if part != variantPQH && part != variantBatch || seen[part] {
			return fmt.Errorf("--variant %q: want %s, %s, both joined by +, or none", variant, variantPQH, variantBatch)
		}
		seen[part] = true
	}
	return nil
}
