#!/usr/bin/env bash
# LeNet-5 training and evaluation, Kiln (bench/lenet.cpp) against PyTorch
# (bench/lenet_torch.py) on the same workload in the same invocation. Each
# side runs on 1 and 2 threads and keeps its best; the lines are
#   lenet_train kiln_img_s=.. pytorch_img_s=.. ratio=..
#   lenet_eval kiln_img_s=.. pytorch_img_s=.. ratio=..
# with ratio = kiln_img_s / pytorch_img_s (above 1: Kiln is faster). The load
# average is printed first, since a busy machine lowers both sides.
# PyTorch comes from /usr/bin/python3; without it only Kiln's figures print.
# Usage: bash bench/lenet_vs_pytorch.sh [build-dir] [--train-images N] [--eval-images M]
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

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
kiln_out="$("$build/bench/lenet" --threads 1 "$@"; "$build/bench/lenet" --threads 2 "$@")"
echo "$kiln_out"
torch_out=""
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  torch_out="$(/usr/bin/python3 "$here/lenet_torch.py" --threads 1 2 "$@")"
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
