package admission

import (
	"context"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/drasched/drasched/internal/manifest"
)

// applyFile creates the admission policies, bindings and cluster-wide RBAC
// objects of a manifest and deletes them when the test ends; objects of
// other kinds are an error, so that a manifest that grows something else is
// not half applied.
func applyFile(t *testing.T, ctx context.Context, client kubernetes.Interface, path string) {
	t.Helper()
	objects, err := manifest.DecodeFile(path)
	if err != nil {
		t.Fatal(err)
	}
	admission := client.AdmissionregistrationV1()
	rbac := client.RbacV1()
	for _, obj := range objects {
		var del func(context.Context) error
		switch obj := obj.(type) {
		case *admissionv1.ValidatingAdmissionPolicy:
			_, err = admission.ValidatingAdmissionPolicies().Create(ctx, obj, metav1.CreateOptions{})
			del = func(ctx context.Context) error {
				return admission.ValidatingAdmissionPolicies().Delete(ctx, obj.Name, metav1.DeleteOptions{})
			}
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			_, err = admission.ValidatingAdmissionPolicyBindings().Create(ctx, obj, metav1.CreateOptions{})
			del = func(ctx context.Context) error {
				return admission.ValidatingAdmissionPolicyBindings().Delete(ctx, obj.Name, metav1.DeleteOptions{})
			}
		case *rbacv1.ClusterRole:
			_, err = rbac.ClusterRoles().Create(ctx, obj, metav1.CreateOptions{})
			del = func(ctx context.Context) error {
				return rbac.ClusterRoles().Delete(ctx, obj.Name, metav1.DeleteOptions{})
			}
		case *rbacv1.ClusterRoleBinding:
			_, err = rbac.ClusterRoleBindings().Create(ctx, obj, metav1.CreateOptions{})
			del = func(ctx context.Context) error {
				return rbac.ClusterRoleBindings().Delete(ctx, obj.Name, metav1.DeleteOptions{})
			}
		default:
			var known bool
			if del, known, err = applyMutating(ctx, admission, obj); !known {
				t.Fatalf("%s: unexpected %T", path, obj)
			}
		}
		if err != nil {
			t.Fatalf("apply %s: %v", path, err)
		}
		t.Cleanup(func() {
			if err := del(context.WithoutCancel(ctx)); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete an object of %s: %v", path, err)
			}
		})
	}
}
