//go:build kube1.35 || kube1.36

package dra

// groupNominator: before 1.37 the framework gives plugins no part in
// pod-group preemption (preemption_kube137.go).
type groupNominator interface{}
