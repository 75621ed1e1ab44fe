// Package drapreemption is the StructuredDRAPreemption scheduler plugin:
// upstream's DefaultPreemption with claim nomination. It owns the
// preemption side (the evaluator's hooks, the bound on waiting for pods
// stuck terminating, pod-group preemption) and asks the StructuredDRA
// plugin of its profile, through dra.Nominator, for what only that plugin
// knows: the devices a dry run found, the nominations in its tracker, and
// the simulation's view of the victims' claims. The dry runs themselves
// are StructuredDRA's PreFilterExtensions, which the framework calls on
// every plugin of the profile. The package also holds
// StructuredDRAQueueSort, PrioritySort with nominated pods first among
// pods of one priority (queuesort.go).
package drapreemption

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	configv1 "k8s.io/kube-scheduler/config/v1"
	fwk "k8s.io/kube-scheduler/framework"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedconfigv1 "k8s.io/kubernetes/pkg/scheduler/apis/config/v1"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"
	"k8s.io/utils/clock"

	draschedv1 "github.com/drasched/drasched/apis/config/v1"
	"github.com/drasched/drasched/internal/minor/schedminor"
	"github.com/drasched/drasched/pkg/core"
	"github.com/drasched/drasched/pkg/plugins/dra"
)

// Name is the name in profiles of the plugin that runs in place of
// DefaultPreemption.
const Name = "StructuredDRAPreemption"

// Preemption is upstream's DefaultPreemption (the same evaluator, executor,
// victim order, PodDisruptionBudget handling, PreEnqueue gate and events)
// with claim nomination for the StructuredDRA plugin of the same profile,
// through its dra.Nominator:
//
//   - each dry run knows the node it is for, and what the pod gets there
//     once the victims are gone is kept per node (SelectVictimsOnNode);
//   - PostFilter: a nominee whose victims' claims are still being freed
//     waits for them instead of preempting again; when DefaultPreemption
//     nominates the pod, the dry run's allocation on that node becomes its
//     claim nomination, and the message says what the victims free for it
//     ("preempting 4 victims to free 4 devices of request gpus");
//   - upstream's wait for the pods it preempted to terminate on the
//     nominated node ends once they are stuck (PodEligibleToPreemptOthers);
//   - PodGroupPostFilter (Kubernetes 1.37; drapreemption_kube137.go):
//     pod-group preemption's simulation sees the devices of the victims it
//     removed as free, and the group's pods get nominations that are held
//     as one; the evaluator runs on the nodes the group takes, not the
//     whole cluster, where no pod elsewhere can matter
//     (narrow_kube137.go).
//
// The plugin also works without StructuredDRA in the profile: then it is
// DefaultPreemption.
type Preemption struct {
	*defaultpreemption.DefaultPreemption
	fh  fwk.Handle
	fts feature.Features
}

var (
	_ fwk.PostFilterPlugin  = &Preemption{}
	_ fwk.PreEnqueuePlugin  = &Preemption{}
	_ fwk.EnqueueExtensions = &Preemption{}
	_ preemption.Interface  = &preemptionHooks{}
)

// New builds the plugin from DefaultPreemptionArgs (the profile
// may give them under this plugin's name), or with DefaultPreemption's
// defaults when the profile gives none: kube-scheduler defaults the args of
// in-tree plugins only.
func New(ctx context.Context, obj runtime.Object, fh fwk.Handle) (fwk.Plugin, error) {
	if obj == nil {
		defaults := &configv1.DefaultPreemptionArgs{}
		scheme := schedconfigv1.GetPluginArgConversionScheme()
		scheme.Default(defaults)
		args := &schedconfig.DefaultPreemptionArgs{}
		if err := scheme.Convert(defaults, args, nil); err != nil {
			return nil, fmt.Errorf("default DefaultPreemptionArgs: %w", err)
		}
		obj = args
	}
	if _, ok := obj.(*schedconfig.DefaultPreemptionArgs); !ok {
		return nil, fmt.Errorf("plugin %s: got args of type %T, want DefaultPreemptionArgs", Name, obj)
	}
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	dp, err := defaultpreemption.New(ctx, obj, fh, fts)
	if err != nil {
		return nil, fmt.Errorf("plugin %s: %w", Name, err)
	}
	// The evaluator calls these through its Interface, which
	// defaultpreemption.New leaves open to change.
	dp.Evaluator.Interface = &preemptionHooks{DefaultPreemption: dp, fh: fh, retries: newRetries(ctx, fh, clock.RealClock{}), kueue: newKueueRule(fh)}
	return &Preemption{DefaultPreemption: dp, fh: fh, fts: fts}, nil
}

// Name returns the plugin's name.
func (p *Preemption) Name() string { return Name }

// PostFilter lets a nominee wait for its victims, or runs DefaultPreemption
// and turns its nomination into a claim nomination.
func (p *Preemption) PostFilter(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, m fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	pl := dra.NominatorOf(p.fh)
	if pl == nil {
		return p.DefaultPreemption.PostFilter(ctx, cs, pod, m)
	}
	if node, msg := pl.NominationWait(ctx, cs, pod); node != "" {
		// The result repeats the nomination: with none, the scheduler
		// nominates the pod anew from its informer copy, which may not
		// show the nomination yet (preemption sets it asynchronously),
		// and the pod would lose it.
		return framework.NewPostFilterResultWithNominatedNode(node), fwk.NewStatus(fwk.Unschedulable, "preemption: "+msg)
	}
	result, status := p.DefaultPreemption.PostFilter(ctx, cs, pod, m)
	if !status.IsSuccess() || result == nil || result.NominatingInfo == nil || result.NominatedNodeName == "" {
		return result, status
	}
	freed, victims := pl.Nominate(ctx, cs, pod, result.NominatedNodeName)
	msg := status.Message()
	if msg == "" && victims > 0 {
		// Kubernetes 1.36's evaluator says nothing when it preempts;
		// 1.37's says this.
		msg = fmt.Sprintf("preemption: found a potential placement for pod on node %s, preempting %d victims", result.NominatedNodeName, victims)
	}
	if freed != "" {
		msg += " to free " + freed
	}
	return result, fwk.NewStatus(fwk.Success, msg)
}

// preemptionHooks are the evaluator's calls that claim nomination needs to
// see, around DefaultPreemption's own.
type preemptionHooks struct {
	*defaultpreemption.DefaultPreemption
	fh      fwk.Handle
	retries *retries
	kueue   kueueRule
}

// selectVictims runs DefaultPreemption's SelectVictimsOnNode (the minor's
// signature, in drapreemption_kube13N.go) with the node named in the dry
// run's state, so that the StructuredDRA plugin keeps what the pod gets on
// the node with the victims chosen. A node whose victims include a pod
// Kueue manages is no candidate (kueueRule).
func (h *preemptionHooks) selectVictims(cs fwk.CycleState, node string, run func() ([]*v1.Pod, int, *fwk.Status)) ([]*v1.Pod, int, *fwk.Status) {
	var done func([]*v1.Pod)
	if pl := dra.NominatorOf(h.fh); pl != nil {
		done = pl.BeginDryRun(cs, node)
	}
	victims, violations, status := run()
	if status.IsSuccess() {
		if kueue := h.kueue.victimsStatus(victims); kueue != nil {
			victims, violations, status = nil, 0, kueue
		}
	}
	if done != nil && status.IsSuccess() {
		done(victims)
	}
	return victims, violations, status
}

// PodEligibleToPreemptOthers is DefaultPreemption's, with a bound: it does
// not let a pod preempt while a pod it preempted is still terminating on
// its nominated node, and a pod stuck there (a kubelet that is gone, a
// finalizer) would keep it from preempting forever. Once every such pod
// has been terminating for longer than its grace period and the
// nomination margin, the pod may preempt again; until then the message
// says until when it waits, and the pod is retried then: no event says
// that a pod turned stuck. A pod Kueue manages never preempts (kueueRule).
func (h *preemptionHooks) PodEligibleToPreemptOthers(ctx context.Context, pod *v1.Pod, nominatedNodeStatus *fwk.Status) (bool, string) {
	if h.kueue.managed(pod) {
		return false, kueuePreemptorMessage
	}
	ok, msg := h.DefaultPreemption.PodEligibleToPreemptOthers(ctx, pod, nominatedNodeStatus)
	node := pod.Status.NominatedNodeName
	if ok || node == "" || pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy == v1.PreemptNever {
		return ok, msg
	}
	until := preemptedUntil(h.fh, margin(h.fh), node)
	if until.IsZero() {
		return ok, msg
	}
	if !h.retries.clock.Now().Before(until) {
		klog.FromContext(ctx).V(4).Info("Pods preempted for the pod are stuck terminating on its nominated node; it may preempt again", "pod", klog.KObj(pod), "node", node)
		return true, ""
	}
	h.retries.at(klog.FromContext(ctx), pod, until)
	return false, fmt.Sprintf("%s It waits until %s at the latest.", msg, until.UTC().Format(time.RFC3339))
}

// retries activates pods at the end of their wait for stuck victims. The
// claim nomination's expiry requeues a pod too, but it is counted from the
// nomination and the wait from the victims' deletion timestamps (whole
// seconds): the pod may be retried a moment before its wait ends, and
// then, without a retry of its own, stay in the unschedulable queue until
// the scheduler flushes it (five minutes by default).
type retries struct {
	fh    fwk.Handle
	clock clock.WithDelayedExecution
	mu    sync.Mutex
	// timers holds one pending retry per pod.
	timers map[types.UID]retry
	done   bool
}

type retry struct {
	until time.Time
	timer clock.Timer
}

// newRetries returns retries that end with ctx, the scheduler's.
func newRetries(ctx context.Context, fh fwk.Handle, clk clock.WithDelayedExecution) *retries {
	r := &retries{fh: fh, clock: clk, timers: map[types.UID]retry{}}
	context.AfterFunc(ctx, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.done = true
		for uid, t := range r.timers {
			t.timer.Stop()
			delete(r.timers, uid)
		}
	})
	return r
}

// at activates the pod once until has come, replacing a pending retry of
// the pod for another time. Activate ignores a pod that is no longer in
// the scheduler's queues (bound, deleted), and one in a cycle then is
// requeued when the cycle ends.
func (r *retries) at(logger klog.Logger, pod *v1.Pod, until time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return
	}
	if t, ok := r.timers[pod.UID]; ok {
		if t.until.Equal(until) {
			return
		}
		t.timer.Stop()
	}
	uid, key := pod.UID, pod.Namespace+"/"+pod.Name
	var timer clock.Timer
	timer = r.clock.AfterFunc(until.Sub(r.clock.Now()), func() {
		r.mu.Lock()
		if t, ok := r.timers[uid]; !ok || t.timer != timer {
			r.mu.Unlock()
			return
		}
		delete(r.timers, uid)
		r.mu.Unlock()
		logger.V(4).Info("Retrying a pod whose victims are stuck terminating", "pod", key)
		r.fh.Activate(logger, map[string]*v1.Pod{key: pod})
	})
	r.timers[uid] = retry{until: until, timer: timer}
}

// preemptedUntil returns how long the pods that preemption evicted on the
// node may still take to terminate: the latest end of their grace period
// plus the nomination margin; zero if none is terminating there. Once it
// has passed, all of them are stuck.
func preemptedUntil(fh fwk.Handle, margin time.Duration, node string) time.Time {
	nodeInfo, err := fh.SnapshotSharedLister().NodeInfos().Get(node)
	if err != nil || nodeInfo == nil {
		return time.Time{}
	}
	var until time.Time
	for _, p := range nodeInfo.GetPods() {
		victim := p.GetPod()
		if schedminor.TerminatingByPreemption(victim) {
			until = latest(until, core.StuckFrom(victim, margin))
		}
	}
	return until
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// margin is the nomination margin of the profile's StructuredDRA plugin;
// the default if the profile does not run it.
func margin(fh fwk.Handle) time.Duration {
	if pl := dra.NominatorOf(fh); pl != nil {
		return pl.NominationMargin()
	}
	return draschedv1.DefaultNominationMargin
}

// pending is the number of retries waiting for their time.
func (r *retries) pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.timers)
}
