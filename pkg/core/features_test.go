package core_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"

	"github.com/drasched/drasched/pkg/core"
)

// upstream are the allocator features kube-scheduler derives from gate.
func upstream(gate featuregate.FeatureGate) any {
	return dynamicresources.AllocatorFeatures(feature.NewSchedulerFeaturesFromGates(gate))
}

// TestFeaturesAsKubeScheduler: for the default gates and with each DRA
// gate flipped on its own (every gate the binary knows whose name starts
// with DRA, so that a gate a new Kubernetes minor adds is covered), core
// derives the allocator features that kube-scheduler derives.
func TestFeaturesAsKubeScheduler(t *testing.T) {
	if diff := cmp.Diff(upstream(utilfeature.DefaultFeatureGate), any(core.DefaultFeatures())); diff != "" {
		t.Errorf("default gates (-kube-scheduler +core):\n%s", diff)
	}
	var settings []map[string]bool
	// DRAWorkloadResourceClaims needs GenericWorkload.
	all := map[string]bool{"GenericWorkload": true}
	for name, spec := range utilfeature.DefaultMutableFeatureGate.GetAll() {
		if !strings.HasPrefix(string(name), "DRA") || spec.LockToDefault {
			continue
		}
		settings = append(settings, map[string]bool{string(name): true}, map[string]bool{string(name): false})
		all[string(name)] = true
	}
	// Every DRA gate on at once, and binding conditions with and without
	// device status, which they need.
	settings = append(settings, all,
		map[string]bool{"DRADeviceBindingConditions": true, "DRAResourceClaimDeviceStatus": false},
		map[string]bool{"DRADeviceBindingConditions": true, "DRAResourceClaimDeviceStatus": true},
	)
	compared := 0
	for _, setting := range settings {
		gate := utilfeature.DefaultMutableFeatureGate.DeepCopy()
		if err := gate.SetFromMap(setting); err != nil {
			// A setting the gate refuses (a gate it depends on is off)
			// cannot reach a binary either.
			t.Logf("%v: refused: %v", setting, err)
			continue
		}
		if diff := cmp.Diff(upstream(gate), any(core.Features(gate))); diff != "" {
			t.Errorf("%v (-kube-scheduler +core):\n%s", setting, diff)
		}
		compared++
	}
	// Most single flips must be accepted, or the test proves little.
	if compared < len(settings)/2 {
		t.Fatalf("only %d of %d gate settings could be compared", compared, len(settings))
	}
	t.Logf("%d gate settings compared", compared)
}
