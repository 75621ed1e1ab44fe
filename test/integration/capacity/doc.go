// Package capacity holds the integration tests of kubectl drasched top:
// its counts per pool against kube-controller-manager's own
// ResourcePoolStatusRequest controller, in process, on random clusters
// published through a real kube-apiserver. The package has its own control
// plane, with the alpha API that controller answers.
package capacity
