package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/drasched/drasched/pkg/allocator"
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

func TestBadOutputFormat(t *testing.T) {
	cmd := newCommand(&bytes.Buffer{})
	cmd.SetArgs([]string{"explain", "p", "-o", "yaml", "--kubeconfig", "/nonexistent"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "want text or json") {
		t.Errorf("-o yaml: %v, want a clear error", err)
	}
}
