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
# The kit also holds the LeNet trainer, the JPEG-to-binary converter the
# benchmarks use, and CIFAR-10 (the JPEG archive from $KILN_DATA or
# ../shared/data, 19 MB) when it is found, so that the GPU run trains on the
# real data: nothing outside the working tree reaches the GPU machine.
#
# Usage (here):  bash scripts/gpu-kit.sh           # about 10 minutes on 2 cores
# Then (device): run(command="bash scripts/gpu-run.sh", carry=[".gpu-kit"], timeout_s=600)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KILN_GPU_KIT_BUILD:-$root/build-gpu-kit}"
kit="$root/.gpu-kit"

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=ON -DKILN_GLOO=OFF -DKILN_MPI=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DKILN_BUILD_TESTS=ON -DKILN_BUILD_BENCH=ON
cmake --build "$build" -j"$(nproc)"

rm -rf "$kit"
mkdir -p "$kit/lib" "$kit/tests" "$kit/bench" "$kit/apps/lenet" "$kit/apps/gpt" "$kit/apps/tools"
# The names the programs ask for (the SONAMEs), as files: the device tool
# carries links as links. libkiln loads the CUDA and NCCL libraries from its
# own folder (Note [Backends as plugins] in tensor/plugin.h).
for library in libkiln libkiln_cuda libkiln_nccl; do
  cp -L "$build/$library.so.0" "$kit/lib/$library.so.0"
done
cp "$build"/tests/kiln_*_tests "$kit/tests/"
for program in lenet op_overhead cuda_ops cuda_conv_host conv gemm gpt attention; do
  if [[ -x "$build/bench/$program" ]]; then cp "$build/bench/$program" "$kit/bench/"; fi
done
# The kernel tracer and the CUPTI it loads (the GPU machine may lack it).
if [[ -f "$build/bench/libcuda_kernel_trace.so" ]]; then
  cp "$build/bench/libcuda_kernel_trace.so" "$kit/bench/"
  cp -L "$(ldd "$build/bench/libcuda_kernel_trace.so" | awk '/libcupti/ { print $3 }')" "$kit/lib/"
fi
# At the paths bench/cifar_binary.sh and gpu-run.sh look for them under a build.
cp "$build/apps/lenet/kiln-lenet" "$kit/apps/lenet/"
cp "$build/apps/gpt/kiln-gpt" "$kit/apps/gpt/"
mkdir -p "$kit/apps/kiln-run"
cp "$build/apps/kiln-run/kiln-run" "$kit/apps/kiln-run/"
cp "$build/apps/tools/kiln-image-folder-to-cifar" "$kit/apps/tools/"
strip --strip-unneeded "$kit"/lib/libkiln*.so.0 "$kit"/tests/* "$kit"/bench/* "$kit"/apps/*/*
# libkiln's system libraries, for a GPU machine whose image lacks them
# (gpu-run.sh adds them only then; they are small).
mkdir -p "$kit/fallback"
for library in libgomp.so.1 libz.so.1; do
  cp -L "$(ldconfig -p | awk -v name="$library" '$1 == name { print $NF; exit }')" "$kit/fallback/"
done
archive="${KILN_DATA:-$root/../shared/data}/cifar10-jpeg.tar.gz"
if [[ -f "$archive" ]]; then
  mkdir -p "$kit/data"
  cp "$archive" "$kit/data/"
else
  echo "gpu-kit: no CIFAR-10 archive at $archive: the GPU run will train and benchmark on synthetic data" >&2
fi
git -C "$root" describe --always --dirty >"$kit/COMMIT"
# The tests name paths of this machine (the sources, for scripts they run;
# kiln-lenet in the build tree, which they start); gpu-run.sh makes them
# resolve there.
echo "$root" >"$kit/SOURCE_DIR"
echo "$build" >"$kit/BUILD_DIR"
# The device tool carries at most 64 MiB with the working tree.
kib="$(du -sk "$kit" | cut -f1)"
echo "gpu-kit: $((kib / 1024)) MiB"
if ((kib > 60 * 1024)); then
  echo "gpu-kit: the kit is over 60 MiB; with the working tree it may not fit the 64 MiB a device call carries" >&2
fi
echo "gpu-kit: $kit holds the build of $(cat "$kit/COMMIT"); carry it with scripts/gpu-run.sh"
