package main

import (
	"path/filepath"
	"regexp"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/drasched/drasched/internal/kwokcluster"
	"github.com/drasched/drasched/internal/manifest"
	"github.com/drasched/drasched/pkg/capacity"
	"github.com/drasched/drasched/pkg/capacity/fit"
)

var fitsTwiceRe = regexp.MustCompile(`\nfits_twice=(\S+)`)

// TestScenarioCapacity keeps the demo's top and fit steps honest without a
// cluster: on the demo's idle nodes, top counts every GPU as available,
// the pod of fits_twice fits exactly twice, both times on
// gpu-l40s-switch-0 (its two PCIe switches of four GPUs), and the pod that
// must not fit does not, as demo/demo.sh says.
func TestScenarioCapacity(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	s := readScenario(t)
	script := string(readFile(t, filepath.Join(repoRoot, "demo", "demo.sh")))
	m := fitsTwiceRe.FindStringSubmatch(script)
	if m == nil {
		t.Fatal("demo/demo.sh: fits_twice not found")
	}
	snap := &capacity.Snapshot{}
	for _, n := range s.nodes {
		gpus, err := n.discover(ctx)
		if err != nil {
			t.Fatal(err)
		}
		node := nodeObject(n)
		slices, err := kwokcluster.NodeSlices(gpus, node)
		if err != nil {
			t.Fatal(err)
		}
		snap.Nodes = append(snap.Nodes, node)
		snap.Slices = append(snap.Slices, slices...)
	}
	for _, f := range []string{filepath.Join(repoRoot, "config", "gpu-driver", "deviceclasses.yaml"), filepath.Join(repoRoot, "config", "examples", "deviceclasses.yaml")} {
		snap.Classes = append(snap.Classes, manifest.OfType[*resourceapi.DeviceClass](decodeFile(t, f))...)
	}

	report, err := capacity.Top(ctx, snap, capacity.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Nodes) != len(s.nodes) {
		t.Errorf("top lists %d nodes, want the demo's %d", len(report.Nodes), len(s.nodes))
	}
	for _, n := range report.Nodes {
		if n.Total == 0 || n.Available != n.Total {
			t.Errorf("idle node %s: %d of %d devices available, want all", n.Name, n.Available, n.Total)
		}
	}

	args, err := fit.ProfileArgs(filepath.Join(repoRoot, "config", "scheduler-config.yaml"), "")
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]int{
		filepath.Join(repoRoot, m[1]): 2,
		filepath.Join(repoRoot, "demo", "workloads", s.unschedulablePods[0]+".yaml"): 0,
	} {
		w, err := fit.Load(readFile(t, file), "default")
		if err != nil {
			t.Fatal(err)
		}
		res, err := fit.Fit(ctx, snap, w, fit.Options{Args: args})
		if err != nil {
			t.Fatal(err)
		}
		if res.Fits != want {
			t.Errorf("%s: %d fit, want %d", file, res.Fits, want)
		}
		for _, p := range res.Placements {
			if p.Node != "gpu-l40s-switch-0" {
				t.Errorf("%s: placed on %s, want gpu-l40s-switch-0", file, p.Node)
			}
		}
	}
}
