# shellcheck shell=bash
# etcd for the scripts whose tests or benchmarks start it (make etcd,
# hack/build-control-plane.sh, hack/bench-scheduler-perf.sh,
# hack/conformance-integration.sh): built from its Go module
# (go.etcd.io/etcd/server/v3, pinned below) in a throwaway module, into an
# ignored folder. Nothing is downloaded from release pages. A stamp file
# next to the binary records what it was built from, so a second call
# returns at once.
#
# `go install go.etcd.io/etcd/server/v3@VERSION` does not work: etcd's
# go.mod has replace directives, which `go install pkg@version` refuses.
# A module of our own that requires it as a tool does.
#
# Source it; ETCD_VERSION=v3.7.0 overrides the pinned version.

ETCD_VERSION="${ETCD_VERSION:-v3.7.0}"

# etcd_stamp is what the stamp file of a current build says.
etcd_stamp() {
	echo "go.etcd.io/etcd/server/v3@${ETCD_VERSION} $(go env GOVERSION) $(go env GOOS)/$(go env GOARCH)"
}

# etcd_built OUTPUT_DIR: OUTPUT_DIR/etcd is the pinned version, built with
# this Go.
etcd_built() {
	[[ -x "$1/etcd" && -f "$1/.etcd.stamp" && "$(cat "$1/.etcd.stamp")" == "$(etcd_stamp)" ]]
}

# build_etcd OUTPUT_DIR builds OUTPUT_DIR/etcd unless etcd_built, and
# prints its path.
build_etcd() {
	local out stamp want tmp
	out="$(mkdir -p "$1" && cd "$1" && pwd)" || return
	stamp="${out}/.etcd.stamp"
	want="$(etcd_stamp)"
	if etcd_built "${out}"; then
		echo "${out}/etcd"
		return 0
	fi
	echo "building etcd ${ETCD_VERSION} into ${out} (one time, about 2 minutes on 2 cores)" >&2
	tmp="$(mktemp -d)" || return
	# The subshell's EXIT trap removes the throwaway module however it ends.
	# Each step checks the one before: callers run build_etcd in a command
	# substitution, where errexit is off.
	(
		trap 'rm -rf "${tmp}"' EXIT
		cd "${tmp}" &&
			go mod init drasched.local/build-etcd >/dev/null 2>&1 &&
			go get -tool "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" >&2 &&
			go build -trimpath -o "${out}/etcd.new" go.etcd.io/etcd/server/v3 >&2
	) || return
	mv "${out}/etcd.new" "${out}/etcd" || return
	echo "${want}" >"${stamp}" || return
	echo "${out}/etcd"
}

# etcd_on_path OUTPUT_DIR: builds etcd as build_etcd does and puts its
# folder first on PATH, where the integration test frameworks (upstream's
# test/integration/framework, scheduler_perf) look for it.
etcd_on_path() {
	local etcd
	etcd=$(build_etcd "$1")
	PATH="$(dirname "${etcd}"):${PATH}"
	export PATH
}
