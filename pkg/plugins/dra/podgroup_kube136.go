//go:build kube1.36

package dra

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drasched/drasched/internal/minor/schedminor"
)

// postFilterGroup: 1.36's framework runs PostFilter for the pods of a pod
// group cycle and has no PodGroupPostFilter for plugins, so, as upstream's
// DynamicResources of 1.36 does there, a pod of a group that did not fit
// frees the group's claims (DRAWorkloadResourceClaims) that no pod of the
// group is scheduled with.
func (pl *Plugin) postFilterGroup(ctx context.Context, cs fwk.CycleState, pod *v1.Pod) *fwk.Status {
	if !schedminor.WorkloadClaims(pl.fts) {
		return nil
	}
	g, err := currentGroupState(cs)
	if err != nil {
		return statusError(klog.FromContext(ctx), err)
	}
	return pl.releaseGroupClaims(ctx, g, pod)
}
