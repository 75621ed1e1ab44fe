package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/drasched/drasched/apis/config"
	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/internal/minor/schedminor"
	"github.com/drasched/drasched/test/integration/framework"
)

// slowSelectorSetup gives a node 2,048 devices (slowSelectorSlices) on
// which builder.SlowSelector matches none: every device must be
// evaluated, at tens to hundreds of milliseconds each, so that allocating
// a claim with the selector takes minutes on any machine. Devices of the
// class without the selector are found at once. It returns the class.
func slowSelectorSetup(env *framework.Env) (class string) {
	env.PublishSlices(slowSelectorSlices(env, env.CreateNode("node"))...)
	return env.CreateClass("gpu")
}

// slowSelectorSlices are the 16 slices of 128 devices, one pool, that
// slowSelectorSetup publishes on the node.
func slowSelectorSlices(env *framework.Env, node *v1.Node) []*resourceapi.ResourceSlice {
	const slices = 16
	var out []*resourceapi.ResourceSlice
	for i := range slices {
		out = append(out, env.MakeSlice(fmt.Sprintf("gpus-%02d", i)).Node(node.Name).Pool(env.Name("gpus"), 1, slices).
			Devices(builder.Devices(fmt.Sprintf("gpu-%02d", i), resourceapi.ResourceSliceMaxDevices, func(_ int, d *builder.DeviceWrapper) {
				d.Int("index", -1)
			})...).Obj())
	}
	return out
}

// TestSlowSelectorFilterTimeout: a claim whose selector is valid (the API
// server accepts it) but takes minutes to evaluate on the node's devices
// fails its pod's scheduling cycle with Filter's timeout after
// filterTimeout (1s here), as a scheduling error (1.35: the node is
// unschedulable), instead of holding the
// scheduler for minutes; a pod created after it is scheduled meanwhile.
// With filterTimeout 0 the scheduler stays in the first pod's cycle, and
// both waits run out.
func TestSlowSelectorFilterTimeout(t *testing.T) {
	env := framework.Setup(t)
	class := slowSelectorSetup(env)
	env.CreateTemplate(builder.MakeTemplate("slow", builder.MakeClaim("").Request("gpu", class, 1, builder.SlowSelector(env.Driver, "index"))))
	env.CreateTemplate(builder.MakeTemplate("plain", builder.MakeClaim("").Request("gpu", class, 1)))
	env.StartScheduler(framework.SchedulerOptions{Configure: framework.UseArgs(func(args *config.StructuredDRAArgs) {
		args.FilterTimeout.Duration = time.Second
	})})

	env.CreatePod(env.MakePod("slow").ClaimFromTemplate("gpu", "slow"))
	condition := framework.PodScheduledCondition(env.WaitForPod("slow", "refused", func(pod *v1.Pod) bool {
		c := framework.PodScheduledCondition(pod)
		return c != nil && c.Status == v1.ConditionFalse
	}))
	// An error, not a verdict: the pod is retried after backoff. In
	// Kubernetes 1.35, as upstream's there, a verdict on the node.
	want := v1.PodReasonSchedulerError
	if !schedminor.FilterTimeoutIsError {
		want = v1.PodReasonUnschedulable
	}
	if condition.Reason != want || !strings.Contains(condition.Message, "timed out trying to allocate devices") {
		t.Errorf("PodScheduled condition %s: %q, want %s with Filter's timeout", condition.Reason, condition.Message, want)
	}

	env.CreatePod(env.MakePod("plain").ClaimFromTemplate("gpu", "plain"))
	env.WaitForPodScheduled("plain")
	env.VerifyAllocations()
}

// TestSlowSelectorQueueingHint: kube-scheduler runs queueing hints
// synchronously, under its scheduling queue's lock, which adding a pod to
// the queue and starting a cycle take too. A pod whose claim has a slow
// selector is unschedulable while its pool is being published (15 of its
// 16 slices are there). When the last slice comes, the slice hint would
// evaluate the selector on the pool's 2,048 devices, minutes in which no
// pod is scheduled; on its CEL budget it queues the pod after one
// evaluation, and Filter, under filterTimeout, decides. A pod created
// right after the last slice is scheduled: the queue is not held.
func TestSlowSelectorQueueingHint(t *testing.T) {
	env := framework.Setup(t)
	node := env.CreateNode("node")
	slices := slowSelectorSlices(env, node)
	env.PublishSlices(slices[:len(slices)-1]...)
	class := env.CreateClass("gpu")
	env.CreateTemplate(builder.MakeTemplate("slow", builder.MakeClaim("").Request("gpu", class, 1, builder.SlowSelector(env.Driver, "index"))))
	env.CreateTemplate(builder.MakeTemplate("plain", builder.MakeClaim("").Request("gpu", class, 1)))
	sched := env.StartScheduler(framework.SchedulerOptions{Configure: framework.UseArgs(func(args *config.StructuredDRAArgs) {
		args.FilterTimeout.Duration = time.Second
	})})

	env.CreatePod(env.MakePod("slow").ClaimFromTemplate("gpu", "slow"))
	// Rejected at once, without evaluating the selector: the pool's
	// devices do not count until all its slices are there. The pod waits
	// in the unschedulable pool for an event, and its hint.
	env.WaitForPodUnschedulable("slow", "is being updated")

	last := env.PublishSlices(slices[len(slices)-1])[0]
	// The slice's event is on its way to the queue before the pod's.
	env.WaitFor(framework.Timeout, "the scheduler to see slice "+last.Name, func(context.Context) (bool, string, error) {
		_, err := sched.CachedSlice(last.Name)
		return err == nil, "", nil
	})
	env.CreatePod(env.MakePod("plain").ClaimFromTemplate("gpu", "plain"))
	env.WaitForPodScheduled("plain")
	env.VerifyAllocations()
}

// TestSlowSelectorCommandTimeout: kubectl drasched explain and fit, for a
// pod whose claim has a selector that takes minutes to evaluate, stop at
// --timeout (1s here) and exit with status 1 and a message that names the
// flag; for a pod without it they answer within the default timeout.
func TestSlowSelectorCommandTimeout(t *testing.T) {
	env := framework.Setup(t)
	class := slowSelectorSetup(env)
	slow := builder.MakeClaim("").Request("gpu", class, 1, builder.SlowSelector(env.Driver, "index"))
	plain := builder.MakeClaim("").Request("gpu", class, 1)
	for name, claim := range map[string]*builder.ClaimWrapper{"slow": slow, "plain": plain} {
		env.CreateTemplate(builder.MakeTemplate(name, claim))
		c := *claim
		c.Name = name
		env.CreateClaim(&c)
		// No scheduler runs: the pods stay pending.
		env.CreatePod(env.MakePod(name).Claim("gpu", name))
	}
	manifest := func(template string) string {
		path := filepath.Join(t.TempDir(), template+".yaml")
		pod := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  schedulerName: %s
  resourceClaims: [{name: gpu, resourceClaimTemplateName: %s}]
  containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {claims: [{name: gpu}]}}]
`, template, framework.SchedulerName, template)
		if err := os.WriteFile(path, []byte(pod), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}

	for name, tc := range map[string]struct {
		args []string
		// want is a part of the standard output (status 0) or, with
		// fails, of the error (status 1).
		want  string
		fails bool
	}{
		"explain, slow": {
			args:  []string{"explain", "slow", "--timeout=1s"},
			want:  "kubectl-drasched: explain did not finish within --timeout=1s; raise it, or --timeout=0 for no limit",
			fails: true,
		},
		"fit, slow": {
			args:  []string{"fit", "-f", manifest("slow"), "--count=1", "--timeout=1s"},
			want:  "kubectl-drasched: fit did not finish within --timeout=1s; raise it, or --timeout=0 for no limit",
			fails: true,
		},
		"explain, plain": {
			args: []string{"explain", "plain"},
			want: "its claims fit on 1 of 1 nodes now",
		},
		"fit, plain": {
			args: []string{"fit", "-f", manifest("plain"), "--count=1"},
			want: "1 of 1 pods fit now",
		},
	} {
		t.Run(name, func(t *testing.T) {
			stdout, stderr, status := kubectlDrasched(t, env, tc.args...)
			t.Logf("kubectl drasched %s: status %d\n%s%s", strings.Join(tc.args, " "), status, stdout, stderr)
			switch {
			case tc.fails && (status != 1 || !strings.Contains(stderr, tc.want)):
				t.Errorf("status %d, error %q; want status 1 and an error with %q", status, stderr, tc.want)
			case !tc.fails && (status != 0 || !strings.Contains(stdout, tc.want)):
				t.Errorf("status %d, output %q, error %q; want status 0 and an output with %q", status, stdout, stderr, tc.want)
			}
		})
	}
}
