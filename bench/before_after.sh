#!/usr/bin/env bash
# Two builds of Kiln, timed against each other in one run: bench/allreduce
# (both gloo paths) and bench/ddp_lenet (2 ranks, shared memory and TCP),
# the builds alternating round by round so that both see the same machine.
# Prints medians per build and the ratio after/before (time: > 1 is slower).
#
#   bash bench/before_after.sh BEFORE_BUILD AFTER_BUILD [ROUNDS]
#
# Each build needs the allreduce and ddp_lenet targets (a build with gloo).
# Used for the cost of the always-on agreement check (docs/BENCHMARKS.md,
# "Always-on collective agreement").
set -euo pipefail
before=${1:?usage: before_after.sh BEFORE_BUILD AFTER_BUILD [ROUNDS]}
after=${2:?usage: before_after.sh BEFORE_BUILD AFTER_BUILD [ROUNDS]}
rounds=${3:-9}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for ((r = 0; r < rounds; r++)); do
  for side in before after; do
    build=$before
    [[ $side == after ]] && build=$after
    # "allreduce bytes=4096 kiln_busbw=0.137GB/s kiln_tcp_busbw=0.014GB/s ...": ms per all_reduce
    # from the bus bandwidth of 2 ranks (bytes / time x 2(n-1)/n, the factor 1).
    "$build/bench/allreduce" --rounds 1 --budget 0.1 |
      awk -v side="$side" '/^allreduce bytes=/ {
        for (i = 2; i <= NF; i++) { split($i, kv, "="); sub("GB/s", "", kv[2]); f[kv[1]] = kv[2] }
        print side, "allreduce_shm", f["bytes"], f["bytes"] / f["kiln_busbw"] / 1e6
        print side, "allreduce_tcp", f["bytes"], f["bytes"] / f["kiln_tcp_busbw"] / 1e6 }' >>"$out/times"
    for shm in 1 0; do
      # "ddp_lenet world=2 allreduce=shm ... images_per_second=31519 ..."
      KILN_GLOO_SHM=$shm "$build/bench/ddp_lenet" --world 2 --steps 150 |
        awk -v side="$side" -v shm="$shm" '/^ddp_lenet world=2/ {
          for (i = 1; i <= NF; i++) if ($i ~ /^images_per_second=/) { split($i, kv, "="); ms = 64000 / kv[2] }
          print side, (shm == 1 ? "ddp_shm" : "ddp_tcp"), 64, ms }' >>"$out/times"
    done
  done
done

# One line per benchmark and size: median ms before, after, and after/before.
awk '{ key = $2 " " $3; v[$1 " " key] = v[$1 " " key] " " $4; keys[key] = 1 }
  function median(list,   a, n, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END {
    for (k in keys) {
      split(k, parts, " ")
      b = median(v["before " k]); a = median(v["after " k])
      printf "before_after bench=%s size=%s before_ms=%.4f after_ms=%.4f ratio=%.3f\n", parts[1], parts[2], b, a, a / b
    }
  }' "$out/times" | sort -t= -k2,2 -k3,3n
