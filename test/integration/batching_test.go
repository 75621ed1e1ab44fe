package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/kubernetes/pkg/features"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/internal/minor/schedminor"
	"github.com/drasched/drasched/test/integration/framework"
)

// Opportunistic batching (KEP-5598) gives a pod the node that the ranking
// of the previous pod with the same signature puts next, after filtering
// only that node; StructuredDRA signs pods whose claims come from one
// template (pkg/plugins/dra/sign.go). TestBatchingSamePlacements runs the
// same sequence of such pods through the scheduler with batching off and
// on, on identical clusters filled at random, and requires the same node
// and the same devices for every pod, in order, and that batching was
// used.
//
// The clusters are made so that no two nodes ever score the same: the
// scheduler breaks ties at random, which would make even two runs without
// batching differ. With MostAllocated device scoring the pod goes to the
// node that is fullest once it has the pod's devices; the random fills
// are drawn until those shares differ by several points between any two
// nodes, more than the other plugins' scores (the pods' default CPU and
// memory requests on large nodes) can make up.
func TestBatchingSamePlacements(t *testing.T) {
	for name, tc := range map[string]struct {
		seed uint64
		gpus int
	}{
		"one-gpu-pods": {seed: 1, gpus: 1},
		"two-gpu-pods": {seed: 2, gpus: 2},
	} {
		t.Run(name, func(t *testing.T) {
			fill := drawFill(rand.New(rand.NewPCG(tc.seed, 0)), tc.gpus)
			var runs [2][]placement
			var hints [2]float64
			for i, batching := range []bool{false, true} {
				t.Run(fmt.Sprintf("batching=%v", batching), func(t *testing.T) {
					featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.OpportunisticBatching, batching)
					before := hintsUsed(t)
					runs[i] = placeSequence(t, fill, tc.gpus)
					hints[i] = hintsUsed(t) - before
				})
			}
			if t.Failed() {
				return
			}
			if diff := cmp.Diff(runs[0], runs[1]); diff != "" {
				t.Errorf("placements without batching (-) and with (+):\n%s", diff)
			}
			// The first pod and each pod after a batch expired (500 ms)
			// are scheduled in full; most others should have had a hint
			// (in 1.36, only those after a pod that filled its node).
			if hints[0] != 0 {
				t.Errorf("%v hints used with batching off", hints[0])
			}
			switch pods := len(runs[1]); {
			case hints[1] == 0:
				t.Errorf("none of %d pods scheduled on a batch's hint", pods)
			case schedminor.BatchRescoresLastNode && hints[1] < float64(pods)/2:
				t.Errorf("%v of %d pods scheduled on a batch's hint, want at least half", hints[1], pods)
			}
			t.Logf("%d pods, %v on a hint", len(runs[1]), hints[1])
		})
	}
}

// nodeFill is one node of a cluster: its GPUs and how many are in use.
type nodeFill struct{ total, used int }

// drawFill draws eight nodes of 6 to 16 GPUs, each with some in use and
// room for at least one pod of gpus, until the share of GPUs in use once a
// pod is placed differs by at least 4 points between any two nodes.
func drawFill(r *rand.Rand, gpus int) []nodeFill {
	for {
		fill := make([]nodeFill, 8)
		var shares []int
		for i := range fill {
			total := 6 + r.IntN(11)
			used := 1 + r.IntN(total-gpus)
			fill[i] = nodeFill{total: total, used: used}
			shares = append(shares, (used+gpus)*100/total)
		}
		slices.Sort(shares)
		distinct := true
		for i := 1; i < len(shares); i++ {
			if shares[i]-shares[i-1] < 4 {
				distinct = false
			}
		}
		if distinct {
			return fill
		}
	}
}

// placement is where a pod of the sequence went: the index of its node in
// the fill, or -1, and its devices.
type placement struct {
	Node    int
	Devices []string
}

// placeSequence makes the cluster of the fill in a namespace of its own,
// fills it with pods holding claims by name, then creates pods with a
// claim from one template, gpus each, enough for every free GPU and one
// more, and lets them be scheduled one after the other, in order: they are
// created with a scheduling gate, and the gates are removed one by one
// once every pod's claim exists. It returns where each pod went.
func placeSequence(t *testing.T, fill []nodeFill, gpus int) []placement {
	env := framework.Setup(t)
	class := env.CreateClass("gpu")
	nodes := make([]*v1.Node, len(fill))
	index := map[string]int{}
	pods := 1
	for i, f := range fill {
		nodes[i] = env.CreateNode(fmt.Sprintf("node-%d", i))
		index[nodes[i].Name] = i
		env.PublishSlices(env.NodeSlice(nodes[i], builder.Devices("gpu", f.total, nil)...).Obj())
		pods += (f.total - f.used) / gpus
	}
	env.CreateTemplate(builder.MakeTemplate("gpus", builder.MakeClaim("").Request("gpu", class, int64(gpus))))
	sched := env.StartScheduler(framework.SchedulerOptions{Configure: framework.WithoutDefaultSpreading})

	// The fill: on each node a pod whose claim takes the GPUs in use.
	for i, f := range fill {
		name := fmt.Sprintf("fill-%d", i)
		claim := env.CreateClaim(builder.MakeClaim(name).Request("gpu", class, int64(f.used)))
		env.CreatePod(env.MakePod(name).Claim("gpu", claim.Name).NodeSelector(v1.LabelHostname, nodes[i].Name))
	}
	for i := range fill {
		env.WaitForPodScheduled(fmt.Sprintf("fill-%d", i))
	}

	const gate = "test.drasched.dev/sequence"
	names := make([]string, pods)
	for i := range names {
		names[i] = fmt.Sprintf("pod-%02d", i)
		env.CreatePod(env.MakePod(names[i]).ClaimFromTemplate("gpu", "gpus").SchedulingGate(gate))
	}
	env.WaitFor(framework.Timeout, "the claims of all pods", func(ctx context.Context) (bool, string, error) {
		list, err := env.Client.CoreV1().Pods(env.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		named := 0
		for _, pod := range list.Items {
			if strings.HasPrefix(pod.Name, "pod-") && len(pod.Status.ResourceClaimStatuses) == 1 {
				named++
			}
		}
		return named == pods, fmt.Sprintf("%d of %d pods with their claim", named, pods), nil
	})
	// The scheduler signs a pod when its gate goes: by then its claim
	// must be in the scheduler's claim cache.
	env.WaitFor(framework.Timeout, "the pods' claims in the scheduler's cache", func(ctx context.Context) (bool, string, error) {
		list, err := env.Client.CoreV1().Pods(env.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		cached := 0
		for _, pod := range list.Items {
			if !strings.HasPrefix(pod.Name, "pod-") {
				continue
			}
			for _, status := range pod.Status.ResourceClaimStatuses {
				if status.ResourceClaimName != nil {
					if _, err := sched.CachedClaim(env.Namespace, *status.ResourceClaimName); err == nil {
						cached++
					}
				}
			}
		}
		return cached == pods, fmt.Sprintf("%d of %d claims cached", cached, pods), nil
	})
	for _, name := range names {
		patch := fmt.Sprintf(`{"spec":{"schedulingGates":[{"$patch":"delete","name":%q}]}}`, gate)
		if _, err := env.Client.CoreV1().Pods(env.Namespace).Patch(env.Ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatalf("remove the gate of pod %s: %v", name, err)
		}
	}

	// Every pod but the last fits.
	result := make([]placement, pods)
	for i, name := range names[:pods-1] {
		pod := env.WaitForPodScheduled(name)
		claim := env.PodClaim(pod, "gpu")
		result[i].Node = index[pod.Spec.NodeName]
		for _, device := range claim.Status.Allocation.Devices.Results {
			result[i].Devices = append(result[i].Devices, device.Device)
		}
	}
	env.WaitForPodUnschedulable(names[pods-1])
	result[pods-1].Node = -1
	env.VerifyAllocations()
	return result
}

// hintsUsed is the number of pods that the scheduler in this process
// scheduled on a batch's hint so far.
func hintsUsed(t *testing.T) float64 {
	t.Helper()
	if schedmetrics.BatchAttemptStats == nil {
		// Registered by the first scheduler.New.
		return 0
	}
	value, err := testutil.GetCounterMetricValue(schedmetrics.BatchAttemptStats.WithLabelValues(framework.SchedulerName, schedmetrics.BatchAttemptHintUsed))
	if err != nil {
		t.Fatalf("read %s: %v", "scheduler_batch_attempts_total", err)
	}
	return value
}
