// Package controlplane runs kube-apiserver with an embedded etcd inside a
// test binary: StartControlPlane for one of one's own, Shared for the one
// instance that all tests of a binary share (stopped by Main, which the
// package's TestMain calls). It imports nothing of drasched, so the tests
// of any package (pkg/tracker included) can use it.
package controlplane
