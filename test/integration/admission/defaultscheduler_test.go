package admission

import (
	"os"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	kubeschedulerscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/test/integration/framework"
)

// TestDefaultSchedulerWithoutDynamicResources runs the cluster's own
// scheduler with config/default-scheduler-config.yaml and gives it a pod
// with a claim from a namespace a cluster admin exempted from
// config/admission, the one way left for such a pod to reach it. The
// scheduler binds the pod but allocates nothing: no device can go to two
// claims, and the kubelet will not start the pod. kube-scheduler's stock
// profile, for comparison, allocates a device: next to drasched, that is
// the race config/admission and this profile prevent.
func TestDefaultSchedulerWithoutDynamicResources(t *testing.T) {
	env := framework.Setup(t)
	applyAdmission(t, env, shippedPolicies...)
	exemptNamespace(env)

	nodes := env.CreateNodes(1)
	env.PublishSlices(env.NodeSlice(nodes[0], builder.Devices("gpu", 2, nil)...).Obj())
	class := env.CreateClass("gpu")
	env.CreateTemplate(builder.MakeTemplate("one-gpu", builder.MakeClaim("").Request("gpu", class, 1)))

	shipped, err := os.ReadFile(framework.RepoFile("config", "default-scheduler-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		config        []byte
		pod           string
		wantAllocated bool
	}{
		{
			name: "stock profile",
			pod:  "stray-stock",
			config: []byte(`
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
`),
			wantAllocated: true,
		},
		{name: "default-scheduler-config.yaml", config: shipped, pod: "stray-shipped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := env.Sub(t)
			var cfg config.KubeSchedulerConfiguration
			if _, _, err := kubeschedulerscheme.Codecs.UniversalDecoder().Decode(tc.config, nil, &cfg); err != nil {
				t.Fatal(err)
			}
			// The scheduler of the test framework, with the identity and
			// RBAC of drasched's (the same as kube-scheduler's), with
			// the profiles of the configuration only.
			env.StartScheduler(framework.SchedulerOptions{Configure: func(c *config.KubeSchedulerConfiguration) {
				c.Profiles = cfg.Profiles
			}})

			pod := env.CreatePod(makePod(tc.pod).ClaimFromTemplate("gpu", "one-gpu"))
			if pod.Spec.SchedulerName != v1.DefaultSchedulerName {
				t.Fatalf("schedulerName %q, want %s in an exempt namespace", pod.Spec.SchedulerName, v1.DefaultSchedulerName)
			}
			env.WaitForPodScheduled(pod.Name)
			waitScheduledBy(t, env, pod.Name, v1.DefaultSchedulerName)
			// The claim controller creates the claim from the template
			// whether or not the pod is scheduled; once the pod is
			// bound, the scheduler is done with it.
			pod = env.WaitForPod(pod.Name, "given its claim", func(p *v1.Pod) bool { return len(p.Status.ResourceClaimStatuses) > 0 })
			claim := env.PodClaim(pod, "gpu")
			if allocated := claim.Status.Allocation != nil; allocated != tc.wantAllocated {
				t.Errorf("claim %s allocated: %v, want %v (allocation %+v, reservedFor %+v)",
					claim.Name, allocated, tc.wantAllocated, claim.Status.Allocation, claim.Status.ReservedFor)
			}
			if !tc.wantAllocated && len(claim.Status.ReservedFor) > 0 {
				t.Errorf("claim %s reserved for %+v, want no one", claim.Name, claim.Status.ReservedFor)
			}
		})
	}
}
