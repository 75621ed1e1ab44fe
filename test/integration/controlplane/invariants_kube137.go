//go:build !kube1.35 && !kube1.36

package controlplane

import kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"

// disableInvariantChecks turns off the test API server's scrape of its own
// metrics for problems of the API server; this suite tests the scheduler.
func disableInvariantChecks(options *kubeapiservertesting.TestServerInstanceOptions) {
	options.DisableInvariantChecks = true
}
