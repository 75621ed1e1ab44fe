# shellcheck shell=bash
# The common start of most scripts under hack/ (those that need no exit
# trap of their own). Each sources it right after its own
# `set -euo pipefail` (which guards this line), as
#
#   # shellcheck source=hack/lib/init.sh
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/init.sh"
#
# It sets root to the repository root and makes that the working directory,
# so that a script runs the same from any folder, and installs the script's
# exit trap, to which at_exit adds.

set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "${root}"

# abs PATH: PATH made absolute against the repository root.
abs() {
  if [[ "$1" == /* ]]; then echo "$1"; else echo "${root}/$1"; fi
}

# wait_for WHAT SECONDS COMMAND...: runs COMMAND every half second until it
# succeeds; after SECONDS, says what it waited for and fails.
wait_for() {
  local what=$1 timeout=$2 i
  shift 2
  for ((i = 0; i < timeout * 2; i++)); do
    if "$@" >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.5
  done
  echo "timed out after ${timeout}s waiting for ${what}" >&2
  return 1
}

# at_exit COMMAND [ARG...]: runs COMMAND when the script exits, however it
# exits: at its end, by exit, on a failed command (errexit), on Ctrl-C or
# SIGTERM (exit 130). The commands run in the order they were added, each
# also when one before it failed, so that a failed teardown step does not
# leave the rest behind; inside them errexit is off (they run as `COMMAND
# || ...`), and they must not call exit. Meanwhile exit_code is the
# script's exit status, which it keeps: a command that fails changes it
# only from 0.
#
# One EXIT trap for all: a second `trap ... EXIT` would replace the first,
# and a script that sources a library which cleans up after itself (as
# hack/lib/processes.sh does) would lose one of the two.
exit_code=0
_at_exit_commands=()
at_exit() {
  _at_exit_commands+=("$(printf '%q ' "$@")")
}

_run_at_exit() {
  exit_code=$?
  trap - EXIT
  local command rc
  for command in "${_at_exit_commands[@]}"; do
    rc=0
    eval "${command}" || rc=$?
    if ((exit_code == 0)); then
      exit_code=${rc}
    fi
  done
  exit "${exit_code}"
}

trap _run_at_exit EXIT
# Ctrl-C and SIGTERM end the script with status 130, through the exit trap.
trap 'exit 130' INT TERM
