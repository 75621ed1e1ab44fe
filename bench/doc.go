// Package bench holds the benchmark runners that compare drasched with the
// upstream kube-scheduler side by side in the same run (scheduler_perf DRA
// workloads and kwok clusters), and their results under bench/results/.
//
// The runners arrive with the demo and benchmark issue; the allocator's own
// micro-benchmarks live in pkg/allocator.
package bench
