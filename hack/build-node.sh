#!/usr/bin/env bash
# Builds what a real node of `make test-node` (and `make demo REAL_NODE=1`)
# runs besides the control plane, from Go modules only (nothing comes from
# release pages or a registry):
#
#   kubelet, kube-proxy       k8s.io/kubernetes as go.mod requires it, with
#                             the control plane's ldflags (hack/lib/build.sh),
#                             in a temporary module that uses exactly this
#                             module's versions (hack/lib/tempmodule.sh)
#   containerd, ctr,          github.com/containerd/containerd/v2 CONTAINERD_VERSION,
#   containerd-shim-runc-v2   static (CGO_ENABLED=0), in a throwaway module
#   images/pause.tar          the pod sandbox image: test/node/images/pause on an
#                             empty base, built by hack/images
#   images/gpu-check.tar      the workload image of the tests: test/node/images/gpu-check,
#                             which prints the environment, device nodes and driver
#                             files it sees, with cuda-check (below) and the GNU C
#                             library of the GPU plugin's image (hack/libc6.sh)
#   driver/libcuda.so.1       the fake NVIDIA driver the tests install under the node's
#   driver/nvidia-smi         driver root, built with gcc from test/node/driver: a real
#                             libcuda (one CUDA entry point, SONAME libcuda.so.1) and
#                             a stand-in for nvidia-smi, linked against the C library,
#                             that prints test/node/testdata/nvidia-smi.txt
#   driver/cuda-check         test/node/driver/cuda-check.c, linked against
#                             that libcuda.so.1: whether a container's loader finds it
#
# runc, the CNI plugins, iptables and conntrack come from Debian
# (hack/node.sh installs them). Each group is rebuilt only when its
# stamp (versions, Go toolchain, platform; the sources for the images)
# changes or an output is missing; the Go build cache makes a rebuild after
# a version change incremental. Cold, on 2 busy cores: kubelet and
# kube-proxy about 20 minutes, containerd about 12.
#
# Usage: hack/build-node.sh [--force]
#   NODE_BIN_DIR   output folder (default _output/node/bin; with an older
#                  KUBELET_MINOR, _output/node/MINOR/bin)
#   KUBELET_MINOR  the Kubernetes minor of the kubelet and kube-proxy (its
#                  module file, hack/lib/minor.sh); the control plane and
#                  the images stay the newest minor's, as kubelets may be
#                  older than the API server (docs/compatibility.md)
set -euo pipefail

# Pinned. Changing one rebuilds that group; never use "latest".
CONTAINERD_VERSION=v2.4.2
# The tags of containerd's static release build, less what needs cgo or
# kernel features these nodes do not use; the shim needs no gRPC server.
CONTAINERD_TAGS="urfave_cli_no_docs no_btrfs no_devmapper no_zfs"
SHIM_TAGS="${CONTAINERD_TAGS} no_grpc"
# Image names of the node's own images; never pulled (see test/node/harness).
NODE_IMAGE_REPOSITORY=localhost/drasched-node
NODE_IMAGE_TAG="test"

cd "$(dirname "$0")/.."
root=$PWD
# hack/lib/tempmodule.sh's write_temp_module replaces this module with repo.
repo=${root}
export repo
# shellcheck source=hack/lib/build.sh
source hack/lib/build.sh
build_args "$@"
# The kubelet's minor is what hack/lib/minor.sh (through tempmodule.sh)
# selects.
export KUBE_MINOR=${KUBELET_MINOR:-}
# shellcheck source=hack/lib/tempmodule.sh
source hack/lib/tempmodule.sh
modfile=()
if [[ ${#go_minor_flags[@]} -gt 0 ]]; then
  modfile=(-modfile="${gomod}")
  bin_dir=${NODE_BIN_DIR:-_output/node/${kube_minor}/bin}
fi
bin_dir=${bin_dir:-${NODE_BIN_DIR:-_output/node/bin}}

export GOWORK=off
go_version=$(go env GOVERSION)
goarch=$(go env GOARCH)
platform="$(go env GOOS)/${goarch}"
kube_version=$(go list "${modfile[@]}" -m -f '{{.Version}}' k8s.io/kubernetes)
kube_build_date=$(go list "${modfile[@]}" -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)

mkdir -p "${bin_dir}/images"
bin_dir=$(cd "${bin_dir}" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/drasched-build-node.XXXXXX")
trap 'rm -rf "${work}"' EXIT

echo "==> node binaries in ${bin_dir#"${root}"/}"

# kubelet and kube-proxy. go.sum lacks the modules only they import (the CRI
# streaming server, ...), so they build in a temporary module that requires
# every module at this module's version and may add go.sum lines there.
# Built as hack/build-control-plane.sh builds kube-apiserver (same flags, no
# -trimpath), so that the packages they share come from the Go build cache.
kube_binaries=(kubelet kube-proxy)
key="k8s.io/kubernetes=${kube_version} ${go_version} ${platform} $(go list "${modfile[@]}" -m -f '{{.Version}}' k8s.io/client-go)"
if up_to_date kubelet "${key}" "${kube_binaries[@]}"; then
  echo "    kubelet, kube-proxy ${kube_version}: up to date"
else
  ldflags=$(kube_ldflags "${kube_version}")
  build_kube() (
    mkdir -p "${work}/kube" &&
      write_temp_module "${work}/kube" drasched.local/build-node &&
      cd "${work}/kube" &&
      for b in "${kube_binaries[@]}"; do
        go build -mod=mod -ldflags "${ldflags}" -o "${bin_dir}/${b}" "k8s.io/kubernetes/cmd/${b}" || return
      done &&
      # -mod=mod may add go.sum lines, never move a version.
      [[ "$(go list -m -f '{{.Version}}' k8s.io/kubernetes)" == "${kube_version}" ]]
  )
  step "kubelet, kube-proxy ${kube_version}" build_kube
  stamp kubelet "${key}"
fi

# containerd, ctr and the runc shim: static, as containerd's release builds
# them, with the version stamped so that `containerd --version` and the CRI
# version the kubelet logs say which release this is.
containerd_binaries=(containerd ctr containerd-shim-runc-v2)
key="github.com/containerd/containerd/v2=${CONTAINERD_VERSION} tags=${CONTAINERD_TAGS} ${go_version} ${platform}"
if up_to_date containerd "${key}" "${containerd_binaries[@]}"; then
  echo "    containerd ${CONTAINERD_VERSION}: up to date"
else
  mod=github.com/containerd/containerd/v2
  cd_ldflags="-s -w -X ${mod}/version.Version=${CONTAINERD_VERSION} -X ${mod}/version.Revision=${CONTAINERD_VERSION}"
  build_containerd() (
    throwaway_module "${work}/containerd" &&
      cd "${work}/containerd" &&
      quiet "${work}/containerd-get.log" go get -tool "${mod}/cmd/containerd@${CONTAINERD_VERSION}" \
        "${mod}/cmd/ctr@${CONTAINERD_VERSION}" "${mod}/cmd/containerd-shim-runc-v2@${CONTAINERD_VERSION}" &&
      export CGO_ENABLED=0 &&
      go build -tags "${CONTAINERD_TAGS}" -ldflags "${cd_ldflags}" -o "${bin_dir}/containerd" "${mod}/cmd/containerd" &&
      go build -tags "${CONTAINERD_TAGS}" -ldflags "${cd_ldflags}" -o "${bin_dir}/ctr" "${mod}/cmd/ctr" &&
      go build -tags "${SHIM_TAGS}" -ldflags "${cd_ldflags}" -o "${bin_dir}/containerd-shim-runc-v2" "${mod}/cmd/containerd-shim-runc-v2"
  )
  step "containerd, ctr, containerd-shim-runc-v2 ${CONTAINERD_VERSION}" build_containerd
  stamp containerd "${key}"
fi

# The fake NVIDIA driver and cuda-check: C, built with the host's gcc
# against its C library, which must be the one hack/images/libc6.sha256
# pins into the images (a newer one could need symbols the image's lacks).
if ! command -v gcc >/dev/null; then
  if [[ ${EUID} -eq 0 ]] && command -v apt-get >/dev/null; then
    echo "    apt-get install gcc libc6-dev"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev >/dev/null
  else
    echo "gcc is missing: it builds the real node's fake NVIDIA driver (apt-get install gcc)" >&2
    exit 1
  fi
fi
driver_dir=${bin_dir}/driver

# The node's images: binaries of this repository on an empty base (with
# the GNU C library for gpu-check), built by hack/images as `make images`
# builds drasched's own. Their stamp is a hash of their sources, of
# hack/images and of the pinned libc6, so an edit rebuilds them.
image_names=(pause gpu-check)
sources_hash=$(cat test/node/images/*/*.go test/node/driver/*.c test/node/testdata/nvidia-smi.txt \
  hack/images/*.go hack/images/go.mod hack/images/libc6.sha256 | sha256sum | cut -d' ' -f1)
key="images=${sources_hash} ${go_version} ${platform} $(gcc -dumpfullversion) ${NODE_IMAGE_REPOSITORY}:${NODE_IMAGE_TAG}"
if up_to_date images "${key}" "${image_names[@]/#/images/}" "${image_names[@]/%/.tar}" driver/libcuda.so.1 driver/nvidia-smi driver/cuda-check; then
  echo "    images ${image_names[*]}, fake NVIDIA driver: up to date"
else
  build_images() {
    local img libc extra
    mkdir -p "${driver_dir}" || return
    # -ffile-prefix-map and no build ID: the same sources give the same
    # binaries, wherever the checkout is.
    local cflags=(-O2 -Wall -Werror -g0 "-ffile-prefix-map=${root}=." "-Wl,--build-id=none")
    gcc "${cflags[@]}" -shared -fPIC -Wl,-soname,libcuda.so.1 -o "${driver_dir}/libcuda.so.1" test/node/driver/libcuda.c &&
      gcc "${cflags[@]}" -DTRANSCRIPT="\"${root}/test/node/testdata/nvidia-smi.txt\"" \
        -o "${driver_dir}/nvidia-smi" test/node/driver/nvidia-smi.c &&
      gcc "${cflags[@]}" -o "${driver_dir}/cuda-check" test/node/driver/cuda-check.c \
        -L "${driver_dir}" -l:libcuda.so.1 || return
    libc=$(hack/libc6.sh "${goarch}" "${bin_dir}/libc6") || return
    go build -C hack/images -o "${bin_dir}/images/images" . || return
    for img in "${image_names[@]}"; do
      extra=()
      if [[ "${img}" == gpu-check ]]; then
        extra=(--libc="${libc}" --libc-package="$(basename "${libc}" .tar)" --extra-binary="${driver_dir}/cuda-check")
      fi
      CGO_ENABLED=0 GOOS=linux GOARCH=${goarch} go build -trimpath -ldflags "-s -w" \
        -o "${bin_dir}/images/${img}" "./test/node/images/${img}" || return
      "${bin_dir}/images/images" --name="${img}" --binary="${bin_dir}/images/${img}" "${extra[@]}" \
        --repository="${NODE_IMAGE_REPOSITORY}" --version="${NODE_IMAGE_TAG}" --arch="${goarch}" \
        --created=1970-01-01T00:00:00Z --output="${bin_dir}/${img}.tar" >/dev/null || return
    done
  }
  step "images ${image_names[*]}, fake NVIDIA driver" build_images
  stamp images "${key}"
fi

# What each binary says about its version: the proof that stamping worked.
for b in "${kube_binaries[@]}" "${containerd_binaries[@]}"; do
  case "${b}" in
    containerd-shim-runc-v2) v=$("${bin_dir}/${b}" -v | sed -n 's/^ *Version: *//p') ;;
    *) v=$("${bin_dir}/${b}" --version) ;;
  esac
  printf '    %-24s %s\n' "${b}" "${v%%$'\n'*}"
done
for img in "${image_names[@]}"; do
  printf '    %-24s %s\n' "${img}.tar" "${NODE_IMAGE_REPOSITORY}/${img}:${NODE_IMAGE_TAG}"
done
