#!/usr/bin/env bash
# The host's cost per op on tiny tensors, Kiln (bench/op_overhead.cpp)
# against PyTorch eager from Python (bench/op_overhead_torch.py), one after
# the other in the same invocation:
#   op_overhead workload=add kiln_us=.. pytorch_us=.. ratio=..
# with ratio = pytorch_us / kiln_us (above 1: Kiln spends less per op).
# PyTorch comes from /usr/bin/python3; without it only Kiln's figures print.
# --device cuda measures on the first GPU instead (each op then also
# launches a kernel); PyTorch then comes from the first of
# $KILN_TORCH_PYTHON, python3 and /usr/bin/python3 that has torch with CUDA.
# Usage: bash bench/op_overhead_vs_pytorch.sh [build-dir] [--device cuda]
set -euo pipefail
build="${1:-build}"
device="cpu"
[[ "${2:-}" == "--device" ]] && device="${3:-cpu}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ ! -x "$build/bench/op_overhead" ]]; then
  echo "op_overhead_vs_pytorch: $build/bench/op_overhead is missing; build with -DKILN_BUILD_BENCH=ON first" >&2
  exit 1
fi
python=""
for candidate in ${KILN_TORCH_PYTHON:-} /usr/bin/python3 python3; do
  if "$candidate" -c "import torch, sys; sys.exit('$device' == 'cuda' and not torch.cuda.is_available())" \
    2>/dev/null; then
    python="$candidate"
    break
  fi
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
# On a GPU fewer passes per timing: each op costs more, and the GPU's time is short.
calls=20000
[[ "$device" == cuda ]] && calls=4000
kiln_out="$(OMP_NUM_THREADS=1 "$build/bench/op_overhead" --device "$device" --calls "$calls")"
torch_out=""
if [[ -n "$python" ]]; then
  torch_out="$(OMP_NUM_THREADS=1 "$python" "$here/op_overhead_torch.py" --device "$device" --calls "$calls")"
fi
# One line per workload: Kiln's figure, PyTorch's and their ratio.
awk -v torch="$torch_out" '
  BEGIN {
    n = split(torch, lines, "\n")
    for (i = 1; i <= n; ++i) {
      split(lines[i], f, " "); split(f[2], w, "="); split(f[3], t, "=")
      if (w[2] != "") pytorch[w[2]] = t[2]
    }
  }
  {
    split($2, w, "="); split($3, k, "=")
    if (w[2] in pytorch) {
      printf "op_overhead workload=%s kiln_us=%s pytorch_us=%s ratio=%.2f\n", w[2], k[2], pytorch[w[2]], pytorch[w[2]] / k[2]
    } else {
      print
    }
  }' <<<"$kiln_out"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
