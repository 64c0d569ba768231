// The host's cost of one op on a tiny tensor: what a framework spends per op
// besides the arithmetic (argument checks, dispatch, allocation, the
// autograd record). On a GPU this, plus the launch, is what an eager step of
// a small model costs, since its kernels take microseconds (docs/BENCHMARKS.md,
// "Launches per step"). The anchor is PyTorch eager from Python on the same
// workloads (bench/op_overhead_torch.py, bench/op_overhead_vs_pytorch.sh).
// Each workload runs one thread on float32 tensors of 4 elements; a figure is
// the median of kRepeats timings of kCalls calls, in microseconds per op:
//   op_overhead workload=add kiln_us=..
// Workloads:
//   add         c = a + b, no gradient recorded
//   mul_grad    c = w * b with w requiring grad (a node recorded)
//   chain_back  ten muls, a sum and backward(), per op (12 per pass)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "kiln.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kRepeats = 7;
constexpr int kCalls = 20000;

// Microseconds per op of `pass`, which runs `ops_per_pass` ops: the median
// over kRepeats timings of kCalls passes.
double microseconds_per_op(const std::function<void()>& pass, int ops_per_pass) {
  for (int i = 0; i < kCalls / 10; ++i) pass();  // warm-up: caches, allocator
  std::vector<double> timings;
  for (int r = 0; r < kRepeats; ++r) {
    const auto start = Clock::now();
    for (int i = 0; i < kCalls; ++i) pass();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    timings.push_back(seconds * 1e6 / (static_cast<double>(kCalls) * ops_per_pass));
  }
  std::sort(timings.begin(), timings.end());
  return timings[kRepeats / 2];
}

}  // namespace

int main() {
  kiln::set_num_threads(1);
  const kiln::Tensor a = kiln::ones({4}), b = kiln::ones({4});
  const kiln::Tensor w = kiln::ones({4}).requires_grad_();
  struct Workload {
    const char* name;
    int ops;
    std::function<void()> pass;
  };
  const Workload workloads[] = {
      {"add", 1, [&] { kiln::Tensor c = kiln::add(a, b); }},
      {"mul_grad", 1, [&] { kiln::Tensor c = kiln::mul(w, b); }},
      {"chain_back", 12,
       [&] {
         kiln::Tensor h = w;
         for (int k = 0; k < 10; ++k) h = kiln::mul(h, b);
         kiln::sum(h).backward();
       }},
  };
  for (const Workload& workload : workloads) {
    std::printf("op_overhead workload=%s kiln_us=%.3f\n", workload.name, microseconds_per_op(workload.pass, workload.ops));
  }
  return 0;
}
