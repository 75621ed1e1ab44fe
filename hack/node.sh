#!/usr/bin/env bash
# A real single-node cluster on this host: `make test-node` and `make demo
# REAL_NODE=1` run it. The harness test/node/harness does the work (its
# package doc and docs/real-node.md say what runs and where); this script
# installs the Debian packages the node needs and runs the harness's
# command, test/node/cmd/node, built into _output/node/harness.
#
# Usage: hack/node.sh up [IMAGE_TARBALL...]   start it; import the images
#        hack/node.sh up --kubeconfig FILE --ca FILE [IMAGE_TARBALL...]
#                                             the node alone, joining the cluster
#                                             of FILE, whose CA is --ca (the demo)
#        hack/node.sh down                    stop it, put the host back, check
#        hack/node.sh restart-kubelet         stop and start the kubelet
#        hack/node.sh env                     print KUBECONFIG and the node's paths
#
# The environment may move the node (defaults in parentheses; relative
# paths are from the repository root):
#   NODE_ROOT (/var/lib/drasched-node), NODE_RUN (/run/drasched-node),
#   NODE_HOSTNAME (drasched-node), NODE_LOG_DIR (_output/node/logs),
#   NODE_STATE_DIR (_output/node: state.json, host-before.txt, host-after.txt),
#   NODE_BIN_DIR (_output/node/bin), CLUSTER_BIN_DIR (_output/cluster/bin),
#   NODE_PROXY (1: run kube-proxy), NODE_TAINTS (the kubelet's
#   --register-with-taints), and the ports NODE_ETCD_PORT (12379, and the
#   next for its peers), NODE_APISERVER_PORT (16443), NODE_KCM_PORT (11257),
#   NODE_SCHEDULER_PORT (11259), NODE_KUBELET_PORT (11250),
#   NODE_KUBELET_HEALTHZ_PORT (11248), NODE_PROXY_METRICS_PORT (11249),
#   NODE_PROXY_HEALTHZ_PORT (11256).
#
# Needs root, Go, hack/build-node.sh and hack/build-control-plane.sh. `up`
# installs the Debian packages it needs (runc, containernetworking-plugins,
# iptables, conntrack, nftables, iproute2) with apt-get when they are
# missing. A failed `up` leaves things running: call `down`, which is safe
# at any point.
set -euo pipefail
# shellcheck source=hack/lib/init.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/init.sh"

# The Debian packages the node needs, by the command or file that shows
# they are there.
declare -A packages=(
  [runc]=runc
  [/usr/lib/cni/bridge]=containernetworking-plugins
  [iptables]=iptables
  [conntrack]=conntrack
  [nft]=nftables
  [ip]=iproute2
)

# install_packages installs the Debian packages that are missing.
install_packages() {
  local cmd missing=()
  for cmd in "${!packages[@]}"; do
    if [[ "${cmd}" == /* ]]; then
      [[ -e "${cmd}" ]] || missing+=("${packages[${cmd}]}")
    else
      command -v "${cmd}" >/dev/null 2>&1 || missing+=("${packages[${cmd}]}")
    fi
  done
  if ((${#missing[@]} > 0)); then
    echo "    apt-get install ${missing[*]}"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  echo "    runc $(runc --version | sed -n 's/^runc version //p'), CNI plugins $(dpkg-query -W -f '${Version}' containernetworking-plugins)"
}

case "${1:-}" in
  up)
    # Without root the harness says what is wrong, before apt-get would.
    if [[ ${EUID} -eq 0 ]]; then
      install_packages
    fi
    ;;
  down | restart-kubelet | env) ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac

harness=${root}/_output/node/harness
go build -o "${harness}" ./test/node/cmd/node
exec "${harness}" "$@"
