#!/usr/bin/env bash
# `make demo HELM=1`: installs the Helm chart (charts/drasched) into a local
# kwok cluster and shows that what it installed works: drasched, with the
# configuration of the chart's ConfigMap and the token of the chart's
# ServiceAccount, wins the chart's leader election Lease and schedules a GPU
# pod; gpu-kubelet-plugin, with a token of the chart's ServiceAccount bound
# to the DaemonSet's pod on a GPU node, publishes that node's ResourceSlices
# and is refused another node's by the chart's ValidatingAdmissionPolicy.
# Then `helm upgrade` with other StructuredDRAArgs rolls the scheduler, and
# `helm uninstall` removes everything. See docs/demo.md, "The Helm demo".
#
# kwok runs no containers: the chart's pods show as Running without running,
# so drasched and the plugin run as local processes, as in `make demo`.
#
# Usage: demo/helm.sh [up|down]; KEEP=1 leaves the cluster up.
# Needs the binaries of `make commands` (BIN_DIR) and of
# hack/build-control-plane.sh (CLUSTER_BIN_DIR); `make demo HELM=1` builds
# both. State and logs go to DEMO_DIR (default _output/demo-helm).
set -euo pipefail
# shellcheck source=hack/lib/init.sh
source "$(dirname "${BASH_SOURCE[0]}")/../hack/lib/init.sh"

KEEP=${KEEP:-0}
cluster=${DEMO_CLUSTER:-drasched-helm}
bin_dir=$(abs "${BIN_DIR:-_output/bin}")
cluster_bin=$(abs "${CLUSTER_BIN_DIR:-_output/cluster/bin}")
demo_dir=$(abs "${DEMO_DIR:-_output/demo-helm}")
run_dir=${demo_dir}/run
log_dir=${demo_dir}/logs
kubeconfig=${demo_dir}/kubeconfig
export KWOK_WORKDIR=${demo_dir}/kwok
export KWOK_KUBECTL_BINARY=${cluster_bin}/kubectl
namespace=drasched-system
gpu_node=gpu-node-0
other_node=node-0

declare -A binaries=(
  [drasched]=${bin_dir}/scheduler
  [gpu-kubelet-plugin]=${bin_dir}/gpu-kubelet-plugin
)
# shellcheck source=hack/lib/processes.sh
source hack/lib/processes.sh
# shellcheck source=hack/lib/kwok.sh
source hack/lib/kwok.sh
# shellcheck source=hack/lib/gpu-plugin.sh
source hack/lib/gpu-plugin.sh

start=${SECONDS}
step() {
  printf '==> %s  (%ds)\n' "$1" "$((SECONDS - start))"
}
kubectl() {
  "${cluster_bin}/kubectl" --kubeconfig "${kubeconfig}" "$@"
}
helm() {
  go tool -modfile="${root}/hack/helm/go.mod" helm --kubeconfig "${kubeconfig}" "$@"
}


teardown() {
  local name
  for name in "${!binaries[@]}"; do
    stop_process "${name}" "${binaries[${name}]}"
  done
  if cluster_exists "${cluster}"; then
    kwokctl delete cluster --name "${cluster}"
  fi
  remove_gpu_plugin_dir
  rm -f "${kubeconfig}" "${demo_dir}"/*.kubeconfig
}

# on_exit: up's exit command (hack/lib/init.sh's at_exit), also on failure
# or Ctrl-C: shows the logs of a failure, and tears down unless KEEP=1.
on_exit() {
  local name
  if ((exit_code != 0)); then
    echo "helm demo failed (exit ${exit_code})" >&2
    for name in drasched gpu-kubelet-plugin; do
      if [[ -s "${log_dir}/${name}.log" ]]; then
        echo "--- last lines of ${log_dir#"${root}"/}/${name}.log" >&2
        tail -n 20 "${log_dir}/${name}.log" >&2
      fi
    done
  fi
  if [[ "${KEEP}" == 1 ]] && cluster_exists "${cluster}"; then
    cat <<EOF

The cluster stays up (KEEP=1). From ${root}:
  export KUBECONFIG=${kubeconfig#"${root}"/} PATH=\$PWD/${cluster_bin#"${root}"/}:\$PATH
  go tool -modfile=hack/helm/go.mod helm list -A
Tear down: demo/helm.sh down
EOF
  else
    step "tearing down"
    teardown
  fi
}

# sa_kubeconfig FILE TOKEN: a kubeconfig for the cluster that authenticates
# with a service account token.
sa_kubeconfig() {
  local file=$1 token=$2 server ca
  server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
  ca=${demo_dir}/ca.crt
  kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d >"${ca}"
  cat >"${file}" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kwok
  cluster: {server: "${server}", certificate-authority: "${ca}"}
users:
- name: sa
  user: {token: "${token}"}
contexts:
- name: sa
  context: {cluster: kwok, user: sa}
current-context: sa
EOF
  chmod 600 "${file}"
}

pod_bound() {
  [[ -n "$(kubectl get pod "$1" -o jsonpath='{.spec.nodeName}')" ]]
}

# gpu_pod prints the demo's GPU pod, which names no scheduler.
gpu_pod() {
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: one-gpu}
spec:
  resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
  containers:
  - name: app
    image: registry.example.com/app:1
    resources: {claims: [{name: gpu}]}
EOF
}

# routing_in_force: the API server applies the chart's routing policy
# (admission policies take effect asynchronously after they are created).
routing_in_force() {
  [[ "$(gpu_pod | kubectl create --dry-run=server -o jsonpath='{.spec.schedulerName}' -f -)" == drasched ]]
}

up() {
  local b
  for b in "${bin_dir}/scheduler" "${bin_dir}/gpu-kubelet-plugin" "${cluster_bin}/kwokctl" "${cluster_bin}/kubectl"; do
    [[ -x "${b}" ]] || {
      echo "missing ${b#"${root}"/}: run make demo HELM=1" >&2
      exit 1
    }
  done
  mkdir -p "${run_dir}" "${log_dir}"
  if cluster_exists "${cluster}" || [[ -n "$(ls -A "${run_dir}")" ]]; then
    echo "==> removing what an earlier run left"
    teardown
  fi
  at_exit on_exit

  step "building Helm (hack/helm/go.mod; about 2 minutes the first time)"
  helm version --short

  step "creating kwok cluster ${cluster} with node ${other_node} and GPU node ${gpu_node}"
  kwokctl create cluster --name "${cluster}" --runtime binary --kubeconfig "" --wait 2m \
    --etcd-binary "${cluster_bin}/etcd" \
    --kube-apiserver-binary "${cluster_bin}/kube-apiserver" \
    --kube-controller-manager-binary "${cluster_bin}/kube-controller-manager" \
    --kube-scheduler-binary "${cluster_bin}/kube-scheduler" \
    --kwok-controller-binary "${cluster_bin}/kwok" >"${log_dir}/kwokctl.log" 2>&1
  kwokctl get kubeconfig --name "${cluster}" >"${kubeconfig}"
  chmod 600 "${kubeconfig}"
  local n gpu_label
  for n in "${other_node}" "${gpu_node}"; do
    gpu_label=""
    [[ "${n}" == "${gpu_node}" ]] && gpu_label=', nvidia.com/gpu.present: "true"'
    kubectl apply -f - <<EOF
apiVersion: v1
kind: Node
metadata:
  name: ${n}
  labels: {kubernetes.io/hostname: ${n}, kubernetes.io/os: linux, type: kwok${gpu_label}}
  annotations: {kwok.x-k8s.io/node: fake}
status:
  capacity: {cpu: "32", memory: 256Gi, pods: "110"}
  allocatable: {cpu: "32", memory: 256Gi, pods: "110"}
EOF
  done
  # The DaemonSet's pods ask for the NVIDIA runtime.
  kubectl apply -f - <<EOF
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: nvidia}
handler: nvidia
EOF
  wait_for "the nodes to be Ready" 60 kubectl wait --for=condition=Ready node --all --timeout=1s

  step "helm install (docs/install.md, \"Helm\")"
  kubectl create namespace "${namespace}"
  kubectl label namespace "${namespace}" pod-security.kubernetes.io/enforce=privileged
  helm install drasched charts/drasched --namespace "${namespace}" --wait --timeout 2m
  kubectl -n "${namespace}" get deployments,daemonsets,pods,poddisruptionbudgets,configmaps -o wide
  kubectl get deviceclasses,validatingadmissionpolicies

  step "drasched with the chart's configuration and the token of its ServiceAccount"
  local config=${demo_dir}/scheduler-config.yaml
  sa_kubeconfig "${demo_dir}/scheduler.kubeconfig" "$(kubectl -n "${namespace}" create token drasched-scheduler --duration 1h)"
  kubectl -n "${namespace}" get configmap drasched-scheduler-config -o jsonpath='{.data.scheduler-config\.yaml}' >"${config}"
  # The in-cluster client configuration of the pod, for a local process.
  printf 'clientConnection:\n  kubeconfig: %s\n' "${demo_dir}/scheduler.kubeconfig" >>"${config}"
  start_process drasched "${binaries[drasched]}" --config "${config}" --secure-port=0 -v=2
  run_watching wait_for "drasched to hold the Lease ${namespace}/drasched" 60 \
    grep -q 'Successfully acquired lease" lock="drasched-system/drasched"' "${log_dir}/drasched.log"
  echo "drasched holds the Lease ${namespace}/drasched"

  step "gpu-kubelet-plugin with a token bound to the DaemonSet's pod on ${gpu_node}"
  local pod
  pod=$(kubectl -n "${namespace}" get pods -l app.kubernetes.io/name=gpu-kubelet-plugin \
    --field-selector spec.nodeName="${gpu_node}" -o jsonpath='{.items[0].metadata.name}')
  sa_kubeconfig "${demo_dir}/plugin.kubeconfig" \
    "$(kubectl -n "${namespace}" create token gpu-kubelet-plugin --bound-object-kind Pod --bound-object-name "${pod}" --duration 1h)"
  start_gpu_plugin drasched-helm "${demo_dir}/plugin.kubeconfig" "${gpu_node}" "${root}/config/inventory/l40s-4.yaml"
  run_watching wait_for "the ResourceSlices of ${gpu_node}" 60 \
    bash -c "[[ -n \"\$(\"${cluster_bin}/kubectl\" --kubeconfig \"${kubeconfig}\" get resourceslices --field-selector spec.nodeName=${gpu_node} -o name)\" ]]"
  kubectl get resourceslices
  echo "The plugin may not write ${other_node}'s slices:"
  if kubectl --kubeconfig "${demo_dir}/plugin.kubeconfig" create -f - 2>&1 <<EOF; then
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: not-mine}
spec:
  nodeName: ${other_node}
  driver: gpu.drasched.dev
  pool: {name: ${other_node}, generation: 1, resourceSliceCount: 1}
  devices: [{name: gpu-0}]
EOF
    echo "the chart's ValidatingAdmissionPolicy let the plugin write another node's slice" >&2
    return 1
  fi

  step "a GPU pod that names no scheduler: the chart's MutatingAdmissionPolicy routes it to drasched"
  kubectl apply -f - <<EOF
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.drasched.dev}
EOF
  run_watching wait_for "the routing policy in force" 60 routing_in_force
  gpu_pod | kubectl create -f -
  echo "spec.schedulerName: $(kubectl get pod one-gpu -o jsonpath='{.spec.schedulerName}')"
  run_watching wait_for "pod one-gpu to be bound" 60 pod_bound one-gpu
  kubectl get pods -o wide
  kubectl get resourceclaims -o custom-columns='CLAIM:.metadata.name,NODE:.status.allocation.nodeSelector.nodeSelectorTerms[0].matchFields[0].values[0],DEVICES:.status.allocation.devices.results[*].device,RESERVED FOR:.status.reservedFor[*].name'

  step "helm upgrade --set scheduler.structuredDRAArgs.allocation.policy=BestFit rolls the scheduler"
  local before after
  before=$(kubectl -n "${namespace}" get deployment drasched-scheduler -o jsonpath='{.spec.template.metadata.annotations.checksum/config}')
  helm upgrade drasched charts/drasched --namespace "${namespace}" --reuse-values \
    --set scheduler.structuredDRAArgs.allocation.policy=BestFit --wait --timeout 2m
  after=$(kubectl -n "${namespace}" get deployment drasched-scheduler -o jsonpath='{.spec.template.metadata.annotations.checksum/config}')
  [[ "${before}" != "${after}" ]] || {
    echo "the configuration checksum did not change" >&2
    return 1
  }
  kubectl -n "${namespace}" get configmap drasched-scheduler-config -o jsonpath='{.data.scheduler-config\.yaml}' | grep 'policy:'
  kubectl -n "${namespace}" rollout status deployment/drasched-scheduler --timeout 1m

  step "helm uninstall"
  helm uninstall drasched --namespace "${namespace}" --wait
  local left
  left=$(kubectl get deviceclasses,validatingadmissionpolicies,clusterroles,clusterrolebindings -o name | grep -E 'drasched|gpu-kubelet-plugin' || true)
  left+=$(kubectl -n "${namespace}" get deployments,daemonsets,configmaps,serviceaccounts,poddisruptionbudgets -o name | grep -E 'drasched|gpu-kubelet-plugin' || true)
  if [[ -n "${left}" ]]; then
    printf 'left after helm uninstall:\n%s\n' "${left}" >&2
    return 1
  fi
  echo "Nothing of the chart is left."
  echo "Helm demo done in $((SECONDS - start))s."
}

case "${1:-up}" in
up) up ;;
down) teardown ;;
*)
  echo "usage: $0 [up|down]" >&2
  exit 2
  ;;
esac
