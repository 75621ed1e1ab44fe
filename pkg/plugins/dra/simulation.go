package dra

// Pod-group preemption's simulation: upstream's pod-group evaluator
// removes its candidate victims from the scheduler's snapshot and runs the
// group's scheduling algorithm (PreFilter and Filter on fresh states). The
// preemption plugin runs it with the context of a Simulation, so that
// PreFilter gives those states a dry run with the victims' claims freed.

import (
	"context"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drasched/drasched/pkg/core"
)

// simulationKey marks the context of pod-group preemption's simulation.
type simulationKey struct{}

// Simulation is what PreFilter needs to know in pod-group preemption's
// simulation: which pods with claims were on the nodes before the
// evaluator removed its candidate victims from the snapshot.
type Simulation struct {
	fh     fwk.Handle
	before map[string][]*v1.Pod

	once    sync.Once
	removed map[types.UID]*v1.Pod

	// victims are what the removed pods free, counted once for all the
	// states of the simulation, which edit clones of it: counting costs
	// the claims of thousands of victims, and the group's scheduling
	// algorithm makes a state per pod. Never edited itself.
	victimsOnce sync.Once
	victims     *core.Victims

	// live is the allocated state that the states of the simulation
	// allocate on.
	live liveState
}

// NewSimulation implements Nominator.
func (nm nominator) NewSimulation() *Simulation {
	fh := nm.pl.fh
	sim := &Simulation{fh: fh, before: map[string][]*v1.Pod{}}
	nodes, err := fh.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return sim
	}
	for _, nodeInfo := range nodes {
		for _, p := range nodeInfo.GetPods() {
			pod := p.GetPod()
			if len(pod.Spec.ResourceClaims) > 0 || pod.Status.ExtendedResourceClaimStatus != nil {
				sim.before[nodeInfo.Node().Name] = append(sim.before[nodeInfo.Node().Name], pod)
			}
		}
	}
	return sim
}

// Context returns ctx for the group's scheduling algorithm in the
// simulation.
func (sim *Simulation) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, simulationKey{}, sim)
}

func simulationOf(ctx context.Context) *Simulation {
	sim, _ := ctx.Value(simulationKey{}).(*Simulation)
	return sim
}

// removedPods returns the pods with claims that the simulation removed
// from the snapshot: its candidate victims. The evaluator removes them all
// before it runs the group's scheduling algorithm, once.
func (sim *Simulation) removedPods() map[types.UID]*v1.Pod {
	sim.once.Do(func() {
		sim.removed = map[types.UID]*v1.Pod{}
		for node, pods := range sim.before {
			present := sets.New[types.UID]()
			if nodeInfo, err := sim.fh.SnapshotSharedLister().NodeInfos().Get(node); err == nil {
				for _, p := range nodeInfo.GetPods() {
					present.Insert(p.GetPod().UID)
				}
			}
			for _, pod := range pods {
				if !present.Has(pod.UID) {
					sim.removed[pod.UID] = pod
				}
			}
		}
	})
	return sim.removed
}

// dryRun is the edits of a state of the simulation: the candidate victims
// removed, with their claims.
func (sim *Simulation) dryRun(pl *Plugin) *dryRun {
	d := (*dryRun)(nil).clone()
	d.simulation = true
	d.live = &sim.live
	d.memo = newFilterMemo()
	sim.victimsOnce.Do(func() {
		sim.victims = core.NewVictims(pl.nominationMargin, pl.fts.EnableDRAConsumableCapacity)
		sim.victims.Remove(sim.removedPods(), pl.claimsOfPod, time.Now())
	})
	d.victims = sim.victims.Clone()
	return d
}
