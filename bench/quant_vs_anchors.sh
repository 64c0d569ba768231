#!/usr/bin/env bash
# Int8 quantization, Kiln against the anchor runtimes, in one run on one CPU
# thread (issue 23, "Targets, side by side in one run"). For LeNet and
# CIFAR ResNet-20, each when its trained float weights exist (a safetensors
# state dict with PyTorch's names, or a kiln-lenet checkpoint), it runs
#   - Kiln: build/bench/quant_bench --model M --weights W --data D, when built;
#   - the anchors: bench/quant_anchors.py with the anchor environment's
#     Python (PyTorch eager / torch.compile / eager int8 on the x86 engine /
#     torchao PT2E, ONNX Runtime float32 / QDQ int8 / dynamic, OpenVINO
#     float32 / int8; see its docstring),
# both printing one line per model, runtime and mode:
#   quant model=lenet runtime=onnxruntime mode=static acc=61.23 bytes=79751 b1_ms=0.058 b64_ms=0.785 path=...
# (acc: test top-1 %, bytes: the stored model, b1_ms / b64_ms: median latency
# of a batch of 1 / 64; a runtime that failed prints acc=nan b1_ms=nan).
# Then, per model and Kiln int8 mode (any Kiln mode but float32), the ratios
#   ratio model=lenet kiln=static vs=onnxruntime:int8 b1=0.412 b64=0.377 faster=yes anchor_b1=onnxruntime:static anchor_b64=onnxruntime:static
# = Kiln's latency / the anchor's best latency, at each batch size
# separately (below 1: Kiln is faster; faster=yes when both are below 1;
# anchor_b1 / anchor_b64 name the runtime:mode that was best there), vs
#   RUNTIME:int8     the best int8 mode of that anchor runtime,
#   RUNTIME:float32  its float32,
#   all:int8 / all:float32   the best over every anchor,
#   kiln:float32     Kiln's own float32 (the issue's target: <= 0.6 at b1,
#                    <= 0.4 at b64 with VNNI).
# The first lines name the CPU and its int8 features: the figures belong to it.
#
# Usage: bash bench/quant_vs_anchors.sh [options] [-- anchor options]
#   --build DIR            Kiln's build folder (default build)
#   --data PATH            CIFAR-10 (default $KILN_DATA, else ../shared/data/cifar10-jpeg.tar.gz)
#   --lenet PATH           LeNet weights (default /work/artifacts/lenet.safetensors)
#   --resnet20 PATH        ResNet-20 weights (default /work/artifacts/resnet20.safetensors)
#   --models "lenet resnet20"   which models (default both, each when its weights exist)
#   --test-images N, --calib-images N   passed to both sides (defaults: 10000, 512)
#   --kiln-args "ARGS"     more options for quant_bench alone (e.g. "--modes static,qat --qat-epochs 1")
#   --python PY            the anchors' interpreter (default $KILN_ANCHORS_PYTHON,
#                          else /opt/kiln-anchors/bin/python)
#   --cpu N                pin every timed process to CPU N (taskset): on a shared
#                          host one vCPU can be twice as slow as the other for
#                          minutes (another tenant on its sibling thread), and
#                          an unpinned run compares sides that landed on different ones
#   --rounds R             run Kiln and the anchors R times, alternating, and keep
#                          each runtime and mode's best median (default 1)
#   --no-wait              time even while a build runs (default: wait for it, up to 20 min)
# Options after "--" go to quant_anchors.py alone (e.g. -- --only onnxruntime,openvino).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"

build="$repo/build"
data="${KILN_DATA:-$repo/../shared/data/cifar10-jpeg.tar.gz}"
lenet_weights=/work/artifacts/lenet.safetensors
resnet20_weights=/work/artifacts/resnet20.safetensors
models="lenet resnet20"
python="${KILN_ANCHORS_PYTHON:-/opt/kiln-anchors/bin/python}"
wait_for_builds=1
pin=()
rounds=1
common=()
anchor_extra=()
kiln_extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    --lenet) lenet_weights="$2"; shift 2 ;;
    --resnet20) resnet20_weights="$2"; shift 2 ;;
    --models) models="$2"; shift 2 ;;
    --test-images|--calib-images) common+=("$1" "$2"); shift 2 ;;
    --kiln-args) read -r -a kiln_extra <<< "$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --cpu) pin=(taskset -c "$2"); shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --no-wait) wait_for_builds=0; shift ;;
    --) shift; anchor_extra=("$@"); break ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "quant_vs_anchors: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done

export OMP_NUM_THREADS=1
export MKL_NUM_THREADS=1

# The CPU, and which of its int8 dot-product features the kernels may use.
cpu_model="$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)"
flags="$(grep -m1 '^flags' /proc/cpuinfo || true)"
has() { [[ " $flags " == *" $1 "* ]] && echo yes || echo no; }
echo "cpu model=\"$cpu_model\" cores=$(getconf _NPROCESSORS_ONLN) avx2=$(has avx2) avx512f=$(has avx512f) avx512_vnni=$(has avx512_vnni) avx_vnni=$(has avx_vnni) amx_int8=$(has amx_int8) threads=1"
echo "load $(cut -d' ' -f1-3 /proc/loadavg) pinned=${pin[2]:-no} rounds=$rounds"

# Builds share these cores: their compilers would slow whichever side they
# overlap. Wait (up to 20 minutes) until none runs. A build still waiting for
# the build lock ("flock ... cmake --build") compiles nothing and does not
# count: only a cmake whose command line starts with it, or a compiler.
build_pattern='^(/usr/bin/)?cmake --build|cc1plus|nvcc|cicc|ptxas'
quiet_machine() {
  [[ $wait_for_builds == 1 ]] || return 0
  local waited=0
  while pgrep -f "$build_pattern" >/dev/null; do
    if (( waited == 0 )); then echo "quant_vs_anchors: a build is running; waiting for it before timing" >&2; fi
    if (( waited >= 1200 )); then
      echo "quant_vs_anchors: still building after 20 min; timing anyway (figures unreliable)" >&2
      return 0
    fi
    sleep 10
    waited=$((waited + 10))
  done
}

lines="$(mktemp)"
trap 'rm -f "$lines"' EXIT
ran=0
for model in $models; do
  case "$model" in
    lenet) weights="$lenet_weights" ;;
    resnet20) weights="$resnet20_weights" ;;
    *) echo "quant_vs_anchors: unknown model '$model' (lenet or resnet20)" >&2; exit 2 ;;
  esac
  if [[ ! -f "$weights" ]]; then
    echo "skip model=$model: no weights at $weights"
    continue
  fi
  ran=1
  for (( round = 1; round <= rounds; ++round )); do
    if [[ -x "$build/bench/quant_bench" ]]; then
      quiet_machine
      "${pin[@]}" "$build/bench/quant_bench" --model "$model" --weights "$weights" --data "$data" "${common[@]}" \
        "${kiln_extra[@]}" | tee -a "$lines" || echo "quant_vs_anchors: quant_bench failed for $model (status $?)" >&2
    else
      echo "skip runtime=kiln model=$model: $build/bench/quant_bench is not built"
    fi
    if [[ -x "$python" ]]; then
      quiet_machine
      "${pin[@]}" "$python" "$here/quant_anchors.py" --model "$model" --weights "$weights" --data "$data" \
        "${common[@]}" "${anchor_extra[@]}" | tee -a "$lines" ||
        echo "quant_vs_anchors: quant_anchors.py failed for $model" >&2
    else
      echo "skip anchors model=$model: no anchor Python at $python (bash ../shared/anchors/setup-torch2.sh)"
    fi
  done
done
[[ $ran == 1 ]] || { echo "quant_vs_anchors: no weights found for: $models" >&2; exit 1; }
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"

# The ratios, from the lines above, each runtime and mode at its best over
# the rounds. A line with b1_ms=nan (a failed runtime) is left out.
awk '
  $1 != "quant" { next }
  {
    delete f
    for (i = 2; i <= NF; ++i) { k = $i; sub(/=.*/, "", k); v = $i; sub(/^[^=]*=/, "", v); f[k] = v }
    if (f["b1_ms"] == "nan" || f["b64_ms"] == "nan" || f["b1_ms"] == "" ) next
    m = f["model"]; rt = f["runtime"]; md = f["mode"]
    kind = (md == "float32") ? "float32" : "int8"
    models[m] = 1
    if (rt == "kiln") {
      if (kind == "int8") {
        if (!((m, md) in kb1) || f["b1_ms"] + 0 < kb1[m, md] + 0) kb1[m, md] = f["b1_ms"]
        if (!((m, md) in kb64) || f["b64_ms"] + 0 < kb64[m, md] + 0) kb64[m, md] = f["b64_ms"]
        kiln_modes[m, md] = 1
      } else {
        key = "kiln:float32"; anchors[m, key] = 1; who1[m, key] = who64[m, key] = key
        if (!((m, key) in best1) || f["b1_ms"] + 0 < best1[m, key] + 0) best1[m, key] = f["b1_ms"]
        if (!((m, key) in best64) || f["b64_ms"] + 0 < best64[m, key] + 0) best64[m, key] = f["b64_ms"]
      }
      next
    }
    split(rt ":" kind " all:" kind, keys, " ")
    for (j in keys) {
      key = keys[j]; anchors[m, key] = 1
      if (!((m, key) in best1) || f["b1_ms"] + 0 < best1[m, key] + 0) { best1[m, key] = f["b1_ms"]; who1[m, key] = rt ":" md }
      if (!((m, key) in best64) || f["b64_ms"] + 0 < best64[m, key] + 0) { best64[m, key] = f["b64_ms"]; who64[m, key] = rt ":" md }
    }
  }
  END {
    for (mk in kiln_modes) {
      split(mk, a, SUBSEP); m = a[1]; md = a[2]
      for (ak in anchors) {
        split(ak, b, SUBSEP); if (b[1] != m) continue
        key = b[2]
        r1 = kb1[m, md] / best1[m, key]; r64 = kb64[m, md] / best64[m, key]
        printf "ratio model=%s kiln=%s vs=%s b1=%.3f b64=%.3f faster=%s anchor_b1=%s anchor_b64=%s\n", m, md, key, r1, r64,
               (r1 < 1 && r64 < 1) ? "yes" : "no", who1[m, key], who64[m, key]
      }
    }
  }' "$lines" | sort
