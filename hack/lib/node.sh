# shellcheck shell=bash
# A real single-node cluster on this host, for `make test-node` and
# `make demo REAL_NODE=1` (hack/node.sh is the command line): etcd,
# kube-apiserver and kube-controller-manager (hack/build-control-plane.sh),
# containerd, kubelet and kube-proxy (hack/build-node.sh), runc and the CNI
# plugins from Debian. Source it after hack/lib/init.sh, which sets
# `root` and wait_for.
#
# Host hygiene. Every path is the node's own: NODE_ROOT (PKI, etcd, the
# kubelet's root directory, containerd's root, CNI and CDI configuration,
# simulated device nodes) and NODE_RUN (sockets, containerd's state, runc's
# state, shim sockets, network namespaces). Pods' cgroups live under
# /drasched-node, the pod network is the bridge drasched0. node_down puts
# the host back as node_snapshot found it: processes, mounts, cgroups,
# links, netfilter tables and chains, the sysctls the kubelet, kube-proxy
# and the bridge plugin change (kernel.panic, kernel.panic_on_oops,
# vm.overcommit_memory, ...), and the well-known paths that components
# create whatever their configuration says (/var/lib/cni, /var/log/containers);
# node_check_clean compares.
#
# Every daemon runs in its own session (setsid), with its PID in
# NODE_RUN/pids and its log in NODE_LOG_DIR.

NODE_ROOT=${NODE_ROOT:-/var/lib/drasched-node}
NODE_RUN=${NODE_RUN:-/run/drasched-node}
# The kubelet's node name; its client certificate says system:node:<name>.
NODE_HOSTNAME=${NODE_HOSTNAME:-drasched-node}
NODE_LOG_DIR=${NODE_LOG_DIR:-${root}/_output/node/logs}
NODE_BIN=${NODE_BIN_DIR:-${root}/_output/node/bin}
NODE_CLUSTER_BIN=${CLUSTER_BIN_DIR:-${root}/_output/cluster/bin}
# kube-proxy routes the kubernetes Service for pods (the chart's); 0 leaves
# it out (the demo's pods do not talk to the API server).
NODE_PROXY=${NODE_PROXY:-1}
# Taints the kubelet registers the node with (--register-with-taints).
NODE_TAINTS=${NODE_TAINTS:-}
# Where node_snapshot writes what node_check_clean compares with.
NODE_SNAPSHOT=${NODE_SNAPSHOT:-${root}/_output/node/host-before.txt}
# The sessions of the daemons node_start started since node_snapshot, one
# session ID a line: what is left in them after node_down is the node's,
# whatever binary it runs. (A kwok cluster beside the node runs the same
# kube-apiserver and etcd binaries, in sessions of its own.)
NODE_SESSIONS=${NODE_SESSIONS:-${root}/_output/node/sessions}
# Ports: away from the defaults, so that the node does not meet another
# cluster on this machine (kwok clusters take random ports).
NODE_ETCD_PORT=${NODE_ETCD_PORT:-12379}
NODE_APISERVER_PORT=${NODE_APISERVER_PORT:-16443}
NODE_KCM_PORT=${NODE_KCM_PORT:-11257}
NODE_SCHEDULER_PORT=${NODE_SCHEDULER_PORT:-11259}
NODE_KUBELET_PORT=${NODE_KUBELET_PORT:-11250}
NODE_KUBELET_HEALTHZ_PORT=${NODE_KUBELET_HEALTHZ_PORT:-11248}
NODE_PROXY_METRICS_PORT=${NODE_PROXY_METRICS_PORT:-11249}
NODE_PROXY_HEALTHZ_PORT=${NODE_PROXY_HEALTHZ_PORT:-11256}

node_cgroup=drasched-node
node_bridge=drasched0
node_network=drasched-node
node_pod_cidr=10.244.0.0/24
node_service_cidr=10.97.0.0/24
node_service_ip=10.97.0.1
# The node's own images (hack/build-node.sh).
node_pause_image=localhost/drasched-node/pause:test
# Debian packages the node needs, by the command that shows they are there.
declare -A node_packages=(
  [runc]=runc
  [/usr/lib/cni/bridge]=containernetworking-plugins
  [iptables]=iptables
  [conntrack]=conntrack
  [nft]=nftables
  [openssl]=openssl
)
# The daemons, in start order.
# shellcheck disable=SC2034 # used by hack/node.sh, which sources this file
node_daemons=(etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy)
# The sysctls that the kubelet (unless protectKernelDefaults), kube-proxy
# and the bridge CNI plugin may change.
node_sysctls=(
  kernel.panic kernel.panic_on_oops vm.overcommit_memory vm.panic_on_oom
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes
  net.ipv4.ip_forward net.ipv4.conf.all.route_localnet net.ipv4.conf.all.forwarding
  net.netfilter.nf_conntrack_max net.netfilter.nf_conntrack_tcp_timeout_established
  net.netfilter.nf_conntrack_tcp_timeout_close_wait net.netfilter.nf_conntrack_tcp_be_liberal
  net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
)
# Paths that components create wherever they are configured to keep their
# state: libcni's result cache, the kubelet's container log links and its
# device plugin socket (/var/lib/kubelet/device-plugins, whatever its root
# directory), ...
node_wellknown_paths=(
  /var/lib/cni /var/log/containers /var/log/pods /run/containerd /var/run/containerd /run/netns
  /var/lib/kubelet /var/lib/containerd /etc/cni /var/run/cdi /etc/cdi /run/nri /opt/containerd
  /run/kubernetes /var/run/kubernetes /etc/kubernetes
)

node_log() {
  printf '    %s\n' "$*"
}

node_die() {
  echo "node: $*" >&2
  return 1
}

node_kubectl() {
  "${NODE_CLUSTER_BIN}/kubectl" --kubeconfig "${NODE_ROOT}/admin.kubeconfig" "$@"
}

# node_require: root, cgroup v1 or v2, the binaries, free ports.
node_require() {
  [[ ${EUID} -eq 0 ]] || node_die "a real node needs root (mounts, cgroups, device nodes, netfilter)" || return
  # The kubelet's device plugin socket is /var/lib/kubelet/device-plugins,
  # whatever its root directory: two kubelets would take it from each other.
  if pgrep -x kubelet >/dev/null; then
    node_die "a kubelet runs on this host already (pid $(pgrep -x kubelet | tr '\n' ' '))" || return
  fi
  local b
  for b in "${NODE_BIN}"/{kubelet,kube-proxy,containerd,ctr,containerd-shim-runc-v2,pause.tar,gpu-check.tar} \
    "${NODE_CLUSTER_BIN}"/{etcd,kube-apiserver,kube-controller-manager,kube-scheduler,kubectl}; do
    [[ -e "${b}" ]] || node_die "${b#"${root}"/} is missing: run hack/build-node.sh and hack/build-control-plane.sh (make test-node does)" || return
  done
}

# node_install_packages installs the Debian packages that are missing.
node_install_packages() {
  local cmd missing=()
  for cmd in "${!node_packages[@]}"; do
    if [[ "${cmd}" == /* ]]; then
      [[ -e "${cmd}" ]] || missing+=("${node_packages[${cmd}]}")
    else
      command -v "${cmd}" >/dev/null 2>&1 || missing+=("${node_packages[${cmd}]}")
    fi
  done
  if ((${#missing[@]} > 0)); then
    node_log "apt-get install ${missing[*]}"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  node_log "runc $(runc --version | sed -n 's/^runc version //p'), CNI plugins $(dpkg-query -W -f '${Version}' containernetworking-plugins)"
}

# node_state prints what node_down must put back: one line per fact,
# sorted within each section, so that two states compare with diff.
node_state() {
  # Facts, not checks: a grep that selects nothing is no error here.
  local -
  set +e +o pipefail
  local s p
  echo "# processes: those in the node's sessions; kubelets, containerds, shims, runc of anyone"
  if [[ -s "${NODE_SESSIONS}" ]]; then
    ps -eo pid=,sid=,comm= | awk 'NR == FNR { node[$1] = 1; next } ($2 in node) { print "process " $3 " (pid " $1 ", session " $2 ")" }' "${NODE_SESSIONS}" -
  fi
  # containerd-shim-runc-v2's process name is cut to 15 characters.
  for p in containerd containerd-shim kubelet kube-proxy runc; do
    echo "process ${p}: $(pgrep -x "${p}" | wc -l)"
  done
  echo "# mounts (mount point, type)"
  awk '{print "mount " $5 " " $(NF-2)}' /proc/self/mountinfo | sort
  echo "# cgroups (two levels)"
  # process_api/ holds this machine's sessions, which come and go.
  find /sys/fs/cgroup -mindepth 2 -maxdepth 2 -type d 2>/dev/null | grep -v '/process_api$' | sed 's/^/cgroup /' | sort
  echo "# links and routes"
  ip -o link show | awk -F': ' '{sub(/@.*/, "", $2); print "link " $2}' | sort
  ip -4 route show table all | sed 's/^/route /' | sort
  # Rules without their counters, which traffic of anyone changes.
  echo "# netfilter"
  nft list ruleset 2>/dev/null | sed -e 's/^[[:space:]]*//' -e 's/ # handle [0-9]*$//' \
    -e 's/counter packets [0-9]* bytes [0-9]*/counter/' -e '/^$/d' | sed 's/^/nft /'
  echo "# sysctls"
  for s in "${node_sysctls[@]}"; do
    echo "sysctl ${s} = $(sysctl -n "${s}" 2>/dev/null || echo '(none)')"
  done
  echo "# well-known paths"
  for p in "${node_wellknown_paths[@]}"; do
    if [[ -e "${p}" ]]; then
      echo "path ${p}: $(find "${p}" -maxdepth 2 2>/dev/null | wc -l) entries"
    else
      echo "path ${p}: absent"
    fi
  done
  for p in "${NODE_ROOT}" "${NODE_RUN}"; do
    [[ -e "${p}" ]] && echo "path ${p}: present" || echo "path ${p}: absent"
  done
}

# node_snapshot records the host's state before the node starts. What an
# earlier node left where every node writes is not the host's own: it goes
# first, or node_down, which removes it, would leave the host different.
node_snapshot() {
  node_remove_leftovers
  mkdir -p "$(dirname "${NODE_SNAPSHOT}")" "$(dirname "${NODE_SESSIONS}")"
  : >"${NODE_SESSIONS}"
  node_state >"${NODE_SNAPSHOT}"
}

# node_check_clean compares the host with node_snapshot's record and
# fails, showing the difference, when the node left something behind.
node_check_clean() {
  local after=${NODE_SNAPSHOT%.txt}
  after=${after%-before}-after.txt
  node_state >"${after}"
  if ! diff -u "${NODE_SNAPSHOT}" "${after}" >"${after%.txt}.diff"; then
    echo "node: the host is not as it was before the node started (${NODE_SNAPSHOT#"${root}"/} vs ${after#"${root}"/}):" >&2
    cat "${after%.txt}.diff" >&2
    return 1
  fi
  rm -f "${after%.txt}.diff"
  node_log "host as before: $(grep -c '' "${after}") facts compared (${after#"${root}"/})"
}

# node_start NAME COMMAND...: runs a daemon in its own session, its output in
# NODE_LOG_DIR/NAME.log, its PID in NODE_RUN/pids/NAME. The lock of
# hack/node.sh (descriptor 9) stays with the script.
node_start() {
  local name=$1
  shift
  mkdir -p "${NODE_RUN}/pids" "${NODE_LOG_DIR}"
  setsid "$@" >>"${NODE_LOG_DIR}/${name}.log" 2>&1 9>&- </dev/null &
  echo "$!" >"${NODE_RUN}/pids/${name}"
  # A background job of a script is no process group leader, so setsid
  # does not fork: the job's PID is its session's ID.
  echo "$!" >>"${NODE_SESSIONS}"
}

# node_pid NAME: the PID of a running daemon, nothing if it is not running.
node_pid() {
  local f=${NODE_RUN}/pids/$1 pid
  [[ -f "${f}" ]] || return 0
  pid=$(<"${f}")
  # A PID file left behind, whose PID may have been reused, does not count:
  # the process must run one of the node's binaries.
  case "$(readlink "/proc/${pid}/exe" 2>/dev/null)" in
    "${NODE_BIN}"/* | "${NODE_CLUSTER_BIN}"/*) echo "${pid}" ;;
  esac
}

# node_stop NAME: stops a daemon and its session: SIGTERM, SIGKILL after 10 s.
node_stop() {
  local name=$1 pid i
  pid=$(node_pid "${name}")
  if [[ -n "${pid}" ]]; then
    kill -TERM -- "-${pid}" 2>/dev/null || kill -TERM "${pid}" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      kill -0 "${pid}" 2>/dev/null || break
      sleep 0.2
    done
    kill -KILL -- "-${pid}" 2>/dev/null || true
  fi
  rm -f "${NODE_RUN}/pids/${name}"
}


# node_ip: the address of the interface of the default route.
node_ip() {
  ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p'
}

node_check_ports() {
  local port
  for port in "${NODE_ETCD_PORT}" "$((NODE_ETCD_PORT + 1))" "${NODE_APISERVER_PORT}" "${NODE_KCM_PORT}" "${NODE_SCHEDULER_PORT}" \
    "${NODE_KUBELET_PORT}" "${NODE_KUBELET_HEALTHZ_PORT}" "${NODE_PROXY_METRICS_PORT}" "${NODE_PROXY_HEALTHZ_PORT}"; do
    if ss -Htln "sport = :${port}" | grep -q .; then
      node_die "port ${port} is in use; set the NODE_*_PORT variables of hack/lib/node.sh" || return
    fi
  done
}

# node_cert NAME SUBJECT [SANS]: a key and a certificate signed by the CA.
node_cert() {
  local name=$1 subject=$2 sans=${3:-} pki=${NODE_ROOT}/pki ext
  ext="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth,serverAuth"
  [[ -n "${sans}" ]] && ext+=$'\n'"subjectAltName=${sans}"
  openssl ecparam -name prime256v1 -genkey -noout -out "${pki}/${name}.key" 2>/dev/null
  openssl req -new -key "${pki}/${name}.key" -subj "${subject}" -out "${pki}/${name}.csr" 2>/dev/null
  openssl x509 -req -in "${pki}/${name}.csr" -CA "${pki}/ca.crt" -CAkey "${pki}/ca.key" -CAcreateserial \
    -days 2 -extfile <(echo "${ext}") -out "${pki}/${name}.crt" 2>/dev/null
  rm -f "${pki}/${name}.csr"
}

# node_kubeconfig NAME CERT: a kubeconfig for a client certificate.
node_kubeconfig() {
  local name=$1 cert=$2 pki=${NODE_ROOT}/pki
  cat >"${NODE_ROOT}/${name}.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: node
  cluster:
    server: https://$(node_ip):${NODE_APISERVER_PORT}
    certificate-authority: ${pki}/ca.crt
users:
- name: ${name}
  user:
    client-certificate: ${pki}/${cert}.crt
    client-key: ${pki}/${cert}.key
contexts:
- name: ${name}
  context: {cluster: node, user: ${name}}
current-context: ${name}
EOF
  chmod 600 "${NODE_ROOT}/${name}.kubeconfig"
}

# node_pki: a CA, the API server's serving certificate, client certificates
# for each component (the kubelet's names its node, for the Node
# authorizer), and the service account key pair.
node_pki() {
  local pki=${NODE_ROOT}/pki ip
  ip=$(node_ip)
  mkdir -p "${pki}"
  chmod 700 "${pki}"
  openssl ecparam -name prime256v1 -genkey -noout -out "${pki}/ca.key" 2>/dev/null
  openssl req -x509 -new -key "${pki}/ca.key" -subj "/CN=drasched-node-ca" -days 2 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "${pki}/ca.crt" 2>/dev/null
  node_cert apiserver "/CN=kube-apiserver" \
    "IP:${ip},IP:127.0.0.1,IP:${node_service_ip},DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost"
  node_cert admin "/O=system:masters/CN=drasched-node-admin"
  node_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  node_cert controller-manager "/CN=system:kube-controller-manager"
  node_cert scheduler "/CN=system:kube-scheduler"
  node_cert kubelet "/O=system:nodes/CN=system:node:${NODE_HOSTNAME}"
  node_cert kube-proxy "/CN=system:kube-proxy"
  openssl genrsa -out "${pki}/sa.key" 2048 2>/dev/null
  openssl rsa -in "${pki}/sa.key" -pubout -out "${pki}/sa.pub" 2>/dev/null
  node_kubeconfig admin admin
  node_kubeconfig controller-manager controller-manager
  node_kubeconfig scheduler scheduler
  node_kubeconfig kubelet kubelet
  node_kubeconfig kube-proxy kube-proxy
}

# node_control_plane_up: etcd, kube-apiserver, kube-controller-manager and
# kube-scheduler, which schedules the DaemonSet's and Deployment's pods (the
# chart's routing policy sends pods with claims to drasched).
node_control_plane_up() {
  local pki=${NODE_ROOT}/pki ip
  ip=$(node_ip)
  node_log "etcd, kube-apiserver, kube-controller-manager, kube-scheduler (${NODE_CLUSTER_BIN#"${root}"/})"
  node_start etcd "${NODE_CLUSTER_BIN}/etcd" --name node --data-dir "${NODE_ROOT}/etcd" \
    --listen-client-urls "http://127.0.0.1:${NODE_ETCD_PORT}" --advertise-client-urls "http://127.0.0.1:${NODE_ETCD_PORT}" \
    --listen-peer-urls "http://127.0.0.1:$((NODE_ETCD_PORT + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((NODE_ETCD_PORT + 1))" \
    --initial-cluster "node=http://127.0.0.1:$((NODE_ETCD_PORT + 1))" --unsafe-no-fsync --log-level warn
  node_start kube-apiserver "${NODE_CLUSTER_BIN}/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:${NODE_ETCD_PORT}" \
    --bind-address 0.0.0.0 --advertise-address "${ip}" --secure-port "${NODE_APISERVER_PORT}" \
    --cert-dir "${NODE_ROOT}/apiserver" --tls-cert-file "${pki}/apiserver.crt" --tls-private-key-file "${pki}/apiserver.key" \
    --client-ca-file "${pki}/ca.crt" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "${pki}/sa.pub" --service-account-signing-key-file "${pki}/sa.key" \
    --service-cluster-ip-range "${node_service_cidr}" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --kubelet-client-certificate "${pki}/apiserver-kubelet-client.crt" --kubelet-client-key "${pki}/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types InternalIP,Hostname \
    --profiling=false --v=1
  wait_for "kube-apiserver /readyz" 120 node_kubectl get --raw /readyz || return
  node_start kube-controller-manager "${NODE_CLUSTER_BIN}/kube-controller-manager" \
    --kubeconfig "${NODE_ROOT}/controller-manager.kubeconfig" \
    --authentication-kubeconfig "${NODE_ROOT}/controller-manager.kubeconfig" \
    --authorization-kubeconfig "${NODE_ROOT}/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "${NODE_KCM_PORT}" --cert-dir "${NODE_ROOT}/controller-manager" \
    --root-ca-file "${pki}/ca.crt" --service-account-private-key-file "${pki}/sa.key" \
    --use-service-account-credentials --leader-elect=false --profiling=false --v=1
  node_start kube-scheduler "${NODE_CLUSTER_BIN}/kube-scheduler" \
    --kubeconfig "${NODE_ROOT}/scheduler.kubeconfig" \
    --authentication-kubeconfig "${NODE_ROOT}/scheduler.kubeconfig" \
    --authorization-kubeconfig "${NODE_ROOT}/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "${NODE_SCHEDULER_PORT}" --cert-dir "${NODE_ROOT}/scheduler" \
    --leader-elect=false --profiling=false --v=1
  # Pods' volumes wait for the root CA ConfigMap and their service account.
  wait_for "the kube-root-ca.crt ConfigMap" 120 node_kubectl -n default get configmap kube-root-ca.crt || return
  wait_for "the default service account" 120 node_kubectl -n default get serviceaccount default
}

# node_containerd_config writes containerd's configuration: every path
# under NODE_ROOT and NODE_RUN, CDI specs from NODE_ROOT/cdi, the sandbox
# image built here, and no plugin that writes outside them.
node_containerd_config() {
  mkdir -p "${NODE_ROOT}/containerd" "${NODE_ROOT}/cni/net.d" "${NODE_ROOT}/cdi"
  cat >"${NODE_ROOT}/containerd/config.toml" <<EOF
version = 3
root = "${NODE_ROOT}/containerd/root"
state = "${NODE_RUN}/containerd"
# NRI would listen on /var/run/nri, opt installs into /opt/containerd, and
# the image verifier reads /opt/containerd too.
disabled_plugins = [
  "io.containerd.nri.v1.nri",
  "io.containerd.internal.v1.opt",
  "io.containerd.image-verifier.v1.bindir",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = "${NODE_RUN}/containerd.sock"

[ttrpc]
  address = "${NODE_RUN}/containerd.sock.ttrpc"

[debug]
  address = "${NODE_RUN}/containerd-debug.sock"

[plugins.'io.containerd.shim.v1.manager']
  socket_dir = "${NODE_RUN}/s"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    # Built by hack/build-node.sh and imported, never pulled.
    sandbox = "${node_pause_image}"

[plugins.'io.containerd.cri.v1.runtime']
  cdi_spec_dirs = ["${NODE_ROOT}/cdi"]
  # root here lacks CAP_SYS_RESOURCE: without this every sandbox fails
  # with "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        Root = "${NODE_RUN}/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "${NODE_ROOT}/cni/net.d"

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
EOF
  # A bridge with host-local addresses; no masquerading and no port maps,
  # so the plugins write no netfilter rules (kube-proxy writes those).
  cat >"${NODE_ROOT}/cni/net.d/10-${node_network}.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "${node_network}",
  "plugins": [{
    "type": "bridge",
    "bridge": "${node_bridge}",
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "dataDir": "${NODE_ROOT}/cni/ipam",
      "ranges": [[{"subnet": "${node_pod_cidr}"}]],
      "routes": [{"dst": "0.0.0.0/0"}]
    }
  }]
}
EOF
}

node_ctr() {
  "${NODE_BIN}/ctr" --address "${NODE_RUN}/containerd.sock" --namespace k8s.io "$@"
}

# node_containerd_up starts containerd and imports the node's images and
# the image tarballs given as arguments (make images).
node_containerd_up() {
  local tar
  node_containerd_config
  node_log "containerd $("${NODE_BIN}/containerd" --version | awk '{print $3}') (${NODE_BIN#"${root}"/})"
  # The shim is found on PATH.
  node_start containerd env PATH="${NODE_BIN}:${PATH}" "${NODE_BIN}/containerd" --config "${NODE_ROOT}/containerd/config.toml"
  wait_for "containerd" 60 node_ctr version || return
  for tar in "${NODE_BIN}/pause.tar" "${NODE_BIN}/gpu-check.tar" "$@"; do
    # ctr warns on stderr that cgroup v1 is deprecated: into the log.
    node_ctr images import --local "${tar}" >/dev/null 2>>"${NODE_LOG_DIR}/ctr.log" || node_die "import ${tar}" || return
  done
  node_log "images: $(node_ctr images ls -q 2>>"${NODE_LOG_DIR}/ctr.log" | grep -v '^sha256:' | tr '\n' ' ')"
}

# node_kubelet_config writes the kubelet's configuration.
node_kubelet_config() {
  local pki=${NODE_ROOT}/pki
  mkdir -p "${NODE_ROOT}/kubelet"
  cat >"${NODE_ROOT}/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# These hosts run cgroup v1, which kubelet 1.35+ refuses unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
# Pods' cgroups under /${node_cgroup} in every hierarchy, removed at teardown.
cgroupRoot: /${node_cgroup}
containerRuntimeEndpoint: unix://${NODE_RUN}/containerd.sock
podLogsDir: ${NODE_ROOT}/pod-logs
port: ${NODE_KUBELET_PORT}
healthzBindAddress: 127.0.0.1
healthzPort: ${NODE_KUBELET_HEALTHZ_PORT}
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: ${pki}/ca.crt}
authorization:
  mode: Webhook
# No cluster DNS: pods use the host's resolver.
resolvConf: /etc/resolv.conf
failSwapOn: false
# Never garbage-collect the imported images (there is no registry to pull
# them back from) and never evict on a host shared with other work.
imageGCHighThresholdPercent: 100
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
  nodefs.inodesFree: 1%
syncFrequency: 10s
fileCheckFrequency: 10s
# A heartbeat in the Node's status every minute, ±30 s (default 5m), so
# that a test waiting for one after a kubelet restart has one within two
# minutes even when it missed the report the kubelet sends as it starts.
nodeStatusReportFrequency: 1m
EOF
}

node_kubelet_start() {
  node_start kubelet "${NODE_BIN}/kubelet" --config "${NODE_ROOT}/kubelet-config.yaml" \
    --kubeconfig "${NODE_ROOT}/kubelet.kubeconfig" --root-dir "${NODE_ROOT}/kubelet" \
    --cert-dir "${NODE_ROOT}/kubelet/pki" \
    --hostname-override "${NODE_HOSTNAME}" --node-ip "$(node_ip)" \
    --node-labels nvidia.com/gpu.present=true ${NODE_TAINTS:+--register-with-taints "${NODE_TAINTS}"} --v=2
}

node_ready() {
  [[ "$(node_kubectl get node "${NODE_HOSTNAME}" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}

# node_restart_kubelet stops the kubelet and starts it again; the pods
# keep running (hack/node.sh restart-kubelet, for the tests).
node_restart_kubelet() {
  node_stop kubelet
  node_kubelet_start
  wait_for "kubelet /healthz" 60 curl -sf "http://127.0.0.1:${NODE_KUBELET_HEALTHZ_PORT}/healthz"
}

node_proxy_up() {
  cat >"${NODE_ROOT}/kube-proxy-config.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: ${NODE_ROOT}/kube-proxy.kubeconfig
hostnameOverride: ${NODE_HOSTNAME}
mode: iptables
clusterCIDR: ${node_pod_cidr}
metricsBindAddress: 127.0.0.1:${NODE_PROXY_METRICS_PORT}
healthzBindAddress: 127.0.0.1:${NODE_PROXY_HEALTHZ_PORT}
# Leave the host's conntrack sysctls and route_localnet alone.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  localhostNodePorts: false
EOF
  node_start kube-proxy "${NODE_BIN}/kube-proxy" --config "${NODE_ROOT}/kube-proxy-config.yaml" --v=1
}

# node_up IMAGE_TARBALL...: the node: containerd (with the images), the
# kubelet, kube-proxy; Ready, with the kubernetes Service routed.
node_up() {
  local i
  node_containerd_up "$@" || return
  # The kubelet refuses a cgroupRoot that does not exist.
  for i in /sys/fs/cgroup/*/; do
    [[ -e "${i}cgroup.procs" && "${i}" != */unified/ ]] && mkdir -p "${i}${node_cgroup}"
  done
  node_kubelet_config
  node_log "kubelet$([[ "${NODE_PROXY}" != 1 ]] || echo ", kube-proxy") $("${NODE_BIN}/kubelet" --version | awk '{print $2}') (node ${NODE_HOSTNAME}, $(node_ip))"
  node_kubelet_start
  [[ "${NODE_PROXY}" != 1 ]] || node_proxy_up
  wait_for "node ${NODE_HOSTNAME} Ready" 120 node_ready || return
  # kube-proxy has written the rules of the kubernetes Service when its
  # ClusterIP answers.
  [[ "${NODE_PROXY}" != 1 ]] || wait_for "the kubernetes Service through kube-proxy" 60 \
    curl -sk --max-time 2 "https://${node_service_ip}:443/readyz"
}

# node_drain deletes every workload and pod, so that the kubelet stops
# their sandboxes the ordinary way (the CNI plugin removes their network),
# and waits until no container runs.
node_drain() {
  local i
  [[ -n "$(node_pid kubelet)" && -n "$(node_pid containerd)" ]] || return 0
  node_kubectl get --raw /readyz >/dev/null 2>&1 || return 0
  node_kubectl delete daemonsets,deployments,replicasets,statefulsets,jobs --all -A --wait=false >/dev/null 2>&1 || true
  node_kubectl delete pods --all -A --grace-period=1 --wait=false >/dev/null 2>&1 || true
  for ((i = 0; i < 120; i++)); do
    [[ -z "$(node_ctr tasks ls -q 2>/dev/null)" ]] && return 0
    sleep 0.5
  done
  node_log "containers still running after 60 s: $(node_ctr tasks ls -q | tr '\n' ' ')"
}

# node_down stops everything and puts the host back as it was (see the
# top of this file). It is safe to call at any point, also twice.
node_down() {
  local d p i name stopped=() shims mounts cgroups
  node_drain
  for name in kube-proxy kubelet; do
    [[ -z "$(node_pid "${name}")" ]] || stopped+=("${name}")
    node_stop "${name}"
  done
  # What the kubelet did not stop: kill the containers, then the shims.
  if [[ -n "$(node_pid containerd)" ]]; then
    for name in $(node_ctr tasks ls -q 2>/dev/null); do
      node_log "killing container ${name}, which the kubelet left running"
      node_ctr tasks kill -s SIGKILL "${name}" >/dev/null 2>&1 || true
    done
    stopped+=(containerd)
  fi
  node_stop containerd
  for d in /sys/fs/cgroup/*/"${node_cgroup}"; do
    [[ -d "${d}" ]] || continue
    # Everything in the node's cgroups: containers, pause processes.
    find "${d}" -name cgroup.procs -exec cat {} + 2>/dev/null | while read -r p; do kill -KILL "${p}" 2>/dev/null; done
  done
  shims=()
  for p in $(pgrep -x containerd-shim); do
    if [[ "$(readlink "/proc/${p}/exe")" == "${NODE_BIN}/containerd-shim-runc-v2" ]]; then
      node_log "killing shim ${p}"
      kill -KILL "${p}" 2>/dev/null || true
      shims+=("${p}")
    fi
  done
  # A killed shim is there until its new parent reaps it, and
  # node_check_clean counts every shim: wait for them to be gone.
  for ((i = 0; i < 50 && ${#shims[@]} > 0; i++)); do
    kill -0 "${shims[@]}" 2>/dev/null || break
    sleep 0.2
  done
  for name in kube-scheduler kube-controller-manager kube-apiserver etcd; do
    [[ -z "$(node_pid "${name}")" ]] || stopped+=("${name}")
    node_stop "${name}"
  done
  ((${#stopped[@]} == 0)) || node_log "stopped ${stopped[*]}"
  # Netfilter: kube-proxy removes its own chains; the tables that did not
  # exist before go too.
  if [[ -x "${NODE_BIN}/kube-proxy" ]]; then
    "${NODE_BIN}/kube-proxy" --cleanup >>"${NODE_LOG_DIR}/kube-proxy-cleanup.log" 2>&1 || true
  fi
  node_restore_netfilter
  if ip link show "${node_bridge}" >/dev/null 2>&1; then
    ip link delete "${node_bridge}"
    node_log "deleted link ${node_bridge}"
  fi
  # Mounts under the node's directories, deepest first: the kubelet's bind
  # mount of its root, volumes, container root filesystems, network
  # namespaces, shm.
  mounts=$(awk -v a="${NODE_ROOT}" -v b="${NODE_RUN}" '{ if (index($5, a) == 1 || index($5, b) == 1) print $5 }' /proc/self/mountinfo | sort -r)
  if [[ -n "${mounts}" ]]; then
    while read -r p; do umount -l "${p}" 2>/dev/null || true; done <<<"${mounts}"
    node_log "unmounted $(wc -l <<<"${mounts}") mounts under ${NODE_ROOT} and ${NODE_RUN}"
  fi
  # Cgroups, deepest first.
  cgroups=$(find /sys/fs/cgroup/*/"${node_cgroup}" -depth -type d 2>/dev/null || true)
  if [[ -n "${cgroups}" ]]; then
    while read -r d; do rmdir "${d}" 2>/dev/null || true; done <<<"${cgroups}"
    node_log "removed $(wc -l <<<"${cgroups}") cgroups under /${node_cgroup}"
  fi
  node_remove_leftovers
  node_restore_sysctls
  node_restore_paths
  rm -rf --one-file-system "${NODE_ROOT}" "${NODE_RUN}"
}

# node_remove_leftovers removes what an earlier node left where every node
# writes, whatever its configuration (a node killed before its down, or a
# kubelet stopped before it removed its dead containers): the kubelet's
# container log links into NODE_ROOT, libcni's cached results for network
# namespaces under NODE_RUN, and kube-proxy's chains, which route the
# node's Service range. Each is recognised as the node's by a path or an
# address no other cluster uses, so nothing of anyone else's goes.
node_remove_leftovers() {
  local f links=0 results=0
  for f in /var/log/containers/*; do
    [[ -L "${f}" && "$(readlink "${f}")" == "${NODE_ROOT}/"* ]] || continue
    rm -f "${f}"
    links=$((links + 1))
  done
  for f in /var/lib/cni/results/*; do
    [[ -f "${f}" ]] || continue
    grep -qF "\"netns\":\"${NODE_RUN}/" "${f}" || continue
    rm -f "${f}"
    results=$((results + 1))
  done
  ((links == 0)) || node_log "removed ${links} container log links into ${NODE_ROOT}"
  ((results == 0)) || node_log "removed ${results} CNI results for network namespaces under ${NODE_RUN}"
  if [[ -z "$(node_pid kube-proxy)" && -x "${NODE_BIN}/kube-proxy" ]] &&
    nft list ruleset 2>/dev/null | grep -qF "daddr ${node_service_ip} "; then
    mkdir -p "${NODE_LOG_DIR}"
    "${NODE_BIN}/kube-proxy" --cleanup >>"${NODE_LOG_DIR}/kube-proxy-cleanup.log" 2>&1 || true
    node_log "removed kube-proxy's chains for ${node_service_cidr}"
  fi
}

# node_restore_netfilter deletes the netfilter tables that were not there
# before the node started (iptables-nft creates ip filter, ip nat, ...
# when kube-proxy and the kubelet first write). Chains added to tables that
# were there are kube-proxy's, which its --cleanup removed; node_check_clean
# shows anything else.
node_restore_netfilter() {
  local family table before=${NODE_SNAPSHOT}
  [[ -f "${before}" ]] || return 0
  command -v nft >/dev/null || return 0
  while read -r family table; do
    if ! grep -qxF "nft table ${family} ${table} {" "${before}"; then
      nft delete table "${family}" "${table}" 2>/dev/null || true
      node_log "deleted netfilter table ${family} ${table}"
    fi
  done < <(nft list tables 2>/dev/null | awk '{print $2, $3}')
}

node_restore_sysctls() {
  local s want now
  [[ -f "${NODE_SNAPSHOT}" ]] || return 0
  for s in "${node_sysctls[@]}"; do
    want=$(sed -n "s/^sysctl ${s//./\\.} = //p" "${NODE_SNAPSHOT}")
    now=$(sysctl -n "${s}" 2>/dev/null || true)
    if [[ -n "${want}" && "${want}" != "(none)" && "${now}" != "${want}" ]]; then
      sysctl -qw "${s}=${want}" || true
      node_log "restored ${s} = ${want} (was ${now})"
    fi
  done
}

# node_restore_paths removes the well-known paths that were absent before.
node_restore_paths() {
  local p
  [[ -f "${NODE_SNAPSHOT}" ]] || return 0
  for p in "${node_wellknown_paths[@]}"; do
    if grep -qxF "path ${p}: absent" "${NODE_SNAPSHOT}" && [[ -e "${p}" ]]; then
      rm -rf --one-file-system "${p}"
      node_log "removed ${p}"
    fi
  done
}
