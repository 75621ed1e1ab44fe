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

// claimControllerWorkers is the number of workers of the ResourceClaim
// controller; enough that generating claims for hundreds of pods created at
// once does not dominate a test.
const claimControllerWorkers = 10

// StartClaimController starts kube-controller-manager's ResourceClaim
// controller against the apiserver of restConfig: it creates claims from
// templates, removes consumers that are gone from status.reservedFor and
// deallocates claims nobody uses any more. It logs through ctx's logger and
// runs until the returned stop function is called or ctx is done; stop
// waits for it to end.
func StartClaimController(ctx context.Context, restConfig *rest.Config) (stop func(), err error) {
	client, err := kubernetes.NewForConfig(rest.AddUserAgent(rest.CopyConfig(restConfig), "resource-claim-controller"))
	if err != nil {
		return nil, fmt.Errorf("create claim controller client: %w", err)
	}
	logger := klog.LoggerWithName(klog.FromContext(ctx), "claim-controller")
	ctx, cancel := context.WithCancel(klog.NewContext(ctx, logger))

	informerFactory := informers.NewSharedInformerFactory(client, 0)
	controller, err := newClaimController(logger, client, informerFactory)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("create claim controller: %w", err)
	}
	informerFactory.Start(ctx.Done())

	var wg sync.WaitGroup
	wg.Go(func() { controller.Run(ctx, claimControllerWorkers) })
	return func() {
		cancel()
		wg.Wait()
		informerFactory.Shutdown()
	}, nil
}
