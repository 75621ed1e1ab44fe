//go:build kube1.35

package dra

// Kubernetes 1.35 has no pod group cycles and no PodGroup API (its alpha
// gang scheduling is the Workload API's): no pod is scheduled as part of a
// group, and reservedFor always names the pod (podgroupcycle_kube137.go).

import (
	"context"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drasched/drasched/internal/minor"
)

// groupStateOf: no pod group cycle in 1.35.
func groupStateOf(fwk.CycleState) (*groupState, error) { return nil, nil }

// currentGroupState: no pod group cycle in 1.35.
func currentGroupState(fwk.CycleState) (*groupState, error) { return nil, nil }

// podGroup: no PodGroup in 1.35.
func (pl *Plugin) podGroup(*v1.Pod) (*minor.PodGroup, error) { return nil, nil }

// claimBindings: reservedFor names the pod for all claims.
func (pl *Plugin) claimBindings(*v1.Pod, []*v1.PodResourceClaim) ([]resourceapi.ResourceClaimConsumerReference, error) {
	return nil, nil
}

// postFilterGroup: no pod groups in 1.35.
func (pl *Plugin) postFilterGroup(context.Context, fwk.CycleState, *v1.Pod) *fwk.Status { return nil }
