#!/usr/bin/env bash
# Tests the builds for the older Kubernetes minors (each hack/minor/MINOR,
# docs/compatibility.md) against their own minor: every package builds with
# the minor's modules and build tag, our unit and integration tests pass
# there (the integration tests on a kube-apiserver of that minor, in
# process), and so do upstream's allocator suite and upstream's DRA
# integration suite of that minor (hack/conformance.sh and
# hack/conformance-integration.sh read them from the module cache at the
# minor's version).
#
# Usage: hack/test-compat.sh [--gate] [MINOR...]   (default: every hack/minor/*)
#   --gate: what make test runs, within CI's budget: upstream's DRA
#           integration suite with its entry point default only. Without
#           it (make test-compat) also its entry point all.
set -euo pipefail
# shellcheck source=hack/lib/init.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/init.sh"

entries="default all"
if [[ "${1:-}" == --gate ]]; then
  entries=default
  shift
fi

# Everything but the benchmarks, which compare the newest build with
# upstream (docs/compatibility.md).
builds=(./apis/... ./cmd/... ./internal/... ./pkg/... ./demo/... ./test/...)
units=(./apis/... ./internal/... ./pkg/core/... ./pkg/allocator/... ./pkg/plugins/... ./pkg/tracker/...
  ./pkg/capacity/... ./pkg/explain/... ./pkg/leaderfence/... ./cmd/scheduler/... ./cmd/kubectl-drasched/...)
integration=(./test/integration/...)
# The GPU driver's tests are the newest minor's: its image is one for every
# cluster, built from the newest minor. The differential corpus against an
# older minor's structured.NewAllocator is not green (make
# test-compat-differential, docs/compatibility.md).
skip='^(TestDifferential|FuzzDifferential)$'

minors=("$@")
if [[ ${#minors[@]} -eq 0 ]]; then
  for dir in hack/minor/*/; do
    dir=${dir%/}
    minors+=("${dir##*/}")
  done
fi
for minor in "${minors[@]}"; do
  (
    export KUBE_MINOR=${minor}
    # shellcheck source=hack/lib/minor.sh
    source hack/lib/minor.sh
    echo "test-compat: Kubernetes ${kube_minor} (${gomod#"${root}/"})"
    start=${SECONDS}
    go build "${go_minor_flags[@]}" "${builds[@]}"
    go test "${go_minor_flags[@]}" -skip "${skip}" "${units[@]}" "${integration[@]}"
    hack/conformance.sh
    ENTRIES="${entries}" hack/conformance-integration.sh
    echo "test-compat: Kubernetes ${kube_minor} passed in $((SECONDS - start))s"
  )
done
