//go:build kube1.35

package framework

import (
	"context"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubernetes/pkg/controller/job"
)

// newJobController is the Job controller as 1.35's kube-controller-manager
// builds it.
func newJobController(ctx context.Context, client kubernetes.Interface, factory informers.SharedInformerFactory) (*job.Controller, error) {
	return job.NewController(ctx, factory.Core().V1().Pods(), factory.Batch().V1().Jobs(), client)
}
