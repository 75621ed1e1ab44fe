//go:build kube1.35 || kube1.36

package dra

// Node-allocatable resources backed by devices (DRANodeAllocatableResources)
// are alpha in Kubernetes 1.36 with an API that 1.37 replaced (the device's
// nodeAllocatableResourceMappings became nodeAllocatableResources, the
// pod's status entries changed their fields). drasched implements 1.37's;
// a build for an older minor refuses the gate at start instead of placing
// pods without the CPU and memory of their devices. The extension points
// below are what the other files call: with the gate refused, there is
// never anything for them to do.

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"

	"github.com/drasched/drasched/internal/minor"
	"github.com/drasched/drasched/internal/minor/schedminor"
)

// supportNodeAllocatable refuses DRANodeAllocatableResources.
func supportNodeAllocatable(fts feature.Features) error {
	if schedminor.NodeAllocatableResources(fts) {
		return fmt.Errorf("plugin %s built for Kubernetes %s does not implement the feature gate DRANodeAllocatableResources (alpha, with an API that Kubernetes 1.37 replaced): turn the gate off, or run the build for 1.37 against a 1.37 API server", Name, minor.Minor)
	}
	return nil
}

// nodeAllocatable: never set (see above).
type nodeAllocatable struct{}

// pendingSharers: see nodeallocatable_kube137.go.
type pendingSharers func(claim types.UID) sets.Set[types.UID]

// uncountedPods: no pod's devices stand for CPU or memory.
type uncountedPods struct{}

func (pl *Plugin) preFilterNodeAllocatable(klog.Logger, *stateData) *fwk.Status { return nil }

func (pl *Plugin) checkNodeAllocatableSharing(*stateData, *v1.Pod, int, pendingSharers) *fwk.Status {
	return nil
}

func (pl *Plugin) filterNodeAllocatable(context.Context, *stateData, *v1.Pod, fwk.NodeInfo, []resourceapi.AllocationResult) *fwk.Status {
	return nil
}

func (pl *Plugin) reserveNodeAllocatable(klog.Logger, *stateData, *v1.Pod, string) *fwk.Status {
	return nil
}

func (pl *Plugin) preBindNodeAllocatable(context.Context, *stateData, *v1.Pod) error { return nil }

func (pl *Plugin) unreserveNodeAllocatable(context.Context, *stateData, *v1.Pod) {}

// preFilterUncounted: pods without claims skip Filter, as nothing is
// uncounted.
func (pl *Plugin) preFilterUncounted() *fwk.Status { return fwk.NewStatus(fwk.Skip) }

func (pl *Plugin) filterUncounted(*v1.Pod, fwk.NodeInfo) *fwk.Status { return nil }
