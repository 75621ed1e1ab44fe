#!/usr/bin/env bash
# Fails if generated files are stale: runs hack/update-codegen.sh in a copy
# of the sources it reads and writes, and compares. The working tree is not
# touched.
#
# Usage: hack/verify-codegen.sh
set -euo pipefail
# shellcheck source=hack/lib/init.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/init.sh"

work=$(mktemp -d "${TMPDIR:-/tmp}/drasched-verify-codegen.XXXXXX")
at_exit rm -rf "${work}"

# The working tree as it is, committed or not: a new type is checked before
# its first commit.
cp -r go.mod go.sum apis hack config "${work}/"
(cd "${work}" && hack/update-codegen.sh)

stale=0
for path in apis config/scheduler/configmap.yaml; do
  if ! diff -ruN "${path}" "${work}/${path}"; then
    stale=1
  fi
done
if [[ ${stale} != 0 ]]; then
  echo "verify-codegen: generated files are stale (the diff above goes from the tree to fresh output); run hack/update-codegen.sh" >&2
  exit 1
fi
echo "verify-codegen: generated files are up to date"
