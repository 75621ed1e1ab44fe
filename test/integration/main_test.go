package integration

import (
	"testing"

	"github.com/drasched/drasched/test/integration/framework"
)

// TestMain shares one kube-apiserver with embedded etcd among all tests of
// the package; each test gets its own namespace, driver name, claim
// controller and scheduler.
func TestMain(m *testing.M) {
	framework.Main(m)
}
