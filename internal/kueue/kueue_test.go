package kueue

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

const chart = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: kueue-controller-manager, namespace: kueue-system}
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta2.visibility.kueue.x-k8s.io}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: kueue-manager-config, namespace: kueue-system}
data:
  controller_manager_config.yaml: |
    apiVersion: config.kueue.x-k8s.io/v1beta2
    kind: Configuration
    webhook: {port: 9443}
    leaderElection: {leaderElect: true}
    featureGates: {DynamicResourceAllocation: true}
---
apiVersion: v1
kind: Service
metadata: {name: kueue-webhook-service, namespace: kueue-system}
spec:
  selector: {control-plane: controller-manager}
  ports: [{port: 443, targetPort: 9443}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: kueue-mutating-webhook-configuration}
webhooks:
- name: mjob.kb.io
  clientConfig: {service: {name: kueue-webhook-service, namespace: kueue-system, path: /mutate-batch-v1-job}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: workloads.kueue.x-k8s.io}
spec:
  conversion:
    strategy: Webhook
    webhook:
      clientConfig: {service: {name: kueue-webhook-service, namespace: kueue-system, path: /convert, port: 443}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: topologies.kueue.x-k8s.io}
spec: {}
`

func TestAdapt(t *testing.T) {
	objects, err := Decode([]byte(chart))
	if err != nil {
		t.Fatal(err)
	}
	config, out, err := Adapt(objects, 12345, 23456, "/run/kueue")
	if err != nil {
		t.Fatal(err)
	}
	byKind := map[string]*unstructured.Unstructured{}
	for _, obj := range out {
		byKind[obj.GetKind()+"/"+obj.GetName()] = obj
	}
	for _, gone := range []string{"Deployment/kueue-controller-manager", "APIService/v1beta2.visibility.kueue.x-k8s.io"} {
		if byKind[gone] != nil {
			t.Errorf("%s is applied; it cannot run or be served here", gone)
		}
	}
	if len(out) != 5 {
		t.Errorf("%d objects to apply, want the other 5", len(out))
	}
	field := func(obj *unstructured.Unstructured, fields ...string) any {
		v, _, _ := unstructured.NestedFieldNoCopy(obj.Object, fields...)
		return v
	}
	service := byKind["Service/kueue-webhook-service"]
	if field(service, "spec", "type") != "ExternalName" || field(service, "spec", "externalName") != "localhost" || field(service, "spec", "selector") != nil {
		t.Errorf("webhook service: %v, want an ExternalName of localhost without a selector", service.Object["spec"])
	}
	hooks, _, _ := unstructured.NestedSlice(byKind["MutatingWebhookConfiguration/kueue-mutating-webhook-configuration"].Object, "webhooks")
	if port, _, _ := unstructured.NestedInt64(hooks[0].(map[string]any), "clientConfig", "service", "port"); port != 12345 {
		t.Errorf("webhook port %d, want 12345", port)
	}
	if port := field(byKind["CustomResourceDefinition/workloads.kueue.x-k8s.io"], "spec", "conversion", "webhook", "clientConfig", "service", "port"); port != int64(12345) {
		t.Errorf("conversion webhook port %v, want 12345", port)
	}
	if conversion := field(byKind["CustomResourceDefinition/topologies.kueue.x-k8s.io"], "spec", "conversion"); conversion != nil {
		t.Errorf("a CRD without a conversion webhook got one: %v", conversion)
	}
	// The chart's objects are left as they were.
	if objects[3].GetName() == "kueue-webhook-service" && field(objects[3], "spec", "type") != nil {
		t.Error("Adapt changed the chart's Service in place")
	}

	var cfg map[string]any
	if err := yaml.Unmarshal(config, &cfg); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"webhook.port":                           int64(12345),
		"webhook.certDir":                        "/run/kueue/certs",
		"health.healthProbeBindAddress":          "127.0.0.1:23456",
		"metrics.bindAddress":                    "0",
		"leaderElection.leaderElect":             false,
		"featureGates.VisibilityOnDemand":        false,
		"featureGates.DynamicResourceAllocation": true,
	}
	for path, value := range want {
		got, _, _ := unstructured.NestedFieldNoCopy(cfg, strings.Split(path, ".")...)
		if f, ok := got.(float64); ok {
			got = int64(f)
		}
		if got != value {
			t.Errorf("Configuration %s = %v, want %v", path, got, value)
		}
	}
}

func TestAdaptBadInput(t *testing.T) {
	for name, tc := range map[string]struct{ manifests, want string }{
		"no ConfigMap": {`
apiVersion: v1
kind: Service
metadata: {name: kueue-webhook-service}
`, "rendered no ConfigMap kueue-manager-config"},
		"not a Configuration": {`
apiVersion: v1
kind: ConfigMap
metadata: {name: kueue-manager-config}
data:
  controller_manager_config.yaml: "kind: Deployment"
`, "kind Deployment, want Configuration"},
		"not YAML": {`
apiVersion: v1
kind: ConfigMap
metadata: {name: kueue-manager-config}
data:
  controller_manager_config.yaml: "{"
`, "the Kueue Configuration"},
	} {
		t.Run(name, func(t *testing.T) {
			objects, err := Decode([]byte(tc.manifests))
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := Adapt(objects, 1, 2, "/d"); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := Decode([]byte("a: [")); err == nil {
		t.Error("Decode of broken YAML: no error")
	}
}
