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
#   preempt_gang  preempt with gangs: the same low-priority fill, then
#          high-priority PodGroups with gang policy of 2 pods x 4 GPUs (25%
#          of the GPUs) at once, waited for at most 60 s; on gang's cluster;
#          counts the gangs bound whole and partly, the pods preempted and
#          their GPUs no bound pod got
#   noclaims  fill's pods without their claims, on the same cluster: what
#          a plain pod costs the scheduler, beside a DRA pod
#   queue  batch/v1 Jobs under Kueue (v0.17, hack/kueue; its manager runs
#          for the case's length): ClusterQueues team-a and team-b in one
#          cohort, each with a nominal quota of 40% of the H100 GPUs
#          (drasched.dev/gpu, ResourceFlavor h100 with the H100 nodes'
#          label), team-a borrowing up to 10%, team-b none, no preemption;
#          Jobs of 4 pods x 2 GPUs and 8 pods x 1 GPU in turn, team-a's 50%
#          of the GPUs and team-b's 30%, created at once (team-a's first),
#          so every Job is admitted without another finishing (kwok ends Job
#          pods as soon as they run); measures per Job its creation -> the
#          bind of its last pod, the time until the last Job's pods are all
#          bound, and per pod its creation -> its bind
#
# It measures pods/s and the p50/p90/p99 of creation → bound latency (what
# the churns leave whole, for the fragmentation cases), the scheduler
# process's CPU seconds per pod bound and peak RSS (from /proc; fill,
# noclaims, churn, match, mig, gang, queue), checks every allocation after each
# case, and writes _output/bench/kwok/kwok.json (bench/internal/results
# format), its case names carrying the node count (fill_5000nodes) and, for
# the runs with SchedulerPreQueueingHints, +pqh; `make bench` merges it into
# bench/results/.
#
# Usage: hack/bench-kwok.sh
#   PLAN="N:CASES[/R] ..." the sizes and the cases of each (CASES
#                    comma-separated, all for every case, -C leaving out C:
#                    all,-noclaims), and at least R runs of them
#                    (default RUNS); default: all cases on 1000 nodes, and
#                    fill, noclaims and churn on 500, 2000 and 5000 nodes,
#                    match too on 5000 (the scaling curve), noclaims in
#                    entries of their own with 5 runs (medians: a plain pod's
#                    cost is close to upstream's, and runs differ by more);
#                    QUICK=1: all on 100
#   NODES="N ..."    instead of PLAN: these sizes, each with CASES (or all)
#                    nodes per cluster: a tenth each L40S and A100 MIG nodes,
#                    the rest H100, 8 GPUs each
#   QUICK=1          100 nodes, 20 s of churn at 10 pods/s, 16
#                    fragmentation steps, no +pqh runs: 6-8 min
#   RUNS=N           runs per scheduler, each on a fresh cluster (default 1;
#                    the order of the schedulers alternates)
#   CHURN_RATE=P     pods/s of the churn workload (default 20; 10 QUICK)
#   CHURN_DURATION=D how long churn creates pods (default 3m; 20s QUICK)
#   FILL_PODS=N      the most pods of fill, noclaims and churn's base
#                    (default 5000: on 5000 nodes fill takes 37% of the
#                    H100 GPUs instead of 90%, churn's base 30%)
#   FRAG_STEPS=N     steps of the fragmentation churns after the initial
#                    fill, half a second or more each (default 24, pods
#                    living 8 steps on average; 16 QUICK, living 6)
#   FRAG_SEED=S      seed of the fragmentation churns (default 1)
#   CASES=A,B        with NODES: only these cases (default all);
#                    drasched-bestfit runs the fragmentation cases among
#                    them, if any
#   SCHEDULERS="A B" only these schedulers (default: upstream drasched
#                    drasched-bestfit upstream+pqh drasched+pqh; QUICK
#                    without the +pqh ones; also upstream+batch,
#                    drasched+batch, upstream+batch+pqh, drasched+batch+pqh);
#                    without both upstream and drasched there is no report,
#                    only the runs' files
#   SCHEDULER_ARGS   more flags for every scheduler process, e.g. to profile
#                    one: "--secure-port=10259
#                    --authorization-always-allow-paths=/healthz,/debug/pprof/*"
#                    and `go tool pprof -seconds 60
#                    https+insecure://127.0.0.1:10259/debug/pprof/profile`
#   CLUSTER_ARGS     more kwokctl flags for every cluster, e.g. to see the
#                    API server's watch cache drop a watcher that reads
#                    too slowly: "--extra-args kube-apiserver=v=1"
#   BENCH_COMMAND    the command recorded in the results as how to reproduce them
#   DONE=FILE        skip the cases whose results FILE names, one per line
#                    as in the results (fill_1000nodes, fill_1000nodes+pqh):
#                    a case of a size runs unless every scheduler variant
#                    of the run has its result (hack/bench.sh resumes so)
#   PRINT_PLAN=1     print the plan's entries (NODES:CASES), one per line,
#                    and run nothing
#
# upstream+pqh and drasched+pqh are upstream and drasched with the alpha
# feature gate SchedulerPreQueueingHints on (upstream at its best; drasched
# implements the hints too), on the same cases. upstream+batch and
# drasched+batch are them without PodTopologySpread's system default
# constraints (defaultingType: List), which kube-scheduler's opportunistic
# batching needs (with them PodTopologySpread signs no pod, so no pod is
# batched); +batch+pqh both changes.
#
# Clusters: kwokctl create cluster --runtime binary with the binaries of
# hack/build-control-plane.sh, --disable-qps-limits, and without kwokctl's
# own kube-scheduler. kwok renews each node's Lease every quarter of its
# duration (40 s times kwokctl's --heartbeat-factor): with the default factor
# of 5 that is 100 writes/s on 5000 nodes, as many as the benchmark's own
# on 2 cores, so the factor grows with the cluster (nodes/200, at least 5),
# keeping the renewals at 20/s or fewer; kube-controller-manager's
# node-monitor periods grow with it, so no node goes NotReady. Before the
# scheduler starts, `kwok warm` grows the API server's pod watch cache to
# the capacity a cluster serving this load has (it sizes each new watch's
# event channel from it: 10 events on a fresh cluster, which made the API
# server close the scheduler's pod watch when a case created its pods at
# once, bench/kwok/warm.go). kwokctl's
# state and the logs go to _output/bench/kwok; everything is torn down on
# exit, also on failure or Ctrl-C.
set -euo pipefail
# shellcheck source=hack/lib/init.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/init.sh"

# The fragmentation churns run until the pods of the initial fill are gone
# (2·lifetime−1 steps) and then some: QUICK keeps them to ~20-30 s.
if [[ "${QUICK:-}" == 1 ]]; then
	default_plan="${NODES:-100}:${CASES:-all}"
	churn_rate=${CHURN_RATE:-10}
	churn_duration=${CHURN_DURATION:-20s}
	frag_steps=${FRAG_STEPS:-16}
	frag_lifetime=6
	default_schedulers="upstream drasched drasched-bestfit"
else
	default_plan="1000:all,-noclaims 1000:noclaims/5 500:fill,churn 500:noclaims/5 2000:fill,churn 2000:noclaims/5 5000:fill,churn,match 5000:noclaims/5"
	churn_rate=${CHURN_RATE:-20}
	churn_duration=${CHURN_DURATION:-3m}
	frag_steps=${FRAG_STEPS:-24}
	frag_lifetime=8
	default_schedulers="upstream drasched drasched-bestfit upstream+pqh drasched+pqh"
fi
if [[ -n "${NODES:-}" ]]; then
	default_plan=""
	for n in ${NODES}; do
		default_plan+=" ${n}:${CASES:-all}"
	done
fi
read -r -a plan <<<"${PLAN:-${default_plan}}"
if [[ "${PRINT_PLAN:-}" == 1 ]]; then
	printf '%s\n' "${plan[@]}"
	exit 0
fi
runs=${RUNS:-1}
fill_pods=${FILL_PODS:-5000}
frag_seed=${FRAG_SEED:-1}
command=${BENCH_COMMAND:-hack/bench-kwok.sh}
schedulers=${SCHEDULERS:-${default_schedulers}}

bin_dir=${root}/_output/bin
cluster_bin=${root}/_output/cluster/bin
out=${root}/_output/bench/kwok
run_dir=${out}/run
log_dir=${out}/logs
raw_dir=${out}/runs
bench=${out}/bin/kwok
export KWOK_WORKDIR=${out}/kwok
export KWOK_KUBECTL_BINARY=${cluster_bin}/kubectl

# The schedulers, by the process name of their run, in the order of a run
# (an even run goes the other way). drasched-bestfit is drasched with the
# BestFit allocation policy; a +pqh one has the feature gate
# SchedulerPreQueueingHints on; a +batch one no PodTopologySpread default
# constraints.
all_schedulers=(upstream drasched drasched-bestfit upstream+pqh drasched+pqh
	upstream+batch drasched+batch upstream+batch+pqh drasched+batch+pqh)
declare -A binaries=()
for s in "${all_schedulers[@]}"; do
	case "${s}" in
	upstream*) binaries[${s}]=${cluster_bin}/kube-scheduler ;;
	*) binaries[${s}]=${bin_dir}/scheduler ;;
	esac
done
for s in ${schedulers}; do
	[[ -n "${binaries[${s}]:-}" ]] || {
		echo "kwok: SCHEDULERS: unknown scheduler ${s} (want some of: ${!binaries[*]})" >&2
		exit 2
	}
done
pqh_feature_gate=SchedulerPreQueueingHints=true
# The cases with PodGroups (gang, preempt_gang: `kwok cases
# --generic-workload`, read once the program is built) run on a cluster of
# their own, whose control plane and scheduler have the GenericWorkload
# feature gate (beta, off by default) and serve scheduling.k8s.io/v1beta1
# (PodGroup). Not on every cluster: with the gate, kube-scheduler requeues
# all unschedulable pods whenever a pod is added and its preemption
# evaluates victims another way, which would change what the other cases
# measure.
workload_feature_gates=GenericWorkload=true
workload_runtime_config=scheduling.k8s.io/v1beta1=true
# shellcheck source=hack/lib/processes.sh
source hack/lib/processes.sh
# shellcheck source=hack/lib/kwok.sh
source hack/lib/kwok.sh

start=${SECONDS}
log() {
	printf 'kwok: %s  (%ds)\n' "$1" "$((SECONDS - start))" >&2
}


# cluster_name SCHEDULER: a scheduler's cluster (a name without "+").
cluster_name() {
	echo "drasched-bench-${1//+/-}"
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

# on_exit: nothing left running at exit (hack/lib/init.sh's at_exit), also
# on failure or Ctrl-C.
# shellcheck disable=SC2317 # called by the exit trap
on_exit() {
	if ((exit_code != 0)); then
		echo "kwok: failed (exit ${exit_code}); logs in ${log_dir#"${root}"/}" >&2
	fi
	teardown
}

# build: the drasched binary, the control-plane binaries (both no-ops when
# up to date), Kueue's manager and Helm for the queue case (go tool caches
# them; internal/kueue runs them) and the benchmark program.
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
	{ go tool -modfile=hack/kueue/go.mod -n kueue && go tool -modfile=hack/helm/go.mod -n helm; } >>"${log_dir}/build.log" 2>&1 || {
		tail -n 20 "${log_dir}/build.log" >&2
		return 1
	}
	go build -o "${bench}" ./bench/kwok
}

# heartbeat_factor NODES: kwokctl's --heartbeat-factor for a cluster of
# that size: node Lease renewals at 20/s or fewer (see the top).
heartbeat_factor() {
	local factor=$(($1 / 200))
	echo $((factor < 5 ? 5 : factor))
}

# run_scheduler SCHEDULER NODES RUN CASES [FEATURE_GATES RUNTIME_CONFIG]:
# one run of one scheduler on a fresh cluster of NODES nodes, of the cases
# (comma-separated), with the feature gates (control plane and scheduler)
# and the APIs given.
run_scheduler() {
	local s=$1 nodes=$2 run=$3 run_cases=$4 gates=${5:-} runtime_config=${6:-} cluster kubeconfig config rc=0 name pid
	# base is the scheduler, the rest its variant: pqh, batch or batch+pqh.
	local base=${s%%+*} scheduler_gates=${5:-} variant=()
	local config_args=(--scheduler "${base}") run_args=(--cases "${run_cases}") cluster_args=() scheduler_args=()
	[[ "${base}" != drasched-bestfit ]] || config_args=(--scheduler drasched --allocation-policy BestFit)
	if [[ "${s}" == *+* ]]; then
		variant=(--variant "${s#"${base}"+}")
	fi
	if [[ "${s}" == *+pqh ]]; then
		scheduler_gates=${scheduler_gates:+${scheduler_gates},}${pqh_feature_gate}
	fi
	if [[ "${s}" == *+batch* ]]; then
		config_args+=(--default-spreading=false)
	fi
	[[ -z "${gates}" ]] || cluster_args+=(--kube-feature-gates "${gates}")
	[[ -z "${scheduler_gates}" ]] || scheduler_args+=(--feature-gates="${scheduler_gates}")
	[[ -z "${runtime_config}" ]] || cluster_args+=(--kube-runtime-config "${runtime_config}")
	# shellcheck disable=SC2206 # CLUSTER_ARGS are words
	cluster_args+=(${CLUSTER_ARGS:-})
	# The run's name: its scheduler, size, and "workload" where it is the
	# cluster of the cases with PodGroups.
	name=${s}-${nodes}nodes
	[[ -z "${gates}" ]] || name=${name}-workload
	cluster=$(cluster_name "${s}")
	kubeconfig=${out}/${s}.kubeconfig
	config=${out}/${s}-scheduler-config.yaml

	log "${name} run ${run}: kwok cluster ${cluster} with ${nodes} nodes${gates:+, feature gates ${gates}}"
	kwokctl create cluster --name "${cluster}" --runtime binary --kubeconfig "" --wait 2m \
		--disable-qps-limits --disable kube-scheduler "${cluster_args[@]}" \
		--heartbeat-factor "$(heartbeat_factor "${nodes}")" \
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
	"${bench}" warm --kubeconfig "${kubeconfig}" >&2

	"${bench}" scheduler-config --kubeconfig "${kubeconfig}" "${config_args[@]}" --out "${config}"
	log "${name} run ${run}: starting ${binaries[${s}]#"${root}"/}${scheduler_gates:+ --feature-gates=${scheduler_gates}}"
	# Every scheduler maps its binary as read back from disk, as from a
	# container image: the page cache keeps a binary that `go build` has just
	# written in large folios, and the kernel maps a whole folio at a fault,
	# which added about 5 MiB of code a process never ran to the peak RSS of the
	# scheduler built last (docs/benchmarks.md#peak-rss).
	sync "${binaries[${s}]}"
	dd if="${binaries[${s}]}" iflag=nocache count=0 status=none
	# shellcheck disable=SC2086 # SCHEDULER_ARGS are words
	start_process "${s}" "${binaries[${s}]}" --config "${config}" --leader-elect=false --secure-port=0 -v=1 "${scheduler_args[@]}" ${SCHEDULER_ARGS:-} || rc=$?
	if ((rc == 0)); then
		pid=$(process_pid "${s}" "${binaries[${s}]}")
		run_watching "${bench}" run --kubeconfig "${kubeconfig}" --scheduler "${base}" "${variant[@]}" --run "${run}" \
			--scheduler-pid "${pid}" --fill-pods "${fill_pods}" \
			--churn-rate "${churn_rate}" --churn-duration "${churn_duration}" \
			--frag-steps "${frag_steps}" --frag-lifetime "${frag_lifetime}" --frag-seed "${frag_seed}" "${run_args[@]}" \
			--kueue-dir "${log_dir}/${name}-${run}-kueue" \
			--out "${raw_dir}/${name}-${run}.json" >&2 || rc=$?
	fi
	if ((rc != 0)); then
		echo "--- last lines of ${log_dir#"${root}"/}/${s}.log" >&2
		tail -n 20 "${log_dir}/${s}.log" >&2
	fi
	stop_process "${s}" "${binaries[${s}]}"
	# The scheduler's and the control plane's logs: keep them per run.
	cp "${log_dir}/${s}.log" "${log_dir}/${name}-${run}.log" 2>/dev/null || true
	cp -r "${KWOK_WORKDIR}/clusters/${cluster}/logs" "${log_dir}/${name}-${run}-cluster" 2>/dev/null || true
	kwokctl delete cluster --name "${cluster}" >/dev/null 2>&1 || true
	return "${rc}"
}

# plan_cases CASES: the cases of a PLAN entry (comma-separated), all
# standing for every case, -C leaving out C.
plan_cases() {
	local c kept=() left_out=() every
	IFS=, read -r -a every <<<"${all_cases}"
	for c in ${1//,/ }; do
		case "${c}" in
		all) kept+=("${every[@]}") ;;
		-*) left_out+=("${c#-}") ;;
		*) kept+=("${c}") ;;
		esac
	done
	for c in "${kept[@]}"; do
		[[ " ${left_out[*]} " == *" ${c} "* ]] || echo "${c}"
	done | paste -sd, -
}

# undone_cases NODES CASES: those of the cases (comma-separated) on NODES
# nodes that DONE lacks for some scheduler variant of this run.
undone_cases() {
	local nodes=$1 c s variants=("") undone=()
	for s in ${schedulers}; do
		[[ "${s}" != *+* ]] || variants+=("+${s#*+}")
	done
	for c in ${2//,/ }; do
		for s in "${variants[@]}"; do
			if ! grep -qxF "${c}_${nodes}nodes${s}" "${DONE}"; then
				undone+=("${c}")
				break
			fi
		done
	done
	(IFS=,; echo "${undone[*]}")
}

mkdir -p "${run_dir}" "${log_dir}"
teardown
rm -rf "${raw_dir}" "${log_dir:?}"/* "${out}/kwok.json"
mkdir -p "${raw_dir}"
at_exit on_exit

build
all_cases=$("${bench}" cases | paste -sd, -)
workload_cases=$("${bench}" cases --generic-workload | paste -sd, -)
log "plan ${plan[*]}; schedulers ${schedulers}; fill at most ${fill_pods} pods, churn ${churn_rate} pods/s for ${churn_duration}, fragmentation ${frag_steps} steps of pods living ${frag_lifetime} (seed ${frag_seed})"
status=0
for entry in "${plan[@]}"; do
	nodes=${entry%%:*}
	cases=${entry#*:}
	entry_runs=${runs}
	if [[ "${cases}" == */* ]]; then
		entry_runs=${cases##*/}
		cases=${cases%/*}
		[[ "${entry_runs}" =~ ^[1-9][0-9]*$ ]] || {
			echo "kwok: PLAN: ${entry}: runs ${entry_runs} is not a number above 0" >&2
			exit 2
		}
		entry_runs=$((entry_runs > runs ? entry_runs : runs))
	fi
	[[ "${nodes}" =~ ^[1-9][0-9]*$ && "${entry}" == *:* ]] || {
		echo "kwok: PLAN: ${entry} is not NODES:CASES[/RUNS]" >&2
		exit 2
	}
	cases=$(plan_cases "${cases}")
	[[ -n "${cases}" ]] || {
		echo "kwok: PLAN: ${entry}: no case left" >&2
		exit 2
	}
	if [[ -n "${DONE:-}" ]]; then
		cases=$(undone_cases "${nodes}" "${cases}")
		if [[ -z "${cases}" ]]; then
			log "${nodes} nodes: every case already measured (${DONE#"${root}"/})"
			continue
		fi
	fi
	# The cases of upstream's and drasched's clusters without feature
	# gates, those of their clusters with GenericWorkload (gang,
	# preempt_gang), and those of drasched-bestfit: the fragmentation
	# cases. The other cases measure speed, which the allocation policy is
	# not about.
	plain_cases=$(tr ',' '\n' <<<"${cases}" | grep -vxF -f <(tr ',' '\n' <<<"${workload_cases}") | paste -sd, -) || true
	gated_cases=$(tr ',' '\n' <<<"${cases}" | grep -xF -f <(tr ',' '\n' <<<"${workload_cases}") | paste -sd, -) || true
	bestfit_cases=$(tr ',' '\n' <<<"${cases}" | grep -xE 'fragmentation|fragmentation_mig' | paste -sd, -) || true
	log "${nodes} nodes: ${cases}, ${entry_runs} run(s) per scheduler"
	for ((run = 1; run <= entry_runs; run++)); do
		order=("${all_schedulers[@]}")
		if ((run % 2 == 0)); then
			order=()
			for ((i = ${#all_schedulers[@]} - 1; i >= 0; i--)); do
				order+=("${all_schedulers[i]}")
			done
		fi
		for s in "${order[@]}"; do
			[[ " ${schedulers} " == *" ${s} "* ]] || continue
			if [[ "${s}" == drasched-bestfit ]]; then
				[[ -z "${bestfit_cases}" ]] || run_scheduler "${s}" "${nodes}" "${run}" "${bestfit_cases}" || status=1
				continue
			fi
			[[ -z "${plain_cases}" ]] || run_scheduler "${s}" "${nodes}" "${run}" "${plain_cases}" || status=1
			[[ -z "${gated_cases}" ]] || run_scheduler "${s}" "${nodes}" "${run}" "${gated_cases}" "${workload_feature_gates}" "${workload_runtime_config}" || status=1
		done
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
if ((${#raws[@]} == 0)); then
	log "done, nothing measured"
	exit "${status}"
fi
"${bench}" report --out "${out}/kwok.json" --command "${command}" --seconds "$((SECONDS - start))" "${raws[@]}" || status=1
log "done, results in ${out#"${root}"/}/kwok.json"
exit "${status}"
