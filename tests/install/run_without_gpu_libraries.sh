#!/usr/bin/env bash
# Run by install.consumer_without_gpu_libraries inside without-gpu-libraries.sh:
# configures the consumer project afresh against the installed Kiln (which
# must not need the hidden CUDA toolkit), then runs the consumer built by
# install.consumer_project with the expectations given.
# Usage: run_without_gpu_libraries.sh WORK_DIR CONSUMER_SOURCE CXX --cuda=... --nccl=... --mpi=...
set -euo pipefail
work="$1" source="$2" cxx="$3"
shift 3
rm -rf "$work/build-hidden"
cmake -S "$source" -B "$work/build-hidden" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DKILN_CONSUMER_CUDA=OFF > "$work/configure-hidden.log" 2>&1 ||
  { cat "$work/configure-hidden.log"; echo "the consumer project does not configure without the CUDA toolkit"; exit 1; }
echo "configured the consumer project without the CUDA toolkit"
"$work/build/consumer" "$@"
