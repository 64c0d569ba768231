#!/usr/bin/env bash
# GPT training on 2 ranks, Kiln's FullyShardedDataParallel against Kiln's
# DistributedDataParallel and PyTorch 2.x's FSDP (fully_shard), on the same
# workload in the same invocation: bench/fsdp.cpp (Kiln, --mode fsdp: FULL_SHARD,
# every block a unit, forward and backward prefetch on; --mode ddp) and
# bench/fsdp_torch.py (PyTorch FSDP2), both described at their tops: the GPT of
# bench/gpt.cpp's small config by default (4 layers, 4 heads, width 128, block
# 128, global batch 32, vocabulary 65, bias off), AdamW, float32, gloo, one
# thread per rank, each program starting its own 2 rank processes. Each
# program runs --warmup steps, then --steps timed steps, and reports the
# global tokens per second of its median step. A round runs Kiln FSDP, Kiln
# DDP and PyTorch FSDP once each; every figure is the median over the rounds
# ($KILN_FSDP_ROUNDS, default 3).
#
# Memory per rank (the largest rank's), in MiB:
#   kiln_peak_mib   Kiln FSDP's CPU allocator peak (cpu_peak_allocated_bytes)
#                   from just before the model is built to the end: every
#                   tensor at the run's worst moment;
#   torch_peak_mib  PyTorch FSDP's growth of resident memory over the same
#                   span (peak RSS minus the RSS before the model): PyTorch's
#                   CPU allocator keeps no byte count, and resident memory is
#                   the nearest thing, an upper bound that also holds what
#                   malloc keeps cached. The detail lines (on stderr) give
#                   Kiln's resident growth by the same measure (rss_peak_mib)
#                   to compare like with like, and Kiln DDP's figures beside
#                   FSDP's.
#
# stdout gets exactly one line:
#   fsdp_train world=2 kiln_fsdp_tok_s=.. kiln_ddp_tok_s=.. torch_fsdp_tok_s=.. ratio_torch=.. ratio_ddp=.. kiln_peak_mib=.. torch_peak_mib=..
# with ratio_torch = kiln_fsdp_tok_s / torch_fsdp_tok_s and ratio_ddp =
# kiln_fsdp_tok_s / kiln_ddp_tok_s (targets in docs/BENCHMARKS.md: >= 2 and
# >= 0.8). Every program's own line, the config and the load average before
# and after go to stderr.
#
# PyTorch comes from $KILN_TORCH_PYTHON, else the anchors' environment
# (`bash ../shared/anchors/setup-torch2.sh` prints its interpreter).
# Usage: bash bench/fsdp_vs_pytorch.sh [build-dir] [--config small|baby] [--steps N] [--warmup N] [--world N]
set -euo pipefail
build="${1:-build}"
shift || true
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
program="$build/bench/fsdp"
if [[ ! -x "$program" ]]; then
  echo "fsdp_vs_pytorch: $program is missing; build with -DKILN_BUILD_BENCH=ON and gloo first" >&2
  exit 1
fi
config=small
steps=20
warmup=3
world=2
while (($#)); do
  case "$1" in
    --config) config="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --world) world="$2"; shift 2 ;;
    *) echo "fsdp_vs_pytorch: unknown argument $1" >&2; exit 2 ;;
  esac
done
rounds="${KILN_FSDP_ROUNDS:-3}"
py="${KILN_TORCH_PYTHON:-}"
if [[ -z "$py" ]]; then
  py="$(bash "$here/../../shared/anchors/setup-torch2.sh" 2>/dev/null | tail -n 1 || true)"
fi
if [[ -z "$py" || ! -x "$py" ]]; then
  echo "fsdp_vs_pytorch: no PyTorch 2.x interpreter (set KILN_TORCH_PYTHON or run ../shared/anchors/setup-torch2.sh)" >&2
  exit 1
fi

# field NAME: the value of NAME=value on the line on stdin.
field() { awk -v name="$1" '{ for (i = 1; i <= NF; ++i) { split($i, kv, "="); if (kv[1] == name) print kv[2] } }'; }
# The median of the numbers on stdin, one a line.
median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

args=(--world "$world" --config "$config" --steps "$steps" --warmup "$warmup")
echo "fsdp_vs_pytorch: config $config, $world ranks, $warmup warm-up and $steps timed steps, $rounds rounds;" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
fsdp_tok=() fsdp_peak=() fsdp_rss=() ddp_tok=() ddp_peak=() torch_tok=() torch_rss=()
for ((round = 1; round <= rounds; ++round)); do
  line="$("$program" --mode fsdp "${args[@]}")"
  echo "round $round: $line" >&2
  fsdp_tok+=("$(field tok_s <<<"$line")") fsdp_peak+=("$(field peak_mib <<<"$line")")
  fsdp_rss+=("$(field rss_peak_mib <<<"$line")")
  line="$("$program" --mode ddp "${args[@]}")"
  echo "round $round: $line" >&2
  ddp_tok+=("$(field tok_s <<<"$line")") ddp_peak+=("$(field peak_mib <<<"$line")")
  line="$("$py" "$here/fsdp_torch.py" "${args[@]}")"
  echo "round $round: $line" >&2
  torch_tok+=("$(field tok_s <<<"$line")") torch_rss+=("$(field rss_peak_mib <<<"$line")")
done

kf="$(printf '%s\n' "${fsdp_tok[@]}" | median)"
kd="$(printf '%s\n' "${ddp_tok[@]}" | median)"
tf="$(printf '%s\n' "${torch_tok[@]}" | median)"
kp="$(printf '%s\n' "${fsdp_peak[@]}" | median)"
kr="$(printf '%s\n' "${fsdp_rss[@]}" | median)"
dp="$(printf '%s\n' "${ddp_peak[@]}" | median)"
tr="$(printf '%s\n' "${torch_rss[@]}" | median)"
echo "medians: kiln_fsdp peak_mib=$kp rss_peak_mib=$kr; kiln_ddp peak_mib=$dp; torch_fsdp rss_peak_mib=$tr;" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
awk -v w="$world" -v kf="$kf" -v kd="$kd" -v tf="$tf" -v kp="$kp" -v tp="$tr" 'BEGIN {
  printf "fsdp_train world=%d kiln_fsdp_tok_s=%.0f kiln_ddp_tok_s=%.0f torch_fsdp_tok_s=%.0f ratio_torch=%.2f ratio_ddp=%.2f kiln_peak_mib=%.1f torch_peak_mib=%.1f\n",
    w, kf, kd, tf, kf / tf, kf / kd, kp, tp }'
