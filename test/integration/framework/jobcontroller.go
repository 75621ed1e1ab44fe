package framework

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// jobControllerWorkers is the number of workers of the Job controller, as
// kube-controller-manager's default (--concurrent-job-syncs).
const jobControllerWorkers = 5

// StartJobController starts kube-controller-manager's Job controller
// against the apiserver of restConfig: it creates the pods of a Job that is
// not suspended and deletes them when the Job is suspended, which is how
// Kueue starts and stops the Jobs it admits and evicts. It runs until the
// returned stop function is called or ctx is done; stop waits for it to end.
func StartJobController(ctx context.Context, restConfig *rest.Config) (stop func(), err error) {
	client, err := kubernetes.NewForConfig(rest.AddUserAgent(rest.CopyConfig(restConfig), "job-controller"))
	if err != nil {
		return nil, fmt.Errorf("create job controller client: %w", err)
	}
	logger := klog.LoggerWithName(klog.FromContext(ctx), "job-controller")
	ctx, cancel := context.WithCancel(klog.NewContext(ctx, logger))

	informerFactory := informers.NewSharedInformerFactory(client, 0)
	controller, err := newJobController(ctx, client, informerFactory)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("create job controller: %w", err)
	}
	informerFactory.Start(ctx.Done())

	var wg sync.WaitGroup
	wg.Go(func() { controller.Run(ctx, jobControllerWorkers) })
	return func() {
		cancel()
		wg.Wait()
		informerFactory.Shutdown()
	}, nil
}
