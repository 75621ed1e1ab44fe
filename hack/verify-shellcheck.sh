#!/usr/bin/env bash
# Runs shellcheck over every shell script of the repository: the files
# named *.sh and those whose first line runs bash or sh (.ci/run), tracked
# or new (not ignored), following what they source (-x; the source=
# directives name paths from the repository root).
#
# The shellcheck command comes from Debian (apt-get install shellcheck; .ci/run
# installs it when it is missing).
#
# Usage: hack/verify-shellcheck.sh
set -euo pipefail
# shellcheck source=hack/lib/init.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/init.sh"

if ! command -v shellcheck >/dev/null 2>&1; then
  echo "verify-shellcheck: shellcheck is not installed (Debian: apt-get install shellcheck)" >&2
  exit 1
fi

scripts=()
while IFS= read -r -d '' file; do
  # Deleted but not yet committed files are still listed.
  [[ -f "${file}" ]] || continue
  if [[ "${file}" == *.sh ]]; then
    scripts+=("${file}")
    continue
  fi
  # tr: binary files have NUL bytes, which bash would warn about.
  first=$(head -n 1 -- "${file}" | tr -d '\0')
  if [[ "${first}" =~ ^\#!.*[/\ ](ba)?sh([[:space:]]|$) ]]; then
    scripts+=("${file}")
  fi
done < <(git ls-files -z --cached --others --exclude-standard)

echo "verify-shellcheck: $(shellcheck --version | sed -n 's/^version: //p'), ${#scripts[@]} scripts"
shellcheck -x "${scripts[@]}"
