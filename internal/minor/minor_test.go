package minor_test

import (
	"testing"

	"k8s.io/component-base/version"

	"github.com/drasched/drasched/internal/minor"
)

// TestMinorOfModules: the build tag that selects this package's files and
// the module file that selects the Kubernetes modules name the same minor,
// the one the staging modules say they are (the version components
// default to for their feature gates).
func TestMinorOfModules(t *testing.T) {
	if minor.Minor != version.DefaultKubeBinaryVersion {
		t.Fatalf("built for Kubernetes %s (the build tag), with the modules of Kubernetes %s (the module file)", minor.Minor, version.DefaultKubeBinaryVersion)
	}
}
