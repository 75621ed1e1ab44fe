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

# kwok_stages_keeping_jobs FILE: writes a kwokctl --config with the node and
# pod stages kwokctl uses by default, taken from the kwok module that
# hack/build-control-plane.sh builds kwokctl from, less pod-complete: kwok
# completes the pods of a Job as soon as they run, and Kueue's steps need
# Jobs that keep their GPUs until Kueue evicts them. kwokctl uses the stages
# of a --config instead of all its defaults, so the node stages are there
# too.
kwok_stages_keeping_jobs() {
  local out=$1 version dir f
  version=$(sed -n 's/^KWOK_VERSION=//p' "${root}/hack/build-control-plane.sh")
  dir=$(go mod download -json "sigs.k8s.io/kwok@${version}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [[ -d "${dir}" ]] || { echo "kwok ${version} is not in the module cache" >&2; return 1; }
  : >"${out}"
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
    pod/fast/pod-ready.yaml pod/fast/pod-delete.yaml; do
    { echo "---"; cat "${dir}/kustomize/stage/${f}"; } >>"${out}"
  done
}
