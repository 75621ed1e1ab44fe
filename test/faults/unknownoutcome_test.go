//go:build faults

package faults

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/test/integration/framework"
)

// A claim write whose outcome the scheduler cannot know: the status update
// of claim a (allocation and reservation for pod a) reaches the apiserver
// and takes effect, but the scheduler gets a 504 or a broken connection,
// and ResourceClaim watch events reach it late, so its cache does not show
// the write either. Pod b, created right after the fault, competes for the
// only device. The device must not go to both claims: until the cache says
// what became of the write, its devices are not free.
func TestUnknownOutcomeWrite(t *testing.T) {
	for name, tc := range map[string]struct {
		fault      fault
		watchDelay time.Duration
	}{
		"504, watch 100ms late":           {fault: gatewayTimeout, watchDelay: 100 * time.Millisecond},
		"unexpected EOF, watch 1s late":   {fault: unexpectedEOF, watchDelay: time.Second},
		"connection reset, watch 5s late": {fault: connectionReset, watchDelay: 5 * time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			env := framework.Setup(t)
			node := env.CreateNode("node")
			env.PublishSlices(env.NodeSlice(node, builder.MakeDevice("gpu-0")).Obj())
			class := env.CreateClass("gpu")
			env.CreateClaim(builder.MakeClaim("a").Request("gpu", class, 1))
			env.CreateClaim(builder.MakeClaim("b").Request("gpu", class, 1))
			f := newFaults(1, tc.watchDelay, tc.watchDelay)
			f.failStatusUpdate(env.Namespace, "a", tc.fault)
			sched := env.StartScheduler(framework.SchedulerOptions{WrapConfig: f.wrap})

			env.CreatePod(env.MakePod("a").Claim("gpu", "a"))
			t.Logf("injected %s", waitForInjection(t, f))
			env.CreatePod(env.MakePod("b").Claim("gpu", "b"))

			settle(t, env, sched, 1, max(3*time.Second, 2*tc.watchDelay), time.Minute)
		})
	}
}

// The same at load: 50 pods with a claim each compete for 20 devices on 4
// nodes; 8 of the first 20 claim status updates, chosen by a seeded draw,
// take effect but their answers are lost, and ResourceClaim watch events
// arrive 100 ms to 2 s late. Exactly 20 pods are bound, each device is in
// one claim, and the tracker agrees with the API.
func TestUnknownOutcomeWriteLoad(t *testing.T) {
	const (
		seed           = 42
		nodes          = 4
		devicesPerNode = 5
		numPods        = 50
		faulted        = 8
	)
	env := framework.Setup(t)
	for _, node := range env.CreateNodes(nodes) {
		env.PublishSlices(env.NodeSlice(node, builder.Devices("gpu", devicesPerNode, nil)...).Obj())
	}
	class := env.CreateClass("gpu")
	f := newFaults(seed, 100*time.Millisecond, 2*time.Second)
	random := rand.New(rand.NewPCG(seed, seed))
	kinds := []fault{gatewayTimeout, unexpectedEOF, connectionReset}
	for i, n := range random.Perm(nodes * devicesPerNode)[:faulted] {
		f.failNthStatusUpdate(n+1, kinds[i%len(kinds)])
	}
	var pods []*builder.PodWrapper
	for i := range numPods {
		name := fmt.Sprintf("claim-%02d", i)
		env.CreateClaim(builder.MakeClaim(name).Request("gpu", class, 1))
		pods = append(pods, env.MakePod(fmt.Sprintf("pod-%02d", i)).Claim("gpu", name))
	}
	sched := env.StartScheduler(framework.SchedulerOptions{WrapConfig: f.wrap})

	env.CreatePods(pods)
	settle(t, env, sched, nodes*devicesPerNode, 5*time.Second, settleTimeout)
	injected := f.Injected()
	for _, i := range injected {
		t.Logf("injected %s", i)
	}
	if len(injected) != faulted {
		t.Errorf("%d faults injected, want %d", len(injected), faulted)
	}
}

// waitForInjection waits for the next injected fault.
func waitForInjection(t *testing.T, f *faults) injection {
	t.Helper()
	select {
	case i := <-f.injections:
		return i
	case <-time.After(framework.Timeout):
		t.Fatalf("no fault injected within %s", framework.Timeout)
		return injection{}
	}
}
