#!/usr/bin/env bash
# Runs upstream's DRA integration suite (k8s.io/kubernetes/test/integration/dra
# of the k8s.io/kubernetes version in go.mod, or in hack/minor/MINOR/go.mod
# with KUBE_MINOR=MINOR; read from the module cache) with drasched's
# StructuredDRA plugin, built for that minor, in place of the in-tree
# DynamicResources.
#
# The suite is copied into a temporary module (never into this repository)
# and changed there, visibly, below; every change is checked to apply
# exactly once, so a new upstream version fails here instead of running
# something else:
#
#  1. The substitution. hack/conformance-integration/structureddra.go is
#     added to the copied package, and the suite's one util.StartScheduler
#     call passes its result as the out-of-tree registry: StructuredDRA
#     registered, and in every profile DynamicResources replaced by
#     StructuredDRA at the same place and weight, DynamicResourcesArgs by
#     StructuredDRAArgs with the same filterTimeout and bindingTimeout.
#  2. Failure text. Where the suite expects the in-tree plugin's only
#     failure text, "cannot allocate all claims", drasched's precise reasons
#     are accepted instead (draschedMessage, draschedReason); the rest of
#     each message is still compared as upstream compares it.
#  3. FilterTimeout/enabled expects a 10ms filter timeout to expire while
#     the allocator looks for 21 devices among 20; drasched's allocator sees
#     at once that they do not fit (and the other node's devices are still
#     allocated to FilterTimeout/disabled's claim), so the pod would be
#     unschedulable instead of in error. That test runs with
#     allocator: upstream (upstream's allocator inside StructuredDRA),
#     unchanged.
#  4. Entry point all runs with every feature gate upstream sets, the
#     workload gates (GenericWorkload, DRAWorkloadResourceClaims,
#     DRANodeAllocatableResources) included: for the newest minor no test
#     is skipped.
#  5. For an older minor (KUBE_MINOR=1.36), whose alpha node-allocatable
#     API the build does not implement, DRANodeAllocatableResources is off
#     in entry all and its test does not run (see below).
#
# Usage: hack/conformance-integration.sh [test binary flags...]
#   ENTRIES="default all"   the suite's entry points to run (ga and api also
#                           build; make conformance does not run them)
#   e.g. ENTRIES=default hack/conformance-integration.sh -test.run 'TestDRA/default/FilterTimeout'
#   -drasched.allocator=upstream runs every test with upstream's allocator.
# Each entry point's full output (-test.v) goes to
# _output/conformance-integration/ENTRY.log (MINOR/ENTRY.log for an older
# minor); the script prints each test's
# result and the failures' first lines.
set -euo pipefail
# shellcheck source=hack/lib/init.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/init.sh"

read -r -a entries <<<"${ENTRIES:-default all}"
# The minor (KUBE_MINOR, hack/lib/minor.sh) whose suite runs against the
# build for it.
# shellcheck source=hack/lib/minor.sh
source hack/lib/minor.sh
k8s_dir=$(go list "${go_minor_flags[@]}" -m -f '{{.Dir}}' k8s.io/kubernetes)
suite="${k8s_dir}/test/integration/dra"
# 1.36 and later: package dra with the entry points default, all, ga and
# api as packages of their own; 1.35: one test package whose TestDRA has
# the entry points as subtests.
if [[ -f "${suite}/dra.go" ]]; then
	layout=packages
elif [[ -f "${suite}/dra_test.go" ]]; then
	layout=subtests
else
	echo "conformance-integration: ${suite} has neither dra.go nor dra_test.go" >&2
	exit 1
fi

# The suite starts etcd from PATH (k8s.io/kubernetes/test/integration/framework).
# shellcheck source=hack/lib/etcd.sh
source hack/lib/etcd.sh
etcd_on_path _output/bin

out="${root}/_output/conformance-integration"
if [[ "${kube_minor}" != "${newest_minor}" ]]; then
	out+="/${kube_minor}"
fi
mkdir -p "${out}"
work=$(mktemp -d "${TMPDIR:-/tmp}/drasched-conformance-integration.XXXXXX")
at_exit rm -rf "${work}"

mod=drasched.local/conformance-integration
cp -r "${suite}" "${work}/dra"
chmod -R u+w "${work}"
pkg="${work}/dra"

# replace_once ORIGINAL REPLACEMENT: replaces the literal text ORIGINAL,
# which must occur exactly once in the suite's files (which file differs
# between minors).
replace_once() {
	local original=$1 replacement=$2 file found="" content rest n total=0
	for file in "${pkg}"/*.go; do
		content=$(<"${file}")
		rest=${content//"${original}"/}
		n=$(((${#content} - ${#rest}) / ${#original}))
		if [[ ${n} -gt 0 ]]; then
			found=${file}
			total=$((total + n))
		fi
	done
	if [[ ${total} != 1 ]]; then
		echo "conformance-integration: the suite changed: its files have ${total} times, not once:" >&2
		echo "${original}" >&2
		exit 1
	fi
	content=$(<"${found}")
	printf '%s\n' "${content/"${original}"/"${replacement}"}" >"${found}"
}

# The entry points import the copied package.
if [[ ${layout} == packages ]]; then
	for entry in default all ga api; do
		sed -i "s#\"k8s.io/kubernetes/test/integration/dra\"#\"${mod}/dra\"#" "${pkg}/${entry}/${entry}_test.go"
		grep -q "\"${mod}/dra\"" "${pkg}/${entry}/${entry}_test.go" || {
			echo "conformance-integration: the suite changed: ${entry}/${entry}_test.go does not import the suite" >&2
			exit 1
		}
	done
fi

# 1. The substitution.
hooks=hack/conformance-integration/structureddra.go
if [[ $(head -n 1 "${hooks}") != '//go:build ignore' ]]; then
	echo "conformance-integration: ${hooks} must start with //go:build ignore" >&2
	exit 1
fi
replace_once '	tCtx = scheduler.rootCtx
' '	testName := tCtx.Name() // drasched: the test that starts the scheduler
	tCtx = scheduler.rootCtx
'
replace_once \
	'util.StartScheduler(schedulerCtx, cfg, nil)' \
	'util.StartScheduler(schedulerCtx, cfg, draschedScheduler(schedulerCtx, testName, cfg))'

# 2. Failure text: assertions expect "cannot allocate all claims".
# Two compare a pod's whole condition message (InvalidResourceSlices,
# PrioritizedList) ...
replace_once \
	'"Message": gomega.Equal("0/8 nodes are available: 1 invalid resource pools were encountered, 7 cannot allocate all claims.' \
	'"Message": draschedMessage("0/8 nodes are available: 1 invalid resource pools were encountered, 7 cannot allocate all claims.'
replace_once \
	'"Message": gomega.Equal("0/8 nodes are available: 8 cannot allocate all claims.' \
	'"Message": draschedMessage("0/8 nodes are available: 8 cannot allocate all claims.'
# ... the others pass it to expectPodUnschedulable (NoSchedule*, and in
# 1.37 CompatibilityGroups twice), which looks for it in the message.
replace_once \
	'"Message": gomega.ContainSubstring(reason),' \
	'"Message": draschedReason(reason),'
# Every other assertion on that text must be one of the latter.
if unhandled=$(grep -n 'cannot allocate all claims' "${pkg}"/*.go | grep -v 'draschedMessage(\|expectPodUnschedulable('); then
	echo "conformance-integration: the suite changed: it expects \"cannot allocate all claims\" where drasched's reasons are not accepted:" >&2
	echo "${unhandled#"${pkg}/"}" >&2
	exit 1
fi

# 3. FilterTimeout/enabled with upstream's allocator.
flags=(-drasched.upstream-allocator-for='^TestDRA/[^/]+/FilterTimeout/enabled$')

# 5. Older minors: their alpha node-allocatable resources (the API that
#    1.37 replaced) are not implemented, and StructuredDRA refuses the gate
#    at start (pkg/plugins/dra/nodeallocatable_kube136.go): in entry all
#    the gate is off and its test is not run.
if [[ "${kube_minor}" != "${newest_minor}" ]] && grep -q 'DRANodeAllocatableResources' "${pkg}"/*.go; then
	if ! grep -qE '^\s+features\.DRANodeAllocatableResources:\s+true,$' "${pkg}"/*.go; then
		echo "conformance-integration: the suite changed: entry all does not turn DRANodeAllocatableResources on" >&2
		exit 1
	fi
	sed -i -E 's/^(\s+features\.DRANodeAllocatableResources:\s+)true,$/\1false, \/\/ drasched: not implemented for this minor/' "${pkg}"/*.go
	replace_once \
		'runSubTest(tCtx, "DRANodeAllocatableResources", func(tCtx ktesting.TContext) { testNodeAllocatableResources(tCtx, true) })' \
		'// drasched: DRANodeAllocatableResources is not implemented for this minor.'
fi

# Only now, so that the checks above count upstream's text only. The hooks
# take the test context from where the suite does (1.37 moved ktesting).
ktesting=$(cat "${pkg}"/*.go | grep -oE '"k8s.io/kubernetes/test/utils/([a-z-]+/)*ktesting"' | head -n 1)
if [[ -z "${ktesting}" ]]; then
	echo "conformance-integration: the suite changed: it imports no ktesting" >&2
	exit 1
fi
# A test file where the suite is one (1.35), for the flags to be parsed
# before the tests run.
hooks_file=zz_drasched.go
[[ ${layout} == subtests ]] && hooks_file=zz_drasched_test.go
tail -n +2 "${hooks}" | sed "s#\"k8s.io/kubernetes/test/utils/client-go/ktesting\"#${ktesting}#" >"${pkg}/${hooks_file}"

# The temporary module uses exactly this repository's dependency versions.
# shellcheck source=hack/lib/tempmodule.sh
source hack/lib/tempmodule.sh
write_temp_module "${work}" "${mod}"

# The build tag of the minor, for drasched's files (the module file is the
# temporary module's own).
go_tags=()
if [[ "${kube_minor}" != "${newest_minor}" ]]; then
	go_tags=("-tags=kube${kube_minor}")
fi

cd "${work}"

echo "conformance-integration: upstream's DRA integration suite from ${suite#"$(go env GOMODCACHE)/"}, StructuredDRA for DynamicResources; entry points: ${entries[*]}"
rc=0
for entry in "${entries[@]}"; do
	start=${SECONDS}
	# -mod=mod adds the suite's own dependencies (gomega, testify, the e2e
	# framework) at the versions this module graph selects. Not go mod
	# tidy: it reads the files of every minor's build tags, and those of
	# another minor import packages this one lacks.
	# 1.35: one test binary, the entry point a subtest of TestDRA.
	binary=${work}/${entry}.test dir=${pkg}/${entry} select=()
	if [[ ${layout} == subtests ]]; then
		binary=${work}/dra.test dir=${pkg} select=(-test.run "^TestDRA\$/^${entry}\$")
		[[ -x "${binary}" ]] || go test -c -mod=mod "${go_tags[@]}" -o "${binary}" ./dra
	else
		go test -c -mod=mod "${go_tags[@]}" -o "${binary}" "./dra/${entry}"
	fi
	compiled=${SECONDS}
	log="${out}/${entry}.log"
	entry_rc=0
	(cd "${dir}" && "${binary}" -test.v -test.timeout=40m "${select[@]}" "${flags[@]}" "$@") >"${log}" 2>&1 || entry_rc=$?
	echo "conformance-integration: ${entry}: compiled in $((compiled - start))s, ran in $((SECONDS - compiled))s, exit ${entry_rc}; full output in ${log#"${root}/"}"
	grep -E '^\s*--- (PASS|FAIL|SKIP)' "${log}" | sed 's/^/  /' || true
	# Leaf tests (those without subtests) by result.
	grep -E '^\s*--- (PASS|FAIL|SKIP)' "${log}" | awk '
		{ name[NR] = $3; result[NR] = $2 }
		END {
			for (i = 1; i <= NR; i++) {
				leaf = 1
				for (j = 1; j <= NR; j++) if (index(name[j], name[i] "/") == 1) leaf = 0
				if (leaf) count[result[i]]++
			}
			printf "conformance-integration: leaf tests: %d passed, %d failed, %d skipped\n", count["PASS:"], count["FAIL:"], count["SKIP:"]
		}' || true
	if [[ ${entry_rc} != 0 ]]; then
		rc=1
		echo "conformance-integration: ${entry}: the first failures (all of them in ${log#"${root}/"}):" >&2
		grep -E -A14 '^\s+\S+\.go:[0-9]+: (FATAL )?ERROR:' "${log}" | cut -c1-300 | head -n 120 >&2 || true
	fi
done
exit "${rc}"
