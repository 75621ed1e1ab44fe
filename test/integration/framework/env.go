package framework

import (
	"context"
	"regexp"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"
	_ "k8s.io/klog/v2/ktesting/init" // -testing.v and -testing.vmodule for the test logs
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/test/integration/controlplane"
)

// Env is one test's share of the control plane: its own namespace, its own
// DRA driver name, a context that ends with the test, and a running
// ResourceClaim controller (unless SetupOptions.NoClaimController). When
// the test ends, the cluster-scoped objects created through Env and the
// namespace's pods are removed.
//
// Tests that share the control plane must not run in parallel: each starts
// its own scheduler for the same scheduler name.
type Env struct {
	t *testing.T

	// Ctx logs to the test and is cancelled when the test ends.
	Ctx    context.Context
	Config *rest.Config
	Client kubernetes.Interface
	// Namespace is the test's namespace; Name derives cluster-scoped names
	// from it.
	Namespace string
	// Driver is the test's DRA driver name, "<namespace>.example.com".
	Driver string
}

// SetupOptions change what Setup starts; the zero value is what Setup
// does.
type SetupOptions struct {
	// NoClaimController leaves the ResourceClaim controller out, for tests
	// of what the scheduler must clean up by itself: the controller also
	// deletes the claims of pods that are gone and would hide a leak.
	NoClaimController bool
	// ControlPlane is the control plane to use instead of the shared one,
	// for tests that restart or break it. The test stops it.
	ControlPlane *controlplane.ControlPlane
}

// Setup creates a namespace on the shared control plane and starts a claim
// controller for the test. The scheduler is started separately with
// StartScheduler, because tests configure, stop and restart it.
func Setup(t *testing.T) *Env {
	t.Helper()
	return SetupWith(t, SetupOptions{})
}

// SetupWith is Setup with options.
func SetupWith(t *testing.T, opts SetupOptions) *Env {
	t.Helper()
	cp := opts.ControlPlane
	if cp == nil {
		cp = Shared(t)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)

	ns, err := cp.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: namespacePrefix(t.Name())},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	env := &Env{
		t:         t,
		Ctx:       ctx,
		Config:    cp.Config,
		Client:    cp.Client,
		Namespace: ns.Name,
		Driver:    ns.Name + ".example.com",
	}
	t.Cleanup(env.deleteNamespace)
	if opts.NoClaimController {
		return env
	}

	stop, err := StartClaimController(ctx, cp.Config)
	if err != nil {
		t.Fatalf("start claim controller: %v", err)
	}
	t.Cleanup(stop)
	return env
}

// Sub returns the Env for a subtest: the same namespace, driver and
// context, with failures and cleanups going to t.
func (env *Env) Sub(t *testing.T) *Env {
	sub := *env
	sub.t = t
	return &sub
}

// Name returns a cluster-wide unique name for a cluster-scoped object of
// this test (nodes, slices, classes, taint rules).
func (env *Env) Name(name string) string {
	return env.Namespace + "-" + name
}

// StartScheduler starts a scheduler with the drasched profile, changed by
// opts, and stops it when the test ends; Stop stops it earlier.
func (env *Env) StartScheduler(opts SchedulerOptions) *Scheduler {
	env.t.Helper()
	s, err := StartScheduler(env.Ctx, env.Config, opts)
	if err != nil {
		env.t.Fatalf("start scheduler: %v", err)
	}
	env.t.Cleanup(s.Stop)
	return s
}

// deleteNamespace removes the test's pods, so that the next test's
// scheduler does not carry them in its cache, and the namespace. No
// namespace controller runs, so the rest of the namespace's content stays
// in etcd until the control plane stops; nothing of it is scheduled again.
func (env *Env) deleteNamespace() {
	ctx := context.WithoutCancel(env.Ctx)
	if err := env.Client.CoreV1().Pods(env.Namespace).DeleteCollection(ctx,
		metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil {
		env.t.Errorf("delete pods: %v", err)
	}
	if err := env.Client.CoreV1().Namespaces().Delete(ctx, env.Namespace, metav1.DeleteOptions{}); err != nil {
		env.t.Errorf("delete namespace: %v", err)
	}
}

var nonDNS = regexp.MustCompile(`[^a-z0-9]+`)

// namespacePrefix turns a test name into a namespace GenerateName, short
// enough that "<namespace>.example.com" and "<namespace>-<name>" stay valid
// names.
func namespacePrefix(testName string) string {
	prefix := strings.Trim(nonDNS.ReplaceAllString(strings.ToLower(testName), "-"), "-")
	if len(prefix) > 30 {
		prefix = strings.Trim(prefix[:30], "-")
	}
	return prefix + "-"
}
