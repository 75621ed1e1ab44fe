//go:build faults

package faults

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/test/integration/framework"
)

// A claim deleted and recreated under the same name while its pod waits in
// PreBind, before StructuredDRA writes anything. The allocation Reserve
// made belongs to the old claim, whose request selected the device of
// model "old"; the new claim selects model "new". Whatever PreBind does on
// finding the name taken by another UID, the new claim must not get the
// old one's allocation, and the old UID must not stay in flight: the pod
// ends bound with the new claim allocated as it asks (or unschedulable
// with nothing written), and the tracker holds nothing in flight.
func TestClaimRecreatedDuringPreBind(t *testing.T) {
	env := framework.Setup(t)
	node := env.CreateNode("node")
	env.PublishSlices(env.NodeSlice(node,
		builder.MakeDevice("gpu-0").String("model", "old"),
		builder.MakeDevice("gpu-1").String("model", "new"),
	).Obj())
	class := env.CreateClass("gpu")
	model := func(value string) string {
		return fmt.Sprintf("device.attributes[%q].model == %q", env.Driver, value)
	}
	old := env.CreateClaim(builder.MakeClaim("claim").Request("gpu", class, 1, model("old")))
	g := newGate()
	sched := env.StartScheduler(schedulerWithGate(g))

	env.CreatePod(env.MakePod("pod").Claim("gpu", "claim").Label(holdLabel, "PreBind"))
	g.waitEntered(t)
	claims := env.Client.ResourceV1().ResourceClaims(env.Namespace)
	if err := claims.Delete(env.Ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete claim: %v", err)
	}
	// Nothing was written yet, so no finalizer holds the claim.
	env.WaitFor(framework.Timeout, "the old claim to be gone", func(ctx context.Context) (bool, string, error) {
		_, err := claims.Get(ctx, old.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err), nil
	})
	recreated := env.CreateClaim(builder.MakeClaim("claim").Request("gpu", class, 1, model("new")))
	t.Logf("claim recreated: UID %s, was %s", recreated.UID, old.UID)
	// PreBind goes on once the scheduler's claim cache has the new claim:
	// the scenario is a claim replaced while PreBind waits, not one
	// replaced behind the scheduler's back.
	env.WaitFor(framework.Timeout, "the recreated claim in the scheduler's cache", func(context.Context) (bool, string, error) {
		cached, err := sched.CachedClaim(env.Namespace, recreated.Name)
		if err != nil {
			return false, err.Error(), nil
		}
		return cached.UID == recreated.UID, "UID " + string(cached.UID), nil
	})
	close(g.release)

	settle(t, env, sched, 1, 3*time.Second, 30*time.Second)
	claim, err := claims.Get(env.Ctx, recreated.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get claim: %v", err)
	}
	if claim.UID != recreated.UID {
		t.Fatalf("claim %s has UID %s, want the recreated %s", claim.Name, claim.UID, recreated.UID)
	}
	want := node.Name + "/gpu-1"
	if devices := claimDevices(claim); claim.Status.Allocation != nil && !slices.Equal(devices, []string{want}) {
		t.Errorf("the recreated claim, which selects model \"new\", is allocated %v, want [%s]: it got the old claim's allocation", devices, want)
	}
	if claim.Status.Allocation == nil && slices.Contains(claim.Finalizers, resourceapi.Finalizer) {
		t.Errorf("the recreated claim is not allocated but has the finalizer %s", resourceapi.Finalizer)
	}
}
