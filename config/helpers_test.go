// Package config_test checks the YAML under config/: every manifest decodes
// strictly and passes the API server's validation, the scheduler profile
// passes kube-scheduler's validation and replaces DynamicResources exactly,
// RBAC grants what kube-scheduler's bootstrap roles grant, the GPU driver's
// DaemonSet runs with least privilege and its DeviceClasses select their
// devices, and the example claims allocate where they should. This directory holds no Go code besides
// these tests.
package config_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	podutil "k8s.io/kubernetes/pkg/api/pod"
	"k8s.io/kubernetes/pkg/apis/admissionregistration"
	_ "k8s.io/kubernetes/pkg/apis/admissionregistration/install"
	admissionvalidation "k8s.io/kubernetes/pkg/apis/admissionregistration/validation"
	"k8s.io/kubernetes/pkg/apis/apps"
	_ "k8s.io/kubernetes/pkg/apis/apps/install"
	appsvalidation "k8s.io/kubernetes/pkg/apis/apps/validation"
	"k8s.io/kubernetes/pkg/apis/core"
	_ "k8s.io/kubernetes/pkg/apis/core/install"
	corevalidation "k8s.io/kubernetes/pkg/apis/core/validation"
	"k8s.io/kubernetes/pkg/apis/policy"
	_ "k8s.io/kubernetes/pkg/apis/policy/install"
	policyvalidation "k8s.io/kubernetes/pkg/apis/policy/validation"
	"k8s.io/kubernetes/pkg/apis/rbac"
	_ "k8s.io/kubernetes/pkg/apis/rbac/install"
	rbacvalidation "k8s.io/kubernetes/pkg/apis/rbac/validation"
	"k8s.io/kubernetes/pkg/apis/resource"
	_ "k8s.io/kubernetes/pkg/apis/resource/install"
	resourcevalidation "k8s.io/kubernetes/pkg/apis/resource/validation"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	_ "k8s.io/kubernetes/pkg/apis/scheduling/install"
	schedulingvalidation "k8s.io/kubernetes/pkg/apis/scheduling/validation"

	"github.com/drasched/drasched/internal/manifest"
)

// sortStrings makes cmp.Diff ignore the order of string slices.
var sortStrings = cmpopts.SortSlices(func(a, b string) bool { return a < b })

// manifestDirs are the directories of plain Kubernetes manifests; each has a
// kustomization.yaml that lists all of them.
var manifestDirs = []string{"scheduler", "gpu-driver", "examples", "admission"}

// manifestFiles returns the YAML files of a manifest directory, without its
// kustomization.yaml.
func manifestFiles(t *testing.T, dir string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, p := range paths {
		if filepath.Base(p) != "kustomization.yaml" {
			files = append(files, p)
		}
	}
	if len(files) == 0 {
		t.Fatalf("no manifests in %s", dir)
	}
	return files
}

// decodeFile decodes every document of a YAML file strictly (unknown and
// duplicate fields are errors), as internal/manifest does for every reader
// of the shipped YAML.
func decodeFile(t *testing.T, path string) []runtime.Object {
	t.Helper()
	objects, err := manifest.DecodeFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return objects
}

// decodeAll decodes all manifests of a directory.
func decodeAll(t *testing.T, dir string) []runtime.Object {
	t.Helper()
	var objects []runtime.Object
	for _, f := range manifestFiles(t, dir) {
		objects = append(objects, decodeFile(t, f)...)
	}
	return objects
}

// named returns the object of type T with the given name.
func named[T runtime.Object](t *testing.T, objects []runtime.Object, name string) T {
	t.Helper()
	for _, obj := range manifest.OfType[T](objects) {
		if m, err := meta.Accessor(obj); err == nil && m.GetName() == name {
			return obj
		}
	}
	var zero T
	t.Fatalf("no %T named %s", zero, name)
	return zero
}

// withDefaults applies the API server's defaults to the objects, in place.
func withDefaults(objects []runtime.Object) []runtime.Object {
	for _, obj := range objects {
		legacyscheme.Scheme.Default(obj)
	}
	return objects
}

// clusterScoped kinds need no namespace.
var clusterScoped = []string{"Namespace", "ClusterRole", "ClusterRoleBinding", "DeviceClass", "PriorityClass",
	"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}

// validate runs the API server's defaulting and validation of a create
// request on an object. Objects without a namespace are validated in
// "default", where kubectl puts them.
func validate(t *testing.T, obj runtime.Object) field.ErrorList {
	t.Helper()
	gvks, _, err := legacyscheme.Scheme.ObjectKinds(obj)
	if err != nil {
		t.Fatal(err)
	}
	gvk := gvks[0]
	versioned := obj.DeepCopyObject()
	accessor, err := meta.Accessor(versioned)
	if err != nil {
		t.Fatal(err)
	}
	if accessor.GetNamespace() == "" && !slices.Contains(clusterScoped, gvk.Kind) {
		accessor.SetNamespace("default")
	}
	legacyscheme.Scheme.Default(versioned)
	internal, err := legacyscheme.Scheme.ConvertToVersion(versioned, schema.GroupVersion{Group: gvk.Group, Version: runtime.APIVersionInternal})
	if err != nil {
		t.Fatalf("convert %s: %v", gvk, err)
	}
	switch o := internal.(type) {
	case *admissionregistration.MutatingAdmissionPolicy:
		return admissionvalidation.ValidateMutatingAdmissionPolicy(o)
	case *admissionregistration.MutatingAdmissionPolicyBinding:
		return admissionvalidation.ValidateMutatingAdmissionPolicyBinding(o)
	case *admissionregistration.ValidatingAdmissionPolicy:
		return admissionvalidation.ValidateValidatingAdmissionPolicy(o)
	case *admissionregistration.ValidatingAdmissionPolicyBinding:
		return admissionvalidation.ValidateValidatingAdmissionPolicyBinding(o)
	case *core.Namespace:
		return corevalidation.ValidateNamespace(o)
	case *core.ServiceAccount:
		return corevalidation.ValidateServiceAccount(o)
	case *core.ConfigMap:
		return corevalidation.ValidateConfigMap(o)
	case *core.Pod:
		return corevalidation.ValidatePodCreate(o, podutil.GetValidationOptionsFromPodSpecAndMeta(&o.Spec, nil, &o.ObjectMeta, nil))
	case *apps.DaemonSet:
		return appsvalidation.ValidateDaemonSet(o, podutil.GetValidationOptionsFromPodTemplate(&o.Spec.Template, nil))
	case *apps.Deployment:
		return appsvalidation.ValidateDeployment(o, podutil.GetValidationOptionsFromPodTemplate(&o.Spec.Template, nil))
	case *policy.PodDisruptionBudget:
		return policyvalidation.ValidatePodDisruptionBudget(o, policyvalidation.PodDisruptionBudgetValidationOptions{})
	case *rbac.ClusterRole:
		return rbacvalidation.ValidateClusterRole(o, rbacvalidation.ClusterRoleValidationOptions{})
	case *rbac.ClusterRoleBinding:
		return rbacvalidation.ValidateClusterRoleBinding(o)
	case *rbac.Role:
		return rbacvalidation.ValidateRole(o)
	case *rbac.RoleBinding:
		return rbacvalidation.ValidateRoleBinding(o)
	case *resource.DeviceClass:
		return resourcevalidation.ValidateDeviceClass(o)
	case *resource.ResourceClaim:
		return resourcevalidation.ValidateResourceClaim(o)
	case *resource.ResourceClaimTemplate:
		return resourcevalidation.ValidateResourceClaimTemplate(o)
	case *scheduling.PriorityClass:
		return schedulingvalidation.ValidatePriorityClass(o)
	case *scheduling.PodGroup:
		return schedulingvalidation.ValidatePodGroup(o)
	default:
		t.Fatalf("no validation for %s: add it to validate()", gvk)
		return nil
	}
}

// kindAndName describes an object as "Kind name".
func kindAndName(t *testing.T, obj runtime.Object) string {
	t.Helper()
	gvks, _, err := scheme.Scheme.ObjectKinds(obj)
	if err != nil {
		t.Fatal(err)
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	name := m.GetName()
	if ns := m.GetNamespace(); ns != "" {
		name = ns + "/" + name
	}
	return strings.Join([]string{gvks[0].Kind, name}, " ")
}
