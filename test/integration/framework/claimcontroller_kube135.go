//go:build kube1.35

package framework

import (
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/resourceclaim"
	"k8s.io/kubernetes/pkg/features"
)

// newClaimController is the ResourceClaim controller as 1.35's
// kube-controller-manager builds it: its features come from the gates, and
// it knows no PodGroups.
func newClaimController(logger klog.Logger, client kubernetes.Interface, factory informers.SharedInformerFactory) (*resourceclaim.Controller, error) {
	gate := utilfeature.DefaultFeatureGate
	return resourceclaim.NewController(logger,
		resourceclaim.Features{
			AdminAccess:     gate.Enabled(features.DRAAdminAccess),
			PrioritizedList: gate.Enabled(features.DRAPrioritizedList),
		},
		client,
		factory.Core().V1().Pods(),
		factory.Resource().V1().ResourceClaims(),
		factory.Resource().V1().ResourceClaimTemplates(),
	)
}
