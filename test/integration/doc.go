// Package integration runs the scheduler against a real kube-apiserver with
// embedded etcd, started in-process, together with the real ResourceClaim
// controller, and checks API effects (claim status, bindings).
//
// The tests arrive with the scheduler issue.
package integration
