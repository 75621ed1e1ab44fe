# shellcheck shell=bash disable=SC2154 # the sourcing script's cluster_bin
# The kwokctl of a script that runs kwok clusters (demo/demo.sh,
# demo/helm.sh, hack/bench-kwok.sh). Source it; the functions use the
# sourcing script's cluster_bin, the folder of the control-plane binaries.

# kwokctl runs the locally built kwokctl.
kwokctl() {
  "${cluster_bin}/kwokctl" "$@"
}

# cluster_exists NAME: kwokctl knows a cluster of that name.
cluster_exists() {
  local clusters
  [[ -x "${cluster_bin}/kwokctl" ]] || return 1
  # Not a pipe into grep -q: with pipefail, kwokctl dying of SIGPIPE after
  # an early match would read as "no cluster".
  clusters=$(kwokctl get clusters 2>/dev/null) || return 1
  grep -qxF "$1" <<<"${clusters}"
}
