#!/usr/bin/env bash
# Runs upstream's DRA integration suite (k8s.io/kubernetes/test/integration/dra
# of the k8s.io/kubernetes version in go.mod, read from the module cache) with
# drasched's StructuredDRA plugin in place of the in-tree DynamicResources.
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
#     DRANodeAllocatableResources) included: no test is skipped.
#
# Usage: hack/conformance-integration.sh [test binary flags...]
#   ENTRIES="default all"   the suite's entry points to run (ga and api also
#                           build; make conformance does not run them)
#   e.g. ENTRIES=default hack/conformance-integration.sh -test.run 'TestDRA/default/FilterTimeout'
#   -drasched.allocator=upstream runs every test with upstream's allocator.
# Each entry point's full output (-test.v) goes to
# _output/conformance-integration/ENTRY.log; the script prints each test's
# result and the failures' first lines.
set -euo pipefail
# shellcheck source=hack/lib/init.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/init.sh"

read -r -a entries <<<"${ENTRIES:-default all}"
k8s_dir=$(go list -m -f '{{.Dir}}' k8s.io/kubernetes)
suite="${k8s_dir}/test/integration/dra"
if [[ ! -f "${suite}/dra.go" ]]; then
	echo "conformance-integration: ${suite} has no dra.go" >&2
	exit 1
fi

# The suite starts etcd from PATH (k8s.io/kubernetes/test/integration/framework).
# shellcheck source=hack/lib/etcd.sh
source hack/lib/etcd.sh
etcd_on_path _output/bin

out="${root}/_output/conformance-integration"
mkdir -p "${out}"
work=$(mktemp -d "${TMPDIR:-/tmp}/drasched-conformance-integration.XXXXXX")
at_exit rm -rf "${work}"

mod=drasched.local/conformance-integration
cp -r "${suite}" "${work}/dra"
chmod -R u+w "${work}"
pkg="${work}/dra"

# replace_once FILE ORIGINAL REPLACEMENT: replaces the literal text ORIGINAL,
# which must occur exactly once in FILE.
replace_once() {
	local file=$1 original=$2 replacement=$3 content rest n
	content=$(<"${file}")
	rest=${content//"${original}"/}
	n=$(((${#content} - ${#rest}) / ${#original}))
	if [[ ${n} != 1 ]]; then
		echo "conformance-integration: the suite changed: ${file#"${work}/"} has ${n} times, not once:" >&2
		echo "${original}" >&2
		exit 1
	fi
	printf '%s\n' "${content/"${original}"/"${replacement}"}" >"${file}"
}

# The entry points import the copied package.
for entry in default all ga api; do
	replace_once "${pkg}/${entry}/${entry}_test.go" '"k8s.io/kubernetes/test/integration/dra"' "\"${mod}/dra\""
done

# 1. The substitution.
hooks=hack/conformance-integration/structureddra.go
if [[ $(head -n 1 "${hooks}") != '//go:build ignore' ]]; then
	echo "conformance-integration: ${hooks} must start with //go:build ignore" >&2
	exit 1
fi
replace_once "${pkg}/dra.go" '	tCtx = scheduler.rootCtx
' '	testName := tCtx.Name() // drasched: the test that starts the scheduler
	tCtx = scheduler.rootCtx
'
replace_once "${pkg}/dra.go" \
	'util.StartScheduler(schedulerCtx, cfg, nil)' \
	'util.StartScheduler(schedulerCtx, cfg, draschedScheduler(schedulerCtx, testName, cfg))'

# 2. Failure text: five assertions expect "cannot allocate all claims".
n=$(cat "${pkg}"/*.go | grep -c 'cannot allocate all claims' || true)
if [[ ${n} != 5 ]]; then
	echo "conformance-integration: the suite changed: \"cannot allocate all claims\" occurs ${n} times, not 5" >&2
	exit 1
fi
# Two compare a pod's whole condition message (InvalidResourceSlices,
# PrioritizedList) ...
replace_once "${pkg}/core.go" \
	'"Message": gomega.Equal("0/8 nodes are available: 1 invalid resource pools were encountered, 7 cannot allocate all claims.' \
	'"Message": draschedMessage("0/8 nodes are available: 1 invalid resource pools were encountered, 7 cannot allocate all claims.'
replace_once "${pkg}/prioritizedlist.go" \
	'"Message": gomega.Equal("0/8 nodes are available: 8 cannot allocate all claims.' \
	'"Message": draschedMessage("0/8 nodes are available: 8 cannot allocate all claims.'
# ... three pass it to expectPodUnschedulable (CompatibilityGroups twice,
# NoSchedule* once), which looks for it in the message.
replace_once "${pkg}/node_allocatable_resources.go" \
	'"Message": gomega.ContainSubstring(reason),' \
	'"Message": draschedReason(reason),'

# 3. FilterTimeout/enabled with upstream's allocator.
flags=(-drasched.upstream-allocator-for='^TestDRA/[^/]+/FilterTimeout/enabled$')

# Only now, so that the checks above count upstream's text only.
tail -n +2 "${hooks}" >"${pkg}/zz_drasched.go"

# The temporary module uses exactly this repository's dependency versions.
# shellcheck source=hack/lib/tempmodule.sh
source hack/lib/tempmodule.sh
write_temp_module "${work}" "${mod}"

cd "${work}"
# Adds the suite's own dependencies (gomega, testify, the e2e framework) at
# the versions this module graph selects.
go mod tidy >/dev/null

echo "conformance-integration: upstream's DRA integration suite from ${suite#"$(go env GOMODCACHE)/"}, StructuredDRA for DynamicResources; entry points: ${entries[*]}"
rc=0
for entry in "${entries[@]}"; do
	start=${SECONDS}
	go test -c -o "${work}/${entry}.test" "./dra/${entry}"
	compiled=${SECONDS}
	log="${out}/${entry}.log"
	entry_rc=0
	(cd "${pkg}/${entry}" && "${work}/${entry}.test" -test.v -test.timeout=40m "${flags[@]}" "$@") >"${log}" 2>&1 || entry_rc=$?
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
