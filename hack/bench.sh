#!/usr/bin/env bash
# `make bench`: the benchmark suites, upstream and drasched side by side in
# one run, merged into bench/results/ (latest.json, latest.md, plots/) and
# the results section of docs/benchmarks.md.
#
#   1. scheduler_perf: upstream's DRA workloads with the in-tree
#      DynamicResources plugin and with StructuredDRA
#      (hack/bench-scheduler-perf.sh).
#   2. allocator: pkg/allocator against structured.NewAllocator
#      (hack/bench-allocator.sh).
#   3. kwok: each scheduler as a process against its own fresh kwok
#      cluster, end to end, on 500 to 5000 nodes, upstream and drasched
#      also with the feature gate SchedulerPreQueueingHints (+pqh), with
#      the CPU seconds per pod and peak RSS of each scheduler process
#      (hack/bench-kwok.sh).
#
# A full run takes about 4 hours on 2 cores, most of it upstream on 5000
# nodes (both variants): it is not part of CI. Run a part of it with
# CASES (scheduler_perf), PLAN or NODES and CASES (kwok), e.g.
#   PLAN="5000:fill,noclaims,churn,match" hack/bench-kwok.sh
#
# QUICK=1 runs the quick scheduler_perf cases once per scheduler, the
# allocator benchmarks briefly and kwok on 100 nodes, writes
# bench/results/quick/ and leaves docs/benchmarks.md alone; under 10
# minutes on 2 cores with a warm build cache.
# RUNS, CASES, DURATION, PROFILE (see hack/bench-scheduler-perf.sh),
# BENCHTIME and COUNT (allocator), PLAN, NODES, KWOK_RUNS (default 1),
# FILL_PODS, CHURN_RATE and CHURN_DURATION (kwok, see hack/bench-kwok.sh)
# override the defaults.
#
# Another suite joins by writing its file in the results format
# (bench/internal/results) and adding it to suites below.
set -euo pipefail
# shellcheck source=hack/lib/init.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/init.sh"

start=$(date +%s)
if [[ "${QUICK:-}" == 1 ]]; then
	results_dir=bench/results/quick
	runs="${RUNS:-1}"
	benchtime="${BENCHTIME:-100ms}"
	count="${COUNT:-1}"
	command="make bench QUICK=1"
	doc=()
else
	results_dir=bench/results
	runs="${RUNS:-2}"
	benchtime="${BENCHTIME:-1s}"
	count="${COUNT:-3}"
	command="make bench"
	doc=(-doc "${root}/docs/benchmarks.md")
fi
out="${root}/_output/bench"
mkdir -p "${out}"
status=0
suites=()

echo "== scheduler_perf ($(date -u +%H:%M:%S))" >&2
if RUNS="${runs}" BENCH_COMMAND="${command}" hack/bench-scheduler-perf.sh; then
	:
else
	status=1
fi
# Even a run with failed cases has results for the others.
[[ -f "${out}/scheduler_perf/scheduler_perf.json" ]] && suites+=("${out}/scheduler_perf/scheduler_perf.json")

echo "== allocator ($(date -u +%H:%M:%S))" >&2
if BENCH_COMMAND="${command}" hack/bench-allocator.sh -benchtime="${benchtime}" -count="${count}" >"${out}/allocator.md"; then
	suites+=("${out}/allocator.json")
else
	status=1
fi

echo "== kwok ($(date -u +%H:%M:%S))" >&2
if RUNS="${KWOK_RUNS:-1}" BENCH_COMMAND="${command}" hack/bench-kwok.sh; then
	:
else
	status=1
fi
# Failed cases are in the file, with their allocation errors.
[[ -f "${out}/kwok/kwok.json" ]] && suites+=("${out}/kwok/kwok.json")

if [[ ${#suites[@]} -gt 0 ]]; then
	(cd bench/cmd/report && go run . merge -out "${root}/${results_dir}" "${doc[@]}" "${suites[@]}")
	echo "== results in ${results_dir}/latest.md" >&2
	cat "${results_dir}/latest.md"
fi
echo "== make bench took $(( ($(date +%s) - start) / 60 )) min $(( ($(date +%s) - start) % 60 )) s" >&2
exit "${status}"
