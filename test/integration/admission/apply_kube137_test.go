//go:build !kube1.35

package admission

import (
	"context"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	admissionclient "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
)

// applyMutating creates a MutatingAdmissionPolicy or its binding
// (admissionregistration.k8s.io/v1 from Kubernetes 1.36 on) and returns
// how to delete it; known is false for an object of another kind.
func applyMutating(ctx context.Context, admission admissionclient.AdmissionregistrationV1Interface, obj runtime.Object) (del func(context.Context) error, known bool, err error) {
	switch obj := obj.(type) {
	case *admissionv1.MutatingAdmissionPolicy:
		_, err = admission.MutatingAdmissionPolicies().Create(ctx, obj, metav1.CreateOptions{})
		return func(ctx context.Context) error {
			return admission.MutatingAdmissionPolicies().Delete(ctx, obj.Name, metav1.DeleteOptions{})
		}, true, err
	case *admissionv1.MutatingAdmissionPolicyBinding:
		_, err = admission.MutatingAdmissionPolicyBindings().Create(ctx, obj, metav1.CreateOptions{})
		return func(ctx context.Context) error {
			return admission.MutatingAdmissionPolicyBindings().Delete(ctx, obj.Name, metav1.DeleteOptions{})
		}, true, err
	}
	return nil, false, nil
}

// shippedPolicies are the files of config/admission that the chart installs
// on a cluster of this minor: both policies.
var shippedPolicies = []string{"routing.yaml", "scheduler-required.yaml"}
