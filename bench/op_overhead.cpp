// The host's cost of one op on a tiny tensor: what a framework spends per op
// besides the arithmetic (argument checks, dispatch, allocation, the
// autograd record). On a GPU this, plus the launch, is what an eager step of
// a small model costs, since its kernels take microseconds (docs/BENCHMARKS.md,
// "Launches per step"). The anchor is PyTorch eager from Python on the same
// workloads (bench/op_overhead_torch.py, bench/op_overhead_vs_pytorch.sh).
// Each workload runs one thread on float32 tensors of 4 elements; a figure is
// the median of kRepeats timings of `calls` passes, in microseconds per op:
//   op_overhead workload=add kiln_us=..
// Workloads:
//   add         c = a + b, no gradient recorded
//   mul_grad    c = w * b with w requiring grad (a node recorded)
//   chain_back  ten muls, a sum and backward(), per op (12 per pass)
// --device cuda puts the tensors on the first GPU: each op then also
// launches a kernel, and the figure is the host's cost per op of an eager
// GPU program (the kernels, about two microseconds each, run behind the
// host). Each timing ends when the GPU has finished what it was given.
//
// Usage: build/bench/op_overhead [--device cuda] [--calls N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <functional>
#include <vector>

#include "kiln.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kRepeats = 7;
int calls = 20000;  // passes per timing (--calls)

// Microseconds per op of `pass`, which runs `ops_per_pass` ops: the median
// over kRepeats timings of `calls` passes, each timing ended by `finish`
// (which waits for a GPU's queued work).
double microseconds_per_op(const std::function<void()>& pass, int ops_per_pass, const std::function<void()>& finish) {
  for (int i = 0; i < calls / 10; ++i) pass();  // warm-up: caches, allocator
  finish();
  std::vector<double> timings;
  for (int r = 0; r < kRepeats; ++r) {
    const auto start = Clock::now();
    for (int i = 0; i < calls; ++i) pass();
    finish();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    timings.push_back(seconds * 1e6 / (static_cast<double>(calls) * ops_per_pass));
  }
  std::sort(timings.begin(), timings.end());
  return timings[kRepeats / 2];
}

}  // namespace

int main(int argc, char** argv) try {
  kiln::Device device = kiln::kCPU;
  // Flags come in pairs: an odd count of arguments after the name is a flag without its value.
  bool understood = argc % 2 == 1;
  for (int i = 1; understood && i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--device" && (value == "cpu" || value == "cuda")) {
      device = value == "cuda" ? kiln::cuda_device(0) : kiln::kCPU;
    } else if (flag == "--calls" && std::atoi(value.c_str()) > 0) {
      calls = std::atoi(value.c_str());
    } else {
      understood = false;
    }
  }
  if (!understood) {
    std::fprintf(stderr, "usage: op_overhead [--device cpu|cuda] [--calls N]\n");
    return 2;
  }
  kiln::set_num_threads(1);
  const kiln::TensorOptions options(kiln::DType::Float32, device);
  const kiln::Tensor a = kiln::ones({4}, options), b = kiln::ones({4}, options);
  const kiln::Tensor w = kiln::ones({4}, options).requires_grad_();
  // Copying a result to the host waits for everything queued before it.
  const auto finish = [&] { (void)kiln::add(a, b).cpu(); };
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
    std::printf("op_overhead workload=%s kiln_us=%.3f\n", workload.name,
                microseconds_per_op(workload.pass, workload.ops, finish));
  }
  return 0;
} catch (const kiln::Error& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
