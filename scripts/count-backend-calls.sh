#!/usr/bin/env bash
# Counts the calls into the CPU backend that one LeNet training step makes
# (batch 64, SGD with momentum), by op: each is at least one kernel launch
# when the step runs on a GPU, where the eager step's time is mostly
# launches (docs/BENCHMARKS.md, "Launches per step").
#   bash scripts/count-backend-calls.sh [build-dir]     # default: build
# Needs gdb and a built libkiln; takes about a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
build="$(cd "${1:-build}" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cat > "$work/step.cpp" <<'CPP'
#include "kiln.h"
using namespace kiln;
// Marks the step boundaries for the debugger.
extern "C" __attribute__((noinline)) void marker(int s) { asm volatile("" ::"r"(s)); }
int main() {
  manual_seed(0);
  auto model = std::make_shared<nn::LeNet>();
  optim::SGD sgd(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  Tensor x = randn({64, 3, 32, 32});
  Tensor y = zeros({64}, DType::Int64);
  for (int s = 0; s < 3; ++s) {  // step 0 makes the momentum buffers; step 1 is counted
    marker(s);
    sgd.zero_grad();
    nn::functional::cross_entropy((*model)(x), y).backward();
    sgd.step();
  }
  marker(99);
}
CPP
g++ -O1 -std=c++20 -I. "$work/step.cpp" -L"$build" -lkiln -Wl,-rpath,"$build" -o "$work/step"

{
  echo "set pagination off"
  echo "break marker"
  echo "run"
  echo "continue"
  nm -DC "$build/libkiln.so" | sed -n 's/.* T \(kiln::cpu::CpuBackend::[a-z_0-9]*\)(.*/\1/p' | sort -u |
    sed 's/^/break /'
  for _ in $(seq 1 300); do echo "continue"; done
} > "$work/commands.gdb"

# The calls between the second and third markers: step 1.
OMP_NUM_THREADS=1 gdb -q -batch -x "$work/commands.gdb" "$work/step" 2>&1 |
  sed -n 's/^Breakpoint [0-9.]*, \(0x[0-9a-f]* in \)\{0,1\}\([a-z:_A-Z0-9]*\).*/\2/p' |
  awk '/^marker$/ { n++; next } n == 2' | sed 's/kiln::cpu::CpuBackend:://' | sort | uniq -c | sort -rn |
  awk '{ total += $1; print } END { print total, "calls in one step" }'
