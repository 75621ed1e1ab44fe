#!/usr/bin/env bash
# The kwok end-to-end benchmark: upstream's kube-scheduler (in-tree
# DynamicResources) and drasched (StructuredDRA, its shipped configuration),
# each as its own process against its own fresh kwok cluster made with
# identical settings, on the same GPU nodes and the same workloads
# (bench/kwok), and a third run, drasched-bestfit (the shipped configuration
# with StructuredDRA's allocation policy BestFit), of the fragmentation
# cases only:
#
#   fill   pods of 8, 4, 2 and 1 H100 GPUs up to 90% of the H100 GPUs,
#          created at once (largest first)
#   churn  a steady stream of 1-4 GPU pods on a partly full cluster, each
#          deleted a few seconds after it was bound
#   match  pods of four L40S GPUs on one PCIe root (matchAttribute)
#   mig    pods of one MIG device each on A100 nodes
#   preempt  the H100 GPUs 100% full of low-priority 2- and 1-GPU pods, then
#          high-priority 8- and 4-GPU pods (25% of the GPUs) at once, waited
#          for at most 60 s: they fit only if low-priority pods are evicted,
#          which upstream's DynamicResources cannot do; also counts the
#          high-priority pods bound and the pods preempted
#   fragmentation  a churn of 1-, 2- and 4-GPU pods keeping 70% of the H100
#          GPUs requested, sizes and lifetimes (in steps) drawn from a fixed
#          seed, so every scheduler gets the same creations and deletions;
#          then H100 nodes with all 8 GPUs free, NUMA nodes with 4 free GPUs,
#          and 8-GPU pods placed (as many as a perfect packing would leave
#          room for); the series of whole free nodes per step is the plot
#   fragmentation_mig  the same, at the same time, with 1g/2g/3g MIG pods on
#          the A100 nodes, then pods of one whole GPU in MIG mode
#   gang   PodGroups with gang policy of 4 pods x 8 H100 GPUs and 8 pods x 4
#          GPUs, 80% of the H100 GPUs, created at once; on a cluster of its
#          own with the GenericWorkload feature gate and the
#          scheduling.k8s.io/v1beta1 API, in the control plane and the
#          scheduler; also measures creation of a group -> all its pods
#          bound and counts the groups left partly bound
#
# It measures pods/s and the p50/p90/p99 of creation → bound latency (what
# the churns leave whole, for the fragmentation cases), checks every
# allocation after each case, and writes
# _output/bench/kwok/kwok.json (bench/internal/results format); `make bench`
# merges it into bench/results/.
#
# Usage: hack/bench-kwok.sh
#   NODES=N          nodes per cluster (default 1000; 100 with QUICK=1): a
#                    tenth each L40S and A100 MIG nodes, the rest H100, 8
#                    GPUs each
#   QUICK=1          100 nodes, 20 s of churn and 16 fragmentation steps:
#                    the three runs in ~5-6 min
#   RUNS=N           runs per scheduler, each on a fresh cluster (default 1;
#                    the order of the schedulers alternates)
#   CHURN_RATE=P     pods/s of the churn workload (default 10)
#   CHURN_DURATION=D how long churn creates pods (default 60s; 20s QUICK)
#   FRAG_STEPS=N     steps of the fragmentation churns after the initial
#                    fill, half a second or more each (default 24, pods
#                    living 8 steps on average; 16 QUICK, living 6)
#   FRAG_SEED=S      seed of the fragmentation churns (default 1)
#   CASES=A,B        only these cases (default all); drasched-bestfit runs
#                    the fragmentation cases among them, if any
#   SCHEDULERS="A B" only these schedulers (default: upstream drasched
#                    drasched-bestfit); without both upstream and drasched
#                    there is no report, only the runs' files and output
#   BENCH_COMMAND    the command recorded in the results as how to reproduce them
#
# Clusters: kwokctl create cluster --runtime binary with the binaries of
# hack/build-control-plane.sh, --disable-qps-limits, and without kwokctl's
# own kube-scheduler. kwokctl's state and the logs go to _output/bench/kwok;
# everything is torn down on exit, also on failure or Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# The fragmentation churns run until the pods of the initial fill are gone
# (2·lifetime−1 steps) and then some: QUICK keeps them to ~20-30 s.
if [[ "${QUICK:-}" == 1 ]]; then
	nodes=${NODES:-100}
	churn_duration=${CHURN_DURATION:-20s}
	frag_steps=${FRAG_STEPS:-16}
	frag_lifetime=6
else
	nodes=${NODES:-1000}
	churn_duration=${CHURN_DURATION:-60s}
	frag_steps=${FRAG_STEPS:-24}
	frag_lifetime=8
fi
runs=${RUNS:-1}
churn_rate=${CHURN_RATE:-10}
frag_seed=${FRAG_SEED:-1}
command=${BENCH_COMMAND:-hack/bench-kwok.sh}

bin_dir=${root}/_output/bin
cluster_bin=${root}/_output/cluster/bin
out=${root}/_output/bench/kwok
run_dir=${out}/run
log_dir=${out}/logs
raw_dir=${out}/runs
bench=${out}/bin/kwok
export KWOK_WORKDIR=${out}/kwok
export KWOK_KUBECTL_BINARY=${cluster_bin}/kubectl

# The schedulers, by the process name of their run.
declare -A binaries=(
	[upstream]=${cluster_bin}/kube-scheduler
	[drasched]=${bin_dir}/scheduler
	[drasched-bestfit]=${bin_dir}/scheduler
)
# The cases of upstream's and drasched's runs (all if empty), and those of
# drasched-bestfit's: the fragmentation cases among them. The other cases
# measure speed, which the allocation policy is not about.
cases=${CASES:-}
bestfit_cases=fragmentation,fragmentation_mig
if [[ -n "${cases}" ]]; then
	bestfit_cases=$(tr ',' '\n' <<<"${cases}" | grep -xE 'fragmentation|fragmentation_mig' | paste -sd, -) || true
fi
schedulers=${SCHEDULERS:-upstream drasched drasched-bestfit}
# The gang case runs on a cluster of its own, whose control plane and
# scheduler have the GenericWorkload feature gate (beta, off by default)
# and serve scheduling.k8s.io/v1beta1 (PodGroup). Not on every cluster: with
# the gate, kube-scheduler requeues all unschedulable pods whenever a pod
# is added and its preemption evaluates victims another way, which would
# change what the other cases measure.
gang_case=gang
gang_feature_gates=GenericWorkload=true
gang_runtime_config=scheduling.k8s.io/v1beta1=true
# shellcheck source=hack/lib/processes.sh
source hack/lib/processes.sh
# shellcheck source=hack/lib/kwok.sh
source hack/lib/kwok.sh

start=${SECONDS}
log() {
	printf 'kwok: %s  (%ds)\n' "$1" "$((SECONDS - start))" >&2
}


cluster_name() {
	echo "drasched-bench-$1"
}


teardown() {
	local s
	for s in "${!binaries[@]}"; do
		stop_process "${s}" "${binaries[${s}]}"
		if cluster_exists "$(cluster_name "${s}")"; then
			kwokctl delete cluster --name "$(cluster_name "${s}")" >/dev/null 2>&1 || true
		fi
	done
}

on_exit() {
	local rc=$?
	trap - EXIT
	if [[ -n "${watched}" ]]; then
		kill "${watched}" 2>/dev/null || true
	fi
	if ((rc != 0)); then
		echo "kwok: failed (exit ${rc}); logs in ${log_dir#"${root}"/}" >&2
	fi
	teardown
	exit "${rc}"
}

# build: the drasched binary, the control-plane binaries (both no-ops when
# up to date) and the benchmark program.
build() {
	log "building: control-plane binaries (hack/build-control-plane.sh), drasched (make commands), bench/kwok"
	CLUSTER_BIN_DIR=${cluster_bin} hack/build-control-plane.sh >"${log_dir}/build.log" 2>&1 || {
		tail -n 20 "${log_dir}/build.log" >&2
		return 1
	}
	# The commit's date instead of the time of the build, so that an
	# unchanged tree is not linked again (as `make demo` does).
	make --no-print-directory commands OUTPUT_DIR="${root}/_output" \
		BUILD_DATE="$(TZ=UTC0 git log -1 --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd)" >>"${log_dir}/build.log" 2>&1 || {
		tail -n 20 "${log_dir}/build.log" >&2
		return 1
	}
	go build -o "${bench}" ./bench/kwok
}

# run_scheduler SCHEDULER RUN CASES [FEATURE_GATES RUNTIME_CONFIG]: one run
# of one scheduler on a fresh cluster, of the cases (comma-separated), with
# the feature gates (control plane and scheduler) and the APIs given.
run_scheduler() {
	local s=$1 run=$2 run_cases=$3 gates=${4:-} runtime_config=${5:-} cluster kubeconfig config rc=0 name
	local config_args=(--scheduler "${s}") run_args=(--cases "${run_cases}") cluster_args=() scheduler_args=()
	[[ "${s}" != drasched-bestfit ]] || config_args=(--scheduler drasched --allocation-policy BestFit)
	if [[ -n "${gates}" ]]; then
		cluster_args+=(--kube-feature-gates "${gates}")
		scheduler_args+=(--feature-gates="${gates}")
	fi
	[[ -z "${runtime_config}" ]] || cluster_args+=(--kube-runtime-config "${runtime_config}")
	# The run's name: its scheduler, and its cases where it is the gang
	# case's own cluster.
	name=${s}
	[[ "${run_cases}" != "${gang_case}" ]] || name=${s}-${gang_case}
	cluster=$(cluster_name "${s}")
	kubeconfig=${out}/${s}.kubeconfig
	config=${out}/${s}-scheduler-config.yaml

	log "${name} run ${run}: kwok cluster ${cluster} with ${nodes} nodes${gates:+, feature gates ${gates}}"
	kwokctl create cluster --name "${cluster}" --runtime binary --kubeconfig "" --wait 2m \
		--disable-qps-limits --disable kube-scheduler "${cluster_args[@]}" \
		--etcd-binary "${cluster_bin}/etcd" \
		--kube-apiserver-binary "${cluster_bin}/kube-apiserver" \
		--kube-controller-manager-binary "${cluster_bin}/kube-controller-manager" \
		--kube-scheduler-binary "${cluster_bin}/kube-scheduler" \
		--kwok-controller-binary "${cluster_bin}/kwok" >"${log_dir}/${name}-kwokctl.log" 2>&1 || {
		tail -n 20 "${log_dir}/${name}-kwokctl.log" >&2
		return 1
	}
	kwokctl get kubeconfig --name "${cluster}" >"${kubeconfig}"
	chmod 600 "${kubeconfig}"
	"${bench}" nodes --kubeconfig "${kubeconfig}" --nodes "${nodes}" >&2

	"${bench}" scheduler-config --kubeconfig "${kubeconfig}" "${config_args[@]}" --out "${config}"
	log "${name} run ${run}: starting ${binaries[${s}]#"${root}"/}"
	start_process "${s}" "${binaries[${s}]}" --config "${config}" --leader-elect=false --secure-port=0 -v=1 "${scheduler_args[@]}" || rc=$?
	if ((rc == 0)); then
		run_watching "${bench}" run --kubeconfig "${kubeconfig}" --scheduler "${s}" --run "${run}" \
			--churn-rate "${churn_rate}" --churn-duration "${churn_duration}" \
			--frag-steps "${frag_steps}" --frag-lifetime "${frag_lifetime}" --frag-seed "${frag_seed}" "${run_args[@]}" \
			--out "${raw_dir}/${name}-${run}.json" >&2 || rc=$?
	fi
	if ((rc != 0)); then
		echo "--- last lines of ${log_dir#"${root}"/}/${s}.log" >&2
		tail -n 20 "${log_dir}/${s}.log" >&2
	fi
	stop_process "${s}" "${binaries[${s}]}"
	# The scheduler's and the control plane's logs: keep them per run.
	[[ "${name}" == "${s}" ]] || cp "${log_dir}/${s}.log" "${log_dir}/${name}.log" 2>/dev/null || true
	cp -r "${KWOK_WORKDIR}/clusters/${cluster}/logs" "${log_dir}/${name}-cluster" 2>/dev/null || true
	kwokctl delete cluster --name "${cluster}" >/dev/null 2>&1 || true
	return "${rc}"
}

mkdir -p "${run_dir}" "${log_dir}"
teardown
rm -rf "${raw_dir}" "${log_dir:?}"/* "${out}/kwok.json"
mkdir -p "${raw_dir}"
trap on_exit EXIT
trap 'exit 130' INT TERM

build
# The cases of upstream's and drasched's clusters without feature gates
# (all but gang), and whether gang runs on its own.
plain_cases=$("${bench}" cases | grep -vxF "${gang_case}" | paste -sd, -)
run_gang=true
if [[ -n "${cases}" ]]; then
	plain_cases=$(tr ',' '\n' <<<"${cases}" | grep -vxF "${gang_case}" | paste -sd, -) || true
	grep -qxF "${gang_case}" < <(tr ',' '\n' <<<"${cases}") || run_gang=false
fi
log "${runs} run(s) per scheduler, ${nodes} nodes, churn ${churn_rate} pods/s for ${churn_duration}, fragmentation ${frag_steps} steps of pods living ${frag_lifetime} (seed ${frag_seed})"
status=0
for ((run = 1; run <= runs; run++)); do
	order=(upstream drasched drasched-bestfit)
	((run % 2 == 0)) && order=(drasched-bestfit drasched upstream)
	for s in "${order[@]}"; do
		[[ " ${schedulers} " == *" ${s} "* ]] || continue
		if [[ "${s}" == drasched-bestfit ]]; then
			[[ -z "${bestfit_cases}" ]] || run_scheduler "${s}" "${run}" "${bestfit_cases}" || status=1
			continue
		fi
		[[ -z "${plain_cases}" ]] || run_scheduler "${s}" "${run}" "${plain_cases}" || status=1
		! ${run_gang} || run_scheduler "${s}" "${run}" "${gang_case}" "${gang_feature_gates}" "${gang_runtime_config}" || status=1
	done
done

# Even failed runs have results for their cases. The report compares
# upstream with drasched: without a run of each there is none.
shopt -s nullglob
raws=("${raw_dir}"/*.json)
if [[ " ${schedulers} " != *" upstream "* || " ${schedulers} " != *" drasched "* ]]; then
	log "done, no report without both upstream and drasched; runs in ${raw_dir#"${root}"/}"
	exit "${status}"
fi
if ((${#raws[@]} > 0)); then
	"${bench}" report --out "${out}/kwok.json" --command "${command}" --seconds "$((SECONDS - start))" "${raws[@]}" || status=1
fi
log "done, results in ${out#"${root}"/}/kwok.json"
exit "${status}"
