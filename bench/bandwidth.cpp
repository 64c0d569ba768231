// bandwidth: memory-bound Kiln ops against memcpy over the same bytes.
//
// Each case counts the bytes it must move: every input read once and every
// output written once (add over 16M float32 moves 3 x 64 MB). The anchor is
// memcpy of one 64 MB tensor, which reads 64 MB and writes 64 MB, run with
// the same threads on per-thread chunks, as Kiln's kernels split their work.
// Both rates are bytes moved / best time, so ratio = kiln_gbs / memcpy_gbs
// says how close an op comes to the machine's copy bandwidth (1.0 = as
// fast as memcpy per byte). Reductions only read, so they may exceed 1.
//
// An out-of-place op allocates its 64 MB result on every call, and fresh
// memory costs a page fault per 4 KB page on first touch; the `*_kernel`
// cases run the same backend kernel into a preallocated output, so the two
// rows separate the kernel's speed from the allocation's.
//
// Usage: build/bench/bandwidth [reps]   (default 9 timed repetitions after a warm-up)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kiln.h"

namespace {

using kiln::Tensor;

constexpr int64_t kNumel = int64_t{1} << 24;  // 16M float32 = 64 MB per tensor
constexpr int64_t kTensorBytes = kNumel * 4;

// Best wall times of `reps` alternating runs of kiln_fn and anchor_fn,
// after one warm-up run of each. Alternating gives both the same machine
// state, and the best run is the one least disturbed by other processes
// (a median drifts with the load of a shared machine).
std::pair<double, double> best_seconds(const std::function<void()>& kiln_fn, const std::function<void()>& anchor_fn,
                                       int reps) {
  auto seconds = [](const std::function<void()>& fn) {
    auto start = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  kiln_fn();
  anchor_fn();
  double best_kiln = 1e30, best_anchor = 1e30;
  for (int i = 0; i < reps; ++i) {
    best_kiln = std::min(best_kiln, seconds(kiln_fn));
    best_anchor = std::min(best_anchor, seconds(anchor_fn));
  }
  return {best_kiln, best_anchor};
}

// memcpy split into one contiguous chunk per thread, as parallel_for splits
// an elementwise kernel.
void parallel_memcpy(char* dst, const char* src, int64_t bytes, int threads) {
#pragma omp parallel num_threads(threads)
  {
    int64_t nthreads = omp_get_num_threads();
    int64_t chunk = (bytes + nthreads - 1) / nthreads;
    int64_t begin = std::min<int64_t>(bytes, omp_get_thread_num() * chunk);
    int64_t end = std::min<int64_t>(bytes, begin + chunk);
    std::memcpy(dst + begin, src + begin, end - begin);
  }
}

struct Case {
  std::string op;
  int64_t bytes;  // read + written
  std::function<void()> run;
};

// Values in [-4, 4): exp/sigmoid stay finite and away from subnormals.
Tensor pattern(int64_t n, int seed) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 7919 + seed * 104729) % 8192) / 1024.0f - 4.0f;
  return kiln::from_vector<float>(v);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = argc > 1 ? std::atoi(argv[1]) : 9;
  if (argc > 2 || reps < 1) {
    std::fprintf(stderr, "usage: bandwidth [reps]   (reps >= 1 timed repetitions, default 9)\n");
    return 2;
  }
  Tensor a = pattern(kNumel, 1);
  Tensor b = pattern(kNumel, 2);
  Tensor accum = a.clone();  // written in place
  Tensor matrix = a.view({4096, 4096});
  Tensor sink;                       // keeps each result alive until the next run replaces it
  Tensor out = kiln::empty_like(a);  // preallocated output of the *_kernel cases
  kiln::ops::zero_(out);
  Tensor scale = kiln::scalar_tensor(1.5f).expand({kNumel});  // a broadcast scalar operand
  kiln::Backend& cpu = kiln::backend_for(kiln::kCPU);

  // The memcpy anchor's own buffers, touched once so that no run pays page faults.
  std::vector<char> src(kTensorBytes, 1), dst(kTensorBytes, 0);

  const int64_t T = kTensorBytes;
  std::vector<Case> cases = {
      {"add", 3 * T, [&] { sink = kiln::ops::add(a, b); }},
      {"mul_scalar", 2 * T, [&] { sink = kiln::ops::mul(a, 1.5); }},
      {"add_kernel", 3 * T, [&] { cpu.binary(kiln::BinaryOp::Add, out, a, b); }},
      {"mul_scalar_kernel", 2 * T, [&] { cpu.binary(kiln::BinaryOp::Mul, out, a, scale); }},
      {"relu", 2 * T, [&] { sink = kiln::ops::relu(a); }},
      {"relu_kernel", 2 * T, [&] { cpu.unary(kiln::UnaryOp::Relu, out, a); }},
      {"exp_kernel", 2 * T, [&] { cpu.unary(kiln::UnaryOp::Exp, out, a); }},
      {"sigmoid_kernel", 2 * T, [&] { cpu.unary(kiln::UnaryOp::Sigmoid, out, a); }},
      {"exp", 2 * T, [&] { sink = kiln::ops::exp(a); }},
      {"sigmoid", 2 * T, [&] { sink = kiln::ops::sigmoid(a); }},
      {"tanh", 2 * T, [&] { sink = kiln::ops::tanh(a); }},
      {"gelu_tanh", 2 * T, [&] { sink = kiln::ops::gelu(a, true); }},
      {"add_inplace", 3 * T, [&] { kiln::ops::add_(accum, b); }},
      {"mul_scalar_inplace", 2 * T, [&] { kiln::ops::mul_(accum, 1.0); }},
      {"transpose_contiguous", 2 * T, [&] { sink = matrix.t().contiguous(); }},
      {"sum_all", T, [&] { sink = kiln::ops::sum(a); }},
      {"sum_lastdim", T, [&] { sink = kiln::ops::sum(matrix, {-1}); }},
      {"mean", T, [&] { sink = kiln::ops::mean(a); }},
      {"amax", T, [&] { sink = kiln::ops::amax(a); }},
  };

  int max_threads = kiln::get_num_threads();
  for (int threads : {1, 2}) {
    if (threads > max_threads && threads > 1) break;
    kiln::set_num_threads(threads);
    for (const Case& bench_case : cases) {
      auto [t_kiln, t_copy] =
          best_seconds(bench_case.run, [&] { parallel_memcpy(dst.data(), src.data(), T, threads); }, reps);
      double kiln_gbs = bench_case.bytes / t_kiln / 1e9;
      double memcpy_gbs = 2.0 * T / t_copy / 1e9;
      std::printf("bandwidth op=%s bytes=%lld threads=%d kiln_gbs=%.2f memcpy_gbs=%.2f ratio=%.2f\n",
                  bench_case.op.c_str(), static_cast<long long>(bench_case.bytes), threads, kiln_gbs, memcpy_gbs,
                  kiln_gbs / memcpy_gbs);
      std::fflush(stdout);
    }
  }
  kiln::set_num_threads(max_threads);
  return 0;
}
