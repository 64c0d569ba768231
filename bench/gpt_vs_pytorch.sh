#!/usr/bin/env bash
# GPT training and generation, Kiln (bench/gpt.cpp) against current PyTorch
# (bench/gpt_torch.py: eager and torch.compile) on the same workload in the
# same invocation: the model, data and optimizer are described in those two
# files. Each side runs on 1 and 2 threads (on the CPU) and keeps its best;
# torch.compile's compilation is timed apart (the warm-up steps) and the
# steady state compared. One line per config:
#   gpt_train device=cpu config=small kiln_tok_s=.. eager_tok_s=.. compile_tok_s=.. ratio_eager=.. ratio_compile=.. compile_s=..
#   gpt_generate device=cpu config=small kiln_tok_s=.. eager_tok_s=.. ratio_eager=..
# with ratio = kiln_tok_s / anchor_tok_s (above 1: Kiln is faster). The load
# average is printed first and last, since a busy machine lowers both sides.
#
# PyTorch comes from $KILN_TORCH_PYTHON, else the anchors' environment
# (`bash ../shared/anchors/setup-torch2.sh` prints its interpreter).
# Usage: bash bench/gpt_vs_pytorch.sh [build-dir] [--device cuda] [--config small|baby] [--steps N]
set -euo pipefail
build="${1:-build}"
shift || true
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ ! -x "$build/bench/gpt" ]]; then
  echo "gpt_vs_pytorch: $build/bench/gpt is missing; build with -DKILN_BUILD_BENCH=ON first" >&2
  exit 1
fi
device=cpu
config=""
steps=20
while (($#)); do
  case "$1" in
    --device) device="$2"; shift 2 ;;
    --config) config="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    *) echo "gpt_vs_pytorch: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [[ -z "$config" ]]; then
  if [[ "$device" == cuda ]]; then config=baby; else config=small; fi
fi
py="${KILN_TORCH_PYTHON:-}"
if [[ -z "$py" ]]; then
  py="$(bash "$here/../../shared/anchors/setup-torch2.sh" 2>/dev/null | tail -n 1 || true)"
fi
if [[ -z "$py" || ! -x "$py" ]]; then
  echo "gpt_vs_pytorch: no PyTorch 2.x interpreter (set KILN_TORCH_PYTHON or run ../shared/anchors/setup-torch2.sh)" >&2
  exit 1
fi
threads=(1 2)
if [[ "$device" == cuda ]]; then threads=(0); fi

# best FIELD: the largest FIELD=value over the lines on stdin.
best() {
  awk -v field="$1" '{ for (i = 1; i <= NF; ++i) { split($i, kv, "="); if (kv[1] == field && kv[2] + 0 > top) top = kv[2] + 0 } }
    END { print top + 0 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

echo "load_average_before $(cut -d' ' -f1-3 /proc/loadavg)"
common=(--config "$config" --device "$device")
kiln_train="" eager_train="" compile_train="" kiln_gen="" eager_gen=""
for t in "${threads[@]}"; do
  targs=()
  if ((t > 0)); then targs=(--threads "$t"); fi
  kiln_train+="$("$build/bench/gpt" "${common[@]}" "${targs[@]}" --steps "$steps")"$'\n'
  eager_train+="$("$py" "$here/gpt_torch.py" "${common[@]}" "${targs[@]}" --steps "$steps" --mode eager)"$'\n'
  compile_train+="$("$py" "$here/gpt_torch.py" "${common[@]}" "${targs[@]}" --steps "$steps" --mode compile)"$'\n'
  kiln_gen+="$("$build/bench/gpt" "${common[@]}" "${targs[@]}" --generate)"$'\n'
  eager_gen+="$("$py" "$here/gpt_torch.py" "${common[@]}" "${targs[@]}" --generate)"$'\n'
done
printf '%s' "$kiln_train$eager_train$compile_train$kiln_gen$eager_gen" | sed 's/^/  /'

k=$(best tok_s <<<"$kiln_train") e=$(best tok_s <<<"$eager_train") c=$(best tok_s <<<"$compile_train")
compile_s=$(awk '{ for (i = 1; i <= NF; ++i) if ($i ~ /^compile_s=/) { split($i, kv, "="); print kv[2]; exit } }' <<<"$compile_train")
echo "gpt_train device=$device config=$config kiln_tok_s=$k eager_tok_s=$e compile_tok_s=$c" \
  "ratio_eager=$(ratio "$k" "$e") ratio_compile=$(ratio "$k" "$c") compile_s=$compile_s"
k=$(best tok_s <<<"$kiln_gen") e=$(best tok_s <<<"$eager_gen")
echo "gpt_generate device=$device config=$config kiln_tok_s=$k eager_tok_s=$e ratio_eager=$(ratio "$k" "$e")"
echo "load_average_after $(cut -d' ' -f1-3 /proc/loadavg)"
