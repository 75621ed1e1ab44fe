# shellcheck shell=bash disable=SC2154 # the sourcing script's bin_dir and force
# Helpers of the scripts that build pinned binaries from Go modules
# (hack/build-control-plane.sh, hack/build-node.sh). Source it; the
# functions use the sourcing script's bin_dir (output folder) and force
# (true: rebuild everything).

# build_args "$@": the scripts' one option, --force (-f), which sets force.
build_args() {
  force=false
  case "${1:-}" in
    --force | -f) force=true ;;
    "") ;;
    *)
      echo "usage: $0 [--force]" >&2
      exit 2
      ;;
  esac
}

# step NAME COMMAND...: runs a long command and says every 30 seconds that it
# is still running, so that a cold build (minutes) does not look hung. The
# command runs where errexit does not apply: chain multi-command steps with &&.
step() {
  local name=$1
  shift
  local start=${SECONDS}
  echo "    building ${name} ..."
  (
    while sleep 30; do
      echo "    ... ${name}: $((SECONDS - start))s"
    done
  ) &
  local ticker=$!
  local rc=0
  "$@" || rc=$?
  kill "${ticker}" 2>/dev/null || true
  wait "${ticker}" 2>/dev/null || true
  if ((rc != 0)); then
    echo "    ${name} failed (exit ${rc})" >&2
    return "${rc}"
  fi
  echo "    ${name}: done in $((SECONDS - start))s"
}

# up_to_date GROUP KEY BINARIES...: true when the group's stamp holds KEY and
# every binary exists.
up_to_date() {
  local group=$1 key=$2
  shift 2
  if ${force}; then
    return 1
  fi
  [[ -f "${bin_dir}/.stamp-${group}" && "$(<"${bin_dir}/.stamp-${group}")" == "${key}" ]] || return 1
  local b
  for b in "$@"; do
    [[ -e "${bin_dir}/${b}" ]] || return 1
  done
}

# stamp GROUP KEY: records that GROUP was built from KEY.
stamp() {
  printf '%s\n' "$2" >"${bin_dir}/.stamp-$1"
}

# quiet LOG COMMAND...: runs a chatty command (go get lists every module it
# adds), showing its output only when it fails.
quiet() {
  local log=$1
  shift
  "$@" >"${log}" 2>&1 || {
    cat "${log}" >&2
    return 1
  }
}

# throwaway_module DIR: an empty module to `go get -tool` a pinned command
# into, so that it builds with its own release's dependencies (`go install
# pkg@version` refuses modules with replace directives, such as etcd's).
throwaway_module() {
  rm -rf "$1" && mkdir -p "$1" && (cd "$1" && go mod init drasched.local/build >/dev/null 2>&1)
}

# kube_ldflags VERSION: the -ldflags of a Kubernetes binary of release
# VERSION (v1.MINOR.PATCH), as kubernetes' hack/lib/version.sh stamps them
# in client-go and component-base; kube_build_date must be set (the
# release's commit time, for a reproducible build).
kube_ldflags() {
  local version=$1 minor pkg flags=(-s -w)
  minor=${version#v1.}
  minor=${minor%%.*}
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    flags+=(
      -X "${pkg}.gitVersion=${version}"
      -X "${pkg}.gitMajor=1"
      -X "${pkg}.gitMinor=${minor}"
      -X "${pkg}.gitTreeState=clean"
      -X "${pkg}.buildDate=${kube_build_date}"
    )
  done
  echo "${flags[*]}"
}
