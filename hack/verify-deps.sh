#!/usr/bin/env bash
# Fails if kubectl-drasched links kube-scheduler. depguard (.golangci.yml)
# checks each file's direct imports; this checks the binary's whole
# dependency graph (go list -deps), which a new import anywhere below the
# tools could widen.
#
# Usage: hack/verify-deps.sh
set -euo pipefail
# shellcheck source=hack/lib/init.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/init.sh"

binary=./cmd/kubectl-drasched
forbidden='^(k8s\.io/kubernetes/pkg/scheduler|k8s\.io/kubernetes/cmd|github\.com/drasched/drasched/pkg/plugins|github\.com/drasched/drasched/apis/config/scheme)(/|$)'
if linked=$(go list -deps "$binary" | grep -E "$forbidden"); then
  echo "verify-deps: $binary links scheduler code:" >&2
  while read -r pkg; do echo "  $pkg"; done <<<"$linked" >&2
  echo "put the rule it needs in pkg/core (see docs/decisions/0006-framework-free-core.md)" >&2
  exit 1
fi
echo "verify-deps: $binary links no kube-scheduler package ($(go list -deps "$binary" | wc -l) packages)"
