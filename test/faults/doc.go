// Package faults runs the drasched scheduler against real parts, as
// test/integration does, and breaks what lies between them: answers to
// claim writes that are lost after the write landed, claim watches that
// deliver seconds late, claims deleted and recreated under the same name
// while a pod binds, events that arrive while a pod is being scheduled, a
// leader paused past its lease, kube-apiserver restarted and the scheduler
// killed in the middle of a load. Every scenario ends with the invariants
// checked against the API (internal/invariants: no device in two
// claims, no counter overcommitted, reservations only for existing pods),
// plus: claims are reserved only for bound pods, every pod that fits is
// bound without waiting for the scheduler's periodic flush of
// unschedulable pods, and, for a scheduler in this process, the claim
// tracker holds nothing in flight and counts exactly the devices the API's
// allocated claims hold.
//
// Scenarios with leader election, SIGSTOP and SIGKILL run the drasched
// binary, built from this tree by the first test that needs it (into
// _output/faults), as child processes whose API traffic passes through a
// proxy in the test process; the others run kube-scheduler in-process with
// a fault-injecting transport (framework.SchedulerOptions.WrapConfig).
// Every fault comes at a point the test controls: a
// framework.RequestGate holds the N-th request of a kind (and every later
// one) while the test kills, stops or restarts, so what the scheduler had
// done is known by construction, on a quiet machine as on a loaded one.
// Watch delays are fixed, or drawn from a seeded source.
//
// The tests are behind the build tag "faults": they take minutes and must
// not run beside the other integration tests on a small machine, which is
// what `go test ./...` would do. `make test` runs them after `go test
// ./...`:
//
//	make test-faults                                  # go test -tags faults ./test/faults/...
//	go test -tags faults ./test/faults/... -run TestLeaderHandover -args -testing.v=4
package faults
