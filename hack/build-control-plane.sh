#!/usr/bin/env bash
# Builds the control-plane binaries that make demo, the e2e tests and the
# benchmarks run, from Go modules only (nothing comes from release pages):
#
#   etcd                      go.etcd.io/etcd/server/v3 ETCD_VERSION, in a throwaway module
#                             (hack/build-etcd.sh)
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl
#                             k8s.io/kubernetes as go.mod requires it, through this
#                             module's staging replaces (go.mod's tool directives)
#   kwok, kwokctl             sigs.k8s.io/kwok KWOK_VERSION, in a throwaway module
#
# Versions are stamped with -ldflags as the upstream release builds do: kwokctl
# reads `--version` of the binaries it runs, and unstamped Kubernetes binaries
# say v0.0.0-master. Each group of binaries is rebuilt only when its stamp file
# (versions, Go toolchain, platform) changes or a binary is missing; the Go
# build cache makes a rebuild after a version change incremental.
#
# Usage: hack/build-control-plane.sh [--force]
#   CLUSTER_BIN_DIR  output folder (default _output/cluster/bin)
set -euo pipefail
# shellcheck source=hack/lib/init.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/init.sh"

# Pinned. Changing one rebuilds that group; never use "latest".
ETCD_VERSION=v3.7.0
KWOK_VERSION=v0.8.0

bin_dir=${CLUSTER_BIN_DIR:-_output/cluster/bin}
force=false
case "${1:-}" in
  --force | -f) force=true ;;
  "") ;;
  *)
    echo "usage: $0 [--force]" >&2
    exit 2
    ;;
esac

export GOWORK=off
go_version=$(go env GOVERSION)
platform="$(go env GOOS)/$(go env GOARCH)"
kube_version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
if [[ ! "${kube_version}" =~ ^v1\.([0-9]+)\.[0-9]+$ ]]; then
  echo "unexpected k8s.io/kubernetes version in go.mod: ${kube_version}" >&2
  exit 1
fi
kube_minor=${BASH_REMATCH[1]}
# The release's commit time, as the module proxy records it: a reproducible
# build date.
kube_build_date=$(go list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)

mkdir -p "${bin_dir}"
bin_dir=$(cd "${bin_dir}" && pwd)

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
    [[ -x "${bin_dir}/${b}" ]] || return 1
  done
}

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

work=$(mktemp -d "${TMPDIR:-/tmp}/drasched-build.XXXXXX")
at_exit rm -rf "${work}"

echo "==> control-plane binaries in ${bin_dir#"${root}"/}"

# etcd: hack/lib/etcd.sh, which the benchmarks also use. It
# keeps its own stamp and prints the binary's path.
# shellcheck source=hack/lib/etcd.sh
source hack/lib/etcd.sh
if [[ "${force}" != true ]] && etcd_built "${bin_dir}"; then
  echo "    etcd ${ETCD_VERSION}: up to date"
else
  rm -f "${bin_dir}/.etcd.stamp"
  etcd_into_bin_dir() { build_etcd "${bin_dir}" >/dev/null; }
  step "etcd ${ETCD_VERSION}" etcd_into_bin_dir
fi

# Kubernetes, through go.mod (tool directives and the generated staging
# replaces). The same variables are stamped in client-go and component-base,
# as kubernetes' hack/lib/version.sh does.
kube_binaries=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
key="k8s.io/kubernetes=${kube_version} ${go_version} ${platform} $(go list -m -f '{{.Version}}' k8s.io/client-go)"
if up_to_date kube "${key}" "${kube_binaries[@]}"; then
  echo "    kubernetes ${kube_version}: up to date"
else
  kube_ldflags=(-s -w)
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    kube_ldflags+=(
      -X "${pkg}.gitVersion=${kube_version}"
      -X "${pkg}.gitMajor=1"
      -X "${pkg}.gitMinor=${kube_minor}"
      -X "${pkg}.gitTreeState=clean"
      -X "${pkg}.buildDate=${kube_build_date}"
    )
  done
  for b in "${kube_binaries[@]}"; do
    step "${b} ${kube_version}" go build -ldflags "${kube_ldflags[*]}" -o "${bin_dir}/${b}" "k8s.io/kubernetes/cmd/${b}"
  done
  stamp kube "${key}"
fi

# kwok
kwok_binaries=(kwok kwokctl)
key="sigs.k8s.io/kwok=${KWOK_VERSION} kube=${kube_version} ${go_version} ${platform}"
if up_to_date kwok "${key}" "${kwok_binaries[@]}"; then
  echo "    kwok ${KWOK_VERSION}: up to date"
else
  # consts.Version is what kwokctl compares with the clusters it created;
  # consts.KubeVersion is the Kubernetes release it assumes by default.
  kwok_ldflags="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION} -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${kube_version}"
  build_kwok() (
    throwaway_module "${work}/kwok" &&
      cd "${work}/kwok" &&
      quiet "${work}/kwok-get.log" go get -tool "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}" "sigs.k8s.io/kwok/cmd/kwokctl@${KWOK_VERSION}" &&
      go build -ldflags "${kwok_ldflags}" -o "${bin_dir}/kwok" sigs.k8s.io/kwok/cmd/kwok &&
      go build -ldflags "${kwok_ldflags}" -o "${bin_dir}/kwokctl" sigs.k8s.io/kwok/cmd/kwokctl
  )
  step "kwok, kwokctl ${KWOK_VERSION}" build_kwok
  stamp kwok "${key}"
fi

# What each binary says about its version: the proof that stamping worked.
for b in etcd "${kube_binaries[@]}" "${kwok_binaries[@]}"; do
  if [[ "${b}" == kubectl ]]; then
    v=$("${bin_dir}/kubectl" version --client)
  else
    v=$("${bin_dir}/${b}" --version)
  fi
  printf '    %-24s %s\n' "${b}" "${v%%$'\n'*}"
done
