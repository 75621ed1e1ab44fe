//go:build faults

package faults

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/test/integration/framework"
)

// settleTimeout bounds the wait for the end state of a scenario. It is
// below the five minutes after which kube-scheduler retries every
// unschedulable pod whatever happened: a pod that fits must be bound by an
// event that concerns it, not by that flush.
const settleTimeout = 2 * time.Minute

// endState is what the API (and the scheduler's tracker, if it runs in this
// process) says at one moment.
type endState struct {
	bound, unschedulable, pending []v1.Pod
	// claims are the namespace's claims.
	claims []resourceapi.ResourceClaim
	// apiDevices are the devices of all allocated claims of the cluster,
	// exclusive ones only (no admin access, no shares): what the tracker
	// must count as allocated.
	apiDevices sets.Set[string]

	tracked        bool // whether the next two are known
	inFlight       []types.UID
	trackerDevices sets.Set[string]
}

func readState(ctx context.Context, env *framework.Env, sched *framework.Scheduler) (*endState, error) {
	var s endState
	var err error
	if s.bound, s.unschedulable, s.pending, err = env.Pods(ctx); err != nil {
		return nil, err
	}
	// The tracker first: the API is read after it, so that the API is at
	// least as new and a settled tracker matches it.
	if sched != nil {
		inFlight, allocated, err := sched.TrackerState()
		if err != nil {
			return nil, err
		}
		s.tracked, s.inFlight, s.trackerDevices = true, inFlight, sets.New[string]()
		for id := range allocated {
			s.trackerDevices.Insert(id.String())
		}
	}
	claims, err := env.Client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list claims: %w", err)
	}
	s.apiDevices = sets.New[string]()
	for _, claim := range claims.Items {
		if claim.Namespace == env.Namespace {
			s.claims = append(s.claims, claim)
		}
		if claim.Status.Allocation == nil {
			continue
		}
		for _, result := range claim.Status.Allocation.Devices.Results {
			if ptr.Deref(result.AdminAccess, false) || result.ShareID != nil {
				continue
			}
			s.apiDevices.Insert(result.Driver + "/" + result.Pool + "/" + result.Device)
		}
	}
	return &s, nil
}

// unsettled says what the scheduler still has to do, or "" if nothing.
func (s *endState) unsettled() string {
	var todo []string
	if len(s.pending) > 0 {
		todo = append(todo, fmt.Sprintf("%d pods neither bound nor unschedulable", len(s.pending)))
	}
	if reserved := s.reservedForUnbound(); len(reserved) > 0 {
		todo = append(todo, reserved...)
	}
	if s.tracked {
		if len(s.inFlight) > 0 {
			todo = append(todo, fmt.Sprintf("tracker has claims in flight: %v", s.inFlight))
		}
		if !s.trackerDevices.Equal(s.apiDevices) {
			todo = append(todo, fmt.Sprintf("tracker counts devices %v as allocated that no allocated claim holds and misses %v",
				sets.List(s.trackerDevices.Difference(s.apiDevices)), sets.List(s.apiDevices.Difference(s.trackerDevices))))
		}
	}
	return strings.Join(todo, "; ")
}

// reservedForUnbound lists the claims that are reserved for a pod that is
// not bound. Once the scheduler is done, a reservation is either that of a
// bound pod or has been rolled back.
func (s *endState) reservedForUnbound() []string {
	bound := sets.New[types.UID]()
	for _, pod := range s.bound {
		bound.Insert(pod.UID)
	}
	var problems []string
	for _, claim := range s.claims {
		for _, consumer := range claim.Status.ReservedFor {
			if consumer.APIGroup == "" && consumer.Resource == "pods" && !bound.Has(consumer.UID) {
				problems = append(problems, fmt.Sprintf("claim %s is reserved for pod %s, which is not bound", klog.KObj(&claim), consumer.Name))
			}
		}
	}
	return problems
}

// fingerprint changes whenever a pod changes state or a claim its
// allocation.
func (s *endState) fingerprint() string {
	var parts []string
	for _, pod := range s.bound {
		parts = append(parts, "bound "+pod.Name+"@"+pod.Spec.NodeName)
	}
	for _, pod := range s.unschedulable {
		parts = append(parts, "unschedulable "+pod.Name)
	}
	for _, claim := range s.claims {
		parts = append(parts, fmt.Sprintf("claim %s %s allocated=%t reserved=%d", claim.Name, claim.UID, claim.Status.Allocation != nil, len(claim.Status.ReservedFor)))
	}
	slices.Sort(parts)
	return strings.Join(append(parts, sets.List(s.apiDevices)...), ",")
}

func (s *endState) String() string {
	return fmt.Sprintf("%d bound, %d unschedulable, %d pending; %s", len(s.bound), len(s.unschedulable), len(s.pending), s.unsettled())
}

// settle waits until the scheduler has settled: no pod is waiting to be
// scheduled, no claim is reserved for an unbound pod and the tracker (if
// sched is set) agrees with the API, all of it unchanged for window, or
// at once when wantBound pods are bound. Then it checks the end state with
// verifyEndState. A scenario that does not settle within timeout fails
// with the last state, checked all the same.
func settle(t *testing.T, env *framework.Env, sched *framework.Scheduler, wantBound int, window, timeout time.Duration) {
	t.Helper()
	var last *endState
	var lastErr error
	var since time.Time
	var seen string
	deadline := time.Now().Add(timeout)
	for {
		// Each read has its own deadline, so that the last one before the
		// timeout still reads a whole state.
		ctx, cancel := context.WithTimeout(env.Ctx, 30*time.Second)
		s, err := readState(ctx, env, sched)
		cancel()
		done := false
		switch {
		case err != nil:
			lastErr = err
		case s.unsettled() != "":
			last, lastErr, since = s, nil, time.Time{}
		case len(s.bound) == wantBound:
			last, lastErr, done = s, nil, true
		default:
			last, lastErr = s, nil
			if p := s.fingerprint(); since.IsZero() || p != seen {
				since, seen = time.Now(), p
			}
			done = time.Since(since) >= window
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			if last == nil {
				t.Fatalf("no state read within %s: %v", timeout, lastErr)
			}
			t.Errorf("the scheduler did not settle within %s; last state: %s (then: %v)", timeout, last, lastErr)
			break
		}
		select {
		case <-env.Ctx.Done():
			t.Fatalf("test ended while waiting for the scheduler to settle: %v", context.Cause(env.Ctx))
		case <-time.After(100 * time.Millisecond):
		}
	}
	verifyEndState(t, env, last, wantBound)
}

// verifyEndState checks a settled state: the invariants of
// internal/invariants (bound pods' claims allocated on their node
// and reserved for them, no reservation for a pod that is gone, no device
// allocated twice, no capacity or counter overcommitted), claims reserved
// only for bound pods, exactly wantBound pods bound and the rest
// unschedulable, and the tracker holding nothing in flight and counting
// exactly the API's allocated devices.
func verifyEndState(t *testing.T, env *framework.Env, s *endState, wantBound int) {
	t.Helper()
	problems, err := env.CheckAllocations(env.Ctx)
	if err != nil {
		t.Fatalf("check allocations: %v", err)
	}
	for _, problem := range problems {
		t.Errorf("invariant violated: %s", problem)
	}
	for _, problem := range s.reservedForUnbound() {
		t.Errorf("invariant violated: %s", problem)
	}
	if len(s.bound) != wantBound {
		var names []string
		for _, pod := range s.bound {
			names = append(names, pod.Name+" on "+pod.Spec.NodeName)
		}
		if len(names) > 5 {
			names = append(names[:5], "...")
		}
		t.Errorf("%d pods bound (%s), want %d: as many as fit", len(s.bound), strings.Join(names, ", "), wantBound)
	}
	if len(s.pending) > 0 {
		t.Errorf("%d pods neither bound nor unschedulable", len(s.pending))
	}
	if s.tracked {
		if len(s.inFlight) > 0 {
			t.Errorf("the tracker still has claims in flight at quiescence: %v", s.inFlight)
		}
		if extra := s.trackerDevices.Difference(s.apiDevices); extra.Len() > 0 {
			t.Errorf("the tracker counts devices as allocated that no allocated claim holds: %v", sets.List(extra))
		}
		if missing := s.apiDevices.Difference(s.trackerDevices); missing.Len() > 0 {
			t.Errorf("the tracker misses allocated devices: %v", sets.List(missing))
		}
	}
}

// claimDevices returns the devices allocated to a claim, as
// "pool/device", nil if it is not allocated.
func claimDevices(claim *resourceapi.ResourceClaim) []string {
	if claim.Status.Allocation == nil {
		return nil
	}
	var devices []string
	for _, result := range claim.Status.Allocation.Devices.Results {
		devices = append(devices, result.Pool+"/"+result.Device)
	}
	return devices
}
