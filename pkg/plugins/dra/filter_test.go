package dra

import (
	"errors"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drasched/drasched/internal/builder"
)

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
