package dra

import (
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"

	"github.com/drasched/drasched/internal/builder"
)

func TestPrioritizedListScore(t *testing.T) {
	claim := builder.MakeClaim("c").FirstAvailable("gpu",
		builder.SubRequest("big", "gpu", 1),
		builder.SubRequest("medium", "gpu", 1),
		builder.SubRequest("small", "gpu", 1),
	).Obj()
	plain := builder.MakeClaim("plain").Request("gpu", "gpu", 1).Obj()
	result := func(requests ...string) resourceapi.AllocationResult {
		var r resourceapi.AllocationResult
		for _, request := range requests {
			r.Devices.Results = append(r.Devices.Results, resourceapi.DeviceRequestAllocationResult{Request: request, Driver: "d", Pool: "p", Device: "x"})
		}
		return r
	}
	allocatedEarlier := claim.DeepCopy()
	allocatedEarlier.Status.Allocation = &resourceapi.AllocationResult{}
	*allocatedEarlier.Status.Allocation = result("gpu/medium")

	for name, tc := range map[string]struct {
		claims  []*resourceapi.ResourceClaim
		results []resourceapi.AllocationResult
		want    int64
	}{
		"first choice":                 {claims: []*resourceapi.ResourceClaim{claim}, results: []resourceapi.AllocationResult{result("gpu/big")}, want: 8},
		"third choice":                 {claims: []*resourceapi.ResourceClaim{claim}, results: []resourceapi.AllocationResult{result("gpu/small")}, want: 6},
		"no prioritized list":          {claims: []*resourceapi.ResourceClaim{plain}, results: []resourceapi.AllocationResult{result("gpu")}, want: 0},
		"allocated earlier counts too": {claims: []*resourceapi.ResourceClaim{allocatedEarlier, claim}, results: []resourceapi.AllocationResult{result("gpu/big")}, want: 7 + 8},
		"plain then list":              {claims: []*resourceapi.ResourceClaim{plain, claim}, results: []resourceapi.AllocationResult{result("gpu"), result("gpu/medium")}, want: 7},
	} {
		t.Run(name, func(t *testing.T) {
			if got := prioritizedListScore(&stateData{claims: tc.claims}, tc.results); got != tc.want {
				t.Errorf("score %d, want %d", got, tc.want)
			}
		})
	}
}

func TestReadyForBinding(t *testing.T) {
	withConditions := func(conditions ...metav1.Condition) *resourceapi.ResourceClaim {
		claim := builder.MakeClaim("c").Request("gpu", "gpu", 1).Obj()
		claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: "d", Pool: "p", Device: "x",
			BindingConditions:        []string{"attached"},
			BindingFailureConditions: []string{"failed"},
		}}}}
		if conditions != nil {
			claim.Status.Devices = []resourceapi.AllocatedDeviceStatus{{Driver: "d", Pool: "p", Device: "x", Conditions: conditions}}
		}
		return claim
	}
	condition := func(kind string, status metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: kind, Status: status, Reason: "Test", Message: kind + " message"}
	}

	plain := builder.MakeClaim("c").Obj()
	plain.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: "d", Pool: "p", Device: "x"}}}}
	for name, tc := range map[string]struct {
		claim     *resourceapi.ResourceClaim
		wantReady bool
		wantErr   string
	}{
		"no binding conditions":  {claim: plain, wantReady: true},
		"no device status yet":   {claim: withConditions()},
		"condition false":        {claim: withConditions(condition("attached", metav1.ConditionFalse))},
		"condition true":         {claim: withConditions(condition("attached", metav1.ConditionTrue)), wantReady: true},
		"failure condition true": {claim: withConditions(condition("attached", metav1.ConditionTrue), condition("failed", metav1.ConditionTrue)), wantErr: "failed message"},
		"not allocated":          {claim: builder.MakeClaim("c").Obj()},
	} {
		t.Run(name, func(t *testing.T) {
			ready, err := readyForBinding(tc.claim)
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, errBindingFailed) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want errBindingFailed with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ready != tc.wantReady {
				t.Errorf("ready %v, want %v", ready, tc.wantReady)
			}
		})
	}
}

func TestBindingTimedOut(t *testing.T) {
	pl := &Plugin{bindingTimeout: time.Minute}
	claim := func(age time.Duration, conditions bool) *resourceapi.ResourceClaim {
		c := builder.MakeClaim("c").Obj()
		result := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: "d", Pool: "p", Device: "x"}
		if conditions {
			result.BindingConditions = []string{"attached"}
		}
		c.Status.Allocation = &resourceapi.AllocationResult{
			AllocationTimestamp: &metav1.Time{Time: time.Now().Add(-age)},
			Devices:             resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{result}},
		}
		return c
	}
	if pl.bindingTimedOut(claim(30*time.Second, true)) {
		t.Error("30s old allocation timed out with a 1m timeout")
	}
	if !pl.bindingTimedOut(claim(2*time.Minute, true)) {
		t.Error("2m old allocation did not time out with a 1m timeout")
	}
	if pl.bindingTimedOut(claim(2*time.Minute, false)) {
		t.Error("allocation without binding conditions timed out")
	}
}

func TestSingleNode(t *testing.T) {
	byName := func(values ...string) *v1.NodeSelector {
		return &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: values}}}}}
	}
	if node, ok := singleNode(byName("node-1")); !ok || node != "node-1" {
		t.Errorf("one node by name: got %q, %v", node, ok)
	}
	if _, ok := singleNode(byName("node-1", "node-2")); ok {
		t.Error("two nodes taken for one")
	}
	byLabel := &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{{Key: "rack", Operator: v1.NodeSelectorOpIn, Values: []string{"a"}}}}}}
	if _, ok := singleNode(byLabel); ok {
		t.Error("label selector taken for one node")
	}
}

func TestRequiresOptionalNodeOperations(t *testing.T) {
	allocation := &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu"}}}}
	if requiresOptionalNodeOperations(allocation) {
		t.Error("plain allocation needs optional node operations")
	}
	allocation.Devices.Results[0].SkipNodeOperations = []resourceapi.SkipNodeOperation{resourceapi.SkipNodeOperationNodePrepareResources}
	if !requiresOptionalNodeOperations(allocation) {
		t.Error("allocation that skips node operations does not need them")
	}
}

func TestUnsupportedFeatures(t *testing.T) {
	if err := unsupportedFeatures(feature.Features{EnableDynamicResourceAllocation: true, EnableDRAExtendedResource: true}); err != nil {
		t.Errorf("default features rejected: %v", err)
	}
	workload := feature.Features{EnableDynamicResourceAllocation: true, EnableGenericWorkload: true, EnableDRAWorkloadResourceClaims: true, EnableTopologyAwareWorkloadScheduling: true}
	if err := unsupportedFeatures(workload); err != nil {
		t.Errorf("workload features rejected: %v", err)
	}
	err := unsupportedFeatures(feature.Features{EnableDRANodeAllocatableResources: true})
	if err == nil || !strings.Contains(err.Error(), "DRANodeAllocatableResources") {
		t.Errorf("got %v, want the gate named", err)
	}
}
