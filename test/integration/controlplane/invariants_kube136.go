//go:build kube1.36

package controlplane

import kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"

// disableInvariantChecks: 1.36's test API server has no invariant checks.
func disableInvariantChecks(*kubeapiservertesting.TestServerInstanceOptions) {}
