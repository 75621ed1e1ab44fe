// Package core holds the rules that the scheduler plugin and the tools
// (kubectl drasched explain, top and fit) must apply alike and that need no
// scheduler framework: which allocator features this binary's feature gates
// give, how a node ranks for a pod's device allocation, which slices a
// pool publishes now (its newest generation), what an allocation takes
// (AddAllocation, the rule of kube-scheduler's allocated state), and what
// evicting a set of pods frees (Victims, preemption's dry-run edits).
//
// It imports no k8s.io/kubernetes/pkg/scheduler package and no drasched
// package above the allocator, so that kubectl-drasched can link it
// without linking kube-scheduler (.golangci.yml's depguard rules and
// hack/verify-deps.sh hold that direction). The plugin's tests prove that
// these rules agree with the framework's: Features with upstream's
// AllocatorFeatures for every DRA gate, MaxScore with the framework's.
package core
