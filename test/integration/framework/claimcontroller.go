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
	return startController(ctx, restConfig, "resource-claim-controller", "claim-controller",
		func(ctx context.Context, client kubernetes.Interface, factory informers.SharedInformerFactory) (controller, error) {
			c, err := newClaimController(klog.FromContext(ctx), client, factory)
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context) { c.Run(ctx, claimControllerWorkers) }, nil
		})
}

// controller runs a kube-controller-manager controller until ctx is done.
type controller func(ctx context.Context)

// startController builds a controller of kube-controller-manager with a
// client of its own (userAgent) and informers, and runs it as
// StartClaimController says: logging as name, until stop or ctx's end.
func startController(ctx context.Context, restConfig *rest.Config, userAgent, name string,
	build func(ctx context.Context, client kubernetes.Interface, factory informers.SharedInformerFactory) (controller, error),
) (stop func(), err error) {
	client, err := kubernetes.NewForConfig(rest.AddUserAgent(rest.CopyConfig(restConfig), userAgent))
	if err != nil {
		return nil, fmt.Errorf("create %s client: %w", name, err)
	}
	logger := klog.LoggerWithName(klog.FromContext(ctx), name)
	ctx, cancel := context.WithCancel(klog.NewContext(ctx, logger))

	informerFactory := informers.NewSharedInformerFactory(client, 0)
	run, err := build(ctx, client, informerFactory)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("create %s: %w", name, err)
	}
	informerFactory.Start(ctx.Done())

	var wg sync.WaitGroup
	wg.Go(func() { run(ctx) })
	return func() {
		cancel()
		wg.Wait()
		informerFactory.Shutdown()
	}, nil
}
