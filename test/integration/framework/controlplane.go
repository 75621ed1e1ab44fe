package framework

import (
	"testing"

	"github.com/drasched/drasched/test/integration/controlplane"
)

// Shared returns the control plane shared by all tests of this test binary
// (controlplane.Shared).
func Shared(t testing.TB) *controlplane.ControlPlane { return controlplane.Shared(t) }

// Main runs the tests of a package that uses Shared; call it from TestMain.
func Main(m *testing.M) { controlplane.Main(m) }
