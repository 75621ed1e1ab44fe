# shellcheck shell=bash disable=SC2154 # the sourcing script's variables
# A gpu-kubelet-plugin process for a kwok node, as demo/demo.sh and
# demo/helm.sh run it. Source it after hack/lib/processes.sh; it uses
# run_dir and binaries as processes.sh does.
#
# No kubelet runs on kwok nodes: the plugin serves its registration and DRA
# sockets to nobody, and publishes its node's ResourceSlices. Socket paths
# must stay short (108 bytes), hence a folder under /tmp, which
# ${run_dir}/plugin-dir names for remove_gpu_plugin_dir.

# start_gpu_plugin PREFIX KUBECONFIG NODE INVENTORY: starts the plugin for
# NODE with the inventory backend on INVENTORY (a path), its state in a new
# folder /tmp/PREFIX.XXXXXX.
start_gpu_plugin() {
  local prefix=$1 kubeconfig=$2 node_name=$3 inventory=$4 plugin_dir
  plugin_dir=$(mktemp -d "${TMPDIR:-/tmp}/${prefix}.XXXXXX")
  echo "${plugin_dir}" >"${run_dir}/plugin-dir"
  # The kubelet would have made the registration directory.
  mkdir -p "${plugin_dir}/registry" "${plugin_dir}/plugin" "${plugin_dir}/cdi"
  echo "demo-boot" >"${plugin_dir}/boot_id"
  start_process gpu-kubelet-plugin "${binaries[gpu-kubelet-plugin]}" run \
    --kubeconfig "${kubeconfig}" --node-name "${node_name}" \
    --backend inventory --inventory "${inventory}" \
    --plugin-data-dir "${plugin_dir}/plugin" --registrar-dir "${plugin_dir}/registry" \
    --cdi-dir "${plugin_dir}/cdi" --boot-id-file "${plugin_dir}/boot_id" \
    --metrics-bind-address "" --health-probe-bind-address "" -v=2
}

# remove_gpu_plugin_dir removes the folder of start_gpu_plugin, if any.
remove_gpu_plugin_dir() {
  if [[ -f "${run_dir}/plugin-dir" ]]; then
    rm -rf "$(<"${run_dir}/plugin-dir")"
    rm -f "${run_dir}/plugin-dir"
  fi
}
