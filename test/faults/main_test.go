//go:build faults

package faults

import (
	"testing"

	"github.com/drasched/drasched/test/integration/framework"
)

// TestMain shares one kube-apiserver with embedded etcd among the scenarios
// that do not restart it; each test gets its own namespace and driver.
func TestMain(m *testing.M) {
	framework.Main(m)
}
