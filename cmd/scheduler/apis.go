package main

import (
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/component-base/featuregate"
	"k8s.io/kubernetes/pkg/features"

	"github.com/drasched/drasched/internal/minor"
)

// gatedAPI is an API that kube-scheduler watches while a feature gate is on.
type gatedAPI struct {
	gate     featuregate.Feature
	version  schema.GroupVersion
	resource string
}

// gatedAPIs are the APIs of this build's minor that kube-scheduler watches
// only with a gate on: their version differs between minors, and an API
// server of another minor may not serve it (1.37 serves PodGroups as
// v1beta1 only, 1.36's scheduler watches v1alpha2).
func gatedAPIs() []gatedAPI {
	apis := []gatedAPI{{gate: features.DRADeviceTaintRules, version: minor.DeviceTaintRuleAPIVersion, resource: "devicetaintrules"}}
	if minor.PodGroupAPI {
		apis = append(apis, gatedAPI{gate: features.GenericWorkload, version: minor.PodGroupAPIVersion, resource: "podgroups"})
	}
	return apis
}

// checkServedAPIs refuses to start a scheduler whose gates make it watch an
// API that the API server does not serve: its informer would never sync,
// and the scheduler would wait forever without a word. That happens when
// the API server's minor is not the build's (docs/compatibility.md) or the
// API version is not enabled.
func checkServedAPIs(client discovery.DiscoveryInterface, gate featuregate.FeatureGate) error {
	for _, api := range gatedAPIs() {
		if !gate.Enabled(api.gate) {
			continue
		}
		served, err := servedResource(client, api.version, api.resource)
		if err != nil {
			return fmt.Errorf("ask the API server whether it serves %s %s: %w", api.version, api.resource, err)
		}
		if !served {
			return fmt.Errorf("the feature gate %s is on, and drasched built for Kubernetes %s then watches %s %s, which the API server does not serve: enable that API version, turn the gate off, or run the build for the API server's minor (docs/compatibility.md)",
				api.gate, minor.Minor, api.version, api.resource)
		}
	}
	return nil
}

// servedResource: the API server serves resource in version.
func servedResource(client discovery.DiscoveryInterface, version schema.GroupVersion, resource string) (bool, error) {
	list, err := client.ServerResourcesForGroupVersion(version.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == resource }), nil
}
