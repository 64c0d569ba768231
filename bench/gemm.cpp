// Kiln's float32 GEMM (tensor/cpu/gemm.h) against OpenBLAS's cblas_sgemm on
// the same row-major inputs, on 1 and 2 threads. One line per case:
//   gemm m=256 n=256 k=256 threads=1 kiln_gflops=.. openblas_gflops=.. ratio=..
// ratio = kiln / openblas. Each library is warmed up, then timed in samples of
// enough repetitions to last ~3 ms (up to 30 samples, about a second); the
// best sample counts, the one least disturbed on a shared machine. Kiln runs
// first for each case, after a pause that lets OpenBLAS's spinning worker
// threads from the previous case go idle.
//
// Shapes, C (m, n) = A (m, k) @ B (k, n):
// - square 256 .. 2048: the classic GEMM curve;
// - LeNet-5 at batch 64, the products its training step runs:
//   - fc1: x (64, 400) @ w.t() (400, 120): m=64 n=120 k=400;
//   - conv1 as im2col: weight (6, 1*5*5) @ cols (75, 28*28) per image:
//     m=6 n=784 k=75; and the whole batch as one product, cols (75, 64*784):
//     m=6 n=50176 k=75;
//   - conv2 likewise: weight (16, 6*5*5) @ cols (150, 10*10): m=16 n=100
//     k=150 per image, and m=16 n=6400 k=150 for the batch.
// - --gpt: the products of one training step of bench/gpt's small config
//   (4096 token rows, width 128; c_attn 128 -> 384, attention's c_proj
//   128 -> 128, MLP 128 -> 512 -> 128, the tied head 128 -> 65), each in the
//   layout Linear uses: the forward x @ w.t() (nt), the input gradient g @ w
//   (nn) and the weight gradient g.t() @ x (tn, K = the 4096 rows).
//
//   build/bench/gemm                        # all cases, 1 and 2 threads
//   build/bench/gemm --threads 1 --shape 512x512x512
//   build/bench/gemm --transpose-b       # c = a @ b.t(): prints gemm_nt lines
//   build/bench/gemm --transpose-a       # c = a.t() @ b: prints gemm_tn lines
//   build/bench/gemm --gpt --threads 2   # the small GPT's training products
//   build/bench/gemm --cpu-time --threads 1   # a loaded machine: thread CPU time
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tensor/parallel.h"
#include "tensor/cpu/gemm.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace {

struct Shape3 {
  int64_t m, n, k;
  // Operand layouts: A is (m, k) row-major, or with ta the transpose of a
  // (k, m) row-major matrix; B is (k, n) row-major, or with tb the transpose
  // of a (n, k) row-major matrix.
  bool ta = false, tb = false;
};

// --cpu-time: time by the calling thread's CPU clock instead of the wall
// clock. Meaningful for threads=1 only, where it discounts the time the
// thread waited for a core on a loaded machine.
bool use_cpu_time = false;

double seconds_now() {
  if (use_cpu_time) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Mean seconds per call over one sample of `reps` calls.
double sample(const std::function<void()>& fn, int reps) {
  double start = seconds_now();
  for (int r = 0; r < reps; ++r) fn();
  return (seconds_now() - start) / reps;
}

// Best-sample seconds per call of `fn`, after a warm-up.
double time_best(const std::function<void()>& fn) {
  fn();
  double once = std::max(sample(fn, 1), 1e-7);
  // Short samples, many of them: on a shared machine the best one is likely
  // to have run undisturbed.
  int reps = static_cast<int>(std::clamp(0.003 / once, 1.0, 100000.0));
  int samples = static_cast<int>(std::clamp(1.0 / (once * reps), 5.0, 30.0));
  sample(fn, reps);  // warm-up: caches, thread pools, page faults
  double best = 1e30;
  for (int s = 0; s < samples; ++s) best = std::min(best, sample(fn, reps));
  return best;
}

// OpenBLAS's idle worker threads spin for a while after each call, and would
// steal a core from the next Kiln measurement: let them go to sleep first.
void let_openblas_threads_sleep() { std::this_thread::sleep_for(std::chrono::milliseconds(300)); }

void run_case(const Shape3& s, int threads) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> a(s.m * s.k), b(s.k * s.n), c_kiln(s.m * s.n), c_blas(s.m * s.n);
  for (float& x : a) x = dist(rng);
  for (float& x : b) x = dist(rng);

  kiln::set_num_threads(threads);
  openblas_set_num_threads(threads);
  // A transposed (a linear layer's weight gradient g.t() @ x) and B
  // transposed (its forward x @ w.t()) are read through swapped strides.
  const int64_t rsa = s.ta ? 1 : s.k, csa = s.ta ? s.m : 1;
  const int64_t rsb = s.tb ? 1 : s.n, csb = s.tb ? s.k : 1;
  auto kiln_fn = [&] {
    kiln::cpu::sgemm(s.m, s.n, s.k, 1.f, a.data(), rsa, csa, b.data(), rsb, csb, 0.f, c_kiln.data(), s.n, 1);
  };
  auto blas_fn = [&] {
    cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans,
                static_cast<int>(s.m), static_cast<int>(s.n), static_cast<int>(s.k), 1.f, a.data(),
                static_cast<int>(s.ta ? s.m : s.k), b.data(), static_cast<int>(s.tb ? s.k : s.n), 0.f,
                c_blas.data(), static_cast<int>(s.n));
  };
  let_openblas_threads_sleep();
  double kiln_s = time_best(kiln_fn);
  double blas_s = time_best(blas_fn);

  double max_err = 0;
  for (size_t i = 0; i < c_kiln.size(); ++i) max_err = std::max(max_err, double(std::fabs(c_kiln[i] - c_blas[i])));
  if (max_err > 1e-3 * std::sqrt(double(s.k))) {
    std::fprintf(stderr, "gemm m=%ld n=%ld k=%ld: results differ from OpenBLAS by %g\n", long(s.m), long(s.n),
                 long(s.k), max_err);
  }
  double flops = 2.0 * double(s.m) * double(s.n) * double(s.k);
  const char* layout = s.ta ? (s.tb ? "_tt" : "_tn") : (s.tb ? "_nt" : "");
  std::printf("gemm%s m=%ld n=%ld k=%ld threads=%d kiln_gflops=%.1f openblas_gflops=%.1f ratio=%.2f\n", layout, long(s.m), long(s.n), long(s.k), threads, flops / kiln_s * 1e-9,
              flops / blas_s * 1e-9, blas_s / kiln_s);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads;
  std::vector<Shape3> shapes;
  bool transpose_a = false, transpose_b = false, gpt = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--cpu-time") {
      use_cpu_time = true;
    } else if (arg == "--transpose-a") {
      transpose_a = true;
    } else if (arg == "--transpose-b") {
      transpose_b = true;
    } else if (arg == "--gpt") {
      gpt = true;
    } else if (arg == "--threads" && i + 1 < argc) {
      threads.push_back(std::atoi(argv[++i]));
    } else if (arg == "--shape" && i + 1 < argc) {
      long m = 0, n = 0, k = 0;
      if (std::sscanf(argv[++i], "%ldx%ldx%ld", &m, &n, &k) != 3) {
        std::fprintf(stderr, "gemm: --shape wants MxNxK, got %s\n", argv[i]);
        return 2;
      }
      shapes.push_back({m, n, k, false, false});
    } else {
      std::fprintf(stderr, "usage: gemm [--cpu-time] [--transpose-a] [--transpose-b] [--gpt] [--threads T]... "
                           "[--shape MxNxK]...\n");
      return 2;
    }
  }
  if (threads.empty()) threads = {1, 2};
  if (shapes.empty() && !gpt) {
    shapes = {{256, 256, 256},  {512, 512, 512},  {1024, 1024, 1024}, {2048, 2048, 2048},
              {64, 120, 400},   {6, 784, 75},     {6, 64 * 784, 75},  {16, 100, 150},
              {16, 64 * 100, 150}};
  }
  for (Shape3& s : shapes) s.ta = transpose_a, s.tb = transpose_b;
  if (gpt) {
    constexpr int64_t kRows = 4096;
    // (in, out) of each Linear: c_attn, attention's c_proj, MLP up and down, the tied head.
    const int64_t linears[][2] = {{128, 384}, {128, 128}, {128, 512}, {512, 128}, {128, 65}};
    for (const auto& io : linears) {
      const int64_t in = io[0], out = io[1];
      shapes.push_back({kRows, out, in, false, true});   // forward: x @ w.t()
      shapes.push_back({kRows, in, out, false, false});  // input gradient: g @ w
      shapes.push_back({out, in, kRows, true, false});   // weight gradient: g.t() @ x
    }
  }
  for (int t : threads) {
    for (const Shape3& s : shapes) run_case(s, t);
  }
  return 0;
}
