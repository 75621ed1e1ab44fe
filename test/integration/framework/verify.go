package framework

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drasched/drasched/internal/invariants"
)

// VerifyAllocations fails the test with every violation of the invariants
// of invariants.Check for the test's namespace: bound pods have their claims
// allocated on their node and reserved for them, no claim is held for a pod
// that is gone, and no device is allocated twice or beyond its capacity or
// counters.
func (env *Env) VerifyAllocations() {
	env.t.Helper()
	problems, err := env.CheckAllocations(env.Ctx)
	if err != nil {
		env.t.Fatalf("check allocations: %v", err)
	}
	for _, problem := range problems {
		env.t.Error(problem)
	}
}

// WaitForConsistentAllocations waits until VerifyAllocations would pass:
// after pods were deleted, the claim controller needs a moment to remove
// their reservations and deallocate their claims.
func (env *Env) WaitForConsistentAllocations() {
	env.t.Helper()
	env.WaitFor(Timeout, "consistent allocations", func(ctx context.Context) (bool, string, error) {
		problems, err := env.CheckAllocations(ctx)
		return err == nil && len(problems) == 0, strings.Join(problems, "; "), err
	})
}

// CheckAllocations reads the cluster's state and returns the violations of
// invariants.Check for the test's namespace.
func (env *Env) CheckAllocations(ctx context.Context) ([]string, error) {
	pods, err := env.Client.CoreV1().Pods(env.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	claims, err := env.Client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list claims: %w", err)
	}
	nodes, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	slices, err := env.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list slices: %w", err)
	}
	errs := invariants.Check(invariants.Cluster{Pods: pods.Items, Claims: claims.Items, Nodes: nodes.Items, Slices: slices.Items},
		invariants.Options{Namespace: env.Namespace, GonePods: true})
	problems := make([]string, len(errs))
	for i, err := range errs {
		problems[i] = err.Error()
	}
	return problems, nil
}
