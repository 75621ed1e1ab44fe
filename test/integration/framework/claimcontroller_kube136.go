//go:build kube1.36

package framework

import (
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/resourceclaim"
	"k8s.io/kubernetes/pkg/features"
)

// newClaimController is the ResourceClaim controller as 1.36's
// kube-controller-manager builds it: its features come from the gates, and
// its PodGroups are scheduling.k8s.io/v1alpha2 (watched only with
// DRAWorkloadResourceClaims).
func newClaimController(logger klog.Logger, client kubernetes.Interface, factory informers.SharedInformerFactory) (*resourceclaim.Controller, error) {
	gate := utilfeature.DefaultFeatureGate
	return resourceclaim.NewController(logger,
		resourceclaim.Features{
			AdminAccess:            gate.Enabled(features.DRAAdminAccess),
			PrioritizedList:        gate.Enabled(features.DRAPrioritizedList),
			WorkloadResourceClaims: gate.Enabled(features.DRAWorkloadResourceClaims),
		},
		client,
		factory.Core().V1().Pods(),
		factory.Scheduling().V1alpha2().PodGroups(),
		factory.Resource().V1().ResourceClaims(),
		factory.Resource().V1().ResourceClaimTemplates(),
	)
}
