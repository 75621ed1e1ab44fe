package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/pkg/capacity"
	"github.com/drasched/drasched/pkg/capacity/fit"
	"github.com/drasched/drasched/test/integration/framework"
)

// TestFitPredictsScheduler: kubectl drasched fit --count N predicts K pods
// and their nodes and devices; creating N such pods makes drasched (the
// shipped profile: FirstFit, MostAllocated) bind exactly K, on those nodes,
// with those devices, and leave the others unschedulable. The nodes are
// uneven, so that where the pods go is decided by the scheduler's ranking:
// node-0 and node-1 have 1 and 3 of 8 GPUs in use, node-2 two tainted GPUs,
// node-3 is tainted NoSchedule (the pod does not tolerate it), and the
// pods ask for 1 GPU (all of them fit for N=10, node by node in the order
// of MostAllocated) or 2 GPUs on one PCIe root (N=30, more than fit).
func TestFitPredictsScheduler(t *testing.T) {
	for name, tc := range map[string]struct {
		gpus, count int
		want        int
	}{
		"one GPU, fewer than fit":             {gpus: 1, count: 10, want: 10},
		"two GPUs on one root, more than fit": {gpus: 2, count: 30, want: 8},
	} {
		t.Run(name, func(t *testing.T) {
			env := framework.Setup(t)
			class := env.CreateClass("gpu")
			nodes := env.CreateNodes(4)
			for i, node := range nodes {
				env.PublishSlices(env.NodeSlice(node, builder.Devices("gpu", 8, func(d int, w *builder.DeviceWrapper) {
					w.String("resource.kubernetes.io/pcieRoot", fmt.Sprintf("pci%d", d/2))
					if i == 2 && d >= 6 {
						w.Taint("example.com/unhealthy", resourceapi.DeviceTaintEffectNoSchedule)
					}
				})...).Obj())
			}
			taintNode(t, env, nodes[3], v1.Taint{Key: "example.com/reserved", Effect: v1.TaintEffectNoSchedule})
			env.CreateTemplate(builder.MakeTemplate("one", builder.MakeClaim("").Request("gpu", class, 1)))
			env.CreateTemplate(builder.MakeTemplate("gpus", builder.MakeClaim("").Request("gpus", class, int64(tc.gpus)).MatchAttribute("resource.kubernetes.io/pcieRoot")))
			env.StartScheduler(framework.SchedulerOptions{})

			// Load: 1 GPU on node-0, 3 on node-1, one pod at a time.
			for i, n := range []int{1, 3} {
				for j := range n {
					name := fmt.Sprintf("load-%d-%d", i, j)
					env.CreatePod(env.MakePod(name).ClaimFromTemplate("gpu", "one").NodeSelector(v1.LabelHostname, nodes[i].Name))
					env.WaitForPodScheduled(name)
				}
			}

			manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: job}
spec:
  schedulerName: %s
  terminationGracePeriodSeconds: 0
  resourceClaims:
  - {name: gpus, resourceClaimTemplateName: gpus}
  containers:
  - name: c
    image: registry.k8s.io/pause:3.10
    resources:
      requests: {cpu: 100m}
      claims: [{name: gpus}]
`, framework.SchedulerName)
			w, err := fit.Load([]byte(manifest), env.Namespace)
			if err != nil {
				t.Fatal(err)
			}
			args, err := fit.ProfileArgs(framework.RepoFile("config", "scheduler-config.yaml"), "")
			if err != nil {
				t.Fatal(err)
			}
			snap, err := capacity.Read(env.Ctx, env.Client, capacity.ReadOptions{Pods: true})
			if err != nil {
				t.Fatal(err)
			}
			res, err := fit.Fit(env.Ctx, snap, w, fit.Options{Count: tc.count, Args: args, Template: func(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaimTemplate, error) {
				return env.Client.ResourceV1().ResourceClaimTemplates(namespace).Get(ctx, name, metav1.GetOptions{})
			}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Fits != tc.want {
				t.Errorf("fit predicts %d, want %d", res.Fits, tc.want)
			}
			t.Logf("fit predicts %d of %d: %v", res.Fits, tc.count, res.Nodes)
			predicted := map[string][]string{}
			for _, p := range res.Placements {
				for _, d := range p.Devices {
					predicted[p.Node] = append(predicted[p.Node], d.Device)
				}
			}

			// The same pods, for real.
			var pods []*builder.PodWrapper
			for i := range tc.count {
				pods = append(pods, env.MakePod(fmt.Sprintf("job-%d", i)).Containers(builder.Container("c", map[v1.ResourceName]string{v1.ResourceCPU: "100m"})).ClaimFromTemplate("gpus", "gpus"))
			}
			env.CreatePods(pods)
			var bound []v1.Pod
			env.WaitFor(2*time.Minute, "every job pod bound or unschedulable", func(ctx context.Context) (bool, string, error) {
				all, unschedulable, pending, err := env.Pods(ctx)
				if err != nil {
					return false, "", err
				}
				bound = slices.DeleteFunc(all, func(p v1.Pod) bool { return !strings.HasPrefix(p.Name, "job-") })
				return len(bound)+len(unschedulable) == tc.count, fmt.Sprintf("%d bound, %d unschedulable, %d pending", len(bound), len(unschedulable), len(pending)), nil
			})
			actual := map[string][]string{}
			for i := range bound {
				claim := env.PodClaim(&bound[i], "gpus")
				for _, r := range claim.Status.Allocation.Devices.Results {
					actual[bound[i].Spec.NodeName] = append(actual[bound[i].Spec.NodeName], r.Device)
				}
			}
			for _, devices := range predicted {
				slices.Sort(devices)
			}
			for _, devices := range actual {
				slices.Sort(devices)
			}
			if len(bound) != res.Fits {
				t.Errorf("%d of %d pods bound, fit predicted %d", len(bound), tc.count, res.Fits)
			}
			if diff := cmp.Diff(predicted, actual); diff != "" {
				t.Errorf("devices per node (-fit +scheduler):\n%s", diff)
			}
			env.VerifyAllocations()
		})
	}
}

func taintNode(t *testing.T, env *framework.Env, node *v1.Node, taint v1.Taint) {
	t.Helper()
	node, err := env.Client.CoreV1().Nodes().Get(env.Ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Spec.Taints = append(node.Spec.Taints, taint)
	if _, err := env.Client.CoreV1().Nodes().Update(env.Ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
