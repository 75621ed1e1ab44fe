package main

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/features"

	"github.com/drasched/drasched/internal/minor"
)

// TestCheckServedAPIs: a gate that makes the scheduler watch an API the
// server does not serve (in the version of this build's minor) stops the
// start with an error that names the gate and the API; a gate that is off,
// or an API that is served, lets it start.
func TestCheckServedAPIs(t *testing.T) {
	rules := &metav1.APIResourceList{
		GroupVersion: minor.DeviceTaintRuleAPIVersion.String(),
		APIResources: []metav1.APIResource{{Name: "devicetaintrules"}},
	}
	for name, tc := range map[string]struct {
		rulesGate bool
		served    []*metav1.APIResourceList
		failure   error
		want      string // "" for no error
	}{
		"gate off, not served": {rulesGate: false},
		"gate on, served":      {rulesGate: true, served: []*metav1.APIResourceList{rules}},
		"gate on, not served":  {rulesGate: true, want: "DRADeviceTaintRules is on, and drasched built for Kubernetes " + minor.Minor + " then watches " + minor.DeviceTaintRuleAPIVersion.String() + " devicetaintrules"},
		"discovery fails":      {rulesGate: true, failure: errors.New("connection refused"), want: "connection refused"},
	} {
		t.Run(name, func(t *testing.T) {
			featuregatetesting.SetFeatureGatesDuringTest(t, utilfeature.DefaultFeatureGate, featuregatetesting.FeatureOverrides{
				features.DRADeviceTaintRules: tc.rulesGate,
				features.GenericWorkload:     false,
			})
			fake := &clienttesting.Fake{Resources: tc.served}
			if tc.failure != nil {
				fake.AddReactor("get", "resource", func(clienttesting.Action) (bool, runtime.Object, error) { return true, nil, tc.failure })
			}
			err := checkServedAPIs(&fakediscovery.FakeDiscovery{Fake: fake}, utilfeature.DefaultFeatureGate)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one with %q", err, tc.want)
			}
		})
	}
}
