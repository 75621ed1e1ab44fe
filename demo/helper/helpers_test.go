package main

import (
	"os"
	"path/filepath"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/drasched/drasched/pkg/driver/gpu"
)

// repoRoot is the repository root, where demo/demo.sh resolves its paths.
const repoRoot = "../.."

func inventory(name string) string {
	return filepath.Join(repoRoot, "config", "inventory", name+".yaml")
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// driverSlicesOf returns the slices of a node, for tests that compare with
// gpu.BuildResourceSlices.
func driverSlicesOf(t *testing.T, n demoNode) []*resourceapi.ResourceSlice {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	gpus, err := n.discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := gpu.BuildResourceSlices(gpu.SliceOptions{NodeName: n.Name}, gpus)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
