//go:build faults

package faults

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/drasched/drasched/internal/minor/schedminor"
	"github.com/drasched/drasched/pkg/plugins/dra"
	"github.com/drasched/drasched/test/integration/framework"
)

// holdLabel marks the pods the gate holds, with the extension point as
// value: "PreBind" or "PostFilter".
const holdLabel = "faults.drasched.dev/hold"

const gateName = "FaultsGate"

// gate is a test-only scheduler plugin that holds a labelled pod at one
// extension point, the first time the pod gets there, until the test lets
// it go: the window in which a scenario changes the cluster under the
// scheduler's feet. It sits right before StructuredDRA in the profile, so
// in PreBind it holds the pod before StructuredDRA writes anything; in
// PostFilter the pod has been rejected by Filter and is still in flight in
// the scheduling queue, which records the events that arrive meanwhile.
type gate struct {
	// PreFlight runs the gate's PreBind alone, not beside
	// StructuredDRA's, which would defeat the hold.
	schedminor.PreFlight

	// entered receives the name of each pod the gate holds.
	entered chan string
	// release ends every hold, present and future.
	release chan struct{}

	// mutex guards held.
	mutex sync.Mutex
	// held are the pods held once already; later attempts pass.
	held sets.Set[types.UID]
}

var (
	_ fwk.PreBindPlugin    = &gate{}
	_ fwk.PostFilterPlugin = &gate{}
)

func newGate() *gate {
	g := &gate{entered: make(chan string, 10), release: make(chan struct{}), held: sets.New[types.UID]()}
	g.PreFlight = schedminor.PreFlight{Run: func(_ fwk.CycleState, pod *v1.Pod) *fwk.Status {
		if !g.holds(pod, "PreBind") {
			return fwk.NewStatus(fwk.Skip)
		}
		return nil
	}}
	return g
}

func (g *gate) Name() string { return gateName }

// holds reports whether the pod is to be held at the extension point now.
func (g *gate) holds(pod *v1.Pod, point string) bool {
	if pod.Labels[holdLabel] != point {
		return false
	}
	g.mutex.Lock()
	defer g.mutex.Unlock()
	return !g.held.Has(pod.UID)
}

// hold holds the pod until the test releases the gate or the scheduler
// stops.
func (g *gate) hold(ctx context.Context, pod *v1.Pod, point string) error {
	if !g.holds(pod, point) {
		return nil
	}
	g.mutex.Lock()
	g.held.Insert(pod.UID)
	g.mutex.Unlock()
	g.entered <- pod.Name
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (g *gate) PreBind(ctx context.Context, _ fwk.CycleState, pod *v1.Pod, _ string) *fwk.Status {
	if err := g.hold(ctx, pod, "PreBind"); err != nil {
		return fwk.AsStatus(err)
	}
	return nil
}

// PostFilter holds a rejected pod and leaves it rejected.
func (g *gate) PostFilter(ctx context.Context, _ fwk.CycleState, pod *v1.Pod, _ fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	if err := g.hold(ctx, pod, "PostFilter"); err != nil {
		return nil, fwk.AsStatus(err)
	}
	return nil, fwk.NewStatus(fwk.Unschedulable)
}

// waitEntered waits until the gate holds a pod and returns its name.
func (g *gate) waitEntered(t *testing.T) string {
	t.Helper()
	select {
	case name := <-g.entered:
		return name
	case <-time.After(framework.Timeout):
		t.Fatalf("no pod reached the gate within %s", framework.Timeout)
		return ""
	}
}

// schedulerWithGate returns scheduler options that put g right before
// StructuredDRA in the profile's multi-point plugins: multi-point plugins
// run in their order at every extension point, ahead of plugins enabled
// for a single one.
func schedulerWithGate(g *gate) framework.SchedulerOptions {
	return framework.SchedulerOptions{
		Registry: frameworkruntime.Registry{gateName: func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
			return g, nil
		}},
		Configure: func(cfg *config.KubeSchedulerConfiguration) {
			multiPoint := &cfg.Profiles[0].Plugins.MultiPoint
			i := slices.IndexFunc(multiPoint.Enabled, func(p config.Plugin) bool { return p.Name == dra.Name })
			multiPoint.Enabled = slices.Insert(multiPoint.Enabled, max(i, 0), config.Plugin{Name: gateName})
		},
	}
}
