// Package minor holds the differences between the Kubernetes minors that
// drasched builds for, so that the rest of the code is one copy for all of
// them. Each minor has one file here, selected by a build tag: kube137.go
// by default, kube136.go with -tags=kube1.36 (and that minor's module
// file, hack/minor/1.36/go.mod). Both define the same names: constants
// for behaviour that differs, accessors for API fields that only some
// minors have, and stand-in types where a type is missing. The table in
// docs/compatibility.md lists every difference.
//
// The package imports no kube-scheduler package: kubectl-drasched links it
// (decision 0006). Differences in the scheduler framework belong in a
// package of their own.
package minor

// NewerFeatures are the allocator features of structured.Features that
// not every minor has: ListTypeAttributes from 1.36 on, the others from
// 1.37 on. The search core reads them from here, so that its code is the
// same in every build; in an older build those it lacks are off, as their
// gates do not exist there.
type NewerFeatures struct {
	FractionalCapacityRange bool
	OptionalNodeOperations  bool
	DerivedAttributes       bool
	CompatibilityGroups     bool
	ListTypeAttributes      bool
}
