// Package integration runs the drasched scheduler profile against real
// parts, all in the test process: kube-apiserver with an embedded etcd
// and RBAC (one per test binary, started by the first test that needs it),
// the ResourceClaim controller of kube-controller-manager, and
// kube-scheduler running as drasched's ServiceAccount with the permissions
// of config/scheduler/rbac.yaml.
// Nodes are plain Node objects, since no kubelet runs: the scheduler binds
// pods, nothing starts them. Tests check API effects (claim status,
// finalizers, reservations, bindings, pod conditions), never plugin
// internals.
//
// Each test gets its own namespace, DRA driver name ("<namespace>.example.com"),
// claim controller and scheduler (framework.Setup, Env.StartScheduler);
// cluster-scoped objects are named after the namespace and removed when the
// test ends. Tests must not run in parallel: every scheduler serves the same
// scheduler name.
//
// The drasched profile is the shipped config/scheduler-config.yaml
// (framework.DraschedConfiguration): StructuredDRA in place of the in-tree
// DynamicResources. framework.UseAllocator switches its allocator to
// upstream's for A/B tests.
//
//	go test ./test/integration/... -run TestRace
//	go test ./test/integration/... -run TestRace -args -testing.v=5 -control-plane-log
//
// -testing.v sets the verbosity of the scheduler's and the claim
// controller's logs, which go to the test (default 2); -control-plane-log
// shows what kube-apiserver and etcd log.
package integration
