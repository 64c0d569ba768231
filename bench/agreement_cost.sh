#!/usr/bin/env bash
# What the always-on agreement check costs over TCP (Note [Calls in the first
# message] in distributed/backends/gloo/call_exchange.h): a build without the
# check against a build with it, on Gloo's TCP path (KILN_GLOO_SHM=0), 2 ranks:
# bench/allreduce's rank program for each size, and bench/ddp_lenet's 150
# steps of batch 64. The two builds run back to back in every round, their
# order alternating, and each round gives a ratio with/without per benchmark,
# so the slow drift of a shared machine cancels; printed are the median of
# each side and the median and quartiles of the per-round ratios (a time
# ratio: above 1 is slower).
#
#   bash bench/agreement_cost.sh NO_CHECK_BUILD CHECK_BUILD [ROUNDS]
#   AGREEMENT_COST_SIZES=4096,4194304 bash bench/agreement_cost.sh ...   # some sizes only
#
# NO_CHECK_BUILD is a build of the same commit with bench/no_agreement_check.patch
# applied (docs/BENCHMARKS.md, "Always-on collective agreement").
set -euo pipefail
no_check=${1:?usage: agreement_cost.sh NO_CHECK_BUILD CHECK_BUILD [ROUNDS]}
check=${2:?usage: agreement_cost.sh NO_CHECK_BUILD CHECK_BUILD [ROUNDS]}
rounds=${3:-15}
sizes=${AGREEMENT_COST_SIZES:-4096,16384,65536,262144,1048576,4194304,16777216,67108864}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# One all-reduce run of every size: "round side allreduce_tcp BYTES MS" lines.
time_all_reduces() {
  local build=$1 side=$2 round=$3
  for rank in 0 1; do
    RANK=$rank WORLD_SIZE=2 KILN_BENCH_STORE="file://$out/store-$side-$round" KILN_BENCH_SIZES=$sizes \
      KILN_BENCH_BUDGET=0.2 KILN_GLOO_SHM=0 "$build/bench/allreduce" --rank >"$out/rank$rank" 2>&1 &
  done
  wait
  # "bytes=4096 seconds=0.000392951"
  awk -v side="$side" -v round="$round" '/^bytes=/ {
    split($1, b, "="); split($2, s, "="); print round, side, "allreduce_tcp", b[2], s[2] * 1e3 }' \
    "$out/rank0" >>"$out/times"
}

# One DDP run: "round side ddp_tcp 64 MS_PER_STEP".
time_ddp() {
  local build=$1 side=$2 round=$3
  # "ddp_lenet world=2 allreduce=tcp ... images_per_second=31519 ..."
  KILN_GLOO_SHM=0 "$build/bench/ddp_lenet" --world 2 --steps 150 |
    awk -v side="$side" -v round="$round" '/^ddp_lenet world=2/ {
      for (i = 1; i <= NF; i++) if ($i ~ /^images_per_second=/) { split($i, kv, "="); print round, side, "ddp_tcp", 64, 64000 / kv[2] } }' \
      >>"$out/times"
}

for ((round = 0; round < rounds; ++round)); do
  order=(no_check check)
  ((round % 2 == 1)) && order=(check no_check)
  for side in "${order[@]}"; do
    build=$no_check
    [[ $side == check ]] && build=$check
    time_all_reduces "$build" "$side" "$round"
    time_ddp "$build" "$side" "$round"
  done
done

awk '{ t[$1 " " $2 " " $3 " " $4] = $5; key[$3 " " $4] = 1; round[$1] = 1 }
  function sort(a, n,   i, j, x) { for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x } }
  function quantile(a, n, q,   p, lo) { p = 1 + (n - 1) * q; lo = int(p); return lo >= n ? a[n] : a[lo] + (p - lo) * (a[lo + 1] - a[lo]) }
  END {
    for (k in key) {
      n = 0; m = 0
      for (r in round) {
        a = t[r " no_check " k]; b = t[r " check " k]
        if (a == "" || b == "") continue
        n++; ratio[n] = b / a; before[n] = a; after[n] = b
      }
      sort(ratio, n); sort(before, n); sort(after, n)
      split(k, parts, " ")
      printf "agreement_cost bench=%s size=%s rounds=%d no_check_ms=%.4f check_ms=%.4f ratio=%.3f ratio_q1=%.3f ratio_q3=%.3f\n",
        parts[1], parts[2], n, quantile(before, n, 0.5), quantile(after, n, 0.5), quantile(ratio, n, 0.5),
        quantile(ratio, n, 0.25), quantile(ratio, n, 0.75)
    }
  }' "$out/times" | sort -t= -k2,2 -k3,3n
