// Package admission tests the admission policy of config/admission, which
// routes the pods that use DRA devices to drasched, against a real
// kube-apiserver (its own, see TestMain): the shipped YAML is read from the
// repository and applied as it is, and the drasched scheduler runs in the
// process as in test/integration.
//
//	go test ./test/integration/admission/...
package admission
