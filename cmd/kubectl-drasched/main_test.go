package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/pkg/allocator"
	"github.com/drasched/drasched/pkg/capacity"
	"github.com/drasched/drasched/pkg/capacity/fit"
	"github.com/drasched/drasched/pkg/capacity/kueue"
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
		// Kueue admitted it by quota, and it fits on no node: both.
		"admitted by Kueue, fits nowhere": {
			report: &explain.Report{Pod: "default/train-0", Kueue: &kueue.Admission{
				Workload: "default/job-train-1", LocalQueue: "team-a", ClusterQueue: "team-a", Admitted: true,
				PodSets: []kueue.PodSetQuota{{Name: "main", Count: 3, Resources: []kueue.ResourceUsage{{Name: "drasched.dev/gpu", Quantity: resource.MustParse("6"), Flavor: "gpus"}}}},
			}, Nodes: []explain.NodeReport{{Node: "node-a", Reasons: []explain.Reason{{
				Failure: allocator.Failure{Request: "gpu", Reason: allocator.ReasonDevicesInUse},
				Message: `request "gpu": 1 of 4 matching devices free, need 2 (3 in use)`,
				HeldBy:  []explain.Holder{{Pod: "default/inference", Claims: []string{"default/inference-gpus"}, Frees: 3}},
			}}, Suggestions: []string{"fits if pod default/inference is deleted"}}}},
			want: []string{
				"Workload default/job-train-1: admitted by Kueue into ClusterQueue team-a (drasched.dev/gpu: 6 of flavor gpus).\n" +
					"Pod default/train-0 is not bound; its claims fit on 0 of 1 nodes now.\n" +
					"node-a:\n" +
					`  request "gpu": 1 of 4 matching devices free, need 2 (3 in use)` + "\n" +
					"    3 held by pod default/inference (claims default/inference-gpus)\n" +
					"  -> fits if pod default/inference is deleted\n",
			},
		},
		"pending in Kueue": {
			report: &explain.Report{Pod: "default/train-0", Kueue: &kueue.Admission{
				Workload: "default/job-train-1", LocalQueue: "team-a", Reason: "Pending",
				Message: "couldn't assign flavors to pod set main: insufficient quota for drasched.dev/gpu in flavor gpus.",
			}},
			want: []string{"Workload default/job-train-1: not admitted by Kueue (LocalQueue team-a): couldn't assign flavors to pod set main: insufficient quota for drasched.dev/gpu in flavor gpus.\nPod default/train-0"},
		},
		"quota reserved, admission checks pending": {
			report: &explain.Report{Pod: "default/train-0", Kueue: &kueue.Admission{
				Workload: "default/job-train-1", ClusterQueue: "team-a",
				PodSets: []kueue.PodSetQuota{
					{Name: "launcher", Resources: []kueue.ResourceUsage{{Name: "cpu", Quantity: resource.MustParse("1")}}},
					{Name: "workers", Resources: []kueue.ResourceUsage{{Name: "drasched.dev/gpu", Quantity: resource.MustParse("8"), Flavor: "gpus"}, {Name: "drasched.dev/mig", Quantity: resource.MustParse("2"), Flavor: "migs"}}},
				},
			}},
			want: []string{"Workload default/job-train-1: quota reserved by Kueue in ClusterQueue team-a (launcher: cpu: 1; workers: drasched.dev/gpu: 8 of flavor gpus, drasched.dev/mig: 2 of flavor migs), not admitted yet."},
		},
		"not Kueue's": {
			report: &explain.Report{Pod: "default/p", Problems: []string{"claim gpu: DeviceClass x does not exist"}},
			want:   []string{"Pod default/p cannot be placed on any node:\n"},
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
			if tc.report.Kueue == nil && strings.Contains(out.String(), "Kueue") {
				t.Errorf("a pod Kueue does not manage, yet the output names Kueue:\n%s", out.String())
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
		"fit: mapping without class": {args: []string{"fit", "-f", noClaims, "--cluster-queue", "q", "--kueue-mapping", "drasched.dev/gpu"},
			want: `--kueue-mapping "drasched.dev/gpu": want RESOURCE=CLASS[,CLASS...], such as drasched.dev/gpu=gpu.drasched.dev`},
		"fit: mapping, bad class": {args: []string{"fit", "-f", noClaims, "--cluster-queue", "q", "--kueue-mapping", "drasched.dev/gpu=GPU"},
			want: `--kueue-mapping "drasched.dev/gpu=GPU": DeviceClass "GPU"`},
		"fit: class mapped twice": {args: []string{"fit", "-f", noClaims, "--cluster-queue", "q", "--kueue-mapping", "a.dev/gpu=gpu.example.com", "--kueue-mapping", "b.dev/gpu=gpu.example.com"},
			want: "DeviceClass gpu.example.com is mapped to a.dev/gpu already"},
		"fit: mapping without queue": {args: []string{"fit", "-f", noClaims, "--kueue-mapping", "drasched.dev/gpu=gpu.drasched.dev"}, want: "give the queue"},
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

// TestPrintFitClusterQueue: the ClusterQueue's answer beside the nodes',
// and the fewer of the two.
func TestPrintFitClusterQueue(t *testing.T) {
	gpu := func(nominal, inUse, borrowed int64, limit *int64) kueue.ResourceFit {
		return kueue.ResourceFit{Name: "drasched.dev/gpu", Flavor: "gpus", PerUnit: 1, Nominal: nominal, InUse: inUse, Borrowed: borrowed, BorrowingLimit: limit, Free: max(0, nominal-inUse)}
	}
	for name, tc := range map[string]struct {
		res  *fit.Result
		want []string
	}{
		"over-used, borrowing without limit": {
			res: &fit.Result{Workload: "Job default/train", PodsPerUnit: 1, Requested: 2, Fits: 2, Policy: "FirstFit", Answer: ptr.To(0),
				Nodes: []fit.NodeCount{{Node: "node-1", Pods: 2}},
				Quota: &kueue.QuotaFit{ClusterQueue: "team-a", Cohort: "gpus", Fits: ptr.To(0), BorrowingUnlimited: true, Resources: []kueue.ResourceFit{gpu(4, 6, 2, nil)}}},
			want: []string{
				"Job default/train: 2 of 2 pods fit now (allocation policy FirstFit).\n" +
					"ClusterQueue team-a: 4 drasched.dev/gpu nominal in flavor gpus, 6 in use (2 borrowed), 1 per pod: 0 more pods fit in its nominal quota; nodes: 2 more pods fit. In both: 0 more pods fit now.\n" +
					"  It may borrow from cohort gpus whatever the cohort's other queues leave unused (no borrowingLimit); fit does not read those queues.\n" +
					"  Kueue admits a workload's pods together: a workload of 2 such pods is not admitted within the nominal quota.\n" +
					"NODE     PODS\n",
			},
		},
		"a Job of 6, borrowing limit": {
			res: &fit.Result{Workload: "Job default/train", PodsPerUnit: 1, Requested: 6, Fits: 6, Policy: "FirstFit", Answer: ptr.To(3),
				Quota: &kueue.QuotaFit{ClusterQueue: "team-a", Cohort: "gpus", Fits: ptr.To(3), FitsBorrowing: ptr.To(5), Resources: []kueue.ResourceFit{gpu(4, 1, 0, ptr.To(int64(2)))},
					Notes: []string{"the pods' requests for cpu count against the queue's quota too: not counted here"}}},
			want: []string{
				"ClusterQueue team-a: 4 drasched.dev/gpu nominal in flavor gpus, 1 in use, 1 per pod: 3 more pods fit in its nominal quota; nodes: 6 more pods fit. In both: 3 more pods fit now.\n",
				"  Borrowing from cohort gpus up to its borrowingLimit: 5 more pods fit in the quota, if the cohort's other queues leave that much unused.\n",
				"  Kueue admits a workload's pods together: a workload of 6 such pods is not admitted within the nominal quota.\n",
				"  Note: the pods' requests for cpu count against the queue's quota too: not counted here.\n",
			},
		},
		"not admitted": {
			res: &fit.Result{Workload: "Pod default/pair", PodsPerUnit: 1, Fits: 1, Policy: "FirstFit", Answer: ptr.To(0),
				Quota: &kueue.QuotaFit{ClusterQueue: "team-a", Fits: ptr.To(0), NotAdmitted: "ResourceClaimTemplate pair: device constraints (MatchAttribute) are not supported"}},
			want: []string{"ClusterQueue team-a: Kueue admits no workload of these pods (ResourceClaimTemplate pair: device constraints (MatchAttribute) are not supported); nodes: 1 more pod fits. In both: 0 more pods fit now.\n"},
		},
		"no quota taken": {
			res: &fit.Result{Workload: "Pod default/shared", PodsPerUnit: 1, Fits: 3, Policy: "FirstFit", Answer: ptr.To(3),
				Quota: &kueue.QuotaFit{ClusterQueue: "team-a"}},
			want: []string{"ClusterQueue team-a: the pods take none of its quota resources (Kueue counts the devices of claims from ResourceClaimTemplates, by --kueue-mapping); nodes: 3 more pods fit. In both: 3 more pods fit now.\n"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			if err := printFit(&out, tc.res, false); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			out.Reset()
			if err := writeJSON(&out, tc.res); err != nil {
				t.Fatal(err)
			}
			for _, w := range []string{`"quota": {`, `"clusterQueue": "team-a"`, fmt.Sprintf(`"answer": %d`, *tc.res.Answer)} {
				if !strings.Contains(out.String(), w) {
					t.Errorf("JSON lacks %q:\n%s", w, out.String())
				}
			}
		})
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
	if strings.Contains(out.String(), "ClusterQueue") {
		t.Errorf("without --cluster-queue, the output names a ClusterQueue:\n%s", out.String())
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
