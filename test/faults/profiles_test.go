//go:build faults

package faults

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drasched/drasched/test/integration/framework"
)

// A scheduler whose profiles run StructuredDRA in one profile and the
// in-tree DynamicResources in another would allocate devices in one
// process from two views of the same claims, each blind to the other's
// allocations in flight. drasched must refuse such a configuration at
// start: exit with an error that names both plugins, before it schedules
// anything.
func TestProfilesWithDynamicResourcesRefused(t *testing.T) {
	env := framework.Setup(t)
	env.CreateNode("node")
	const inTree = "drasched-in-tree"
	// A pod of the in-tree profile, without claims: if the scheduler ran,
	// it would bind it within a second.
	canary := env.CreatePod(env.MakePod("canary").SchedulerName(inTree))

	p := startScheduler(t, env, "refused", processOptions{profiles: []map[string]any{
		shippedProfile(t),
		// kube-scheduler's default plugins, DynamicResources among them.
		{"schedulerName": inTree},
	}})
	const startTimeout = 20 * time.Second
	if !p.waitExit(startTimeout) {
		t.Errorf("drasched still runs %s after it started with a profile that runs DynamicResources beside one that runs StructuredDRA", startTimeout)
	} else {
		output := p.logTail(20)
		if p.exitCode() == 0 {
			t.Errorf("drasched exited with status 0, want an error; output:\n%s", output)
		}
		for _, want := range []string{"DynamicResources", "StructuredDRA"} {
			if !strings.Contains(output, want) {
				t.Errorf("drasched's output does not name %s:\n%s", want, output)
			}
		}
	}
	pod, err := env.Client.CoreV1().Pods(env.Namespace).Get(env.Ctx, canary.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod: %v", err)
	}
	if pod.Spec.NodeName != "" {
		t.Errorf("pod %s of profile %s was bound to %s: drasched scheduled with the profile it must refuse", pod.Name, inTree, pod.Spec.NodeName)
	}
	if written := p.proxy.requests(time.Time{}, framework.Writes); len(written) > 0 {
		t.Errorf("drasched wrote to the API before refusing its configuration:\n%s", describeRequests(written))
	}
}
