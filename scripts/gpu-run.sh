#!/usr/bin/env bash
# Runs Kiln's GPU checks on the lent GPU machine from the kit that
# scripts/gpu-kit.sh built (see there for why a kit), in one device call:
#   run(command="bash scripts/gpu-run.sh", carry=[".gpu-kit"], timeout_s=600)
# 1. finds the CUDA libraries libkiln needs (the toolkit's runtime and cuBLAS,
#    cuDNN and NCCL from the Python nvidia packages) and stops at once,
#    naming them, if one is missing;
# 2. runs every test suite of the kit (kiln_apps_tests only for its CUDA
#    tests: its other tests start programs at paths of the machine that built
#    the kit); on a machine with a GPU the Cuda*, CudaGraph*, Nccl* ... tests
#    run instead of skipping;
# 3. runs the CUDA benchmarks: bench/lenet_vs_pytorch.sh --device cuda (Kiln
#    eager and with a CUDA graph against PyTorch eager), the same with
#    KILN_CUDA_CONV=kiln (Kiln's direct convolution kernels), and cuda_ops.
# Everything goes to $OUT/gpu-run.log (what the device tool brings back);
# the summary is printed last. KILN_GPU_FILTER narrows the tests
# (a --gtest_filter pattern); KILN_GPU_SKIP_BENCH=1 skips step 3.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kit="$root/.gpu-kit"
out="${OUT:-/tmp/kiln-gpu-run}"
mkdir -p "$out"
log="$out/gpu-run.log"
summary="$out/summary.txt"
: >"$log"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }

if [[ ! -d "$kit/lib" ]]; then
  echo "gpu-run: no kit at $kit; build it with scripts/gpu-kit.sh on the machine without a GPU and carry .gpu-kit" >&2
  exit 2
fi
say "kit built from $(cat "$kit/COMMIT" 2>/dev/null || echo '?'); tree at $(git -C "$root" rev-parse HEAD 2>/dev/null || echo '?')"
nvidia-smi -L 2>&1 | tee -a "$summary" || say "gpu-run: nvidia-smi did not answer"

# 1. Libraries: every directory under the Python nvidia packages that holds
# one of the libraries libkiln links, then the toolkit's.
libdirs="$(python3 - <<'EOF'
import os
try:
    import nvidia
    roots = list(nvidia.__path__)
except Exception:
    roots = []
wanted = ("libcudnn.so.9", "libnccl.so.2", "libcublas.so.13", "libcublasLt.so.13", "libcudart.so.13")
found = []
for root in roots:
    for dirpath, _, files in os.walk(root):
        if any(name in files for name in wanted) and dirpath not in found:
            found.append(dirpath)
print(":".join(found))
EOF
)"
export LD_LIBRARY_PATH="$kit/lib${libdirs:+:$libdirs}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
say "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
missing="$(ldd "$kit"/lib/libkiln.so.* | grep 'not found' | sort -u)"
if [[ -n "$missing" ]]; then
  say "gpu-run: libkiln cannot load; missing: $missing"
  exit 1
fi

# 2. The test suites.
filter="${KILN_GPU_FILTER:-*}"
status=0
for suite in "$kit"/tests/kiln_*_tests; do
  name="$(basename "$suite")"
  suite_filter="$filter"
  [[ "$name" == kiln_apps_tests ]] && suite_filter="*Cuda*"
  echo "==== $name --gtest_filter=$suite_filter" >>"$log"
  "$suite" --gtest_filter="$suite_filter" >>"$log" 2>&1
  code=$?
  [[ $code -ne 0 ]] && status=1
  passed="$(grep -c '^\[       OK \]' <(sed -n "/^==== $name /,/^==== /p" "$log"))"
  failed="$(sed -n "/^==== $name /,/^==== /p" "$log" | grep '^\[  FAILED  \]' | grep -v 'listed below' | sort -u)"
  skipped="$(sed -n "/^==== $name /,/^==== /p" "$log" | grep -c '^\[  SKIPPED \] .* ([0-9]* ms)$')"
  say "$name: exit $code, $passed passed, $skipped skipped"
  [[ -n "$failed" ]] && say "$failed"
done

# 3. The benchmarks.
if [[ "${KILN_GPU_SKIP_BENCH:-0}" != 1 ]]; then
  {
    echo "==== bench/lenet_vs_pytorch.sh --device cuda"
    bash "$root/bench/lenet_vs_pytorch.sh" "$kit" --device cuda
    echo "==== the same with KILN_CUDA_CONV=kiln"
    KILN_CUDA_CONV=kiln bash "$root/bench/lenet_vs_pytorch.sh" "$kit" --device cuda
    echo "==== cuda_ops"
    "$kit/bench/cuda_ops"
  } >>"$log" 2>&1
  grep -E '^(lenet_train_cuda|cuda_ops|gemm|elementwise)|ratio=' "$log" | tee -a "$summary"
fi
echo "---- summary ($summary; full log $log)"
cat "$summary"
exit $status
