// The int8 GEMM (tensor/cpu/qgemm.h) on every path this CPU runs, against
// Kiln's float32 GEMM (tensor/cpu/gemm.h) at the same shape, on 1 thread.
// One line per shape and path:
//   qgemm m=.. n=.. k=.. out=.. path=.. int8_gops=.. float_gflops=.. speedup=..
// speedup = float32 time / int8 time (above 1: int8 is faster). Each kernel
// is warmed up, then timed in samples of enough calls to last ~2 ms (30
// samples); the best sample counts, the one least disturbed on a shared
// machine. Amx rows use qgemm as callers do (small problems go to the VNNI
// kernels, Note [Int8 GEMM paths]); amx-tiles forces the tiles.
//
// Shapes (C = A (m, k) @ W (n, k)^T):
// - linear layers at batch 1 and 64: k = 400, 120, 84 -> n = 120, 84, 10;
//   out=u8 (requantized rows), the float anchor x @ w.t();
// - convolutions as GEMM, one image: m = output pixels, k = C*kh*kw,
//   n = output channels; out=u8_nchw (the (n, m) plane, stride_m = 1), the
//   float anchor the im2col product w (n, k) @ cols (k, m).
//
//   build/bench/qgemm                     # every shape, every path
//   build/bench/qgemm --shape 64x120x400  # one shape (m x n x k), as a linear
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench/time_best.h"
#include "tensor/cpu/gemm.h"
#include "tensor/cpu/qgemm.h"
#include "tensor/cpu/qgemm_kernels.h"
#include "tensor/parallel.h"

namespace {

using kiln::cpu::QGemmOutput;
using kiln::cpu::QGemmPath;

// About 2e-3 s a sample (bench/time_best.h).
double time_best(const std::function<void()>& fn) { return kiln::bench::time_best(fn, 2e-3); }

struct Shape {
  int64_t m, n, k;
  bool conv;
};

void run_shape(const Shape& s) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> u8(0, 255), s8(-127, 127);
  std::vector<uint8_t> a(s.m * s.k);
  std::vector<int8_t> w(s.n * s.k);
  for (auto& v : a) v = static_cast<uint8_t>(u8(rng));
  for (auto& v : w) v = static_cast<int8_t>(s8(rng));
  std::vector<int32_t> bias(s.n, 100);
  std::vector<float> scale(s.n, 1e-4f);
  std::vector<uint8_t> out(s.m * s.n);
  QGemmOutput o;
  o.kind = QGemmOutput::Kind::UInt8;
  o.a_zero_point = 3;
  o.bias = bias.data();
  o.scale = scale.data();
  o.scale_per_channel = true;
  o.zero_point = 10;
  o.lo = 10;
  o.out = out.data();
  o.stride_m = s.conv ? 1 : s.n;
  o.stride_n = s.conv ? s.m : 1;

  // The float32 anchor on the same values.
  std::vector<float> af(a.begin(), a.end()), wf(w.begin(), w.end()), cf(s.m * s.n);
  std::vector<float> cols(s.k * s.m);  // conv: cols (k, m)
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t kk = 0; kk < s.k; ++kk) cols[kk * s.m + i] = af[i * s.k + kk];
  const double float_s = time_best([&] {
    if (s.conv) kiln::cpu::sgemm(s.n, s.m, s.k, 1.f, wf.data(), s.k, 1, cols.data(), s.m, 1, 0.f, cf.data(), s.m, 1);
    else kiln::cpu::sgemm(s.m, s.n, s.k, 1.f, af.data(), s.k, 1, wf.data(), 1, s.k, 0.f, cf.data(), s.n, 1);
  });
  const double ops = 2.0 * s.m * s.n * s.k;
  auto report = [&](const char* path, double int8_s) {
    std::printf("qgemm m=%ld n=%ld k=%ld out=%s path=%s int8_gops=%.1f float_gflops=%.1f speedup=%.2f\n",
                static_cast<long>(s.m), static_cast<long>(s.n), static_cast<long>(s.k), s.conv ? "u8_nchw" : "u8",
                path, ops / int8_s * 1e-9, ops / float_s * 1e-9, float_s / int8_s);
  };
  for (QGemmPath path : kiln::cpu::qgemm_paths_available()) {
    auto packed = kiln::cpu::pack_qweight(w.data(), s.n, s.k, s.k, path);
    report(std::string(kiln::cpu::qgemm_path_name(path)).c_str(),
           time_best([&] { kiln::cpu::qgemm(s.m, a.data(), s.k, *packed, o); }));
    if (path == QGemmPath::Amx)
      report("amx-tiles",
             time_best([&] { kiln::cpu::qgemm_detail::qgemm_own_kernel(s.m, a.data(), s.k, *packed, o); }));
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  kiln::set_num_threads(1);
  std::vector<Shape> shapes;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--shape") == 0 && i + 1 < argc) {
      long m, n, k;
      if (std::sscanf(argv[++i], "%ldx%ldx%ld", &m, &n, &k) != 3) {
        std::fprintf(stderr, "--shape wants MxNxK, got %s\n", argv[i]);
        return 2;
      }
      shapes.push_back({m, n, k, false});
    } else {
      std::fprintf(stderr, "usage: %s [--shape MxNxK]\n", argv[0]);
      return 2;
    }
  }
  if (shapes.empty()) {
    for (int64_t m : {1, 64}) {
      shapes.push_back({m, 120, 400, false});
      shapes.push_back({m, 84, 120, false});
      shapes.push_back({m, 10, 84, false});
    }
    const Shape convs[] = {{784, 6, 75, true},   {100, 16, 150, true}, {1024, 16, 27, true}, {1024, 16, 144, true},
                           {256, 32, 144, true}, {256, 32, 288, true}, {64, 64, 288, true},  {64, 64, 576, true}};
    for (const Shape& c : convs) shapes.push_back(c);
  }
  for (const Shape& s : shapes) run_shape(s);
  return 0;
}
