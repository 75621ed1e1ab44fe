//go:build kube1.35

package admission

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	admissionclient "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
)

// applyMutating knows no object: Kubernetes 1.35 has no
// MutatingAdmissionPolicy in admissionregistration.k8s.io/v1.
func applyMutating(context.Context, admissionclient.AdmissionregistrationV1Interface, runtime.Object) (func(context.Context) error, bool, error) {
	return nil, false, nil
}

// shippedPolicies are the files of config/admission that the chart installs
// on a 1.35 cluster: only the ValidatingAdmissionPolicy, as the routing
// policy needs MutatingAdmissionPolicy v1.
var shippedPolicies = []string{"scheduler-required.yaml"}
