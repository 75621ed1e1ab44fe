package admission

import (
	"testing"

	"github.com/drasched/drasched/test/integration/framework"
)

// TestMain gives the package its own kube-apiserver with embedded etcd: the
// routing policy is cluster-wide, and in the shared control plane of
// test/integration it would reroute the pods of other tests.
func TestMain(m *testing.M) {
	framework.Main(m)
}
