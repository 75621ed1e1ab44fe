#!/usr/bin/env bash
# Benchmarks pkg/allocator against upstream's structured allocator on the
# same inputs in the same run, and prints a Markdown table of medians and
# ratios (upstream / drasched).
#
# Usage: hack/bench-allocator.sh [go test flags]   e.g. -count 5 -benchtime 2s
#   The raw `go test -bench` output is kept in _output/bench-allocator.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

raw=_output/bench-allocator.txt
mkdir -p _output
echo "bench-allocator: $(nproc) cores, $(go version | cut -d' ' -f3), $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
go test ./pkg/allocator -run '^$' -bench '^BenchmarkAllocate$' -benchmem "$@" | tee "${raw}" >&2
(cd hack/tools && go run ./benchtable) < "${raw}"
