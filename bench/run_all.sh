#!/usr/bin/env bash
# Runs every benchmark program; each prints one line per case with Kiln's
# figure, the anchor's figure measured in the same run, and their ratio.
# Usage: bash bench/run_all.sh [build-dir]
set -euo pipefail
build="${1:-build}"
for program in gemm bandwidth conv; do
  if [[ ! -x "$build/bench/$program" ]]; then
    echo "run_all: $build/bench/$program is missing; build with 'make build' first" >&2
    exit 1
  fi
  echo "== $program"
  "$build/bench/$program"
done
echo "== op_overhead"
bash "$(dirname "${BASH_SOURCE[0]}")/op_overhead_vs_pytorch.sh" "$build"
