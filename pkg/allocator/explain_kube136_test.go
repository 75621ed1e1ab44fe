//go:build kube1.35 || kube1.36

package allocator_test

import "k8s.io/dynamic-resource-allocation/structured"

// newerExplainCases: 1.35 and 1.36 have neither optional node operations nor
// compatibility groups.
func newerExplainCases(structured.Features, func(names ...string) structured.AllocatedState) map[string]explainCase {
	return nil
}
