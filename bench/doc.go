// Package bench holds the benchmark runners that compare drasched with the
// upstream kube-scheduler side by side in the same run, and their results
// under bench/results/:
//
//   - bench/schedulerperf: upstream's scheduler_perf DRA workloads, both
//     schedulers in process (hack/bench-scheduler-perf.sh);
//   - bench/kwok: both schedulers as processes, each against its own fresh
//     kwok cluster of GPU nodes, end to end (hack/bench-kwok.sh);
//   - bench/cmd/report: merges the suites' files (bench/internal/results)
//     into bench/results/ with tables and plots.
//
// The allocator's own micro-benchmarks live in pkg/allocator
// (hack/bench-allocator.sh).
package bench
