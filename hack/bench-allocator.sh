#!/usr/bin/env bash
# Benchmarks pkg/allocator against upstream's structured allocator on the
# same inputs in the same run, and kubectl drasched top and fit
# (pkg/capacity: BenchmarkTop, BenchmarkFit, 5,000 nodes of 8 GPUs from a
# fake clientset, against their time targets), and prints a Markdown table
# of medians and ratios (bench/cmd/report, the formatter of `make bench`).
#
# Usage: hack/bench-allocator.sh [go test flags]   e.g. -count 5 -benchtime 2s
#   The raw `go test -bench` output is kept in _output/bench-allocator.txt,
#   the suite file (bench/internal/results format) in
#   _output/bench/allocator.json, which `make bench` merges.
#   BENCH_COMMAND is the command recorded as how to reproduce the figures.
set -euo pipefail
# shellcheck source=hack/lib/init.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/init.sh"

raw=_output/bench-allocator.txt
out=_output/bench/allocator.json
mkdir -p _output/bench
start=$(date +%s)
echo "bench-allocator: $(nproc) cores, $(go version | cut -d' ' -f3), $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
go test ./pkg/allocator -run '^$' -bench '^BenchmarkAllocate$' -benchmem "$@" | tee "${raw}" >&2
go test ./pkg/capacity/... -run '^$' -bench '^Benchmark(Top|Fit)$' -benchmem "$@" | tee -a "${raw}" >&2
(cd bench/cmd/report && go run . allocator -print \
	-command "${BENCH_COMMAND:-hack/bench-allocator.sh $*}" -seconds "$(($(date +%s) - start))" \
	"${root}/${raw}" "${root}/${out}")
