package dra

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestSingleNode(t *testing.T) {
	byName := func(values ...string) *v1.NodeSelector {
		return &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: values}}}}}
	}
	if node, ok := singleNode(byName("node-1")); !ok || node != "node-1" {
		t.Errorf("one node by name: got %q, %v", node, ok)
	}
	if _, ok := singleNode(byName("node-1", "node-2")); ok {
		t.Error("two nodes taken for one")
	}
	byLabel := &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{{Key: "rack", Operator: v1.NodeSelectorOpIn, Values: []string{"a"}}}}}}
	if _, ok := singleNode(byLabel); ok {
		t.Error("label selector taken for one node")
	}
}
