//go:build !kube1.35

package fit_test

// Gangs need the PodGroup API, which 1.35 lacks.

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"

	"github.com/drasched/drasched/internal/minor"
	"github.com/drasched/drasched/pkg/capacity/fit"
)

// TestFitGang: a gang of two pods of two GPUs fits where both fit at once.
func TestFitGang(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	manifest := `
apiVersion: ` + minor.PodGroupAPIVersion.String() + `
kind: PodGroup
metadata: {name: train}
spec:
  schedulingPolicy:
    gang: {minCount: 2}
---
apiVersion: batch/v1
kind: Job
metadata: {name: train}
spec:
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      schedulingGroup: {podGroupName: train}
      resourceClaims:
      - {name: gpus, resourceClaimTemplateName: two-gpus}
      containers:
      - name: c
        image: x
        resources:
          claims: [{name: gpus}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: two-gpus}
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly: {deviceClassName: gpu, count: 2}
`
	w, err := fit.Load([]byte(manifest), "default")
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Pods) != 2 {
		t.Fatalf("a gang of %d pods, want 2", len(w.Pods))
	}
	// 2 + 5 GPUs free: three pods of two GPUs, so one gang, and the
	// second gang's first pod fits but not its second.
	res, err := fit.Fit(ctx, snapshot(node("node-a", 6), node("node-b", 3)), w, fit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Fits != 1 || len(res.Placements) != 2 {
		t.Errorf("%d gangs (%d pods) fit, want 1 (2)", res.Fits, len(res.Placements))
	}
	if res.Unplaced == nil || res.Unplaced.Pod != "default/train-1-1" {
		t.Errorf("unplaced: %+v, want the second pod of the second gang", res.Unplaced)
	}
}

// TestFitGangClaim: a PodGroup's claim is made once per gang and shared by
// its pods, which therefore go where it is allocated.
func TestFitGangClaim(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	manifest := `
apiVersion: ` + minor.PodGroupAPIVersion.String() + `
kind: PodGroup
metadata: {name: train}
spec:
  schedulingPolicy:
    gang: {minCount: 2}
  resourceClaims:
  - {name: shared, resourceClaimTemplateName: two-gpus}
---
apiVersion: v1
kind: Pod
metadata: {name: worker}
spec:
  schedulingGroup: {podGroupName: train}
  resourceClaims:
  - {name: shared, resourceClaimTemplateName: two-gpus}
  - {name: own, resourceClaimTemplateName: one-gpu}
  containers: [{name: c, image: x}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: two-gpus}
spec:
  spec:
    devices:
      requests:
      - {name: gpus, exactly: {deviceClassName: gpu, count: 2}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu}
spec:
  spec:
    devices:
      requests:
      - {name: gpu, exactly: {deviceClassName: gpu}}
`
	w, err := fit.Load([]byte(manifest), "default")
	if err != nil {
		t.Fatal(err)
	}
	// A gang takes 2 + 1 + 1 GPUs of one node: node-a has 2 free, node-b 5.
	res, err := fit.Fit(ctx, snapshot(node("node-a", 6), node("node-b", 3)), w, fit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]fit.NodeCount{{Node: "node-b", Pods: 2}}, res.Nodes); diff != "" {
		t.Errorf("pods per node (-want +got):\n%s", diff)
	}
	if res.Fits != 1 || len(res.Placements) != 2 || len(res.Placements[0].Devices) != 3 || len(res.Placements[1].Devices) != 1 {
		t.Errorf("got %d gangs, placements %+v; want one gang, its claim allocated with the first pod", res.Fits, res.Placements)
	}
}
