#!/usr/bin/env bash
# LeNet-5 data-parallel training on this machine, Kiln's DistributedDataParallel
# (bench/ddp_lenet.cpp) against PyTorch's (bench/ddp_lenet_torch.py) in the same
# invocation: 2 ranks over gloo (Kiln's all-reduces go through shared memory
# on one host, or over TCP as PyTorch's do with KILN_GLOO_SHM=0 in the
# environment), 1 thread per rank, global batch 64 (32 per rank), SGD lr 0.01 momentum 0.9, one epoch of CIFAR-10 already in memory as
# normalised float32, each rank's images chosen by a DistributedSampler. Each
# program starts its own rank processes. A round runs Kiln with 2 ranks,
# PyTorch with 2 ranks, Kiln with 1 rank and PyTorch with 1 rank (batch 64
# in that one rank, DDP and all); every figure is the median over the rounds
# (3 by default: from one set of processes to the next the all-reduce's
# latency varies with where the scheduler puts their threads, as
# bench/allreduce.cpp explains).
# The lines are
#   ddp_train world=2 kiln_img_s=.. pytorch_img_s=.. ratio=..
#   ddp_scaling kiln_world2_img_s=.. kiln_world1_img_s=.. scaling=..
#   ddp_scaling_pytorch pytorch_world2_img_s=.. pytorch_world1_img_s=.. scaling=..
#   ddp_overlap hidden_share=.. pytorch_hidden_share_sampled=..
# with ratio = Kiln images/s / PyTorch images/s (above 1: Kiln is faster),
# scaling = 2-rank images/s / 1-rank images/s, and hidden_share the share of
# Kiln's all-reduce time that ran while backward was still computing (2 ranks;
# defined at the top of bench/ddp_lenet.cpp; PyTorch's is its DDP logger's
# figure for a few sampled steps, bench/ddp_lenet_torch.py). Every program's
# own line (with its per-phase times) is printed first; the load average is
# printed first and last, since a busy machine lowers both sides.
#
# The data: CIFAR-10 when scripts/get-cifar10.sh finds it ($KILN_DATA, then
# data/; never a download here), converted into the binary format both sides
# read as bench/lenet_vs_pytorch.sh does; otherwise 10,000 synthetic images.
# Extra arguments go to both programs (--steps S, --train-images N).
# The Kiln program is $KILN_DDP_LENET, else BUILD/bench/ddp_lenet; the
# rounds are $KILN_DDP_ROUNDS (default 3). PyTorch comes from /usr/bin/python3
# (Debian's python3-torch); without it only Kiln's figures print.
# Usage: KILN_DATA=../shared/data bash bench/ddp_vs_pytorch.sh [build-dir] [--steps S] [--train-images N]
set -euo pipefail
build="${1:-build}"
shift || true
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
program="${KILN_DDP_LENET:-$build/bench/ddp_lenet}"
rounds="${KILN_DDP_ROUNDS:-3}"
if [[ ! -x "$program" ]]; then
  echo "ddp_vs_pytorch: $program is missing; build with -DKILN_BUILD_BENCH=ON and gloo first" >&2
  exit 1
fi

# CIFAR-10 in the binary format, in a temporary folder, when it can be found
# (as bench/lenet_vs_pytorch.sh).
data_args=()
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=bench/cifar_binary.sh
source "$here/cifar_binary.sh"
if cifar_binary "$build" "$tmp"; then
  data_args=(--cifar "$tmp")
else
  echo "data: synthetic (no CIFAR-10 found through KILN_DATA or data/)"
fi

python=""
if /usr/bin/python3 -c "import torch.distributed as d, sys; sys.exit(not d.is_gloo_available())" 2>/dev/null; then
  python=/usr/bin/python3
else
  echo "ddp_vs_pytorch: /usr/bin/python3 has no torch with gloo; skipping the anchor" >&2
fi

# field NAME: the value of NAME=value on the line on stdin.
field() { awk -v name="$1" '{ for (i = 1; i <= NF; ++i) { split($i, kv, "="); if (kv[1] == name) print kv[2] } }'; }
# The median of the numbers on stdin, one a line.
median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

kiln2=() kiln1=() torch2=() torch1=() hidden=() torch_hidden=()
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((round = 1; round <= rounds; ++round)); do
  line="$("$program" --world 2 "${data_args[@]}" "$@")"
  echo "round $round: $line"
  kiln2+=("$(field images_per_second <<<"$line")")
  hidden+=("$(field hidden_share <<<"$line")")
  if [[ -n "$python" ]]; then
    line="$("$python" "$here/ddp_lenet_torch.py" --world 2 "${data_args[@]}" "$@")"
    echo "round $round: $line"
    torch2+=("$(field images_per_second <<<"$line")")
    torch_hidden+=("$(field hidden_share_sampled <<<"$line")")
  fi
  line="$("$program" --world 1 "${data_args[@]}" "$@")"
  echo "round $round: $line"
  kiln1+=("$(field images_per_second <<<"$line")")
  if [[ -n "$python" ]]; then
    line="$("$python" "$here/ddp_lenet_torch.py" --world 1 "${data_args[@]}" "$@")"
    echo "round $round: $line"
    torch1+=("$(field images_per_second <<<"$line")")
  fi
done

k2="$(printf '%s\n' "${kiln2[@]}" | median)"
k1="$(printf '%s\n' "${kiln1[@]}" | median)"
h="$(printf '%s\n' "${hidden[@]}" | median)"
if [[ -n "$python" ]]; then
  t2="$(printf '%s\n' "${torch2[@]}" | median)"
  t1="$(printf '%s\n' "${torch1[@]}" | median)"
  awk -v k="$k2" -v t="$t2" 'BEGIN { printf "ddp_train world=2 kiln_img_s=%.0f pytorch_img_s=%.0f ratio=%.2f\n", k, t, k / t }'
else
  awk -v k="$k2" 'BEGIN { printf "ddp_train world=2 kiln_img_s=%.0f\n", k }'
fi
awk -v a="$k2" -v b="$k1" \
  'BEGIN { printf "ddp_scaling kiln_world2_img_s=%.0f kiln_world1_img_s=%.0f scaling=%.2f\n", a, b, a / b }'
if [[ -n "$python" ]]; then
  awk -v a="$t2" -v b="$t1" \
    'BEGIN { printf "ddp_scaling_pytorch pytorch_world2_img_s=%.0f pytorch_world1_img_s=%.0f scaling=%.2f\n", a, b, a / b }'
fi
if [[ -n "$python" ]]; then
  th="$(printf '%s\n' "${torch_hidden[@]}" | median)"
  awk -v h="$h" -v t="$th" 'BEGIN { printf "ddp_overlap hidden_share=%.3f pytorch_hidden_share_sampled=%.3f\n", h, t }'
else
  awk -v h="$h" 'BEGIN { printf "ddp_overlap hidden_share=%.3f\n", h }'
fi
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
