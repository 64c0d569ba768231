#!/usr/bin/env bash
# Runs Kiln's GPU checks on the lent GPU machine from the kit that
# scripts/gpu-kit.sh built (see there for why a kit), in one device call:
#   run(command="bash scripts/gpu-run.sh", carry=[".gpu-kit"], timeout_s=600)
# A session has about 15 minutes of device time, machine start included, so
# the run is planned to end in about 5 minutes, leaving room to fix what it
# finds and run again; each step has its own time limit, and what a step
# printed before its limit stays in the log.
# 1. finds the CUDA libraries libkiln needs (the toolkit's runtime and cuBLAS,
#    cuDNN and NCCL from the Python nvidia packages) and stops at once,
#    naming them, if one is missing, or if the runtime sees no GPU;
# 2. starts the LeNet trainer in the background on the GPU, the default
#    recipe (30 epochs) in float32 and with --amp (float16 autocast and
#    GradScaler), when the kit holds CIFAR-10 (KILN_GPU_SKIP_TRAIN=1: not);
# 3. meanwhile runs every test suite of the kit, side by side (kiln_apps_tests
#    only for its CUDA tests: the others run in CI, and several need Gloo,
#    which the kit is built without); on a machine with a GPU the Cuda*, CudaGraph*,
#    Nccl* ... tests run instead of skipping;
# 4. waits for the trainer and prints each run's final test accuracy, then
#    trains kiln-gpt under FSDP over NCCL with CPU offload (issue 22);
# 5. then, with the GPU to themselves, the CUDA benchmarks:
#    bench/lenet_vs_pytorch.sh --device cuda (Kiln eager and with a CUDA
#    graph against PyTorch eager: with the defaults, Kiln's direct
#    convolution kernels; again with KILN_CUDA_CONV=cudnn, cuDNN through its
#    graph API; and, unless KILN_GPU_SKIP_LEGACY=1, through its legacy calls),
#    cuda_ops, cuda_conv_host, bench/op_overhead_vs_pytorch.sh --device cuda,
#    and a kernel trace (bench/cuda_kernel_trace.cpp) of a LeNet epoch at
#    batch 64 and 512, Kiln's (direct kernels and cuDNN) and PyTorch's, at
#    batch 64 with the host's time between launches too.
#    Then the GPT (issue 21): bench/gpt_vs_pytorch.sh --device cuda (the
#    baby-GPT config, Kiln against PyTorch eager and torch.compile, and
#    KV-cache generation) and bench/attention --device cuda (the fused
#    attention kernels against the reference).
# Everything goes to $OUT/gpu-run.log (what the device tool brings back), the
# trainer's logs to $OUT/lenet_fp32.jsonl and $OUT/lenet_amp.jsonl; the summary
# is printed last. KILN_GPU_FILTER narrows the tests (a --gtest_filter
# pattern); KILN_GPU_SKIP_BENCH=1 skips step 5, KILN_GPU_SKIP_TRACE=1 its
# kernel traces; KILN_GPU_SANITIZE=1 also runs
# the tensor suite's CUDA tests under compute-sanitizer (memcheck, then
# racecheck; slow, up to 4 minutes each) after step 3.
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
# The anchor's versions, for docs/BENCHMARKS.md (Kiln loads the same cuDNN
# and NCCL, from PyTorch's wheels: step 1).
python3 - <<'EOF' 2>&1 | tee -a "$summary"
try:
    import torch
    parts = [f"pytorch {torch.__version__}", f"cuda {torch.version.cuda}", f"cudnn {torch.backends.cudnn.version()}"]
    try:
        parts.append("nccl " + ".".join(map(str, torch.cuda.nccl.version())))
    except Exception:
        parts.append("nccl unknown")
    print(", ".join(parts))
except Exception as error:
    print(f"pytorch: not importable ({error})")
EOF

# 1. Libraries: every directory under the Python nvidia packages that holds
# one of the libraries libkiln_cuda and libkiln_nccl link, then the toolkit's.
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
missing="$(ldd "$kit"/lib/libkiln*.so.* | grep 'not found' | sort -u)"
if [[ -n "$missing" ]]; then
  # The system libraries the kit brought (OpenMP's runtime, zlib), as a last resort.
  say "gpu-run: missing here: $missing; adding the kit's fallback libraries"
  export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$kit/fallback"
  missing="$(ldd "$kit"/lib/libkiln*.so.* | grep 'not found' | sort -u)"
fi
if [[ -n "$missing" ]]; then
  say "gpu-run: libkiln cannot load; missing: $missing"
  exit 1
fi
# The runtime libkiln loads must see the GPU: with a driver older than the
# runtime (CUDA 13 needs r580 or later) it sees none, every GPU test would
# skip, and the run would look green with nothing checked.
if ! python3 - <<'EOF' 2>&1 | tee -a "$summary"; then
import ctypes, sys
runtime = ctypes.CDLL("libcudart.so.13")
count, driver, version = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
status = runtime.cudaGetDeviceCount(ctypes.byref(count))
runtime.cudaDriverGetVersion(ctypes.byref(driver))
runtime.cudaRuntimeGetVersion(ctypes.byref(version))
print(f"cuda runtime {version.value}, driver API {driver.value}, {count.value} device(s), cudaGetDeviceCount status {status}")
sys.exit(0 if status == 0 and count.value > 0 else 1)
EOF
  say "gpu-run: the CUDA runtime sees no device; stopping (every GPU test would only skip)"
  exit 1
fi

# The paths the test programs were built with (gpu-kit.sh), made to resolve
# here: the sources, and kiln-lenet in the kit's build tree.
source_dir="$(cat "$kit/SOURCE_DIR" 2>/dev/null)"
if [[ -n "$source_dir" && ! -e "$source_dir" ]]; then
  mkdir -p "$(dirname "$source_dir")" && ln -s "$root" "$source_dir"
fi
build_dir="$(cat "$kit/BUILD_DIR" 2>/dev/null)"
if [[ -n "$build_dir" && ! -e "$build_dir/apps/lenet/kiln-lenet" ]]; then
  mkdir -p "$build_dir/apps/lenet" && ln -s "$kit/apps/lenet/kiln-lenet" "$build_dir/apps/lenet/kiln-lenet"
fi

# 2. The trainer, in the background (step 4 waits for it).
lenet="$kit/apps/lenet/kiln-lenet"
archive="$kit/data/cifar10-jpeg.tar.gz"
# The suites' CIFAR-10 tests find the archive through KILN_DATA too.
[[ -f "$archive" ]] && export KILN_DATA="$kit/data"
trainer_pids=()
if [[ "${KILN_GPU_SKIP_TRAIN:-0}" != 1 && -x "$lenet" && -f "$archive" ]]; then
  for run in fp32 amp; do
    flags=(--device cuda --workers 4 --data "$archive" --log "$out/lenet_$run.jsonl")
    [[ "$run" == amp ]] && flags+=(--amp)
    OMP_NUM_THREADS=2 timeout "${KILN_GPU_TRAIN_TIMEOUT:-240}" "$lenet" "${flags[@]}" >"$out/lenet_$run.out" 2>&1 &
    trainer_pids+=($!)
  done
  say "trainer: kiln-lenet --device cuda, default recipe, float32 and --amp, started"
else
  say "trainer: not run (KILN_GPU_SKIP_TRAIN=1, or the kit holds no kiln-lenet or no CIFAR-10 archive)"
fi

# 3. The test suites, side by side: each its own log, two CPU threads each
# (16 cores), a time limit each.
filter="${KILN_GPU_FILTER:-*}"
status=0
suite_pids=()
for suite in "$kit"/tests/kiln_*_tests; do
  name="$(basename "$suite")"
  suite_filter="$filter"
  [[ "$name" == kiln_apps_tests ]] && suite_filter="*Cuda*"
  echo "==== $name --gtest_filter=$suite_filter" >"$out/$name.part"
  (
    KILN_CUDNN_GRAPH_DEBUG=1 OMP_NUM_THREADS=2 timeout "${KILN_GPU_SUITE_TIMEOUT:-240}" "$suite" \
      --gtest_filter="$suite_filter" \
      >>"$out/$name.part" 2>&1
    echo "==== exit $?" >>"$out/$name.part"
  ) &
  suite_pids+=($!)
done
wait "${suite_pids[@]}"
for part in "$out"/kiln_*_tests.part; do
  name="$(basename "$part" .part)"
  cat "$part" >>"$log"
  code="$(sed -n 's/^==== exit //p' "$part")"
  [[ "$code" != 0 ]] && status=1
  passed="$(grep -c '^\[       OK \]' "$part")"
  failed="$(grep '^\[  FAILED  \]' "$part" | grep -v 'listed below' | sort -u)"
  skipped="$(grep -c '^\[  SKIPPED \] .* ([0-9]* ms)$' "$part")"
  [[ "$code" == 124 ]] && code="124 (timed out)"
  say "$name: exit $code, $passed passed, $skipped skipped"
  [[ -n "$failed" ]] && say "$failed"
  rm -f "$part"
done

# 3b. Optional: the CUDA kernels under compute-sanitizer.
if [[ "${KILN_GPU_SANITIZE:-0}" == 1 ]]; then
  sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  for tool in memcheck racecheck; do
    echo "==== compute-sanitizer --tool $tool kiln_tensor_tests --gtest_filter=Cuda*" >>"$log"
    timeout 240 "$sanitizer" --tool "$tool" --error-exitcode 3 "$kit/tests/kiln_tensor_tests" \
      --gtest_filter='Cuda*' >>"$log" 2>&1
    say "compute-sanitizer $tool: exit $? (0 clean, 3 errors found, 124 timed out)"
  done
fi

# 4. The trainer's outcome: the last epoch of each log.
if ((${#trainer_pids[@]} > 0)); then
  wait "${trainer_pids[@]}"
  for run in fp32 amp; do
    cat "$out/lenet_$run.out" >>"$log"
    last="$(tail -n 1 "$out/lenet_$run.jsonl" 2>/dev/null)"
    say "trainer $run: ${last:-no epoch finished; its last line: $(tail -n 1 "$out/lenet_$run.out")}"
    rm -f "$out/lenet_$run.out"
  done
fi

# 4b. FSDP on the GPU (issue 22): kiln-gpt under kiln-run, one rank over
# NCCL, with the shards, gradients and AdamW state in host memory
# (--fsdp-cpu-offload), 200 steps on the repository's docs as text.
if [[ -x "$kit/apps/kiln-run/kiln-run" && -x "$kit/apps/gpt/kiln-gpt" ]]; then
  cat "$root"/docs/*.md >"$out/docs.txt"
  {
    echo "==== kiln-run --nproc-per-node 1 kiln-gpt train --fsdp --fsdp-cpu-offload --backend nccl --device cuda"
    timeout 180 "$kit/apps/kiln-run/kiln-run" --nproc-per-node 1 "$kit/apps/gpt/kiln-gpt" train --data "$out/docs.txt" \
      --fsdp --fsdp-cpu-offload --backend nccl --device cuda --steps 200 --eval-interval 100 --warmup-steps 20
    echo "==== exit $?"
  } >"$out/fsdp_gpt.out" 2>&1
  cat "$out/fsdp_gpt.out" >>"$log"
  say "fsdp gpt (nccl, cpu offload): $(grep -E 'val|exit' "$out/fsdp_gpt.out" | tail -n 2 | tr '\n' ' ')"
  rm -f "$out/docs.txt"
else
  say "fsdp gpt: not run (the kit has no kiln-run or kiln-gpt)"
fi

# 5. The benchmarks, alone on the GPU.
if [[ "${KILN_GPU_SKIP_BENCH:-0}" != 1 ]]; then
  {
    echo "==== bench/lenet_vs_pytorch.sh --device cuda"
    KILN_DATA="$kit/data" timeout 150 bash "$root/bench/lenet_vs_pytorch.sh" "$kit" --device cuda
    echo "==== the same with KILN_CUDA_CONV=cudnn"
    KILN_DATA="$kit/data" KILN_CUDA_CONV=cudnn KILN_CUDNN_GRAPH_DEBUG=1 timeout 120 \
      bash "$root/bench/lenet_vs_pytorch.sh" "$kit" --device cuda
    if [[ "${KILN_GPU_SKIP_LEGACY:-0}" != 1 ]]; then
      echo "==== the same with KILN_CUDA_CONV=cudnn KILN_CUDNN_API=legacy"
      KILN_DATA="$kit/data" KILN_CUDA_CONV=cudnn KILN_CUDNN_API=legacy timeout 120 \
        bash "$root/bench/lenet_vs_pytorch.sh" "$kit" --device cuda
    fi
    echo "==== cuda_ops"
    timeout 60 "$kit/bench/cuda_ops"
    echo "==== cuda_conv_host"
    timeout 120 "$kit/bench/cuda_conv_host"
    echo "==== bench/op_overhead_vs_pytorch.sh --device cuda"
    timeout 90 bash "$root/bench/op_overhead_vs_pytorch.sh" "$kit" --device cuda
    echo "==== bench/gpt_vs_pytorch.sh --device cuda"
    KILN_TORCH_PYTHON="$(command -v python3)" timeout 240 bash "$root/bench/gpt_vs_pytorch.sh" "$kit" --device cuda
    echo "==== bench/attention --device cuda"
    timeout 60 "$kit/bench/attention" --device cuda
    # Where the GPU time of a LeNet step goes, Kiln's kernels and PyTorch's.
    trace="$kit/bench/libcuda_kernel_trace.so"
    if [[ -f "$trace" && "${KILN_GPU_SKIP_TRACE:-0}" != 1 ]]; then
      # At batch 64 also the host's time between launches (KILN_TRACE_HOST).
      for batch in 64 512; do
        host=$([[ $batch == 64 ]] && echo 1 || echo 0)
        echo "==== kernel trace: bench/lenet --device cuda --batch $batch (eager and graph passes)"
        KILN_TRACE_HOST=$host LD_PRELOAD="$trace" timeout 60 "$kit/bench/lenet" --device cuda --batch "$batch" \
          --train-images 25600
        echo "==== kernel trace: bench/lenet_torch.py --device cuda --batch $batch"
        KILN_TRACE_HOST=$host LD_PRELOAD="$trace" timeout 60 python3 "$root/bench/lenet_torch.py" --device cuda \
          --batch "$batch" --train-images 25600
        echo "==== kernel trace: KILN_CUDA_CONV=cudnn bench/lenet --device cuda --batch $batch"
        KILN_CUDA_CONV=cudnn KILN_TRACE_HOST=$host LD_PRELOAD="$trace" timeout 60 "$kit/bench/lenet" --device cuda \
          --batch "$batch" --train-images 12800
      done
    fi
  } >>"$log" 2>&1
  results="$(sed -n '/^==== bench\/lenet_vs_pytorch.sh/,$p' "$log" | grep -E '^(====|lenet_train_cuda|cuda_ops|cuda_conv_host|op_overhead|gemm|elementwise|gpt_|attention_)|ratio=')"
  say "${results:-benchmarks: no result lines; see the end of gpu-run.log}"
fi
echo "---- summary ($summary; full log $log)"
cat "$summary"
exit $status
