#!/usr/bin/env bash
# GPT training cut into pipeline stages on 2 ranks, Kiln's Pipeline
# (distributed/pipeline/pipeline.h) against PyTorch 2.x's
# torch.distributed.pipelining, schedule by schedule, in the same invocation:
# bench/pipeline.cpp (Kiln) and bench/pipeline_torch.py (PyTorch), both
# described at their tops: the GPT of bench's small config (4 layers, 4 heads,
# width 128, block 128, vocabulary 65, bias off, tied LM head), global batch
# 32 in --micro-batches micro-batches (default 8), AdamW, float32, gloo, one
# thread per rank, each program starting its own rank processes. The split is
# the same in both: 2 stages (blocks 0-1 with the embedding, blocks 2-3 with
# ln_f and the head), or 4 for interleaved (one block each, stage s on rank
# s % 2). The schedules both have:
#   gpipe        Kiln gpipe                  PyTorch ScheduleGPipe
#   1f1b         Kiln 1f1b                   PyTorch Schedule1F1B
#   interleaved  Kiln interleaved, v = 2     PyTorch ScheduleInterleaved1F1B, 2 stages per rank
#   zero-bubble  Kiln zero-bubble (ZB-H1)    PyTorch ScheduleInterleavedZeroBubble, 1 stage per rank
# Each program runs --warmup steps, then --steps timed steps, and reports
# the global tokens per second of its median step. A round runs every
# schedule on Kiln and then on PyTorch once; every figure is the median over
# the rounds ($KILN_PIPELINE_ROUNDS, default 3).
#
# stdout gets one line per schedule:
#   pipeline schedule=1f1b stages=2 micro_batches=8 kiln_tok_s=.. torch_tok_s=.. ratio=.. bubble=.. bubble_formula=..
#            kiln_act_peak_mib=..
# with ratio = kiln_tok_s / torch_tok_s, bubble Kiln's measured bubble (1 -
# the ranks' compute time over world x the step's wall time, the median
# step's; bench/pipeline.cpp) and bubble_formula the textbook figure for the
# schedule ((p-1)/(m+p-1), (p-1)/(v m+p-1) interleaved; an upper bound for
# zero-bubble). Every program's own line (with Kiln's per-rank compute and
# wait times and the simulated bubble), and the load average before and
# after, go to stderr.
#
# With --bind-cores, each rank of both programs runs on its own share of the
# cores: Kiln's under `kiln-run --bind-cores` (the build's kiln-run), PyTorch's
# bound the same way by pipeline_torch.py --bind-cores. Without it the
# system places the ranks' threads.
#
# PyTorch comes from $KILN_TORCH_PYTHON, else the anchors' environment
# (`bash ../shared/anchors/setup-torch2.sh` prints its interpreter).
# Usage: bash bench/pipeline_vs_pytorch.sh [build-dir] [--steps N] [--warmup N] [--micro-batches M]
#                                          [--schedules "gpipe 1f1b interleaved zero-bubble"] [--bind-cores]
set -euo pipefail
build="${1:-build}"
shift || true
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
program="$build/bench/pipeline"
if [[ ! -x "$program" ]]; then
  echo "pipeline_vs_pytorch: $program is missing; build with -DKILN_BUILD_BENCH=ON and gloo first" >&2
  exit 1
fi
steps=20
warmup=3
micro_batches=8
schedules="gpipe 1f1b interleaved zero-bubble"
bind=0
while (($#)); do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --micro-batches) micro_batches="$2"; shift 2 ;;
    --schedules) schedules="$2"; shift 2 ;;
    --bind-cores) bind=1; shift ;;
    *) echo "pipeline_vs_pytorch: unknown argument $1" >&2; exit 2 ;;
  esac
done
rounds="${KILN_PIPELINE_ROUNDS:-3}"
py="${KILN_TORCH_PYTHON:-}"
if [[ -z "$py" ]]; then
  py="$(bash "$here/../../shared/anchors/setup-torch2.sh" 2>/dev/null | tail -n 1 || true)"
fi
if [[ -z "$py" || ! -x "$py" ]]; then
  echo "pipeline_vs_pytorch: no PyTorch 2.x interpreter (set KILN_TORCH_PYTHON or run ../shared/anchors/setup-torch2.sh)" >&2
  exit 1
fi

# field NAME: the value of NAME=value on the line on stdin.
field() { awk -v name="$1" '{ for (i = 1; i <= NF; ++i) { split($i, kv, "="); if (kv[1] == name) print kv[2] } }'; }
# The median of the numbers on stdin, one a line.
median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

args=(--world 2 --batch 32 --micro-batches "$micro_batches" --steps "$steps" --warmup "$warmup")
kiln=("$program")
torch_args=()
if ((bind)); then
  launcher="$build/apps/kiln-run/kiln-run"
  [[ -x "$launcher" ]] || { echo "pipeline_vs_pytorch: --bind-cores needs $launcher" >&2; exit 1; }
  kiln=("$launcher" --standalone --nproc-per-node 2 --bind-cores "$program")
  torch_args=(--bind-cores)
fi
echo "pipeline_vs_pytorch: schedules $schedules; 2 ranks, $micro_batches micro-batches, $warmup warm-up and" \
  "$steps timed steps, $rounds rounds, cores bound: $( ((bind)) && echo yes || echo no); load average" \
  "$(cut -d' ' -f1-3 /proc/loadavg)" >&2
declare -A kiln_tok torch_tok bubble formula stages peak
for ((round = 1; round <= rounds; ++round)); do
  for schedule in $schedules; do
    line="$("${kiln[@]}" --schedule "$schedule" "${args[@]}" | sed 's/^\[rank 0\] //' | grep '^pipeline_kiln schedule=')"
    echo "round $round: $line" >&2
    kiln_tok[$schedule]+="$(field tok_s <<<"$line") "
    bubble[$schedule]+="$(field bubble <<<"$line") "
    peak[$schedule]+="$(field act_peak_mib <<<"$line") "
    formula[$schedule]="$(field bubble_formula <<<"$line")"
    stages[$schedule]="$(field stages <<<"$line")"
    line="$("$py" "$here/pipeline_torch.py" --schedule "$schedule" "${args[@]}" "${torch_args[@]}")"
    echo "round $round: $line" >&2
    torch_tok[$schedule]+="$(field tok_s <<<"$line") "
  done
done

echo "pipeline_vs_pytorch: done; load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for schedule in $schedules; do
  kt="$(tr ' ' '\n' <<<"${kiln_tok[$schedule]}" | grep . | median)"
  tt="$(tr ' ' '\n' <<<"${torch_tok[$schedule]}" | grep . | median)"
  bu="$(tr ' ' '\n' <<<"${bubble[$schedule]}" | grep . | median)"
  pk="$(tr ' ' '\n' <<<"${peak[$schedule]}" | grep . | median)"
  awk -v s="$schedule" -v st="${stages[$schedule]}" -v m="$micro_batches" -v kt="$kt" -v tt="$tt" -v bu="$bu" \
    -v bf="${formula[$schedule]}" -v pk="$pk" 'BEGIN {
    printf "pipeline schedule=%s stages=%d micro_batches=%d kiln_tok_s=%.0f torch_tok_s=%.0f ratio=%.2f bubble=%.4f bubble_formula=%.4f kiln_act_peak_mib=%.2f\n",
      s, st, m, kt, tt, kt / tt, bu, bf, pk }'
done
