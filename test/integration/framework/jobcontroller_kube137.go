//go:build !kube1.35

package framework

import (
	"context"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubernetes/pkg/controller/job"
)

// newJobController is the Job controller as 1.36's and 1.37's
// kube-controller-manager build it without the WorkloadWithJob gate (no
// Workload or PodGroup informers).
func newJobController(ctx context.Context, client kubernetes.Interface, factory informers.SharedInformerFactory) (*job.Controller, error) {
	return job.NewController(ctx, client, factory.Core().V1().Pods(), factory.Batch().V1().Jobs(), nil, nil)
}
