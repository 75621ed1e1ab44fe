package extendedresources

import (
	"testing"

	"k8s.io/kubernetes/pkg/features"

	"github.com/drasched/drasched/test/integration/controlplane"
	"github.com/drasched/drasched/test/integration/framework"
)

// TestMain shares one kube-apiserver with embedded etcd among the tests of
// the package, as test/integration does, with DRAExtendedResource on: it is
// on by default from 1.36 on, alpha in 1.35, where it would keep
// kube-scheduler from batching any pod (test/integration leaves it off
// there).
func TestMain(m *testing.M) {
	controlplane.Features[string(features.DRAExtendedResource)] = true
	framework.Main(m)
}
