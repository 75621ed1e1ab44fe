// Package admission tests the admission policies that drasched ships
// against a real kube-apiserver (its own, see TestMain), reading the shipped
// YAML from the repository and applying it as it is:
//
//	go test ./test/integration/admission/...
//
// config/admission: pods that use DRA devices are routed to drasched (the
// MutatingAdmissionPolicy) and may not go to any other scheduler (the
// ValidatingAdmissionPolicy), outside the namespaces an admin exempts; the
// drasched scheduler runs in the process as in test/integration.
// config/default-scheduler-config.yaml: kube-scheduler with it allocates no
// claim.
//
// config/gpu-driver/rbac.yaml: the GPU kubelet plugin may write only the
// ResourceSlices of its own node, driver and pool, and no writer, a node's
// kubelet or an admin, may write the driver's slices outside their node's
// pool.
package admission
