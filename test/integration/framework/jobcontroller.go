package framework

import (
	"context"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// jobControllerWorkers is the number of workers of the Job controller, as
// kube-controller-manager's default (--concurrent-job-syncs).
const jobControllerWorkers = 5

// StartJobController starts kube-controller-manager's Job controller
// against the apiserver of restConfig: it creates the pods of a Job that is
// not suspended and deletes them when the Job is suspended, which is how
// Kueue starts and stops the Jobs it admits and evicts. It runs as
// StartClaimController does.
func StartJobController(ctx context.Context, restConfig *rest.Config) (stop func(), err error) {
	return startController(ctx, restConfig, "job-controller", "job-controller",
		func(ctx context.Context, client kubernetes.Interface, factory informers.SharedInformerFactory) (controller, error) {
			c, err := newJobController(ctx, client, factory)
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context) { c.Run(ctx, jobControllerWorkers) }, nil
		})
}
