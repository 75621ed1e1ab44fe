//go:build !kube1.35 && !kube1.36

package framework

import (
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/resourceclaim"
)

// newClaimController is the ResourceClaim controller as 1.37's
// kube-controller-manager builds it.
func newClaimController(logger klog.Logger, client kubernetes.Interface, factory informers.SharedInformerFactory) (*resourceclaim.Controller, error) {
	return resourceclaim.NewController(logger, client,
		factory.Core().V1().Pods(),
		factory.Scheduling().V1beta1().PodGroups(),
		factory.Resource().V1().ResourceClaims(),
		factory.Resource().V1().ResourceClaimTemplates(),
	)
}
