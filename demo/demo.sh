#!/usr/bin/env bash
# The demo behind `make demo`: a local kwok cluster made of locally built
# binaries, GPU nodes simulated from the GPU driver's inventory files, and
# drasched scheduling the example GPU workloads of config/examples. See
# docs/demo.md.
#
# Usage: demo/demo.sh [up|down]
#   up    (default) run the demo, then tear the cluster down; KEEP=1 leaves
#         it up and prints how to use it
#   down  tear down what KEEP=1 left
#   REAL_NODE=1 (root) adds a real node next to the kwok nodes: containerd,
#         kubelet and runc of hack/node.sh (hack/build-node.sh builds
#         them), its GPUs simulated as in make test-node, and shows a GPU
#         pod's container printing the devices it sees (docs/real-node.md).
#   KUEUE=1 adds two teams' Jobs under Kueue (demo/kueue, docs/kueue.md):
#         Kueue admits them by GPU quota, drasched places them.
#
# Needs the binaries of `make build` (BIN_DIR, default _output/bin) and of
# hack/build-control-plane.sh (CLUSTER_BIN_DIR, default _output/cluster/bin);
# `make demo` builds both. Everything runs locally and offline; state and logs
# go to DEMO_DIR (default _output/demo). DEMO_CLUSTER names the kwok cluster.
# KUBE_MINOR=1.36 (make demo KUBE_MINOR=1.36): the control plane and
# drasched of that minor (docs/compatibility.md), without the steps that
# need a newer one.
set -euo pipefail
# shellcheck source=hack/lib/init.sh
source "$(dirname "${BASH_SOURCE[0]}")/../hack/lib/init.sh"

KEEP=${KEEP:-0}
REAL_NODE=${REAL_NODE:-0}
KUEUE=${KUEUE:-0}
cluster=${DEMO_CLUSTER:-drasched-demo}
bin_dir=$(abs "${BIN_DIR:-_output/bin}")
cluster_bin=$(abs "${CLUSTER_BIN_DIR:-_output/cluster/bin}")
demo_dir=$(abs "${DEMO_DIR:-_output/demo}")
run_dir=${demo_dir}/run
log_dir=${demo_dir}/logs
kubeconfig=${demo_dir}/kubeconfig
demo=${demo_dir}/bin/demo
# kwokctl keeps its clusters here instead of ~/.kwok, and runs this kubectl
# instead of downloading one.
export KWOK_WORKDIR=${demo_dir}/kwok
export KWOK_KUBECTL_BINARY=${cluster_bin}/kubectl

# Nodes whose ResourceSlices demo/helper publishes (pkg/driver/gpu builds them).
demo_nodes=(
  gpu-h100-0=config/inventory/h100-hgx-8.yaml
  gpu-a100-mig-0=config/inventory/a100-mig-8.yaml
  gpu-l40s-switch-0=config/inventory/l40s-8-pcie-switch.yaml
)
# The node served by a real gpu-kubelet-plugin process.
plugin_node=gpu-l40s-0
plugin_inventory=config/inventory/l40s-4.yaml
# The pod that must not fit (demo/workloads/<name>.yaml).
unschedulable_pod=four-large-gpus-one-pcie-root
# kubectl drasched fit: before the workloads, a pod that fits twice on the
# idle nodes (four GPUs behind one PCIe switch: gpu-l40s-switch-0 has two
# such switches); after them, the pod that must not fit.
fits_twice=config/examples/four-gpus-one-pcie-root.yaml
# The minor of the control plane and of drasched (hack/lib/minor.sh).
# shellcheck source=hack/lib/minor.sh
source hack/lib/minor.sh
# Gang scheduling (config/examples/gang): the control plane serves PodGroups
# (scheduling.k8s.io/v1beta1, 1.37's) and runs with the workload gates, and
# so does drasched. Older minors skip that step; 1.35 turns on the DRA
# features that the GPU nodes' slices use (partitionable devices for MIG,
# device taints for health), alpha there and on by default from 1.36 on.
gangs=true
case "${kube_minor}" in
  1.35)
    feature_gates=DRAPartitionableDevices=true,DRADeviceTaints=true
    runtime_config=
    gangs=false
    ;;
  1.36)
    feature_gates=
    runtime_config=
    gangs=false
    ;;
  *)
    feature_gates=GenericWorkload=true,DRAWorkloadResourceClaims=true
    runtime_config=scheduling.k8s.io/v1beta1=true
    ;;
esac
# The gang that fits and the gang that must not, applied in this order
# after the preemption step (config/examples/gang/<name>.yaml).
gang_fits=finetune
gang_unschedulable=pretrain

start=${SECONDS}
step_no=0
step() {
  step_no=$((step_no + 1))
  printf '==> [%d] %s  (%ds)\n' "${step_no}" "$1" "$((SECONDS - start))"
}

kubectl() {
  "${cluster_bin}/kubectl" --kubeconfig "${kubeconfig}" "$@"
}

# kubectl_drasched runs the kubectl plugin as users do: kubectl finds
# kubectl-drasched on PATH.
# It runs with the cluster's feature gates, as drasched does: the DRA
# features it allocates with follow them.
kubectl_drasched() {
  KUBECONFIG="${kubeconfig}" PATH="${bin_dir}:${PATH}" "${cluster_bin}/kubectl" drasched "$@" ${feature_gates:+--feature-gates "${feature_gates}"}
}

# top_flags: the profile's topology attributes (--scheduler-config) and the
# MIG profile as the partition type.
top_flags=(--scheduler-config config/scheduler-config.yaml --partition-attribute gpu.drasched.dev/profile)


# The processes the demo runs besides the cluster, by name.
declare -A binaries=(
  [gpu-kubelet-plugin]=${bin_dir}/gpu-kubelet-plugin
  [drasched]=${bin_dir}/scheduler
)

# start_process, process_pid, run_watching and stop_process; they use
# run_dir, log_dir, root and binaries. It stops what run_watching runs at
# exit.
# shellcheck source=hack/lib/processes.sh
source hack/lib/processes.sh
# shellcheck source=hack/lib/kwok.sh
source hack/lib/kwok.sh
# shellcheck source=hack/lib/gpu-plugin.sh
source hack/lib/gpu-plugin.sh

# The real node (REAL_NODE=1): hack/node.sh up --kubeconfig, with its state
# and logs beside the demo's. Its pods are only those that tolerate its
# taint. real_node_env reads where it lives.
export NODE_LOG_DIR=${log_dir}/node
export NODE_STATE_DIR=${demo_dir}/node
export NODE_PROXY=0
export NODE_TAINTS=drasched.dev/real-node=true:NoSchedule
NODE_ROOT="" NODE_HOSTNAME="" NODE_BIN=""
real_node_inventory=test/node/testdata/inventory.yaml
if [[ "${REAL_NODE}" == 1 ]]; then
  binaries[gpu-kubelet-plugin-real]=${bin_dir}/gpu-kubelet-plugin
fi
# Kueue (KUEUE=1): demo/helper's kueue command runs Kueue's manager.
if [[ "${KUEUE}" == 1 ]]; then
  binaries[kueue]=${demo}
fi


teardown() {
  local name
  # The real node first: its pods are drained through the API server.
  # hack/node.sh down puts the host back and checks it.
  if [[ -f "${NODE_STATE_DIR}/state.json" ]]; then
    hack/node.sh down
    rm -f "${NODE_STATE_DIR}/state.json"
  fi
  for name in "${!binaries[@]}"; do
    stop_process "${name}" "${binaries[${name}]}"
  done
  if cluster_exists "${cluster}"; then
    kwokctl delete cluster --name "${cluster}"
  fi
  remove_gpu_plugin_dir
  rm -f "${kubeconfig}"
}

show_logs() {
  local name
  for name in gpu-kubelet-plugin drasched kueue; do
    if [[ -s "${log_dir}/${name}.log" ]]; then
      echo "--- last lines of ${log_dir#"${root}"/}/${name}.log"
      tail -n 20 "${log_dir}/${name}.log"
    fi
  done
}

print_usage() {
  local rel_kubeconfig=${kubeconfig#"${root}"/} rel_bin=${cluster_bin#"${root}"/}
  cat <<EOF

The cluster stays up (KEEP=1). From ${root}:
  export KUBECONFIG=${rel_kubeconfig} PATH=\$PWD/${rel_bin}:\$PATH
  kubectl get nodes -L gpu.drasched.dev/inventory,gpu.drasched.dev/slices-from
  kubectl get pods -o wide
  kubectl get resourceclaims
  kubectl get resourceslices
  kubectl describe pod ${unschedulable_pod}
  kubectl get podgroups
  kubectl get pods -l gang -o wide
Logs: ${log_dir#"${root}"/}/drasched.log, ${log_dir#"${root}"/}/gpu-kubelet-plugin.log;
  control plane: KWOK_WORKDIR=${KWOK_WORKDIR#"${root}"/} ${rel_bin}/kwokctl logs kube-apiserver --name ${cluster}
Tear down: make demo-down
EOF
}

# on_exit: up's exit command (hack/lib/init.sh's at_exit), also on failure
# or Ctrl-C: shows the logs of a failure, and tears down unless KEEP=1.
on_exit() {
  if ((exit_code != 0)); then
    echo "demo failed (exit ${exit_code})" >&2
    show_logs >&2
  fi
  if [[ "${KEEP}" == 1 ]] && cluster_exists "${cluster}"; then
    print_usage
  else
    step "tearing down"
    teardown
  fi
}

check_binaries() {
  local b missing=()
  for b in "${bin_dir}/scheduler" "${bin_dir}/gpu-kubelet-plugin" "${bin_dir}/kubectl-drasched"; do
    [[ -x "${b}" ]] || missing+=("${b#"${root}"/} (make build)")
  done
  for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok kwokctl; do
    [[ -x "${cluster_bin}/${b}" ]] || missing+=("${cluster_bin#"${root}"/}/${b} (hack/build-control-plane.sh)")
  done
  if ((${#missing[@]} > 0)); then
    printf 'missing binaries, run make demo:\n' >&2
    printf '  %s\n' "${missing[@]}" >&2
    exit 1
  fi
}

up() {
  check_binaries
  mkdir -p "${run_dir}" "${log_dir}" "$(dirname "${demo}")"
  if cluster_exists "${cluster}" || [[ -n "$(ls -A "${run_dir}")" ]]; then
    echo "==> removing what an earlier run left"
    teardown
  fi
  rm -f "${log_dir}"/*.log
  at_exit on_exit

  step "building demo/helper (GPU nodes, scheduler configuration, report)"
  go build "${go_minor_flags[@]}" -o "${demo}" ./demo/helper

  step "creating kwok cluster ${cluster} (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok from ${cluster_bin#"${root}"/})"
  local real_node_args=()
  if [[ "${REAL_NODE}" == 1 ]]; then
    # kwok manages only its own nodes; the API server reaches the real
    # kubelet (kubectl logs) by its address, with kwokctl's client
    # certificate, which the kubelet trusts (the same CA).
    # The first --extra-args of each component come first, in this order:
    # kwokctl v0.8.0 files later ones under the position of the component's
    # first flag among all --extra-args, not among the components, and
    # panics (index out of range) otherwise.
    local pki=${KWOK_WORKDIR}/clusters/${cluster}/pki
    real_node_args=(
      --extra-args "kwok-controller=manage-all-nodes=false"
      --extra-args "kube-apiserver=kubelet-preferred-address-types=InternalIP,Hostname"
      --extra-args "kwok-controller=manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake"
      --extra-args "kube-apiserver=kubelet-client-certificate=${pki}/admin.crt"
      --extra-args "kube-apiserver=kubelet-client-key=${pki}/admin.key"
    )
  fi
  local stage_args=()
  if [[ "${KUEUE}" == 1 ]]; then
    kwok_stages_keeping_jobs "${demo_dir}/kwok-stages.yaml"
    stage_args=(--config "${demo_dir}/kwok-stages.yaml")
  fi
  kwokctl create cluster --name "${cluster}" --runtime binary --kubeconfig "" --wait 2m \
    --kube-feature-gates "${feature_gates}" --kube-runtime-config "${runtime_config}" \
    "${stage_args[@]}" "${real_node_args[@]}" \
    --etcd-binary "${cluster_bin}/etcd" \
    --kube-apiserver-binary "${cluster_bin}/kube-apiserver" \
    --kube-controller-manager-binary "${cluster_bin}/kube-controller-manager" \
    --kube-scheduler-binary "${cluster_bin}/kube-scheduler" \
    --kwok-controller-binary "${cluster_bin}/kwok"
  kwokctl get kubeconfig --name "${cluster}" >"${kubeconfig}"
  chmod 600 "${kubeconfig}"
  kubectl version

  step "creating GPU nodes"
  local args=() n
  for n in "${demo_nodes[@]}"; do
    args+=(--node "${n}")
  done
  "${demo}" nodes --kubeconfig "${kubeconfig}" "${args[@]}" --plugin-node "${plugin_node}=${plugin_inventory}"

  step "starting gpu-kubelet-plugin for ${plugin_node} (inventory ${plugin_inventory})"
  start_gpu_plugin drasched-demo "${kubeconfig}" "${plugin_node}" "${root}/${plugin_inventory}"

  if [[ "${REAL_NODE}" == 1 ]]; then
    real_node_up
  fi

  step "waiting for the nodes: Ready, not-ready taints gone, ResourceSlices published"
  local names=("${plugin_node}")
  for n in "${demo_nodes[@]}"; do
    names+=("${n%%=*}")
  done
  run_watching "${demo}" wait-nodes --kubeconfig "${kubeconfig}" --timeout 2m "${names[@]}"
  kubectl get nodes -L gpu.drasched.dev/inventory,gpu.drasched.dev/slices-from
  kubectl get resourceslices

  step "starting drasched (${binaries[drasched]#"${root}"/}, the profile of config/scheduler-config.yaml)"
  "${demo}" scheduler-config --kubeconfig "${kubeconfig}" --in config/scheduler-config.yaml --out "${demo_dir}/scheduler-config.yaml"
  start_process drasched "${binaries[drasched]}" --config "${demo_dir}/scheduler-config.yaml" \
    --feature-gates="${feature_gates}" --leader-elect=false --secure-port=0 -v=2

  step "applying DeviceClasses (config/gpu-driver/deviceclasses.yaml, config/examples/deviceclasses.yaml)"
  kubectl apply -f config/gpu-driver/deviceclasses.yaml
  kubectl apply -f config/examples/deviceclasses.yaml

  step "what is free before the workloads: kubectl drasched top (devices per node; GPUs wholly free, partly used, full; MIG partitions free per profile; whole PCIe roots, NVLink domains, NUMA nodes)"
  kubectl_drasched top -o wide "${top_flags[@]}"

  step "would it fit? kubectl drasched fit: ${fits_twice} (four GPUs on one PCIe root) fits twice, where and with which GPUs"
  kubectl_drasched fit -f "${fits_twice}" --scheduler-config config/scheduler-config.yaml -o wide

  step "applying workloads (config/examples, demo/workloads/workloads.yaml, demo/workloads/${unschedulable_pod}.yaml)"
  # The ServiceAccount admission plugin refuses pods until the controller
  # manager has created the namespace's default ServiceAccount.
  kubectl wait --for=create serviceaccount/default --timeout=60s >/dev/null
  kubectl apply -k config/examples
  kubectl apply -f demo/workloads/workloads.yaml
  kubectl apply -f "demo/workloads/${unschedulable_pod}.yaml"

  step "waiting for drasched to schedule the pods"
  run_watching "${demo}" report --kubeconfig "${kubeconfig}" --expect-unschedulable "${unschedulable_pod}" --timeout 2m

  step "why ${unschedulable_pod} is pending: kubectl drasched explain (the kubectl plugin ${bin_dir#"${root}"/}/kubectl-drasched, read-only)"
  kubectl_drasched explain "${unschedulable_pod}"

  step "what is free now: kubectl drasched top, per node and per DeviceClass"
  kubectl_drasched top -o wide "${top_flags[@]}"
  kubectl_drasched top classes -o wide "${top_flags[@]}"

  step "would one more fit? kubectl drasched fit: ${unschedulable_pod} fits nowhere, and why, node by node"
  kubectl_drasched fit -f "demo/workloads/${unschedulable_pod}.yaml" --scheduler-config config/scheduler-config.yaml

  step "preemption: training pods fill gpu-h100-0, an inference pod of higher priority evicts as many as it needs GPUs (config/examples/preemption)"
  kubectl apply -f config/examples/preemption/training.yaml
  kubectl wait --for=condition=PodScheduled pod -l app=training --timeout=60s
  kubectl apply -f config/examples/preemption/inference.yaml
  kubectl wait --for=condition=PodScheduled pod/inference --timeout=60s
  kubectl get events --field-selector involvedObject.name=inference --sort-by=.lastTimestamp -o custom-columns=REASON:.reason,MESSAGE:.message
  kubectl get events --field-selector reason=Preempted --sort-by=.lastTimestamp -o custom-columns=POD:.involvedObject.name,MESSAGE:.message

  if [[ "${gangs}" == true ]]; then
    step "gang scheduling: PodGroup ${gang_fits} (2 pods x 2 GPUs) is bound all together; PodGroup ${gang_unschedulable} (5 pods x 2 GPUs) does not fit as a whole and stays Pending, all of it, holding no GPU (config/examples/gang)"
    # With gpu-h100-0 full, the free GPUs take five or six pods of two
    # GPUs, and at most four next to ${gang_fits}, so most of
    # ${gang_unschedulable}'s pods would fit one by one, but not all five.
    kubectl apply -f "config/examples/gang/${gang_fits}.yaml"
    kubectl wait --for=condition=PodScheduled pod -l "gang=${gang_fits}" --timeout=60s
    kubectl apply -f "config/examples/gang/${gang_unschedulable}.yaml"
    run_watching "${demo}" report --kubeconfig "${kubeconfig}" --selector gang \
      --expect-unschedulable-group "${gang_unschedulable}" --timeout 1m
    kubectl get podgroups
  else
    echo "==> gang scheduling: skipped, the PodGroup API of config/examples/gang is Kubernetes 1.37's (docs/compatibility.md)"
  fi
  if [[ "${KUEUE}" == 1 ]]; then
    kueue_steps
  fi
  if [[ "${REAL_NODE}" == 1 ]]; then
    real_node_workload
  fi
  echo "Demo done in $((SECONDS - start))s. What each step shows, and the output to expect: demo/README.md."
}

# kueue_steps (KUEUE=1): Kueue holds two teams' GPU quota, drasched places
# what it admits (demo/kueue, docs/kueue.md).
kueue_steps() {
  local i
  step "Kueue from its own chart (hack/kueue: v0.17, DRA quota on), its manager a process here; two teams' queues share 8 GPUs of quota (demo/kueue)"
  rm -f "${demo_dir}/kueue/ready"
  start_process kueue "${demo}" kueue --kubeconfig "${kubeconfig}" --root "${root}" --dir "${demo_dir}/kueue"
  # Certificates made and injected, webhooks answering: seconds once
  # make kueue has built the manager.
  for ((i = 0; i < 300; i++)); do
    [[ ! -f "${demo_dir}/kueue/ready" ]] || break
    [[ -n "$(process_pid kueue "${demo}")" ]] || { echo "Kueue's manager did not start" >&2; return 1; }
    sleep 1
  done
  [[ -f "${demo_dir}/kueue/ready" ]] || { echo "Kueue's manager not ready after 5 minutes" >&2; return 1; }
  kubectl apply -f demo/kueue/queues.yaml
  kubectl -n kueue-demo wait --for=create serviceaccount/default --timeout=60s >/dev/null

  step "team-a's Job of 6 GPUs: Kueue admits it, 4 GPUs of its quota and 2 borrowed from idle team-b; drasched places its pods (demo/kueue/a-train.yaml)"
  kubectl apply -f demo/kueue/a-train.yaml
  kubectl -n kueue-demo wait --for=jsonpath='{.status.active}'=6 job/a-train --timeout=2m >/dev/null
  run_watching "${demo}" report --kubeconfig "${kubeconfig}" --namespace kueue-demo --timeout 1m
  kubectl get clusterqueues -o custom-columns='CLUSTERQUEUE:.metadata.name,COHORT:.spec.cohortName,ADMITTED:.status.admittedWorkloads,PENDING:.status.pendingWorkloads,GPUS IN USE:.status.flavorsUsage[0].resources[0].total,BORROWED:.status.flavorsUsage[0].resources[0].borrowed'

  step "team-b's Job of 4 GPUs takes its lent quota back: Kueue evicts team-a's Job, drasched places team-b's pods (demo/kueue/b-train.yaml)"
  kubectl apply -f demo/kueue/b-train.yaml
  kubectl -n kueue-demo wait --for=jsonpath='{.status.active}'=4 job/b-train --timeout=2m >/dev/null
  for ((i = 0; i < 120; i++)); do
    [[ -n "$(kubectl -n kueue-demo get pods -l batch.kubernetes.io/job-name=a-train -o name)" ]] || break
    sleep 1
  done
  run_watching "${demo}" report --kubeconfig "${kubeconfig}" --namespace kueue-demo --timeout 1m
  kubectl -n kueue-demo get workloads.kueue.x-k8s.io -o custom-columns='WORKLOAD:.metadata.name,QUEUE:.spec.queueName,ADMITTED:.status.conditions[?(@.type=="Admitted")].status,WHY:.status.conditions[?(@.type=="QuotaReserved")].message'

  step "quota and devices side by side: kubectl drasched explain names a pod's admission by Kueue; fit --cluster-queue: how many more of a-train's pods fit in team-a's quota and on the nodes"
  kubectl_drasched explain -n kueue-demo "$(kubectl -n kueue-demo get pods -l batch.kubernetes.io/job-name=b-train -o jsonpath='{.items[0].metadata.name}')"
  kubectl_drasched fit -f demo/kueue/a-train.yaml --cluster-queue team-a --scheduler-config config/scheduler-config.yaml
}

# real_node_env sets NODE_ROOT, NODE_HOSTNAME and NODE_BIN from
# hack/node.sh env.
real_node_env() {
  local line
  while IFS= read -r line; do
    case "${line}" in
      NODE_ROOT=* | NODE_HOSTNAME=* | NODE_BIN=*) printf -v "${line%%=*}" '%s' "${line#*=}" ;;
    esac
  done < <(hack/node.sh env)
}

# real_node_up adds the real node ${NODE_HOSTNAME} to the kwok cluster:
# containerd, the kubelet (with kwokctl's CA and an admin kubeconfig) and
# a gpu-kubelet-plugin process for it, its GPUs simulated by character
# devices under the node's device root and its NVIDIA driver by a driver
# root with hack/build-node.sh's libcuda.
real_node_up() {
  real_node_env
  step "adding a real node: containerd, kubelet and runc (hack/node.sh), GPUs of ${real_node_inventory} as device nodes under ${NODE_ROOT}/devroot"
  hack/node.sh up --kubeconfig "${kubeconfig}" --ca "${KWOK_WORKDIR}/clusters/${cluster}/pki/ca.crt"
  mkdir -p "${NODE_ROOT}/inventory" "${NODE_ROOT}/devroot/dev"
  cp "${real_node_inventory}" "${NODE_ROOT}/inventory/gpus.yaml"
  local i gpus
  gpus=$(grep -c '^- index:' "${real_node_inventory}")
  for ((i = 0; i < gpus; i++)); do
    mknod -m 666 "${NODE_ROOT}/devroot/dev/nvidia${i}" c 195 "${i}"
  done
  mknod -m 666 "${NODE_ROOT}/devroot/dev/nvidiactl" c 195 255
  mknod -m 666 "${NODE_ROOT}/devroot/dev/nvidia-uvm" c 120 0
  mknod -m 666 "${NODE_ROOT}/devroot/dev/nvidia-uvm-tools" c 120 1
  # The MIG devices' nvidia-caps nodes, with the minors the inventory says.
  local gi ci minor
  mkdir -p "${NODE_ROOT}/devroot/dev/nvidia-caps"
  while read -r gi ci; do
    for minor in "${gi}" "${ci}"; do
      mknod -m 666 "${NODE_ROOT}/devroot/dev/nvidia-caps/nvidia-cap${minor}" c 121 "${minor}"
    done
  done < <(sed -n 's/.*caps: {gpuInstance: \([0-9]*\), computeInstance: \([0-9]*\)}.*/\1 \2/p' "${real_node_inventory}")
  # The driver's libraries of the inventory's version, as the CDI specs
  # mount them (test/node/driver_test.go fakes a whole installation).
  local version lib="${NODE_ROOT}/driverroot/usr/lib/x86_64-linux-gnu"
  version=$(sed -n 's/^driverVersion: "\(.*\)"$/\1/p' "${real_node_inventory}")
  mkdir -p "${lib}"
  cp "${NODE_BIN}/driver/libcuda.so.1" "${lib}/libcuda.so.${version}"
  ln -s "libcuda.so.${version}" "${lib}/libcuda.so.1"
  echo "stands for NVML" >"${lib}/libnvidia-ml.so.${version}"
  ln -s "libnvidia-ml.so.${version}" "${lib}/libnvidia-ml.so.1"
  start_process gpu-kubelet-plugin-real "${binaries[gpu-kubelet-plugin-real]}" run \
    --kubeconfig "${kubeconfig}" --node-name "${NODE_HOSTNAME}" \
    --backend inventory --inventory "${NODE_ROOT}/inventory/gpus.yaml" \
    --registrar-dir "${NODE_ROOT}/kubelet/plugins_registry" \
    --plugin-data-dir "${NODE_ROOT}/kubelet/plugins/gpu.drasched.dev" \
    --cdi-dir "${NODE_ROOT}/cdi" --dev-root "${NODE_ROOT}/devroot" --driver-root "${NODE_ROOT}/driverroot" \
    --metrics-bind-address "" -v=2
  # Not wait-nodes: the node keeps its taint.
  wait_for "the ResourceSlices of ${NODE_HOSTNAME}" 120 real_node_published
  kubectl get nodes -o wide
}

real_node_published() {
  [[ -n "$(kubectl get resourceslices --field-selector "spec.nodeName=${NODE_HOSTNAME}" -o name)" ]]
}

# real_node_workload runs demo/real-node/real-node.yaml: drasched allocates a GPU
# on the real node, the kubelet has the plugin prepare it, containerd
# injects it (CDI), and the container prints what it sees.
real_node_workload() {
  step "real node: a GPU pod runs as a container on ${NODE_HOSTNAME} and prints its devices (demo/real-node/real-node.yaml)"
  kubectl apply -f demo/real-node/real-node.yaml
  kubectl wait --for=condition=Ready pod/real-gpu --timeout=2m
  kubectl get resourceclaims -o custom-columns=CLAIM:.metadata.name,DEVICE:.status.allocation.devices.results[*].device,NODE:.status.allocation.nodeSelector.nodeSelectorTerms[0].matchFields[0].values[0] |
    grep -E "^CLAIM|real-gpu"
  echo "--- kubectl logs real-gpu (its NVIDIA devices, driver files and libcuda, all from the claim's CDI spec):"
  kubectl logs real-gpu | grep -E '^(dev /dev/nvidia|env NVIDIA_VISIBLE_DEVICES|file |cuda )'
}

case "${1:-up}" in
  up) up ;;
  down)
    mkdir -p "${run_dir}"
    teardown
    ;;
  *)
    echo "usage: $0 [up|down]" >&2
    exit 2
    ;;
esac
