package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/internal/invariants"
	"github.com/drasched/drasched/internal/minor/schedminor"
	"github.com/drasched/drasched/test/integration/framework"
)

// blockLabel marks the pods the blocker plugin holds up.
const blockLabel = "integration.drasched.dev/block"

// blocker is a test-only scheduler plugin that holds up labelled pods in
// Permit or in PreBind, so that a test can delete them half-way through
// their binding cycle. It runs after the DRA plugin in both: it is enabled
// for the extension point only, which puts it behind the profile's
// multi-point plugins.
type blocker struct {
	schedminor.PreFlight
	// entered receives each blocked pod's name.
	entered chan string
	// release lets PreBind go on.
	release chan struct{}
}

const blockerName = "IntegrationBlocker"

var (
	_ fwk.PermitPlugin  = &blocker{}
	_ fwk.PreBindPlugin = &blocker{}
)

func (b *blocker) Name() string { return blockerName }

// Permit makes a labelled pod wait (as a gang-scheduling plugin would);
// only its deletion ends the wait within the test.
func (b *blocker) Permit(_ context.Context, _ fwk.CycleState, pod *v1.Pod, _ string) (*fwk.Status, time.Duration) {
	if pod.Labels[blockLabel] != "permit" {
		return nil, 0
	}
	b.entered <- pod.Name
	return fwk.NewStatus(fwk.Wait), 10 * time.Minute
}

// PreBind holds a labelled pod until the test releases it; by then the DRA
// plugin's PreBind has written the claim's allocation and reservation.
func (b *blocker) PreBind(ctx context.Context, _ fwk.CycleState, pod *v1.Pod, _ string) *fwk.Status {
	if pod.Labels[blockLabel] != "prebind" {
		return nil
	}
	b.entered <- pod.Name
	select {
	case <-b.release:
		return nil
	case <-ctx.Done():
		return fwk.AsStatus(context.Cause(ctx))
	}
}

// schedulerWithBlocker returns scheduler options that enable b.
func schedulerWithBlocker(b *blocker) framework.SchedulerOptions {
	return framework.SchedulerOptions{
		Registry: frameworkruntime.Registry{blockerName: func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
			return b, nil
		}},
		Configure: func(cfg *config.KubeSchedulerConfiguration) {
			plugins := cfg.Profiles[0].Plugins
			plugins.Permit.Enabled = append(plugins.Permit.Enabled, config.Plugin{Name: blockerName})
			plugins.PreBind.Enabled = append(plugins.PreBind.Enabled, config.Plugin{Name: blockerName})
		},
	}
}

// A pod deleted half-way through its binding cycle fails to bind, and the
// scheduler unreserves it. Whether it was waiting in Permit (its allocation
// only in the scheduler's memory) or in PreBind (allocation and reservation
// already written to the claim), no claim stays allocated or reserved for
// the deleted pod, and the device goes to the next pod.
func TestUnreserve(t *testing.T) {
	for _, stage := range []string{"permit", "prebind"} {
		t.Run(stage, func(t *testing.T) {
			env := framework.Setup(t)
			node := env.CreateNode("node")
			env.PublishSlices(env.NodeSlice(node, builder.MakeDevice("gpu-0")).Obj())
			class := env.CreateClass("gpu")
			env.CreateTemplate(builder.MakeTemplate("gpu", builder.MakeClaim("").Request("gpu", class, 1)))
			b := &blocker{entered: make(chan string, 1), release: make(chan struct{}),
				PreFlight: schedminor.PreFlight{Run: func(_ fwk.CycleState, pod *v1.Pod) *fwk.Status {
					if pod.Labels[blockLabel] != "prebind" {
						return fwk.NewStatus(fwk.Skip)
					}
					return nil
				}}}
			env.StartScheduler(schedulerWithBlocker(b))

			doomed := env.CreatePod(env.MakePod("doomed").ClaimFromTemplate("gpu", "gpu").Label(blockLabel, stage))
			select {
			case <-b.entered:
			case <-time.After(framework.Timeout):
				t.Fatalf("pod %s did not reach %s within %s", doomed.Name, stage, framework.Timeout)
			}
			claim := env.PodClaim(env.WaitForPod(doomed.Name, "told its claim", func(pod *v1.Pod) bool {
				return len(pod.Status.ResourceClaimStatuses) > 0
			}), "gpu")
			if stage == "prebind" {
				if claim.Status.Allocation == nil || !invariants.ReservedFor(claim, doomed.UID) {
					t.Fatalf("in PreBind after the DRA plugin, claim %s is not allocated and reserved for the pod: %+v", claim.Name, claim.Status)
				}
			}

			env.DeletePod(doomed.Name)
			if stage == "prebind" {
				// Only the claim controller acts while the scheduler is
				// held up: it sees the pod gone and deallocates. Releasing
				// the scheduler afterwards checks that unreserving does
				// not bring back what the controller cleaned up.
				// The controller may go on to delete the claim, whose
				// pod is gone, before the first look: that counts too.
				env.WaitFor(framework.Timeout, fmt.Sprintf("claim %s to be deallocated or deleted by the claim controller", claim.Name), func(ctx context.Context) (bool, string, error) {
					claim, err := env.Client.ResourceV1().ResourceClaims(env.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
					switch {
					case apierrors.IsNotFound(err):
						return true, "deleted", nil
					case err != nil:
						return false, "", err
					}
					return claim.Status.Allocation == nil && len(claim.Status.ReservedFor) == 0,
						fmt.Sprintf("allocation %+v, reservedFor %+v", claim.Status.Allocation, claim.Status.ReservedFor), nil
				})
				close(b.release)
			}
			// The scheduler reports the failed binding after it has
			// unreserved the pod: from here on, what it did is in the API.
			waitForFailedScheduling(env, doomed)

			env.CreatePod(env.MakePod("next").ClaimFromTemplate("gpu", "gpu"))
			assertDevice(t, env, env.WaitForPodScheduled("next"), "gpu-0")
			env.WaitForConsistentAllocations()
		})
	}
}

// waitForFailedScheduling waits for the scheduler's FailedScheduling event
// about the pod.
func waitForFailedScheduling(env *framework.Env, pod *v1.Pod) {
	selector := fields.Set{"involvedObject.uid": string(pod.UID), "reason": "FailedScheduling"}.AsSelector().String()
	env.WaitFor(framework.Timeout, fmt.Sprintf("a FailedScheduling event for pod %s", pod.Name), func(ctx context.Context) (bool, string, error) {
		events, err := env.Client.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			return false, "", err
		}
		return len(events.Items) > 0, fmt.Sprintf("%d events", len(events.Items)), nil
	})
}
