#!/usr/bin/env bash
# Builds, on a machine without a GPU, what a session with a lent GPU needs to
# run Kiln's GPU checks, and packs it into .gpu-kit/ (git-ignored) for the
# device tool's `carry`. scripts/gpu-run.sh is the other half, run there.
#
# Why a kit: the GPU machine (/work/.library/device/KINDS.md) has nvcc, CMake
# and PyTorch but no GoogleTest, Gloo or OpenMPI, so the test suites cannot be
# built there, and device time is short. So the suites, the CUDA benchmarks and
# libkiln are built here for the H100 only (sm_90), without the Gloo and MPI
# backends (their libraries are not there; their tests run in CI here), then
# stripped: the kit must stay under the 64 MiB a call may carry. GoogleTest is
# linked statically; at run time libkiln needs the CUDA runtime and cuBLAS of
# the toolkit there and the cuDNN and NCCL of its Python's nvidia packages,
# which gpu-run.sh finds.
#
# Usage (here):  bash scripts/gpu-kit.sh           # about 10 minutes on 2 cores
# Then (device): run(command="bash scripts/gpu-run.sh", carry=[".gpu-kit"])
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KILN_GPU_KIT_BUILD:-$root/build-gpu-kit}"
kit="$root/.gpu-kit"

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=ON -DKILN_GLOO=OFF -DKILN_MPI=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DKILN_BUILD_TESTS=ON -DKILN_BUILD_BENCH=ON
cmake --build "$build" -j"$(nproc)"

rm -rf "$kit"
mkdir -p "$kit/lib" "$kit/tests" "$kit/bench"
# The name the programs ask for (libkiln's SONAME), as a file: the device
# tool carries links as links.
cp -L "$build/libkiln.so.0" "$kit/lib/libkiln.so.0"
cp "$build"/tests/kiln_*_tests "$kit/tests/"
for program in lenet cuda_ops conv gemm; do
  if [[ -x "$build/bench/$program" ]]; then cp "$build/bench/$program" "$kit/bench/"; fi
done
strip --strip-unneeded "$kit"/lib/libkiln.so.0 "$kit"/tests/* "$kit"/bench/*
git -C "$root" describe --always --dirty >"$kit/COMMIT"
du -sh "$kit"
echo "gpu-kit: $kit holds the build of $(cat "$kit/COMMIT"); carry it with scripts/gpu-run.sh"
