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
#   CLUSTER_BIN_DIR  output folder (default _output/cluster/bin; for an
#                    older KUBE_MINOR, _output/cluster/MINOR/bin)
#   KUBE_MINOR       the Kubernetes minor (hack/lib/minor.sh): its release's
#                    binaries, from its module file
set -euo pipefail
# shellcheck source=hack/lib/init.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/init.sh"

# Pinned. Changing one rebuilds that group; never use "latest".
ETCD_VERSION=v3.7.0
KWOK_VERSION=v0.8.0

# shellcheck source=hack/lib/minor.sh
source hack/lib/minor.sh
# The module file of the minor, for the Kubernetes binaries (its tool
# directives, the generated staging replaces).
modfile=()
if [[ ${#go_minor_flags[@]} -gt 0 ]]; then
  modfile=(-modfile="${gomod}")
  bin_dir=${CLUSTER_BIN_DIR:-_output/cluster/${kube_minor}/bin}
fi
bin_dir=${bin_dir:-${CLUSTER_BIN_DIR:-_output/cluster/bin}}

export GOWORK=off
go_version=$(go env GOVERSION)
platform="$(go env GOOS)/$(go env GOARCH)"
kube_version=$(go list "${modfile[@]}" -m -f '{{.Version}}' k8s.io/kubernetes)
if [[ ! "${kube_version}" =~ ^v1\.([0-9]+)\.[0-9]+$ ]]; then
  echo "unexpected k8s.io/kubernetes version in go.mod: ${kube_version}" >&2
  exit 1
fi
# The release's commit time, as the module proxy records it: a reproducible
# build date.
kube_build_date=$(go list "${modfile[@]}" -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)

mkdir -p "${bin_dir}"
bin_dir=$(cd "${bin_dir}" && pwd)

# step, up_to_date, stamp, quiet, throwaway_module, kube_ldflags; they use
# bin_dir and force.
# shellcheck source=hack/lib/build.sh
source hack/lib/build.sh
build_args "$@"

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
key="k8s.io/kubernetes=${kube_version} ${go_version} ${platform} $(go list "${modfile[@]}" -m -f '{{.Version}}' k8s.io/client-go)"
if up_to_date kube "${key}" "${kube_binaries[@]}"; then
  echo "    kubernetes ${kube_version}: up to date"
else
  ldflags=$(kube_ldflags "${kube_version}")
  for b in "${kube_binaries[@]}"; do
    step "${b} ${kube_version}" go build "${modfile[@]}" -ldflags "${ldflags}" -o "${bin_dir}/${b}" "k8s.io/kubernetes/cmd/${b}"
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
