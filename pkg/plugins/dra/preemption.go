package dra

// What the preemption plugin of the profile (pkg/plugins/drapreemption,
// StructuredDRAPreemption) needs of this one: the claim nominations
// (nomination.go), the dry runs' fits (dryrun.go) and pod-group
// preemption's simulation (simulation.go), behind Nominator.

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

// Nominator is the StructuredDRA plugin as the preemption plugin of its
// profile sees it: the plugin turns preemption's nominations into claim
// nominations and tells a nominee to wait for its victims.
type Nominator interface {
	// NominationMargin is how long past their grace period the pods that
	// preemption evicted may take to terminate before they count as
	// stuck (StructuredDRAArgs preemption.nominationMargin).
	NominationMargin() time.Duration
	// NominationWait says whether the pod waits for the victims of its
	// claim nomination instead of preempting again: the node it is
	// nominated to and what it waits for; "" if it does not wait (a
	// nomination that can no longer be honoured ends here).
	NominationWait(ctx context.Context, cs fwk.CycleState, pod *v1.Pod) (node, message string)
	// BeginDryRun names the node of DefaultPreemption's dry run in its
	// state, before the evaluator selects victims there, and returns
	// what to call with the victims it selected; nil if the pod
	// allocates nothing.
	BeginDryRun(cs fwk.CycleState, node string) func(victims []*v1.Pod)
	// Nominate turns DefaultPreemption's nomination of the pod to the
	// node into a claim nomination, from what its dry run found there,
	// and says what the victims free for it ("4 devices of request
	// gpus"; "" if they free none of its devices) and how many victims
	// the dry run chose there (0 if it knows of none).
	Nominate(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, node string) (freed string, victims int)
	// NewSimulation notes the pods with claims on every node, for
	// pod-group preemption's simulation, before it changes the snapshot.
	NewSimulation() *Simulation
	// groupNominator is what pod-group preemption calls, in the minors
	// whose framework lets a plugin take part in it
	// (preemption_kube137.go).
	groupNominator
}

// nominator is the plugin as its Nominator: the preemption plugin's view,
// apart from the framework's extension points.
type nominator struct{ pl *Plugin }

var _ Nominator = nominator{}

// plugins are the StructuredDRA plugins by framework handle (one per
// profile), for the preemption plugin of the same profile: the framework
// builds the plugins of a profile in no fixed order and gives none of them
// a way to find another.
var plugins sync.Map

// registerPlugin makes the plugin findable from its profile's handle until
// ctx, the scheduler's, ends.
func registerPlugin(ctx context.Context, fh fwk.Handle, pl *Plugin) {
	plugins.Store(fh, pl)
	context.AfterFunc(ctx, func() { plugins.CompareAndDelete(fh, pl) })
}

// NominatorOf returns the StructuredDRA plugin of the profile; nil if the
// profile does not run it. Call it when the plugin is needed, not when
// the caller is built: the profile's plugins are built in no fixed order.
func NominatorOf(fh fwk.Handle) Nominator {
	if pl, ok := plugins.Load(fh); ok {
		return nominator{pl: pl.(*Plugin)}
	}
	return nil
}

// NominationMargin implements Nominator.
func (nm nominator) NominationMargin() time.Duration { return nm.pl.nominationMargin }

// NominationWait implements Nominator.
func (nm nominator) NominationWait(ctx context.Context, cs fwk.CycleState, pod *v1.Pod) (string, string) {
	pl := nm.pl
	var base *structured.AllocatedState
	if s, err := getState(cs); err == nil {
		base = s.base
	}
	if n, msg := pl.nominationWait(ctx, base, pod); n != nil {
		return n.Node, msg
	}
	return "", ""
}

// BeginDryRun implements Nominator. The state is a clone of the cycle's,
// one per node, and the dry runs of several nodes run in parallel: nothing
// here is shared between them but the cycle's results, which have a lock.
// Naming the node makes Filter keep its fit rather than an allocation for
// Reserve.
func (nm nominator) BeginDryRun(cs fwk.CycleState, node string) func(victims []*v1.Pod) {
	pl := nm.pl
	s, err := getState(cs)
	if err != nil || s.allocator == nil || s.dryRun == nil {
		return nil
	}
	s.dryRun.node = node
	return func(victims []*v1.Pod) {
		s.results.storeFit(node, &preemptionFit{results: s.dryRun.fit.get(), victims: victims, freed: pl.freedClaims(s.dryRun)})
	}
}

// Nominate implements Nominator.
func (nm nominator) Nominate(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, node string) (string, int) {
	pl := nm.pl
	s, err := getState(cs)
	if err != nil || s.allocator == nil {
		return "", 0
	}
	fit := s.results.fit(node)
	if fit == nil {
		return "", 0
	}
	logger := klog.FromContext(ctx)
	pl.nominate(logger, pod, node, "", fit.results, fit.victims, fit.freed)
	freed, err := pl.freedForPreemptor(node, fit)
	if err != nil {
		logger.V(4).Info("Devices freed by preemption unknown", "pod", klog.KObj(pod), "node", node, "err", err)
		return "", len(fit.victims)
	}
	return freed, len(fit.victims)
}

// freedForPreemptor says which devices, per request, the pod gets on node
// that its victims there free: "4 devices of request gpus"; "" if its
// victims free none of them (it preempted for other resources). A device
// is freed if a victim's claim held it, or shared counters with one that
// a victim's claim held (a whole GPU whose partitions the victims used).
func (pl *Plugin) freedForPreemptor(node string, fit *preemptionFit) (string, error) {
	freed := sets.New[structured.DeviceID]()
	for _, claim := range fit.freed {
		for _, r := range claim.Status.Allocation.Devices.Results {
			freed.Insert(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
		}
	}
	var counters map[structured.DeviceID]sets.Set[string]
	var err error
	counts := map[string]int{}
	var requests []string
	for _, result := range fit.results {
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
