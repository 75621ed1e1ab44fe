#!/usr/bin/env bash
# Runs upstream's scheduler_perf DRA workloads (k8s.io/kubernetes v1.37.2,
# read from the module cache) with kube-scheduler's in-tree DynamicResources
# plugin and with drasched's StructuredDRA in its place, interleaved, in one
# process: bench/schedulerperf's BenchmarkSchedulerPerf (build tag
# schedulerperf). Writes _output/bench/scheduler_perf/scheduler_perf.json
# (bench/internal/results format); `make bench` merges it into
# bench/results/.
#
# Usage: hack/bench-scheduler-perf.sh [benchmark flags]
#   QUICK=1        only the quick cases (see bench/schedulerperf/cases.go)
#   RUNS=N         runs per case and scheduler (default 1; 2 for the full run via make bench)
#   CASES=REGEXP   only the cases whose names match; a case named NAME+pqh is
#                  NAME with the alpha gate SchedulerPreQueueingHints on for
#                  both schedulers: CASES='\+pqh' runs just those,
#                  CASES='^empty_500nodes$' the default one alone
#   DURATION=10s   steady-state duration instead of upstream's 10s
#   PROFILE=1      CPU profile of every run's measurement phase (*-cpu.prof in its runs/ folder)
#   LIST=FILE      write the names of the cases QUICK and CASES select to
#                  FILE, one per line, and run none (hack/bench.sh resumes
#                  case by case with it)
#   BENCH_COMMAND  the command recorded in the results as how to reproduce them
# The logs of the in-process apiserver, etcd and scheduler go to
# _output/bench/scheduler_perf/test.log; the progress display to stderr.
set -euo pipefail
# shellcheck source=hack/lib/init.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/init.sh"

# scheduler_perf starts etcd from PATH.
# shellcheck source=hack/lib/etcd.sh
source hack/lib/etcd.sh
etcd_on_path _output/bin

out="${root}/_output/bench/scheduler_perf"
bin="${root}/_output/bench/schedulerperf.test"
echo "scheduler_perf: building the benchmark (cold build cache: several minutes)" >&2
go test -c -tags schedulerperf -o "${bin}" ./bench/schedulerperf

args=(
	-test.run '^$' -test.bench '^BenchmarkSchedulerPerf$'
	# One iteration per workload: scheduler_perf measures inside it.
	-test.benchtime 1ns -test.timeout 0
	-drasched-out "${out}" -drasched-progress /dev/fd/3
	-drasched-runs "${RUNS:-1}"
	-drasched-command "${BENCH_COMMAND:-hack/bench-scheduler-perf.sh}"
)
[[ "${QUICK:-}" == 1 ]] && args+=(-drasched-quick)
[[ -n "${CASES:-}" ]] && args+=(-drasched-cases "${CASES}")
[[ -n "${DURATION:-}" ]] && args+=(-drasched-duration "${DURATION}")
[[ "${PROFILE:-}" == 1 ]] && args+=(-perf-cpuprofile)
if [[ -n "${LIST:-}" ]]; then
	list=$(realpath -m "${LIST}")
	(cd bench/schedulerperf && "${bin}" "${args[@]}" -drasched-list "${list}" "$@" 3>&2 >/dev/null 2>&1)
	exit
fi

rm -rf "${out}"
mkdir -p "${out}"
echo "scheduler_perf: $(nproc) cores, logs in ${out}/test.log" >&2
# Run where `go test` would: the package folder (the benchmark reads
# ../../config/scheduler-config.yaml).
rc=0
(cd bench/schedulerperf && "${bin}" "${args[@]}" "$@" 3>&2 >"${out}/test.log" 2>&1) || rc=$?
if [[ ${rc} -ne 0 ]]; then
	echo "scheduler_perf: the benchmark failed (exit ${rc}); the end of ${out}/test.log:" >&2
	grep -E -- '--- FAIL|FAIL|Error|error running' "${out}/test.log" | tail -n 20 >&2 || true
fi
exit "${rc}"
