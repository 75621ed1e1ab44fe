package kueue

import (
	"fmt"
	"os"
	"testing"

	baseversion "k8s.io/component-base/version"

	"github.com/drasched/drasched/test/integration/framework"
)

// TestMain gives the package a kube-apiserver of its own: Kueue's CRDs and
// webhooks are installed on it once, for the tests of this package only.
//
// A test binary's kube-apiserver answers /version with the unstamped
// "v0.0.0-master+$Format:%H$" (a release build stamps it with -ldflags),
// which Kueue's manager cannot parse and exits on. The version is set to
// the same placeholder in a form that parses; Kueue only reports it.
func TestMain(m *testing.M) {
	if err := baseversion.SetDynamicVersion("v0.0.0-master"); err != nil {
		fmt.Fprintf(os.Stderr, "set the API server's version: %v\n", err)
		os.Exit(2)
	}
	framework.Main(m)
}
