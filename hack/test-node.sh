#!/usr/bin/env bash
# make test-node: brings up the real node (hack/node.sh up), runs the tests
# of test/node against it (go test -tags node), and takes the node down
# again, whether the tests pass or not (hack/node.sh down), failing when the
# host is not as it was before. One run at a time per host.
#
# Usage: hack/test-node.sh [go test flags...]     e.g. -run 'TestWorkloads/MIG'
#   IMAGE_TARBALLS  the images of `make images` to import (make test-node
#                   passes them)
#   KEEP=1          leave the node up after the tests (hack/node.sh down
#                   removes it)
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
KEEP=${KEEP:-0}
read -r -a tarballs <<<"${IMAGE_TARBALLS:-}"
if ((${#tarballs[@]} == 0)); then
  echo "IMAGE_TARBALLS is empty: run make test-node" >&2
  exit 2
fi

mkdir -p /run/lock
exec 9>/run/lock/drasched-node.lock
if ! flock -n 9; then
  echo "another real node runs on this host (/run/lock/drasched-node.lock)" >&2
  exit 1
fi

start=${SECONDS}
on_exit() {
  local rc=$?
  if [[ "${KEEP}" == 1 ]]; then
    echo "==> the node stays up (KEEP=1): $(hack/node.sh env | head -1); hack/node.sh down removes it"
    exit "${rc}"
  fi
  hack/node.sh down || rc=1
  echo "==> test-node: exit ${rc} after $((SECONDS - start))s"
  exit "${rc}"
}
trap on_exit EXIT
trap 'exit 130' INT TERM

hack/node.sh up "${tarballs[@]}"
echo "==> node up after $((SECONDS - start))s; go test -tags node ./test/node"
set -a
# shellcheck disable=SC1090
source <(hack/node.sh env)
set +a
go test -tags node -count=1 -timeout 30m -v ./test/node/ "$@" 2>&1 | tee "${root}/_output/node/test.log"
