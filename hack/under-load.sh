#!/usr/bin/env bash
# Runs a command RUNS times in a row (default 10) with LOAD busy loops
# beside it (default 2), and stops at the first failure: how the fault and
# integration suites are checked for flakes on a loaded machine.
#
#   hack/under-load.sh make test-faults
#   RUNS=10 hack/under-load.sh go test -count=1 ./test/integration/...
set -euo pipefail

runs=${RUNS:-10}
load=${LOAD:-2}
[[ $# -gt 0 ]] || { echo "usage: $0 command [args...]" >&2; exit 2; }

pids=()
for ((i = 0; i < load; i++)); do
  ( while :; do :; done ) &
  pids+=("$!")
done
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT

for ((run = 1; run <= runs; run++)); do
  start=$(date +%s)
  if ! "$@"; then
    echo "under-load: run ${run} of ${runs} failed after $(($(date +%s) - start)) s" >&2
    exit 1
  fi
  echo "under-load: run ${run} of ${runs} passed in $(($(date +%s) - start)) s"
done
