#!/usr/bin/env bash
# Regenerates what is generated from sources in this repository: deepcopy,
# conversion and defaulting code of apis/config (k8s.io/code-generator,
# pinned in hack/tools/go.mod; the generators run offline from the module cache).
#
# Usage: hack/update-codegen.sh        (hack/verify-codegen.sh checks without writing)
set -euo pipefail
cd "$(dirname "$0")/.."

module=$(go list -m)
gen() {
  go tool -modfile=hack/tools/go.mod "$@"
}

# Remove old output first, so that a type or package that is gone leaves no
# stale generated file behind.
find apis/config -name 'zz_generated.*.go' -delete

# Generated files carry the generators' "Code generated ... DO NOT EDIT."
# line; this repository has no license header to prepend.
gen deepcopy-gen --go-header-file /dev/null --output-file zz_generated.deepcopy.go \
  "${module}/apis/config" "${module}/apis/config/v1"
gen conversion-gen --go-header-file /dev/null --output-file zz_generated.conversion.go \
  "${module}/apis/config/v1"
gen defaulter-gen --go-header-file /dev/null --output-file zz_generated.defaults.go \
  "${module}/apis/config/v1"
