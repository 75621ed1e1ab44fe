package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/internal/minor"
	"github.com/drasched/drasched/pkg/capacity"
	"github.com/drasched/drasched/pkg/capacity/fit"
	"github.com/drasched/drasched/pkg/explain"
	"github.com/drasched/drasched/test/integration/framework"
)

// TestToolsAgreeOnDrainedGPU: kubectl drasched explain, top and fit read
// the cluster with one reader, so a DeviceTaintRule that drains one GPU of
// node-0 (two GPUs on each of two nodes) is in all three answers as the
// scheduler sees it: top counts it unavailable, explain says a pod asking
// for two GPUs fits on node-1 only and why not on node-0, fit places one
// such pod, on node-1; the scheduler binds the pod there and gives the
// next one explain's reason for node-0. Once the rule is deleted, all three and the
// scheduler see node-0 whole again. The commands are the binary, run
// against the API server, with -o json.
func TestToolsAgreeOnDrainedGPU(t *testing.T) {
	env := framework.Setup(t)
	class := env.CreateClass("gpu")
	nodes := env.CreateNodes(2)
	for _, node := range nodes {
		env.PublishSlices(env.NodeSlice(node, builder.Devices("gpu", 2, nil)...).Obj())
	}
	drained, free := nodes[0].Name, nodes[1].Name
	drain := resourceapi.DeviceTaint{Key: "example.com/drain", Effect: resourceapi.DeviceTaintEffectNoSchedule}
	rule, err := minor.DeviceTaintRules(env.Client).Create(env.Ctx,
		minor.NewDeviceTaintRule(env.Name("drain"), ptr.To(env.Driver), ptr.To(drained), ptr.To("gpu-1"), drain), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create DeviceTaintRule: %v", err)
	}
	t.Cleanup(func() {
		err := minor.DeviceTaintRules(env.Client).Delete(context.WithoutCancel(env.Ctx), rule.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete DeviceTaintRule: %v", err)
		}
	})
	env.CreateTemplate(builder.MakeTemplate("two", builder.MakeClaim("").Request("gpus", class, 2)))
	manifest := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(manifest, fmt.Appendf(nil, `apiVersion: v1
kind: Pod
metadata: {name: job}
spec:
  schedulerName: %s
  resourceClaims:
  - {name: gpus, resourceClaimTemplateName: two}
  containers:
  - {name: c, image: registry.k8s.io/pause:3.10}
`, framework.SchedulerName), 0o600); err != nil {
		t.Fatal(err)
	}
	createJob := func(name string) {
		env.CreatePod(env.MakePod(name).ClaimFromTemplate("gpus", "two"))
		env.WaitForPod(name, "given its claim by the claim controller", func(p *v1.Pod) bool { return len(p.Status.ResourceClaimStatuses) == 1 })
	}
	createJob("job-0")

	// Drained: gpu-1 of node-0 is unavailable to all three.
	top := runJSON[capacity.Report](t, env, "top")
	if got, want := nodeCounts(top, drained, free), map[string]capacity.Counts{
		drained: {Total: 2, Available: 1, Unavailable: 1},
		free:    {Total: 2, Available: 2},
	}; !maps.Equal(got, want) {
		t.Errorf("top, drained: got %v, want %v", got, want)
	}
	report := runJSON[explain.Report](t, env, "explain", "job-0")
	reason := explainReason(t, report, drained)
	if !strings.Contains(reason, "tainted") {
		t.Errorf("explain, drained: reason on %s %q does not name the taint", drained, reason)
	}
	if fits := fittingNodes(report); !slices.Equal(fits, []string{free}) {
		t.Errorf("explain, drained: fits on %v, want [%s]", fits, free)
	}
	res := runJSON[fit.Result](t, env, "fit", "-f", manifest, "--count", "2")
	if got := fitNodes(res); res.Fits != 1 || !slices.Equal(got, []string{free}) {
		t.Errorf("fit, drained: %d fit, on %v; want 1, on [%s]", res.Fits, got, free)
	}

	// The scheduler agrees: job-0 on node-1; job-1, created then, waits
	// for explain's reason.
	sched := env.StartScheduler(framework.SchedulerOptions{})
	if pod := env.WaitForPodScheduled("job-0"); pod.Spec.NodeName != free {
		t.Errorf("scheduler, drained: job-0 bound to %s, want %s", pod.Spec.NodeName, free)
	}
	createJob("job-1")
	report = runJSON[explain.Report](t, env, "explain", "job-1")
	if fits := fittingNodes(report); len(fits) != 0 {
		t.Errorf("explain, drained, job-0 bound: job-1 fits on %v, want nowhere", fits)
	}
	env.WaitForPodUnschedulable("job-1", explainReason(t, report, drained))

	// Undrained: node-0 is whole again for all three, and job-1 is bound
	// there. The scheduler is stopped meanwhile, so that it does not bind
	// job-1 before the tools have looked.
	sched.Stop()
	if err := minor.DeviceTaintRules(env.Client).Delete(env.Ctx, rule.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete DeviceTaintRule: %v", err)
	}
	top = runJSON[capacity.Report](t, env, "top")
	if got, want := nodeCounts(top, drained, free), map[string]capacity.Counts{
		drained: {Total: 2, Available: 2},
		free:    {Total: 2, Allocated: 2},
	}; !maps.Equal(got, want) {
		t.Errorf("top, undrained: got %v, want %v", got, want)
	}
	report = runJSON[explain.Report](t, env, "explain", "job-1")
	if fits := fittingNodes(report); !slices.Equal(fits, []string{drained}) {
		t.Errorf("explain, undrained: job-1 fits on %v, want [%s]", fits, drained)
	}
	res = runJSON[fit.Result](t, env, "fit", "-f", manifest, "--count", "2")
	if got := fitNodes(res); res.Fits != 1 || !slices.Equal(got, []string{drained}) {
		t.Errorf("fit, undrained: %d fit, on %v; want 1, on [%s]", res.Fits, got, drained)
	}
	env.StartScheduler(framework.SchedulerOptions{})
	if pod := env.WaitForPodScheduled("job-1"); pod.Spec.NodeName != drained {
		t.Errorf("scheduler, undrained: job-1 bound to %s, want %s", pod.Spec.NodeName, drained)
	}
	env.VerifyAllocations()
}

// runJSON runs kubectl drasched with -o json and decodes its answer; a
// command that fails or writes a note (all of DeviceTaintRules is readable
// here) fails the test.
func runJSON[T any](t *testing.T, env *framework.Env, args ...string) *T {
	t.Helper()
	args = append(args, "-o", "json")
	stdout, stderr, status := kubectlDrasched(t, env, args...)
	if status != 0 || withoutAPIWarnings(stderr) != "" {
		t.Fatalf("kubectl drasched %s: status %d, stderr %q", strings.Join(args, " "), status, stderr)
	}
	var v T
	if err := json.Unmarshal([]byte(stdout), &v); err != nil {
		t.Fatalf("kubectl drasched %s: %v\n%s", strings.Join(args, " "), err, stdout)
	}
	return &v
}

// withoutAPIWarnings is stderr without the API server's warnings that
// client-go prints (warnings.go), such as 1.36's deprecation of the
// DeviceTaintRule API version it serves.
func withoutAPIWarnings(stderr string) string {
	var kept strings.Builder
	for line := range strings.Lines(stderr) {
		if !strings.Contains(line, "warnings.go:") {
			kept.WriteString(line)
		}
	}
	return kept.String()
}

// nodeCounts are top's counts of the named nodes.
func nodeCounts(r *capacity.Report, names ...string) map[string]capacity.Counts {
	counts := map[string]capacity.Counts{}
	for _, n := range r.Nodes {
		if slices.Contains(names, n.Name) {
			counts[n.Name] = n.Counts
		}
	}
	return counts
}

// explainReason is explain's one reason on the node; a node it says fits,
// or gives other than one reason, fails the test.
func explainReason(t *testing.T, r *explain.Report, node string) string {
	t.Helper()
	for _, n := range r.Nodes {
		if n.Node == node {
			if n.Fits || len(n.Reasons) != 1 {
				t.Fatalf("explain %s on %s: fits %v, reasons %+v; want one reason", r.Pod, node, n.Fits, n.Reasons)
			}
			return n.Reasons[0].Message
		}
	}
	t.Fatalf("explain %s: no answer for node %s", r.Pod, node)
	return ""
}

// fittingNodes are the nodes explain says the claims fit on.
func fittingNodes(r *explain.Report) []string {
	var nodes []string
	for _, n := range r.Nodes {
		if n.Fits {
			nodes = append(nodes, n.Node)
		}
	}
	return nodes
}

// fitNodes are the nodes fit placed pods on.
func fitNodes(r *fit.Result) []string {
	var nodes []string
	for _, n := range r.Nodes {
		nodes = append(nodes, n.Node)
	}
	return nodes
}
