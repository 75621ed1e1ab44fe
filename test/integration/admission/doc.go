// Package admission tests the admission policies that drasched ships
// against a real kube-apiserver (its own, see TestMain): the shipped YAML is
// read from the repository and applied as it is.
//
//   - config/admission: pods that use DRA devices are routed to drasched
//     (the MutatingAdmissionPolicy) and may not go to any other scheduler
//     (the ValidatingAdmissionPolicy), outside the namespaces an admin
//     exempts; the drasched scheduler runs in the process as in
//     test/integration.
//   - config/gpu-driver/rbac.yaml: the GPU kubelet plugin may write only the
//     ResourceSlices of its own node, driver and pool.
//
//	go test ./test/integration/admission/...
package admission
