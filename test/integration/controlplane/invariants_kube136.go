//go:build kube1.35 || kube1.36

package controlplane

import kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"

// disableInvariantChecks: the test API server of 1.35 and 1.36 has no invariant checks.
func disableInvariantChecks(*kubeapiservertesting.TestServerInstanceOptions) {}
