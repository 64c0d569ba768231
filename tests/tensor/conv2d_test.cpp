// conv2d and conv2d_backward against a float64 direct loop written from the
// definition, as adjoints of each other, and by finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <initializer_list>
#include <string>

#include "tensor/cpu/conv2d_direct.h"
#include "tensor/cpu/cpu_features.h"
#include "tensor/ops.h"
#include "tests/tensor/test_util.h"

namespace kiln {

using namespace kiln::ops;
namespace {

std::vector<double> values(const Tensor& t) {
  std::vector<double> v(t.numel());
  for (int64_t k = 0; k < t.numel(); ++k) v[k] = flat_value(t, k);
  return v;
}

std::vector<double> absolute(std::vector<double> v) {
  for (double& e : v) e = std::abs(e);
  return v;
}

Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed) {
  return from_vector<double>(pseudo_random(shape_numel(shape), -1.0, 1.0, seed), shape).to(dtype);
}

// One convolution: x (N, C, H, W), weight (OC, C/groups, kh, kw).
struct Case {
  Shape x_shape;
  int64_t out_channels, kernel_h, kernel_w;
  Conv2dParams p;
  bool bias = true;

  int64_t n() const { return x_shape[0]; }
  int64_t c() const { return x_shape[1]; }
  int64_t h() const { return x_shape[2]; }
  int64_t w() const { return x_shape[3]; }
  int64_t oh() const { return (h() + 2 * p.padding.h - p.dilation.h * (kernel_h - 1) - 1) / p.stride.h + 1; }
  int64_t ow() const { return (w() + 2 * p.padding.w - p.dilation.w * (kernel_w - 1) - 1) / p.stride.w + 1; }
  Shape weight_shape() const { return {out_channels, c() / p.groups, kernel_h, kernel_w}; }
  Shape out_shape() const { return {n(), out_channels, oh(), ow()}; }
};

std::string describe(const Case& k) {
  return detail::str("x ", k.x_shape, " w ", k.weight_shape(), " stride ", k.p.stride.h, "x", k.p.stride.w, " pad ",
                     k.p.padding.h, "x", k.p.padding.w, " dilation ", k.p.dilation.h, "x", k.p.dilation.w, " groups ",
                     k.p.groups, k.bias ? " bias" : "");
}

// Calls fn(out_index, x_index, w_index) for every term out += x * w of the
// convolution's sum (taps in the padding have none): the forward and all
// three gradients are read from these triples.
template <class Fn>
void for_each_term(const Case& k, const Fn& fn) {
  const int64_t cg = k.c() / k.p.groups, og = k.out_channels / k.p.groups;
  for (int64_t n = 0; n < k.n(); ++n)
    for (int64_t oc = 0; oc < k.out_channels; ++oc)
      for (int64_t oy = 0; oy < k.oh(); ++oy)
        for (int64_t ox = 0; ox < k.ow(); ++ox)
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t ki = 0; ki < k.kernel_h; ++ki)
              for (int64_t kj = 0; kj < k.kernel_w; ++kj) {
                const int64_t c = oc / og * cg + ci;
                const int64_t iy = oy * k.p.stride.h - k.p.padding.h + ki * k.p.dilation.h;
                const int64_t ix = ox * k.p.stride.w - k.p.padding.w + kj * k.p.dilation.w;
                if (iy < 0 || iy >= k.h() || ix < 0 || ix >= k.w()) continue;
                const int64_t out = ((n * k.out_channels + oc) * k.oh() + oy) * k.ow() + ox;
                fn(out, ((n * k.c() + c) * k.h() + iy) * k.w() + ix, ((oc * cg + ci) * k.kernel_h + ki) * k.kernel_w + kj);
              }
}

struct Reference {
  std::vector<double> out, grad_input, grad_weight, grad_bias;
};

// out = conv(x, w) + b and, for grad_out g, the three gradients, in float64.
Reference direct(const Case& k, const std::vector<double>& x, const std::vector<double>& w,
                 const std::vector<double>& b, const std::vector<double>& g) {
  Reference r{std::vector<double>(shape_numel(k.out_shape()), 0.0), std::vector<double>(x.size(), 0.0),
              std::vector<double>(w.size(), 0.0), std::vector<double>(k.out_channels, 0.0)};
  const int64_t plane = k.oh() * k.ow();
  for (int64_t i = 0; i < static_cast<int64_t>(r.out.size()); ++i) {
    const int64_t oc = i / plane % k.out_channels;
    if (!b.empty()) r.out[i] = b[oc];
    r.grad_bias[oc] += g[i];
  }
  for_each_term(k, [&](int64_t out, int64_t xi, int64_t wi) {
    r.out[out] += x[xi] * w[wi];
    r.grad_input[xi] += w[wi] * g[out];
    r.grad_weight[wi] += x[xi] * g[out];
  });
  return r;
}

// Expects got == want within `rel` of `scale`, the same sum over absolute
// values (the size rounding errors grow with).
void expect_close(const std::vector<double>& got, const std::vector<double>& want, const std::vector<double>& scale,
                  double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rel * scale[i] + 1e-300) << what << " at " << i;
  }
}

// Runs conv2d and conv2d_backward for `k` on x, w, b (may be undefined) and
// grad_out g, any of them non-contiguous views, and checks all four results
// against the reference, once per thread count in `threads`.
void check_case(const Case& k, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& g,
                std::initializer_list<int> threads = {2}) {
  const DType dtype = x.dtype();
  // The reference reads the values as rounded to `dtype`.
  std::vector<double> xv = values(x), wv = values(w), bv = b.defined() ? values(b) : std::vector<double>{};
  std::vector<double> gv = values(g);
  Reference want = direct(k, xv, wv, bv, gv);
  Reference scale = direct(k, absolute(xv), absolute(wv), absolute(bv), absolute(gv));
  const double rel = dtype == DType::Float64 ? 1e-13 : 2e-6;

  for (int t : threads) {
    set_num_threads(t);
    const std::string what = describe(k) + " " + std::string(dtype_name(dtype)) + " threads " + std::to_string(t);
    Tensor out = conv2d(x, w, b, k.p);
    ASSERT_EQ(out.shape(), k.out_shape()) << what;
    ASSERT_EQ(out.dtype(), dtype);
    expect_close(values(out), want.out, scale.out, rel, what + " out");

    Conv2dGrads grads = conv2d_backward(g, x, w, k.p, {true, true, true});
    ASSERT_EQ(grads.grad_input.shape(), k.x_shape) << what;
    ASSERT_EQ(grads.grad_weight.shape(), k.weight_shape()) << what;
    ASSERT_EQ(grads.grad_bias.shape(), (Shape{k.out_channels})) << what;
    expect_close(values(grads.grad_input), want.grad_input, scale.grad_input, rel, what + " grad_input");
    expect_close(values(grads.grad_weight), want.grad_weight, scale.grad_weight, rel, what + " grad_weight");
    expect_close(values(grads.grad_bias), want.grad_bias, scale.grad_bias, rel, what + " grad_bias");
  }
}

// As above with random weight, bias (when k.bias) and grad_out.
void check_case(const Case& k, const Tensor& x, uint64_t seed, std::initializer_list<int> threads = {2}) {
  const DType dtype = x.dtype();
  check_case(k, x, random_tensor(k.weight_shape(), dtype, seed + 1),
             k.bias ? random_tensor({k.out_channels}, dtype, seed + 2) : Tensor(),
             random_tensor(k.out_shape(), dtype, seed + 3), threads);
}

Conv2dParams params(int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh = 1, int64_t dw = 1,
                    int64_t groups = 1) {
  return Conv2dParams{.stride = {sh, sw}, .padding = {ph, pw}, .dilation = {dh, dw}, .groups = groups};
}

// Stride 2, padding, dilation, groups (depthwise and with a channel
// multiplier), non-square kernels, a 1x1 kernel, a kernel as large as the
// padded image, an odd batch with work enough to spread its images over
// threads (uneven ranges), and a single image large enough that the GEMMs
// inside it run on several threads.
std::vector<Case> cases() {
  return {
      {{2, 3, 7, 7}, 4, 3, 3, params(1, 1, 0, 0)},
      {{2, 3, 9, 8}, 5, 3, 3, params(2, 2, 0, 0), false},
      {{3, 2, 8, 9}, 4, 3, 2, params(1, 2, 2, 1)},
      {{2, 4, 9, 9}, 6, 3, 3, params(1, 1, 2, 2, 2, 2, 2), false},
      {{2, 6, 7, 8}, 6, 3, 3, params(1, 1, 1, 1, 1, 1, 6)},
      {{2, 6, 7, 8}, 12, 3, 3, params(2, 2, 1, 1, 2, 1, 3)},
      {{1, 3, 5, 5}, 2, 5, 5, params(1, 1, 2, 2)},
      {{2, 4, 6, 6}, 3, 1, 1, params(1, 1, 0, 0), false},
      {{5, 32, 24, 23}, 32, 2, 3, params(2, 1, 1, 0, 1, 2)},
      {{1, 8, 64, 64}, 16, 3, 3, params(1, 1, 1, 1)},
  };
}

TEST(Conv2d, MatchesDirectLoopForEveryGeometry) {
  uint64_t seed = 1;
  for (const Case& k : cases()) {
    for (DType dtype : {DType::Float32, DType::Float64}) {
      check_case(k, random_tensor(k.x_shape, dtype, seed), seed);
      seed += 10;
    }
  }
}

TEST(Conv2d, LeNetShapesOnOneAndTwoThreads) {
  const std::vector<Case> lenet = {{{64, 3, 32, 32}, 6, 5, 5, params(1, 1, 0, 0)},
                                   {{64, 6, 14, 14}, 16, 5, 5, params(1, 1, 0, 0)}};
  for (const Case& k : lenet) check_case(k, random_tensor(k.x_shape, DType::Float32, 5), 5, {1, 2});
}

// Float32 stride-1 convolutions take the direct path (Note [Direct
// convolution over a wide output]) on AVX2 machines: every output-channel
// count up to 13 reaches each register block of 1..6 rows, paddings of 0..2,
// odd widths leave the last vectors partly past the wide row, and a batch of
// 5 on 2 threads sums grad_weight from uneven ranges. 8, 16 and 24 output
// channels take the forward with channels in the vector (Note [Direct
// convolution with channels in the vector]): blocks of 16 and 8 channels,
// and position tiles of 1..6 as the plane's 9*(8 + 2*pad) positions
// divide by 6.
TEST(Conv2d, DirectPathForEveryRowBlockAndPadding) {
  const Conv2dParams unit, stride2{.stride = 2};
  const Conv2dShape lenet1 = conv2d_shape(3, {32, 32}, 5, unit), strided = conv2d_shape(3, {32, 32}, 5, stride2);
  if (cpu::simd_level() >= cpu::SimdLevel::Avx2) {
    EXPECT_TRUE(cpu::direct_conv_applies(unit, lenet1));
    EXPECT_FALSE(cpu::direct_conv_applies(stride2, strided));
  } else {
    EXPECT_FALSE(cpu::direct_conv_applies(unit, lenet1)) << "the direct path needs AVX2";
  }
  uint64_t seed = 300;
  for (int64_t oc : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 16, 24}) {
    if (oc % 8 == 0) {
      EXPECT_TRUE(cpu::make_direct_conv_plan(unit, conv2d_shape(2, {9, 11}, {3, 4}, unit), oc).forward_by_channel)
          << oc;
    }
    for (int64_t pad = 0; pad <= 2; ++pad) {
      Case k{{5, 2, 9, 11}, oc, 3, 4, params(1, 1, pad, pad), oc % 2 == 0};
      check_case(k, random_tensor(k.x_shape, DType::Float32, seed), seed, {1, 2});
      seed += 10;
    }
  }
}

TEST(Conv2d, NonContiguousOperands) {
  for (const Case& k : cases()) {
    if (k.n() > 3) continue;  // the large single image adds nothing here
    // Every other column of a wider tensor, and NHWC memory seen as NCHW.
    Tensor every_other = random_tensor({k.n(), k.c(), k.h(), 2 * k.w()}, DType::Float32, 20).slice(3, 0, 2 * k.w(), 2);
    Tensor nhwc = random_tensor({k.n(), k.h(), k.w(), k.c()}, DType::Float64, 21).permute({0, 3, 1, 2});
    check_case(k, every_other, 22);
    check_case(k, nhwc, 23);
  }
  // A weight stored with kh and kw swapped, and an expanded grad_out (the
  // gradient of a sum), in both dtypes.
  Case k{{2, 3, 6, 6}, 3, 3, 3, params(1, 1, 1, 1)};
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Tensor w = random_tensor({3, 3, 3, 3}, dtype, 25).transpose(2, 3);
    Tensor g = ones({1}, dtype).expand(k.out_shape());
    check_case(k, random_tensor(k.x_shape, dtype, 24), w, random_tensor({3}, dtype, 26), g);
    EXPECT_EQ(values(conv2d_backward(g, zeros(k.x_shape, dtype), w, k.p, {false, false, true}).grad_bias),
              std::vector<double>(3, 72.0));
  }
}

double dot(const Tensor& a, const Tensor& b) {
  std::vector<double> av = values(a), bv = values(b);
  double s = 0.0;
  for (size_t i = 0; i < av.size(); ++i) s += av[i] * bv[i];
  return s;
}

TEST(Conv2d, GradientsAreAdjointsOfTheForward) {
  // Without bias conv is bilinear: <conv(x, w), g> = <x, grad_input> = <w, grad_weight>.
  for (const Case& k : cases()) {
    Tensor x = random_tensor(k.x_shape, DType::Float64, 30);
    Tensor w = random_tensor(k.weight_shape(), DType::Float64, 31);
    Tensor g = random_tensor(k.out_shape(), DType::Float64, 32);
    Conv2dGrads grads = conv2d_backward(g, x, w, k.p, {true, true, false});
    double lhs = dot(conv2d(x, w, Tensor(), k.p), g);
    double scale = dot(conv2d(abs(x), abs(w), Tensor(), k.p), abs(g));
    EXPECT_GT(scale, 0.0);
    EXPECT_NEAR(dot(x, grads.grad_input), lhs, 1e-12 * scale) << describe(k);
    EXPECT_NEAR(dot(w, grads.grad_weight), lhs, 1e-12 * scale) << describe(k);
    EXPECT_FALSE(grads.grad_bias.defined());
  }
}

TEST(Conv2d, GradientsMatchFiniteDifferences) {
  // d/dv sum(conv(x, w, b) * g) by central differences, for every element
  // of x, w and b of a small strided, padded, grouped case.
  Case k{{2, 4, 5, 6}, 4, 3, 2, params(2, 1, 1, 1, 1, 2, 2)};
  Tensor x = random_tensor(k.x_shape, DType::Float64, 40);
  Tensor w = random_tensor(k.weight_shape(), DType::Float64, 41);
  Tensor b = random_tensor({4}, DType::Float64, 42);
  Tensor g = random_tensor(k.out_shape(), DType::Float64, 43);
  Conv2dGrads grads = conv2d_backward(g, x, w, k.p, {true, true, true});
  const double eps = 1e-4;
  auto check = [&](Tensor& v, const Tensor& grad, const char* name) {
    double* p = v.data<double>();
    for (int64_t i = 0; i < v.numel(); ++i) {
      const double old = p[i];
      p[i] = old + eps;
      double up = dot(conv2d(x, w, b, k.p), g);
      p[i] = old - eps;
      double down = dot(conv2d(x, w, b, k.p), g);
      p[i] = old;
      EXPECT_NEAR((up - down) / (2 * eps), flat_value(grad, i), 1e-8) << name << " element " << i;
    }
  };
  check(x, grads.grad_input, "x");
  check(w, grads.grad_weight, "weight");
  check(b, grads.grad_bias, "bias");
}

TEST(Conv2d, UnbatchedInputIsOneImage) {
  Case k{{1, 3, 7, 6}, 4, 3, 3, params(2, 1, 1, 1)};
  Tensor x = random_tensor({3, 7, 6}, DType::Float32, 50);
  Tensor w = random_tensor(k.weight_shape(), DType::Float32, 51);
  Tensor b = random_tensor({4}, DType::Float32, 52);
  Tensor g = random_tensor({4, k.oh(), k.ow()}, DType::Float32, 53);
  Tensor out = conv2d(x, w, b, k.p);
  ASSERT_EQ(out.shape(), (Shape{4, k.oh(), k.ow()}));
  EXPECT_EQ(values(out), values(conv2d(x.unsqueeze(0), w, b, k.p)));
  Conv2dGrads single = conv2d_backward(g, x, w, k.p, {true, true, true});
  Conv2dGrads batched = conv2d_backward(g.unsqueeze(0), x.unsqueeze(0), w, k.p, {true, true, true});
  ASSERT_EQ(single.grad_input.shape(), (Shape{3, 7, 6}));
  EXPECT_EQ(values(single.grad_input), values(batched.grad_input));
  EXPECT_EQ(values(single.grad_weight), values(batched.grad_weight));
  EXPECT_EQ(values(single.grad_bias), values(batched.grad_bias));
}

TEST(Conv2d, SixteenBitFloatsComputeInFloat32) {
  Case k{{2, 3, 8, 8}, 4, 3, 3, params(1, 1, 1, 1)};
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    Tensor x = random_tensor(k.x_shape, dtype, 60), w = random_tensor(k.weight_shape(), dtype, 61);
    Tensor b = random_tensor({4}, dtype, 62), g = random_tensor(k.out_shape(), dtype, 63);
    Tensor out = conv2d(x, w, b, k.p);
    ASSERT_EQ(out.dtype(), dtype);
    // The float32 result of the same (rounded) values, rounded once to dtype.
    Tensor x32 = x.to(DType::Float32), w32 = w.to(DType::Float32);
    EXPECT_EQ(values(out), values(conv2d(x32, w32, b.to(DType::Float32), k.p).to(dtype)));
    Conv2dGrads grads = conv2d_backward(g, x, w, k.p, {true, true, true});
    Conv2dGrads grads32 = conv2d_backward(g.to(DType::Float32), x32, w32, k.p, {true, true, true});
    EXPECT_EQ(grads.grad_input.dtype(), dtype);
    EXPECT_EQ(values(grads.grad_input), values(grads32.grad_input.to(dtype)));
    EXPECT_EQ(values(grads.grad_weight), values(grads32.grad_weight.to(dtype)));
    EXPECT_EQ(values(grads.grad_bias), values(grads32.grad_bias.to(dtype)));
  }
}

TEST(Conv2d, OutputMaskLeavesUnaskedGradientsUndefined) {
  Case k{{2, 3, 6, 6}, 4, 3, 3, params(1, 1, 0, 0)};
  Tensor x = random_tensor(k.x_shape, DType::Float64, 70), w = random_tensor(k.weight_shape(), DType::Float64, 71);
  Tensor g = random_tensor(k.out_shape(), DType::Float64, 72);
  Conv2dGrads all = conv2d_backward(g, x, w, k.p, {true, true, true});
  for (int mask = 0; mask < 8; ++mask) {
    std::array<bool, 3> m{(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0};
    Conv2dGrads some = conv2d_backward(g, x, w, k.p, m);
    ASSERT_EQ(some.grad_input.defined(), m[0]);
    ASSERT_EQ(some.grad_weight.defined(), m[1]);
    ASSERT_EQ(some.grad_bias.defined(), m[2]);
    if (m[0]) {
      EXPECT_EQ(values(some.grad_input), values(all.grad_input));
    }
    if (m[1]) {
      EXPECT_EQ(values(some.grad_weight), values(all.grad_weight));
    }
    if (m[2]) {
      EXPECT_EQ(values(some.grad_bias), values(all.grad_bias));
    }
  }
}

TEST(Conv2d, EmptyBatchGivesZeroParameterGradients) {
  set_num_threads(2);
  Tensor x = zeros({0, 3, 6, 6}), w = random_tensor({4, 3, 3, 3}, DType::Float32, 80);
  Tensor out = conv2d(x, w, random_tensor({4}, DType::Float32, 81));
  EXPECT_EQ(out.shape(), (Shape{0, 4, 4, 4}));
  Conv2dGrads grads = conv2d_backward(zeros({0, 4, 4, 4}), x, w, {}, {true, true, true});
  EXPECT_EQ(grads.grad_input.shape(), (Shape{0, 3, 6, 6}));
  EXPECT_EQ(values(grads.grad_weight), std::vector<double>(4 * 27, 0.0));
  EXPECT_EQ(values(grads.grad_bias), std::vector<double>(4, 0.0));
}

TEST(Conv2d, Errors) {
  Tensor x = zeros({2, 4, 8, 8}), w = zeros({6, 2, 3, 3});
  Conv2dParams two_groups;
  two_groups.groups = 2;
  expect_error([&] { conv2d(zeros({4, 8}), w); },
               "conv2d: expected a 3-d (C, H, W) or 4-d (N, C, H, W) input, got shape [4, 8]");
  expect_error([&] { conv2d(x, zeros({6, 4, 3})); },
               "conv2d: expected a 4-d weight (OC, C/groups, kh, kw), got shape [6, 4, 3]");
  expect_error([&] { conv2d(x, w); },
               "conv2d: input of shape [2, 4, 8, 8] has 4 channels, but weight of shape [6, 2, 3, 3] with groups=1 "
               "expects 2 * 1 = 2");
  expect_error([&] { conv2d(x, zeros({5, 2, 3, 3}), Tensor(), two_groups); },
               "conv2d: weight of shape [5, 2, 3, 3] has 5 output channels, not divisible by groups=2");
  Conv2dParams no_groups;
  no_groups.groups = 0;
  expect_error([&] { conv2d(x, w, Tensor(), no_groups); }, "conv2d: groups must be positive, got 0");
  expect_error([&] { conv2d(x, w, zeros({5}), two_groups); }, "conv2d: bias must have shape [6], got [5]");
  expect_error([&] { conv2d(x, w, zeros({6}, DType::Float64), two_groups); },
               "conv2d: expected bias of dtype float32 like x, got float64");
  expect_error([&] { conv2d(x, w.to(DType::Float64), Tensor(), two_groups); },
               "conv2d: expected x and weight of one dtype, got float32 and float64");
  expect_error([&] { conv2d(x.to(DType::Int64), w.to(DType::Int64), Tensor(), two_groups); },
               "conv2d: expected floating point tensors, got int64");
  expect_error([&] { conv2d(x, zeros({6, 4, 9, 3})); },
               "conv2d: kernel 9 x 3 with dilation 1 x 1 spans 9 x 3, more than the padded input 8 x 8");
  expect_error([&] { conv2d(x, zeros({6, 4, 3, 3}), Tensor(), params(1, 1, 0, 0, 4, 1)); },
               "conv2d: kernel 3 x 3 with dilation 4 x 1 spans 9 x 3, more than the padded input 8 x 8");
  expect_error([&] { conv2d(x, zeros({6, 4, 3, 3}), Tensor(), params(0, 1, 0, 0)); },
               "conv2d: stride must be positive, got 0 x 1");
  expect_error([&] { conv2d(x, zeros({6, 4, 3, 3}), Tensor(), params(1, 1, 0, 0, 1, -1)); },
               "conv2d: dilation must be positive, got 1 x -1");
  expect_error([&] { conv2d(x, zeros({6, 4, 3, 3}), Tensor(), params(1, 1, -1, 0)); },
               "conv2d: padding must be non-negative, got -1 x 0");
  expect_error([&] { conv2d(Tensor(), w); }, "conv2d: x or weight is undefined");
  expect_error([&] { conv2d(tensor_claiming_device(cuda_device(0), 4).view({1, 1, 2, 2}),
                            zeros({1, 1, 1, 1})); },
               "conv2d: expected x and weight on one device, got cuda:0 and cpu");
}

TEST(Conv2dBackward, Errors) {
  Tensor x = zeros({2, 4, 8, 8}), w = zeros({6, 4, 3, 3});
  expect_error([&] { conv2d_backward(zeros({2, 6, 6, 5}), x, w, {}); },
               "conv2d_backward: grad_out has shape [2, 6, 6, 5], but conv2d's output for x [2, 4, 8, 8] and weight "
               "[6, 4, 3, 3] has shape [2, 6, 6, 6]");
  expect_error([&] { conv2d_backward(zeros({6, 6, 6}), x, w, {}); }, "conv2d_backward: grad_out has shape [6, 6, 6]");
  expect_error([&] { conv2d_backward(zeros({2, 6, 6, 6}, DType::Float64), x, w, {}); },
               "conv2d_backward: grad_out is float64 on cpu, x is float32 on cpu");
  expect_error([&] { conv2d_backward(Tensor(), x, w, {}); }, "conv2d_backward: grad_out is undefined");
  expect_error([&] { conv2d_backward(zeros({2, 6, 6, 6}), x, zeros({6, 3, 3, 3}), {}); },
               "conv2d_backward: input of shape [2, 4, 8, 8] has 4 channels, but weight of shape [6, 3, 3, 3]");
  expect_error([&] { conv2d_backward(zeros({2, 6, 6, 6}), x, w, params(1, 1, -2, -2)); },
               "conv2d_backward: padding must be non-negative, got -2 x -2");
}

}  // namespace
}  // namespace kiln
