#!/usr/bin/env bash
# Builds the pinned etcd (hack/lib/etcd.sh: which version, and how) into
# OUTPUT_DIR, unless it is there already, and prints the binary's path.
#
# Usage: hack/build-etcd.sh [OUTPUT_DIR]      (default: _output/bin)
#   ETCD_VERSION=v3.7.0 overrides the pinned version.
#
# Scripts source hack/lib/etcd.sh instead; sourcing this file does the same.
set -euo pipefail

# shellcheck source=hack/lib/etcd.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/etcd.sh"

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
	# shellcheck source=hack/lib/init.sh
	source "$(dirname "${BASH_SOURCE[0]}")/lib/init.sh"
	build_etcd "${1:-_output/bin}"
fi
