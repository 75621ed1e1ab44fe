#!/usr/bin/env bash
# A real single-node cluster on this host (hack/lib/node.sh says what runs
# and where): `make test-node` and `make demo REAL_NODE=1` run it.
#
# Usage: hack/node.sh up [IMAGE_TARBALL...]   start it; import the images
#        hack/node.sh down                    stop it, put the host back, check
#        hack/node.sh restart-kubelet         stop and start the kubelet
#        hack/node.sh env                     print KUBECONFIG and the node's paths
#
# Needs root, hack/build-node.sh and hack/build-control-plane.sh. Installs
# the Debian packages it needs (runc, containernetworking-plugins, iptables,
# conntrack, nftables, openssl) with apt-get when they are missing. A failed
# `up` leaves things running: call `down`, which is safe at any point.
set -euo pipefail
# shellcheck source=hack/lib/init.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/init.sh"
# shellcheck source=hack/lib/node.sh
source hack/lib/node.sh

running() {
  local name
  for name in "${node_daemons[@]}"; do
    [[ -z "$(node_pid "${name}")" ]] || return 0
  done
  return 1
}

case "${1:-}" in
  up)
    shift
    echo "==> real node ${NODE_HOSTNAME}: ${NODE_ROOT}, ${NODE_RUN}; logs in ${NODE_LOG_DIR#"${root}"/}"
    if running; then
      node_die "a node runs already (${NODE_RUN}/pids): hack/node.sh down"
    fi
    node_require
    if [[ -e "${NODE_RUN}" || -e "${NODE_ROOT}" ]]; then
      node_log "removing what an earlier run left"
      node_down
      [[ ! -f "${NODE_SNAPSHOT}" ]] || node_check_clean
    fi
    node_install_packages
    node_check_ports
    rm -rf "${NODE_LOG_DIR}"
    node_snapshot
    mkdir -p "${NODE_ROOT}" "${NODE_RUN}"
    node_pki
    node_control_plane_up
    node_up "$@"
    node_log "Ready: export KUBECONFIG=${NODE_ROOT}/admin.kubeconfig"
    ;;
  down)
    echo "==> stopping real node ${NODE_HOSTNAME}"
    node_down
    if [[ -f "${NODE_SNAPSHOT}" ]]; then
      node_check_clean
    fi
    ;;
  restart-kubelet)
    node_restart_kubelet
    ;;
  env)
    cat <<ENV
KUBECONFIG=${NODE_ROOT}/admin.kubeconfig
NODE_ROOT=${NODE_ROOT}
NODE_RUN=${NODE_RUN}
NODE_HOSTNAME=${NODE_HOSTNAME}
NODE_LOG_DIR=${NODE_LOG_DIR}
NODE_BIN=${NODE_BIN}
NODE_CDI_DIR=${NODE_ROOT}/cdi
NODE_KUBELET_DIR=${NODE_ROOT}/kubelet
ENV
    ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
