package config_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/drasched/drasched/internal/manifest"
)

// TestManifests decodes every manifest strictly and runs the API server's
// validation on every object, and pins what each file contains.
func TestManifests(t *testing.T) {
	want := map[string][]string{
		"scheduler/namespace.yaml":      {"Namespace drasched-system"},
		"scheduler/serviceaccount.yaml": {"ServiceAccount drasched-system/drasched-scheduler"},
		"scheduler/rbac.yaml": {
			"ClusterRole drasched-scheduler",
			"ClusterRoleBinding drasched-scheduler",
			"ClusterRoleBinding drasched-scheduler:auth-delegator",
			"RoleBinding kube-system/drasched-scheduler:extension-apiserver-authentication-reader",
			"Role drasched-system/drasched-scheduler:leader-election",
			"RoleBinding drasched-system/drasched-scheduler:leader-election",
		},
		"scheduler/configmap.yaml":           {"ConfigMap drasched-system/drasched-scheduler-config"},
		"scheduler/deployment.yaml":          {"Deployment drasched-system/drasched-scheduler"},
		"scheduler/poddisruptionbudget.yaml": {"PodDisruptionBudget drasched-system/drasched-scheduler"},
		"gpu-driver/namespace.yaml":          {"Namespace drasched-system"},
		"gpu-driver/serviceaccount.yaml":     {"ServiceAccount drasched-system/gpu-kubelet-plugin"},
		"gpu-driver/rbac.yaml": {
			"ClusterRole gpu-kubelet-plugin",
			"ClusterRoleBinding gpu-kubelet-plugin",
			"ClusterRoleBinding gpu-kubelet-plugin:auth-delegator",
			"ValidatingAdmissionPolicy gpu-kubelet-plugin-own-node-slices",
			"ValidatingAdmissionPolicyBinding gpu-kubelet-plugin-own-node-slices",
			"ValidatingAdmissionPolicy drasched-node-local-slices",
			"ValidatingAdmissionPolicyBinding drasched-node-local-slices",
		},
		"gpu-driver/deviceclasses.yaml": {"DeviceClass gpu.drasched.dev", "DeviceClass mig.gpu.drasched.dev"},
		"gpu-driver/daemonset.yaml":     {"DaemonSet drasched-system/gpu-kubelet-plugin"},
		"examples/deviceclasses.yaml": {
			"DeviceClass large-memory.gpu.drasched.dev",
			"DeviceClass timeshared.gpu.drasched.dev",
		},
		"examples/one-gpu.yaml":                 {"ResourceClaimTemplate one-gpu", "Pod one-gpu"},
		"examples/four-gpus-one-pcie-root.yaml": {"ResourceClaimTemplate four-gpus-one-pcie-root", "Pod four-gpus-one-pcie-root"},
		"examples/mig-slice.yaml":               {"ResourceClaimTemplate mig-1g-5gb", "Pod mig-slice"},
		"examples/prioritized-list.yaml":        {"ResourceClaimTemplate best-available-gpu", "Pod best-available-gpu"},
		"examples/shared-claim.yaml":            {"ResourceClaim shared-gpu", "Pod shared-gpu-a", "Pod shared-gpu-b"},
		"admission/routing.yaml":                {"MutatingAdmissionPolicy drasched-routing", "MutatingAdmissionPolicyBinding drasched-routing"},
		"admission/scheduler-required.yaml":     {"ValidatingAdmissionPolicy drasched-scheduler-required", "ValidatingAdmissionPolicyBinding drasched-scheduler-required"},
	}
	checkObjectsPerFile(t, want, manifestDirs...)
}

// TestKustomizations: each kustomization.yaml lists exactly the manifests
// of its directory, so that no file is forgotten by `kubectl apply -k`.
func TestKustomizations(t *testing.T) {
	for _, dir := range manifestDirs {
		t.Run(dir, func(t *testing.T) {
			listed, err := manifest.KustomizationResources(dir)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(manifestFiles(t, dir), listed, sortStrings); diff != "" {
				t.Errorf("resources (-files in %s +listed):\n%s", dir, diff)
			}
		})
	}
}

// TestExampleSteps: the examples that are applied one file at a time, as
// the demo's preemption and gang steps do, or on their own, as the GPU
// driver's, and so have no kustomization: every manifest decodes strictly
// and passes the API server's validation, and each file holds what it
// should.
func TestExampleSteps(t *testing.T) {
	want := map[string][]string{
		"examples/preemption/training.yaml": {
			"PriorityClass training", "PriorityClass inference",
			"Pod training-0", "Pod training-1", "Pod training-2", "Pod training-3", "Pod training-4", "Pod training-5", "Pod training-6",
		},
		"examples/preemption/inference.yaml": {"ResourceClaimTemplate four-gpus", "Pod inference"},
		"examples/gang/finetune.yaml":        {"PodGroup finetune", "ResourceClaimTemplate finetune-gpus", "Pod finetune-0", "Pod finetune-1"},
		"examples/gang/pretrain.yaml": {
			"PodGroup pretrain", "ResourceClaimTemplate pretrain-gpus",
			"Pod pretrain-0", "Pod pretrain-1", "Pod pretrain-2", "Pod pretrain-3", "Pod pretrain-4",
		},
		"examples/gpu-driver/claims.yaml": {"ResourceClaimTemplate one-gpu-mps", "ResourceClaimTemplate two-small-migs", "Pod cuda-mps"},
	}
	checkObjectsPerFile(t, want, exampleStepDirs...)
}

// exampleStepDirs are the directories of examples applied one file at a
// time.
var exampleStepDirs = []string{"examples/preemption", "examples/gang", "examples/gpu-driver"}

// checkObjectsPerFile decodes every manifest of the directories strictly,
// runs the API server's validation on each object, and compares the
// objects (kind and name) of each file with want.
func checkObjectsPerFile(t *testing.T, want map[string][]string, dirs ...string) {
	t.Helper()
	got := map[string][]string{}
	for _, dir := range dirs {
		for _, path := range manifestFiles(t, dir) {
			for _, obj := range decodeFile(t, path) {
				name := kindAndName(t, obj)
				got[path] = append(got[path], name)
				if errs := validate(t, obj); len(errs) > 0 {
					t.Errorf("%s: %s: %v", path, name, errs.ToAggregate())
				}
			}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("objects per file (-want +got):\n%s", diff)
	}
}
