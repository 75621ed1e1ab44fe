//go:build !kube1.35 && !kube1.36

package capacity

import (
	"testing"

	"k8s.io/kubernetes/pkg/features"

	"github.com/drasched/drasched/test/integration/controlplane"
	"github.com/drasched/drasched/test/integration/framework"
)

// TestMain gives the package its own kube-apiserver with embedded etcd,
// with the alpha API that the ResourcePoolStatusRequest controller
// answers: resource.k8s.io/v1alpha3 served, DRAResourcePoolStatus and
// DRAPartitionableDevicesType (a slice's partitionTypeAttribute) on.
func TestMain(m *testing.M) {
	controlplane.Features[string(features.DRAResourcePoolStatus)] = true
	controlplane.Features[string(features.DRAPartitionableDevicesType)] = true
	controlplane.RuntimeConfig += ",resource.k8s.io/v1alpha3=true"
	framework.Main(m)
}
