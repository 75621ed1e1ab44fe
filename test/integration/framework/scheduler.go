package framework

import (
	"context"
	"errors"
	"fmt"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/profile"

	"github.com/drasched/drasched/internal/minor/schedminor"
	"github.com/drasched/drasched/pkg/plugins/dra"
)

// SchedulerOptions change the scheduler that StartScheduler starts; the zero
// value runs DraschedConfiguration as it is.
type SchedulerOptions struct {
	// Configure changes the configuration from DraschedConfiguration before
	// the scheduler starts: backoff, or enabling a test-only plugin.
	Configure func(*config.KubeSchedulerConfiguration)
	// Registry adds out-of-tree plugins, such as test-only ones, to the
	// registry from DraschedConfiguration.
	Registry frameworkruntime.Registry
	// WrapConfig changes the scheduler's client configuration (already
	// impersonating its ServiceAccount) before any client is made from it:
	// a fault-injecting transport added with rest.Config.Wrap sees every
	// request the scheduler sends, its informers' watches included.
	WrapConfig func(*rest.Config)
}

// Scheduler is a kube-scheduler running in this process.
type Scheduler struct {
	cancel          context.CancelCauseFunc
	done            chan struct{}
	informerFactory informers.SharedInformerFactory
	broadcaster     events.EventBroadcaster
	stopOnce        sync.Once
}

// errSchedulerStopped is the cancellation cause of a stopped scheduler.
var errSchedulerStopped = errors.New("scheduler stopped")

// StartScheduler starts kube-scheduler with the drasched profile against the
// apiserver of restConfig (an admin config) and returns once its informers
// have synced. The scheduler runs as its ServiceAccount, with the
// permissions of config/scheduler/rbac.yaml, which StartScheduler applies
// first. It logs through ctx's logger and runs until Stop or until ctx is
// done.
func StartScheduler(ctx context.Context, restConfig *rest.Config, opts SchedulerOptions) (*Scheduler, error) {
	cfg, registry, err := DraschedConfiguration()
	if err != nil {
		return nil, err
	}
	if opts.Configure != nil {
		opts.Configure(cfg)
	}
	if err := validation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		return nil, fmt.Errorf("validate scheduler configuration: %w", err)
	}
	if registry == nil {
		registry = frameworkruntime.Registry{}
	}
	if err := registry.Merge(opts.Registry); err != nil {
		return nil, fmt.Errorf("add test plugins: %w", err)
	}

	if err := ensureSchedulerRBAC(ctx, restConfig); err != nil {
		return nil, err
	}
	restConfig = rest.AddUserAgent(schedulerConfig(restConfig), "drasched-scheduler")
	if opts.WrapConfig != nil {
		opts.WrapConfig(restConfig)
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("create scheduler client: %w", err)
	}
	ctx = klog.NewContext(ctx, klog.LoggerWithName(klog.FromContext(ctx), "scheduler"))
	ctx, cancel := context.WithCancelCause(ctx)
	s := &Scheduler{
		cancel:          cancel,
		done:            make(chan struct{}),
		informerFactory: schedminor.InformerFactory(client),
		broadcaster:     events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()}),
	}
	s.broadcaster.StartRecordingToSink(ctx.Done())

	sched, err := scheduler.New(ctx, client, s.informerFactory, nil, profile.NewRecorderFactory(s.broadcaster),
		scheduler.WithKubeConfig(restConfig),
		scheduler.WithProfiles(cfg.Profiles...),
		scheduler.WithParallelism(cfg.Parallelism),
		scheduler.WithPercentageOfNodesToScore(cfg.PercentageOfNodesToScore),
		scheduler.WithPodInitialBackoffSeconds(cfg.PodInitialBackoffSeconds),
		scheduler.WithPodMaxBackoffSeconds(cfg.PodMaxBackoffSeconds),
		scheduler.WithExtenders(cfg.Extenders...),
		scheduler.WithFrameworkOutOfTreeRegistry(registry),
	)
	if err != nil {
		close(s.done)
		s.Stop()
		return nil, fmt.Errorf("create scheduler: %w", err)
	}
	s.informerFactory.Start(ctx.Done())
	s.informerFactory.WaitForCacheSync(ctx.Done())
	if err := sched.WaitForHandlersSync(ctx); err != nil {
		close(s.done)
		s.Stop()
		return nil, fmt.Errorf("wait for scheduler event handlers: %w", err)
	}
	go func() {
		defer close(s.done)
		sched.Run(ctx)
	}()
	return s, nil
}

// TrackerState returns what the StructuredDRA plugin's claim tracker holds:
// the UIDs of claims with allocations in flight and the devices it counts
// as taken (allocated or in flight). At quiescence the first is empty and
// the second equals the devices of the allocated claims in the API.
func (s *Scheduler) TrackerState() (inFlight []types.UID, allocated sets.Set[structured.DeviceID], err error) {
	t := dra.TrackerFor(s.informerFactory)
	if t == nil {
		return nil, nil, errors.New("no StructuredDRA claim tracker in this scheduler")
	}
	state, err := t.AllocatedState(context.Background())
	if err != nil {
		return nil, nil, err
	}
	return t.InFlight(), state.AllocatedDevices, nil
}

// CachedSlice returns the scheduler's copy of a ResourceSlice, as its
// informer keeps it.
func (s *Scheduler) CachedSlice(name string) (*resourceapi.ResourceSlice, error) {
	return s.informerFactory.Resource().V1().ResourceSlices().Lister().Get(name)
}

// CachedClaim returns the scheduler's copy of a ResourceClaim, as its
// informer keeps it.
func (s *Scheduler) CachedClaim(namespace, name string) (*resourceapi.ResourceClaim, error) {
	return s.informerFactory.Resource().V1().ResourceClaims().Lister().ResourceClaims(namespace).Get(name)
}

// Stop stops the scheduler and waits until its scheduling loop and informers
// have ended. It does not wait for binding goroutines under way: their next
// API call fails with the cancelled context, but a request already sent may
// still land, much as one from a process that just crashed. Stop may be
// called more than once.
func (s *Scheduler) Stop() {
	s.stopOnce.Do(func() {
		s.cancel(errSchedulerStopped)
		<-s.done
		s.informerFactory.Shutdown()
		s.broadcaster.Shutdown()
	})
}
