package extendedresources

import (
	"testing"

	"github.com/drasched/drasched/test/integration/framework"
)

// TestMain shares one kube-apiserver with embedded etcd among the tests of
// the package, as test/integration does.
func TestMain(m *testing.M) {
	framework.Main(m)
}
