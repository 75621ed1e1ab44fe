package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drasched/drasched/pkg/allocator"
	"github.com/drasched/drasched/pkg/capacity"
	"github.com/drasched/drasched/pkg/capacity/fit"
	"github.com/drasched/drasched/pkg/explain"
)

func TestPrintText(t *testing.T) {
	for name, tc := range map[string]struct {
		report *explain.Report
		want   []string
	}{
		"bound": {
			report: &explain.Report{Pod: "default/p", Node: "node-a", Placement: []explain.DevicePlacement{{Claim: "default/c", Request: "gpu", Driver: "gpu.example.com", Pool: "node-a", Device: "gpu-1"}}},
			want:   []string{"Pod default/p is bound to node node-a.", "claim default/c, request gpu: gpu.example.com/node-a/gpu-1"},
		},
		"problems": {
			report: &explain.Report{Pod: "default/p", Problems: []string{"claim gpu: DeviceClass x does not exist"}},
			want:   []string{"cannot be placed on any node", "DeviceClass x does not exist"},
		},
		"nodes": {
			report: &explain.Report{Pod: "default/p", Nodes: []explain.NodeReport{
				{Node: "node-b", Fits: true, Devices: []explain.DevicePlacement{{Device: "gpu-0"}}},
				{Node: "node-a", Reasons: []explain.Reason{{
					Failure: allocator.Failure{Request: "gpu", Reason: allocator.ReasonDevicesInUse},
					Message: `request "gpu": 0 of 1 matching devices free, need 1 (1 in use)`,
					HeldBy:  []explain.Holder{{Pod: "default/a", Claims: []string{"default/a-gpu"}, Frees: 1}},
				}}, Suggestions: []string{"fits if pod default/a is deleted"}},
			}},
			want: []string{"fit on 1 of 2 nodes", "node-b: fits (gpu-0)", "1 held by pod default/a (claims default/a-gpu)", "-> fits if pod default/a is deleted"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			if err := printText(&out, tc.report); err != nil {
				t.Fatal(err)
			}
			for _, want := range tc.want {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	malformed := write("malformed.yaml", "kind: Pod\n  spec: [")
	noClaims := write("no-claims.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c, image: x}]\n")
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"top: unknown view":         {args: []string{"top", "gpus"}, want: "want nodes, pools or classes"},
		"top: bad output":           {args: []string{"top", "-o", "yaml"}, want: "want wide or json"},
		"top: bad sort":             {args: []string{"top", "--sort-by", "size"}, want: "--sort-by"},
		"top: bad selector":         {args: []string{"top", "-l", "a in (b"}, want: "--selector"},
		"fit: no file":              {args: []string{"fit"}, want: "-f FILE is required"},
		"fit: missing file":         {args: []string{"fit", "-f", filepath.Join(dir, "gone.yaml")}, want: "no such file"},
		"fit: malformed":            {args: []string{"fit", "-f", malformed}, want: "document 1"},
		"fit: no claims":            {args: []string{"fit", "-f", noClaims}, want: "has no resourceClaims"},
		"fit: negative count":       {args: []string{"fit", "-f", noClaims, "--count", "-1"}, want: "want 1 or more"},
		"fit: bad config":           {args: []string{"fit", "-f", write("ok.yaml", "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: t}\nspec: {spec: {}}\n"), "--scheduler-config", malformed}, want: malformed},
		"explain: bad output":       {args: []string{"explain", "p", "-o", "yaml"}, want: "want text or json"},
		"explain: negative timeout": {args: []string{"explain", "p", "--timeout", "-1s"}, want: "--timeout -1s: want 0 (no limit) or more"},
		"fit: negative timeout":     {args: []string{"fit", "-f", noClaims, "--timeout", "-1s"}, want: "--timeout -1s: want 0 (no limit) or more"},
		"fit: malformed timeout":    {args: []string{"fit", "-f", noClaims, "--timeout", "soon"}, want: `invalid argument "soon" for "--timeout"`},
		"top: unknown argument":     {args: []string{"top", "nodes", "pools"}, want: "accepts at most 1 arg"},
	} {
		t.Run(name, func(t *testing.T) {
			cmd := newCommand(&bytes.Buffer{})
			cmd.SetArgs(append(tc.args, "--kubeconfig", "/nonexistent"))
			err := cmd.Execute()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: got %v, want an error with %q", tc.args, err, tc.want)
			}
		})
	}
}

func TestPrintTop(t *testing.T) {
	report := &capacity.Report{Nodes: []capacity.Node{
		{Name: "node-b", Counts: capacity.Counts{Total: 8, Allocated: 2, Available: 5, Unavailable: 1}, Pools: []string{"gpu.example.com/node-b"},
			CounterSets: &capacity.CounterSets{Total: 2, Free: 1, Partial: 1},
			Partitions:  []capacity.Partition{{Attribute: "gpu.example.com/profile", Type: "1g.5gb", Total: 7, Free: 3}},
			Topology:    []capacity.Topology{{Attribute: "resource.kubernetes.io/pcieRoot", Groups: 4, Whole: 2}}},
		{Name: "node-a", Counts: capacity.Counts{Total: 4, Available: 4}},
	}}
	sortReport(report, "available")
	var out bytes.Buffer
	if err := printTop(&out, report, capacity.ViewNodes, true); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"NODE     TOTAL   ALLOCATED   AVAILABLE   UNAVAILABLE",
		"node-b   8       2           5           1             1/1/0",
		"1g.5gb 3/7",
		"pcieRoot 2/4",
	}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
	if strings.Index(out.String(), "node-b") > strings.Index(out.String(), "node-a") {
		t.Errorf("not sorted by available devices:\n%s", out.String())
	}
}

func TestPrintFit(t *testing.T) {
	res := &fit.Result{Workload: "Deployment default/train", PodsPerUnit: 1, Requested: 4, Fits: 3, Policy: "FirstFit",
		Nodes: []fit.NodeCount{{Node: "node-a", Pods: 2}, {Node: "node-b", Pods: 1}},
		Unplaced: &fit.Unplaced{Pod: "default/train-3", Reasons: []fit.Reason{
			{Message: `request "gpu": 0 of 8 matching devices free, need 1 (8 in use)`, Nodes: 4, Examples: []string{"node-a", "node-b", "node-c"}},
		}},
		Approximations: []string{"in-flight allocations are not in the API"},
	}
	var out bytes.Buffer
	if err := printFit(&out, res, false); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"Deployment default/train: 3 of 4 pods fit now (allocation policy FirstFit).",
		"node-a   2",
		"The next pod (default/train-3) fits on no node:",
		`4 nodes: request "gpu": 0 of 8 matching devices free, need 1 (8 in use) (node-a, node-b, node-c, ...)`,
		"- in-flight allocations are not in the API",
	} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
}
