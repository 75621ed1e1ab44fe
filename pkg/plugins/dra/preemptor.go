package dra

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	configv1 "k8s.io/kube-scheduler/config/v1"
	fwk "k8s.io/kube-scheduler/framework"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedconfigv1 "k8s.io/kubernetes/pkg/scheduler/apis/config/v1"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
)

// PreemptionName is the name in profiles of the plugin that runs in place
// of DefaultPreemption.
const PreemptionName = "StructuredDRAPreemption"

// Preemption is upstream's DefaultPreemption, unchanged (the same
// evaluator, executor, victim order, PodDisruptionBudget handling, the same
// PreEnqueue gate and events), which adds to the preemptor's condition what
// its victims free for it: "preempting 4 victims to free 4 devices of
// request gpus". DefaultPreemption's message names only the number of
// victims, and a PostFilter plugin that runs after it cannot amend it: the
// first PostFilter plugin that succeeds ends the extension point.
type Preemption struct {
	*defaultpreemption.DefaultPreemption
	fh fwk.Handle
}

var (
	_ fwk.PostFilterPlugin  = &Preemption{}
	_ fwk.PreEnqueuePlugin  = &Preemption{}
	_ fwk.EnqueueExtensions = &Preemption{}
)

// NewPreemption builds the plugin from DefaultPreemptionArgs (the profile
// may give them under this plugin's name), or with DefaultPreemption's
// defaults when the profile gives none: kube-scheduler defaults the args of
// in-tree plugins only.
func NewPreemption(ctx context.Context, obj runtime.Object, fh fwk.Handle) (fwk.Plugin, error) {
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
		return nil, fmt.Errorf("plugin %s: got args of type %T, want DefaultPreemptionArgs", PreemptionName, obj)
	}
	dp, err := defaultpreemption.New(ctx, obj, fh, feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate))
	if err != nil {
		return nil, fmt.Errorf("plugin %s: %w", PreemptionName, err)
	}
	return &Preemption{DefaultPreemption: dp, fh: fh}, nil
}

// Name returns the plugin's name.
func (p *Preemption) Name() string { return PreemptionName }

// PostFilter runs DefaultPreemption; when it nominates the pod to a node,
// the message says which devices the victims free there for the pod's
// requests, as the StructuredDRA plugin of the profile found them in the
// dry run.
func (p *Preemption) PostFilter(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, m fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	result, status := p.DefaultPreemption.PostFilter(ctx, cs, pod, m)
	if !status.IsSuccess() || result == nil || result.NominatingInfo == nil || result.NominatedNodeName == "" {
		return result, status
	}
	pl := pluginOf(p.fh)
	if pl == nil {
		return result, status
	}
	freed, err := pl.freedForPreemptor(cs, pod, result.NominatedNodeName)
	if err != nil {
		klog.FromContext(ctx).V(4).Info("Devices freed by preemption unknown", "pod", klog.KObj(pod), "node", result.NominatedNodeName, "err", err)
		return result, status
	}
	if freed == "" {
		return result, status
	}
	return result, fwk.NewStatus(fwk.Success, status.Message()+" to free "+freed)
}

// plugins are the StructuredDRA plugins by framework handle (one per
// profile), for the Preemption plugin of the same profile: the framework
// builds the plugins of a profile in no fixed order and gives none of them
// a way to find another.
var plugins sync.Map

// registerPlugin makes the plugin findable from its profile's handle until
// ctx, the scheduler's, ends.
func registerPlugin(ctx context.Context, fh fwk.Handle, pl *Plugin) {
	plugins.Store(fh, pl)
	context.AfterFunc(ctx, func() { plugins.CompareAndDelete(fh, pl) })
}

// pluginOf returns the StructuredDRA plugin of the profile; nil if the
// profile does not run it.
func pluginOf(fh fwk.Handle) *Plugin {
	if pl, ok := plugins.Load(fh); ok {
		return pl.(*Plugin)
	}
	return nil
}

// fitCell holds the allocation that the last successful Filter of a
// preemption dry run found, shared by the dry run's state and the clones
// the framework makes of it to add the pods nominated to the node.
type fitCell struct {
	mutex sync.Mutex
	// results match the claims Filter allocated (the pending claims,
	// then the claim for extended resources, if any).
	results []resourceapi.AllocationResult
	// withNominated: results were found with the devices of the pods
	// nominated to the node taken, and are what the pod would get.
	withNominated bool
}

// set keeps a fit. With pods nominated to the node the framework filters
// twice, with them and then without; the fit with them is the one that
// counts, and is not replaced by the one without.
func (c *fitCell) set(results []resourceapi.AllocationResult, withNominated bool) {
	c.mutex.Lock()
	defer c.mutex.Unlock()
	if withNominated || !c.withNominated {
		c.results, c.withNominated = results, withNominated
	}
}

func (c *fitCell) get() []resourceapi.AllocationResult {
	c.mutex.Lock()
	defer c.mutex.Unlock()
	return c.results
}

// freedForPreemptor says which devices, per request, the pod gets on node
// that its victims there free: "4 devices of request gpus"; "" if its
// victims free none of them (it preempted for other resources). A device
// is freed if a victim's claim held it, or shared counters with one that
// a victim's claim held (a whole GPU whose partitions the victims used).
func (pl *Plugin) freedForPreemptor(cs fwk.CycleState, pod *v1.Pod, node string) (string, error) {
	s, err := getState(cs)
	if err != nil || s.allocator == nil {
		return "", nil
	}
	d := pl.preemptions.dryRun(pod.UID, node)
	if d == nil || d.fit == nil {
		return "", nil
	}
	fit := d.fit.get()
	freed := sets.New[structured.DeviceID]()
	for _, claim := range d.freedClaims() {
		for _, r := range claim.Status.Allocation.Devices.Results {
			freed.Insert(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
		}
	}
	var counters map[structured.DeviceID]sets.Set[string]
	counts := map[string]int{}
	var requests []string
	for _, result := range fit {
		for _, r := range result.Devices.Results {
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			if !freed.Has(id) {
				if counters == nil {
					if counters, err = pl.counterSets(node); err != nil {
						return "", err
					}
				}
				if !sharesCounters(id, freed, counters) {
					continue
				}
			}
			if counts[r.Request] == 0 {
				requests = append(requests, r.Request)
			}
			counts[r.Request]++
		}
	}
	sort.Strings(requests)
	var parts []string
	for i, request := range requests {
		n := counts[request]
		switch {
		case i > 0:
			parts = append(parts, fmt.Sprintf("%d of request %s", n, request))
		case n == 1:
			parts = append(parts, "1 device of request "+request)
		default:
			parts = append(parts, fmt.Sprintf("%d devices of request %s", n, request))
		}
	}
	return strings.Join(parts, " and "), nil
}

// counterSets returns, for the devices that the node's ResourceSlices
// publish, the counter sets they consume, as "driver/pool/counterSet".
func (pl *Plugin) counterSets(node string) (map[structured.DeviceID]sets.Set[string], error) {
	slices, err := pl.tracker.Slices()
	if err != nil {
		return nil, fmt.Errorf("list resource slices: %w", err)
	}
	out := map[structured.DeviceID]sets.Set[string]{}
	for _, slice := range slices {
		if slice.Spec.NodeName == nil || *slice.Spec.NodeName != node {
			continue
		}
		for _, device := range slice.Spec.Devices {
			for _, c := range device.ConsumesCounters {
				id := structured.MakeDeviceID(slice.Spec.Driver, slice.Spec.Pool.Name, device.Name)
				if out[id] == nil {
					out[id] = sets.New[string]()
				}
				out[id].Insert(slice.Spec.Driver + "/" + slice.Spec.Pool.Name + "/" + c.CounterSet)
			}
		}
	}
	return out, nil
}

// sharesCounters: the device consumes a counter set that one of the freed
// devices consumes.
func sharesCounters(id structured.DeviceID, freed sets.Set[structured.DeviceID], counters map[structured.DeviceID]sets.Set[string]) bool {
	mine := counters[id]
	if mine.Len() == 0 {
		return false
	}
	for other := range freed {
		if mine.HasAny(sets.List(counters[other])...) {
			return true
		}
	}
	return false
}
