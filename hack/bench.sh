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
# A full run takes more than 6 hours on 2 cores (an estimate from the parts
# measured 2026-11-27, docs/benchmarks.md), most of it upstream's kwok runs
# (both variants): it is not part of CI. Run a part of it with
# CASES (scheduler_perf), PLAN or NODES and CASES (kwok), e.g.
#   PLAN="5000:fill,churn,match 5000:noclaims/5" hack/bench-kwok.sh
#
# Resuming: a full run records its figures against a commit, the last one
# that changed more than bench/results/, docs/ and Markdown pages (a run
# refuses a tree with such changes uncommitted). Each suite's part is merged
# into bench/results/next/ as soon as it ends (a scheduler_perf case, the
# allocator, a kwok PLAN entry): its file joins those of the same commit in
# bench/results/next/store/ and next/latest.json is merged from all of
# them. Run again on the same commit, `make bench` skips every case
# next/latest.json already holds for it, so one commit's results accumulate
# over sittings; on another commit it starts over (bench/cmd/report merge
# -store).
#
# Staging: the figures stay in bench/results/next/ until a sitting ends
# with the whole plan measured on their commit (every suite and case, no
# SUITES, CASES, PLAN or NODES narrowing the run, no part failed); then
# they replace bench/results/'s (store, latest.json, latest.md, plots) and
# the results section of docs/benchmarks.md. So bench/results/ and the page
# always show one whole run of one commit, and a run of many sittings lands
# as it goes without hiding the last whole one.
#
# QUICK=1 runs the quick scheduler_perf cases once per scheduler, the
# allocator benchmarks briefly and kwok on 100 nodes, writes
# bench/results/quick/ afresh (nothing is skipped) and leaves
# docs/benchmarks.md alone; under 10 minutes on 2 cores with a warm build
# cache.
# RUNS, CASES, DURATION, PROFILE (see hack/bench-scheduler-perf.sh),
# BENCHTIME and COUNT (allocator), PLAN, NODES, KWOK_RUNS (default 1),
# FILL_PODS, CHURN_RATE and CHURN_DURATION (kwok, see hack/bench-kwok.sh)
# override the defaults; SUITES="scheduler_perf allocator kwok" (default)
# picks the suites.
#
# Another suite joins by writing its file in the results format
# (bench/internal/results) and adding it to the suites below.
set -euo pipefail
# shellcheck source=hack/lib/init.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/init.sh"

start=$(date +%s)
# The code measured: everything but the results and the documentation.
code=(. ':(exclude)bench/results' ':(exclude)docs' ':(exclude)*.md')
commit=$(git log -1 --format=%H -- "${code[@]}" | cut -c1-12)
dirty=$(git status --porcelain -- "${code[@]}")
if [[ "${QUICK:-}" == 1 ]]; then
	results_dir=bench/results/quick
	runs="${RUNS:-1}"
	benchtime="${BENCHTIME:-100ms}"
	count="${COUNT:-1}"
	command="make bench QUICK=1"
	doc=()
	[[ -z "${dirty}" ]] || commit=${commit}-dirty
	rm -rf "${results_dir}/store"
else
	results_dir=bench/results/next
	runs="${RUNS:-2}"
	benchtime="${BENCHTIME:-1s}"
	count="${COUNT:-3}"
	command="make bench"
	doc=()
	if [[ -n "${dirty}" ]]; then
		echo "bench: make bench records its figures against a commit; commit (or stash) these changes first:" >&2
		echo "${dirty}" >&2
		exit 2
	fi
fi
out="${root}/_output/bench"
mkdir -p "${out}"
suites=${SUITES:-scheduler_perf allocator kwok}
status=0

log() {
	echo "== $1 ($(date -u +%H:%M:%S))" >&2
}

# report ARGS...: bench/cmd/report, a module of its own.
report() {
	(cd bench/cmd/report && go run . "$@")
}

# done_cases SUITE: the cases of SUITE that latest.json holds for this
# commit, one per line (none for QUICK, which starts afresh).
done_cases() {
	[[ "${QUICK:-}" != 1 ]] || return 0
	report "done" -commit "${commit}" -suite "$1" "${root}/${results_dir}/latest.json"
}

# merge FILE: one suite file into the results, at once, so that an
# interrupted run keeps what it measured.
merge() {
	report merge -out "${root}/${results_dir}" -commit "${commit}" -store "${root}/${results_dir}/store" "${doc[@]}" "$1" || status=1
}

# A whole run of this commit has landed already (staged and promoted):
# what runs now adds to it.
if [[ "${QUICK:-}" != 1 ]]; then
	for suite in scheduler_perf allocator kwok; do
		if [[ -n "$(report "done" -commit "${commit}" -suite "${suite}" "${root}/bench/results/latest.json")" ]]; then
			results_dir=bench/results
			doc=(-doc "${root}/docs/benchmarks.md")
			break
		fi
	done
fi

log "measuring commit ${commit}; results in ${results_dir}"
if [[ " ${suites} " == *" scheduler_perf "* ]]; then
	log "scheduler_perf"
	done_cases scheduler_perf >"${out}/done-scheduler_perf.txt"
	LIST="${out}/scheduler_perf-cases.txt" hack/bench-scheduler-perf.sh
	while read -r name; do
		if grep -qxF "${name}" "${out}/done-scheduler_perf.txt"; then
			log "scheduler_perf ${name}: already measured on ${commit}"
			continue
		fi
		log "scheduler_perf ${name}"
		RUNS="${runs}" CASES="^${name//+/\\+}\$" BENCH_COMMAND="${command}" hack/bench-scheduler-perf.sh </dev/null || status=1
		# Even a failed case has a result, with its error; a case no run
		# of which measured anything is not done and runs again next time.
		[[ ! -f "${out}/scheduler_perf/scheduler_perf.json" ]] || merge "${out}/scheduler_perf/scheduler_perf.json"
	done <"${out}/scheduler_perf-cases.txt"
fi

if [[ " ${suites} " == *" allocator "* ]]; then
	if [[ -n "$(done_cases allocator)" ]]; then
		log "allocator: already measured on ${commit}"
	else
		log "allocator"
		if BENCH_COMMAND="${command}" hack/bench-allocator.sh -benchtime="${benchtime}" -count="${count}" >"${out}/allocator.md"; then
			merge "${out}/allocator.json"
		else
			status=1
		fi
	fi
fi

if [[ " ${suites} " == *" kwok "* ]]; then
	done_cases kwok >"${out}/done-kwok.txt"
	while read -r entry; do
		log "kwok ${entry}"
		if PLAN="${entry}" RUNS="${KWOK_RUNS:-1}" DONE="${out}/done-kwok.txt" BENCH_COMMAND="${command}" hack/bench-kwok.sh </dev/null; then
			:
		else
			status=1
		fi
		# Failed cases are in the file, with their allocation errors.
		[[ ! -f "${out}/kwok/kwok.json" ]] || merge "${out}/kwok/kwok.json"
	done < <(PRINT_PLAN=1 hack/bench-kwok.sh)
fi

# promote: the staged figures, a whole run of one commit, become
# bench/results/'s and the page's (Staging, at the top).
promote() {
	local files=("${root}/${results_dir}"/store/*.json)
	log "the whole plan is measured on ${commit}: ${results_dir} replaces bench/results"
	report merge -out "${root}/bench/results" -commit "${commit}" -store "${root}/bench/results/store" \
		-doc "${root}/docs/benchmarks.md" "${files[@]}" || return 1
	rm -rf "${root:?}/${results_dir}"
	results_dir=bench/results
}

# The whole plan: nothing narrowed the run, and every part of it ran now
# or had run on this commit before, none failing.
if [[ "${results_dir}" == bench/results/next ]]; then
	if ((status == 0)) && [[ -z "${SUITES:-}${CASES:-}${PLAN:-}${NODES:-}" ]]; then
		promote || status=1
	else
		log "not the whole plan (or a part failed): the figures of ${commit} stay in ${results_dir}"
	fi
fi

if [[ -f "${results_dir}/latest.md" ]]; then
	log "results in ${results_dir}/latest.md"
	cat "${results_dir}/latest.md"
fi
echo "== make bench took $(( ($(date +%s) - start) / 60 )) min $(( ($(date +%s) - start) % 60 )) s" >&2
exit "${status}"
