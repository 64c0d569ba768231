#!/usr/bin/env bash
# LeNet-5 training and evaluation, Kiln (bench/lenet.cpp) against PyTorch
# (bench/lenet_torch.py) on the same workload in the same invocation: one
# epoch of training (SGD lr 0.01 momentum 0.9, batch 64) and one pass over
# the test set (batches of 1000, no grad), data already in memory as float32,
# no augmentation. Each side runs on 1 and 2 threads and keeps its best (the
# evaluation's figure for a thread count is the median of 5 passes); the
# lines are
#   lenet_train kiln_img_s=.. pytorch_img_s=.. ratio=..
#   lenet_eval kiln_img_s=.. pytorch_img_s=.. ratio=..
# with ratio = kiln_img_s / pytorch_img_s (above 1: Kiln is faster). The load
# average is printed first and last, since a busy machine lowers both sides.
#
# The data: CIFAR-10 (50,000 training and 10,000 test images) when
# scripts/get-cifar10.sh finds it ($KILN_DATA, then data/; never a download
# here), converted once into the binary format both sides read (a JPEG tree
# goes through kiln-image-folder-to-cifar); otherwise 10,000 synthetic images
# per pass. Extra arguments go to both programs (--train-images N,
# --eval-images M).
# PyTorch comes from /usr/bin/python3; without it only Kiln's figures print.
#
# --device cuda measures the GPU instead: one epoch of training with the
# images resident on the device, at batch 64 and 512, on both sides:
#   lenet_train_cuda batch=64 kiln_img_s=.. pytorch_img_s=.. ratio=..
#   lenet_train_cuda_graph batch=64 kiln_img_s=.. pytorch_img_s=.. ratio=..
# (the second with Kiln's step captured in a CUDA graph and replayed, against
# the same PyTorch eager figure)
# PyTorch then comes from the first of $KILN_TORCH_PYTHON, python3 and
# /usr/bin/python3 that has torch with CUDA.
# Usage: bash bench/lenet_vs_pytorch.sh [build-dir] [--device cuda] [--train-images N] [--eval-images M]
set -euo pipefail
build="${1:-build}"
shift || true
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ ! -x "$build/bench/lenet" ]]; then
  echo "lenet_vs_pytorch: $build/bench/lenet is missing; build with -DKILN_BUILD_BENCH=ON first" >&2
  exit 1
fi

# best PASS FIELD: the largest FIELD=value over the lines of PASS on stdin.
best() {
  awk -v pass="$1" -v field="$2" '$1 == pass {
      for (i = 2; i <= NF; ++i) { split($i, kv, "="); if (kv[1] == field && kv[2] + 0 > top) top = kv[2] + 0 }
    } END { print top + 0 }'
}

# CIFAR-10 in the binary format, in a temporary folder, when it can be found.
data_args=()
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=bench/cifar_binary.sh
source "$here/cifar_binary.sh"
if cifar_binary "$build" "$tmp"; then
  data_args=(--cifar "$tmp" --train-images 50000 --eval-images 10000)
else
  echo "data: synthetic (no CIFAR-10 found through KILN_DATA or data/)"
fi

device=cpu
args=()
for arg in "$@"; do
  if [[ "${prev:-}" == "--device" ]]; then device="$arg"; prev=""; continue; fi
  prev="$arg"
  [[ "$arg" == "--device" ]] || args+=("$arg")
done
set -- "${args[@]+"${args[@]}"}"

if [[ "$device" == "cuda" ]]; then
  python=""
  for candidate in ${KILN_TORCH_PYTHON:-} python3 /usr/bin/python3; do
    if "$candidate" -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
      python="$candidate"
      break
    fi
  done
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  # A failing program keeps what it printed, and the other still runs: on a
  # GPU either may fail for the first time here.
  kiln_out="$("$build/bench/lenet" --device cuda "${data_args[@]}" "$@")" ||
    echo "lenet_vs_pytorch: bench/lenet --device cuda exited with status $?" >&2
  echo "$kiln_out"
  torch_out=""
  if [[ -n "$python" ]]; then
    torch_out="$("$python" "$here/lenet_torch.py" --device cuda "${data_args[@]}" "$@")" ||
      echo "lenet_vs_pytorch: lenet_torch.py --device cuda exited with status $?" >&2
    echo "$torch_out"
  else
    echo "lenet_vs_pytorch: no python with torch and CUDA found; skipping the anchor" >&2
  fi
  # Kiln eager (lenet_train_cuda) and Kiln with the step in a CUDA graph
  # (lenet_train_cuda_graph), each against PyTorch's eager step.
  for kind in lenet_train_cuda lenet_train_cuda_graph; do
    for batch in $(awk -v k="$kind" '$1 == k { split($2, kv, "="); print kv[2] }' <<<"$kiln_out"); do
      kiln="$(awk -v k="$kind" -v b="batch=$batch" '$1 == k && $2 == b { split($3, kv, "="); print kv[2] }' <<<"$kiln_out")"
      if [[ -n "$torch_out" ]]; then
        torch="$(awk -v b="batch=$batch" '$1 == "lenet_train_cuda" && $2 == b { split($3, kv, "="); print kv[2] }' <<<"$torch_out")"
        awk -v k="$kind" -v b="$batch" -v kiln="$kiln" -v t="$torch" \
          'BEGIN { printf "%s batch=%s kiln_img_s=%.0f pytorch_img_s=%.0f ratio=%.2f\n", k, b, kiln, t, (t > 0 ? kiln / t : 0) }'
      else
        echo "$kind batch=$batch kiln_img_s=$kiln"
      fi
    done
  done
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  exit 0
fi

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
kiln_out="$("$build/bench/lenet" --threads 1 "${data_args[@]}" "$@"; "$build/bench/lenet" --threads 2 "${data_args[@]}" "$@")"
echo "$kiln_out"
torch_out=""
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  torch_out="$(/usr/bin/python3 "$here/lenet_torch.py" --threads 1 2 "${data_args[@]}" "$@")"
  echo "$torch_out"
else
  echo "lenet_vs_pytorch: PyTorch is not importable by /usr/bin/python3; skipping the anchor" >&2
fi

for pass in lenet_train lenet_eval; do
  kiln="$(best "$pass" kiln_img_s <<<"$kiln_out")"
  if [[ -n "$torch_out" ]]; then
    torch="$(best "$pass" pytorch_img_s <<<"$torch_out")"
    awk -v p="$pass" -v k="$kiln" -v t="$torch" 'BEGIN { printf "%s kiln_img_s=%.0f pytorch_img_s=%.0f ratio=%.2f\n", p, k, t, k / t }'
  else
    echo "$pass kiln_img_s=$kiln"
  fi
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
