// conv: Kiln's conv2d forward and backward on LeNet-5's two convolutions
// (batch 64, float32) against a direct loop, on 1 and 2 threads.
//
// The anchor is the textbook direct convolution: for each output element a
// sum over (c, ki, kj), compiled -O3 and split over images (forward, and
// grad_input) or output channels (grad_weight) with the same threads. One
// line per (layer, pass, threads):
//   conv layer=conv1 pass=forward threads=1 kiln_ms=.. direct_ms=.. ratio=.. wide_ms=.. batched_ms=..
// ratio = direct_ms / kiln_ms (how many times faster Kiln is). The backward
// pass computes all three gradients. Times are the best of `reps` runs after
// a warm-up, alternating the variants, as bench/bandwidth.cpp does.
//
// Two other layouts of the same im2col + GEMM are timed beside Kiln's
// per-image GEMMs (Note [Convolution as per-image GEMMs] in tensor/conv.h),
// built here from the public ops and backend calls:
// - wide: cols (CKK, N*P) for the whole batch and one GEMM
//   weight (OC, CKK) @ cols, then a transpose (OC, N, P) -> (N, OC, P);
// - batched: cols (N, CKK, P) for the whole batch and one batched GEMM call
//   with the weight broadcast (batch stride 0), which threads over images.
// Every variant is checked against Kiln's result before it is timed.
//
// Usage: build/bench/conv [reps]   (default 15)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tensor/ops.h"

namespace {

using kiln::Conv2dParams;
using kiln::Conv2dShape;
using kiln::Tensor;
namespace ops = kiln::ops;

struct Layer {
  const char* name;
  int64_t n, c, h, w, oc, k;
};

// ---- the direct-loop anchor --------------------------------------------------

struct Dims {
  int64_t n, c, h, w, oc, k, oh, ow;
};

// out: (N, OC, oh, ow) = conv(x (N, C, H, W), w (OC, C, k, k)) + b; stride 1, no padding.
void direct_forward(const Dims& d, const float* x, const float* w, const float* b, float* out, int threads) {
#pragma omp parallel for num_threads(threads)
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t o = 0; o < d.oc; ++o)
      for (int64_t oy = 0; oy < d.oh; ++oy)
        for (int64_t ox = 0; ox < d.ow; ++ox) {
          float sum = b[o];
          for (int64_t c = 0; c < d.c; ++c)
            for (int64_t ki = 0; ki < d.k; ++ki)
              for (int64_t kj = 0; kj < d.k; ++kj)
                sum += x[((n * d.c + c) * d.h + oy + ki) * d.w + ox + kj] * w[((o * d.c + c) * d.k + ki) * d.k + kj];
          out[((n * d.oc + o) * d.oh + oy) * d.ow + ox] = sum;
        }
}

// The three gradients for grad_out g: (N, OC, oh, ow).
void direct_backward(const Dims& d, const float* x, const float* w, const float* g, float* gx, float* gw, float* gb,
                     int threads) {
#pragma omp parallel num_threads(threads)
  {
#pragma omp for
    for (int64_t n = 0; n < d.n; ++n) {
      std::fill(gx + n * d.c * d.h * d.w, gx + (n + 1) * d.c * d.h * d.w, 0.f);
      for (int64_t o = 0; o < d.oc; ++o)
        for (int64_t oy = 0; oy < d.oh; ++oy)
          for (int64_t ox = 0; ox < d.ow; ++ox) {
            const float go = g[((n * d.oc + o) * d.oh + oy) * d.ow + ox];
            for (int64_t c = 0; c < d.c; ++c)
              for (int64_t ki = 0; ki < d.k; ++ki)
                for (int64_t kj = 0; kj < d.k; ++kj)
                  gx[((n * d.c + c) * d.h + oy + ki) * d.w + ox + kj] += go * w[((o * d.c + c) * d.k + ki) * d.k + kj];
          }
    }
#pragma omp for
    for (int64_t o = 0; o < d.oc; ++o) {
      for (int64_t c = 0; c < d.c; ++c)
        for (int64_t ki = 0; ki < d.k; ++ki)
          for (int64_t kj = 0; kj < d.k; ++kj) {
            float sum = 0.f;
            for (int64_t n = 0; n < d.n; ++n)
              for (int64_t oy = 0; oy < d.oh; ++oy)
                for (int64_t ox = 0; ox < d.ow; ++ox)
                  sum += x[((n * d.c + c) * d.h + oy + ki) * d.w + ox + kj] * g[((n * d.oc + o) * d.oh + oy) * d.ow + ox];
            gw[((o * d.c + c) * d.k + ki) * d.k + kj] = sum;
          }
      float sum = 0.f;
      for (int64_t n = 0; n < d.n; ++n)
        for (int64_t p = 0; p < d.oh * d.ow; ++p) sum += g[(n * d.oc + o) * d.oh * d.ow + p];
      gb[o] = sum;
    }
  }
}

// ---- the two other GEMM layouts ----------------------------------------------

// LeNet's layers' settings: stride 1, no padding.
const Conv2dParams kParams;

// cols (CKK, N, P) filled by im2col through a permuted view (N, CKK, P).
Tensor wide_cols(const Tensor& x, const Conv2dShape& s, int64_t ckk, int64_t p) {
  Tensor cols = Tensor::empty({ckk, x.size(0), p});
  kiln::backend_for(kiln::kCPU).im2col(cols.permute({1, 0, 2}), x, kParams, s);
  return cols;
}

ops::Conv2dGrads wide_backward(const Tensor& go, const Tensor& x, const Tensor& w2, const Conv2dShape& s) {
  kiln::Backend& cpu = kiln::backend_for(kiln::kCPU);
  const int64_t n = x.size(0), oc = w2.size(0), ckk = w2.size(1), p = s.output.h * s.output.w;
  Tensor go_t = go.view({n, oc, p}).permute({1, 0, 2}).contiguous().view({1, oc, n * p});  // (1, OC, N*P)
  Tensor cols = wide_cols(x, s, ckk, p).view({1, ckk, n * p});                             // (1, CKK, N*P)
  Tensor gw = Tensor::empty({1, oc, ckk});
  cpu.gemm(gw, go_t, cols.transpose(1, 2), 1.0, 0.0);
  Tensor gcols = Tensor::empty({ckk, n, p});  // (CKK, N, P)
  cpu.gemm(gcols.view({1, ckk, n * p}), w2.t().unsqueeze(0), go_t, 1.0, 0.0);
  Tensor gx = Tensor::empty(x.shape());
  cpu.col2im(gx, gcols.permute({1, 0, 2}), kParams, s);
  return {gx, gw, ops::sum(go, {0, 2, 3})};
}

Tensor wide_forward(const Tensor& x, const Tensor& w2, const Tensor& b, const Conv2dShape& s) {
  const int64_t n = x.size(0), oc = w2.size(0), ckk = w2.size(1), p = s.output.h * s.output.w;
  Tensor out = Tensor::empty({oc, n, p});  // (OC, N, P), bias first, the GEMM adds to it
  out.copy_(b.view({oc, 1, 1}).expand({oc, n, p}));
  kiln::backend_for(kiln::kCPU).gemm(out.view({1, oc, n * p}), w2.unsqueeze(0),
                                     wide_cols(x, s, ckk, p).view({1, ckk, n * p}), 1.0, 1.0);
  return out.permute({1, 0, 2}).contiguous().view({n, oc, s.output.h, s.output.w});
}

Tensor batched_forward(const Tensor& x, const Tensor& w2, const Tensor& b, const Conv2dShape& s) {
  const int64_t n = x.size(0), oc = w2.size(0), p = s.output.h * s.output.w;
  Tensor out = Tensor::empty({n, oc, p});
  out.copy_(b.view({1, oc, 1}).expand({n, oc, p}));
  kiln::backend_for(kiln::kCPU).gemm(out, w2.unsqueeze(0).expand({n, oc, w2.size(1)}), ops::im2col(x, s.kernel), 1.0,
                                     1.0);
  return out.view({n, oc, s.output.h, s.output.w});
}

ops::Conv2dGrads batched_backward(const Tensor& go, const Tensor& x, const Tensor& w2, const Conv2dShape& s) {
  kiln::Backend& cpu = kiln::backend_for(kiln::kCPU);
  const int64_t n = x.size(0), oc = w2.size(0), ckk = w2.size(1), p = s.output.h * s.output.w;
  Tensor go3 = go.view({n, oc, p});
  Tensor gw = ops::sum(ops::bmm(go3, ops::im2col(x, s.kernel).transpose(1, 2)), {0});  // sum_n (OC, CKK)
  Tensor gcols = Tensor::empty({n, ckk, p});
  cpu.gemm(gcols, w2.t().unsqueeze(0).expand({n, ckk, oc}), go3, 1.0, 0.0);
  return {ops::col2im(gcols, s.input, s.kernel), gw, ops::sum(go, {0, 2, 3})};
}

// ---- timing -------------------------------------------------------------------

// Best wall time of each function over `reps` alternating rounds after a warm-up.
std::vector<double> best_ms(const std::vector<std::function<void()>>& fns, int reps) {
  std::vector<double> best(fns.size(), 1e30);
  for (const auto& fn : fns) fn();
  for (int r = 0; r < reps; ++r) {
    for (size_t i = 0; i < fns.size(); ++i) {
      auto start = std::chrono::steady_clock::now();
      fns[i]();
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      best[i] = std::min(best[i], ms);
    }
  }
  return best;
}

// Largest |a - b| relative to max |b|: the variants must agree before they are timed.
double rel_diff(const Tensor& a, const Tensor& b) {
  Tensor ac = a.contiguous(), bc = b.contiguous();
  const float* pa = ac.data<float>();
  const float* pb = bc.data<float>();
  double diff = 0.0, scale = 0.0;
  for (int64_t i = 0; i < ac.numel(); ++i) {
    diff = std::max(diff, double(std::abs(pa[i] - pb[i])));
    scale = std::max(scale, double(std::abs(pb[i])));
  }
  return diff / std::max(scale, 1e-30);
}

void require_close(const Tensor& got, const Tensor& want, const std::string& what) {
  double d = rel_diff(got, want);
  if (d > 1e-4) {
    std::fprintf(stderr, "conv: %s differs from kiln's result (relative %.3g)\n", what.c_str(), d);
    std::exit(1);
  }
}

// float32 values in [-1, 1) from a 64-bit LCG; `seed` picks the stream.
Tensor random(const kiln::Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = static_cast<float>(static_cast<double>(s >> 11) / static_cast<double>(1ull << 52) - 1.0);
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = argc > 1 ? std::atoi(argv[1]) : 15;
  if (argc > 2 || reps < 1) {
    std::fprintf(stderr, "usage: conv [reps]   (reps >= 1 timed repetitions, default 15)\n");
    return 2;
  }
  const std::vector<Layer> layers = {{"conv1", 64, 3, 32, 32, 6, 5}, {"conv2", 64, 6, 14, 14, 16, 5}};
  const int max_threads = kiln::get_num_threads();
  for (const Layer& l : layers) {
    Tensor x = random({l.n, l.c, l.h, l.w}, 1), w = random({l.oc, l.c, l.k, l.k}, 2), b = random({l.oc}, 3);
    const Dims d{l.n, l.c, l.h, l.w, l.oc, l.k, l.h - l.k + 1, l.w - l.k + 1};
    Tensor go = random({l.n, l.oc, d.oh, d.ow}, 4);
    const Conv2dShape shape = kiln::conv2d_shape(l.c, {l.h, l.w}, l.k, kParams);
    Tensor w2 = w.view({l.oc, l.c * l.k * l.k});
    Tensor out_direct = Tensor::empty({l.n, l.oc, d.oh, d.ow});
    Tensor gx = Tensor::empty(x.shape()), gw = Tensor::empty(w.shape()), gb = Tensor::empty({l.oc});
    auto run_direct_forward = [&](int threads) {
      direct_forward(d, x.data<float>(), w.data<float>(), b.data<float>(), out_direct.data<float>(), threads);
    };
    auto run_direct_backward = [&](int threads) {
      direct_backward(d, x.data<float>(), w.data<float>(), go.data<float>(), gx.data<float>(), gw.data<float>(),
                      gb.data<float>(), threads);
    };

    // Every variant against Kiln's result, once.
    Tensor out = ops::conv2d(x, w, b);
    ops::Conv2dGrads grads = ops::conv2d_backward(go, x, w, {}, {true, true, true});
    run_direct_forward(1);
    run_direct_backward(1);
    require_close(out_direct, out, "direct forward");
    require_close(wide_forward(x, w2, b, shape), out, "wide forward");
    require_close(batched_forward(x, w2, b, shape), out, "batched forward");
    ops::Conv2dGrads wide = wide_backward(go, x, w2, shape), batched = batched_backward(go, x, w2, shape);
    for (const auto& [got, want, what] : {std::tuple{gx, grads.grad_input, "direct grad_input"},
                                          {gw, grads.grad_weight, "direct grad_weight"},
                                          {gb, grads.grad_bias, "direct grad_bias"},
                                          {wide.grad_input, grads.grad_input, "wide grad_input"},
                                          {wide.grad_weight.view(w.shape()), grads.grad_weight, "wide grad_weight"},
                                          {batched.grad_input, grads.grad_input, "batched grad_input"},
                                          {batched.grad_weight.view(w.shape()), grads.grad_weight,
                                           "batched grad_weight"}}) {
      require_close(got, want, what);
    }

    for (int threads : {1, 2}) {
      if (threads > max_threads && threads > 1) break;
      kiln::set_num_threads(threads);
      Tensor sink;
      ops::Conv2dGrads sink_grads;
      std::vector<double> fwd = best_ms({[&] { sink = ops::conv2d(x, w, b); }, [&] { run_direct_forward(threads); },
                                         [&] { sink = wide_forward(x, w2, b, shape); },
                                         [&] { sink = batched_forward(x, w2, b, shape); }},
                                        reps);
      std::vector<double> bwd =
          best_ms({[&] { sink_grads = ops::conv2d_backward(go, x, w, {}, {true, true, true}); },
                   [&] { run_direct_backward(threads); }, [&] { sink_grads = wide_backward(go, x, w2, shape); },
                   [&] { sink_grads = batched_backward(go, x, w2, shape); }},
                  reps);
      for (const auto& [pass, t] : {std::pair{"forward", fwd}, std::pair{"backward", bwd}}) {
        std::printf("conv layer=%s pass=%s threads=%d kiln_ms=%.3f direct_ms=%.3f ratio=%.2f wide_ms=%.3f "
                    "batched_ms=%.3f\n",
                    l.name, pass, threads, t[0], t[1], t[1] / t[0], t[2], t[3]);
        std::fflush(stdout);
      }
    }
  }
  kiln::set_num_threads(max_threads);
  return 0;
}
