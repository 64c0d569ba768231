// Quantized max, average and adaptive average pooling (ops::max_pool2d,
// avg_pool2d, adaptive_avg_pool2d on quantized tensors) against loops
// written here from torch's window rules and quant_math::average_value;
// the quantized add kernel against add_value, every SIMD level bit for bit;
// and safetensors files keeping QuantParams.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "tensor/cpu/cpu_features.h"
#include "tensor/cpu/cpu_quantized.h"
#include "tensor/cpu/quantized_binary_simd.h"
#include "tensor/cpu/quantized_pool_simd.h"
#include "tensor/memory_layout.h"
#include "tensor/ops.h"
#include "tensor/quant_math.h"
#include "tensor/quantize.h"
#include "tensor/quantized_ops.h"
#include "tensor/safetensors.h"
#include "tests/tensor/test_util.h"

namespace kiln {
namespace {

Tensor random_floats(const Shape& shape, uint64_t seed, double lo = -3, double hi = 3) {
  std::vector<double> v = pseudo_random(shape_numel(shape), lo, hi, seed);
  return from_vector<float>(std::vector<float>(v.begin(), v.end()), shape);
}

std::vector<int64_t> ints(const Tensor& t) {
  std::vector<int64_t> out;
  for (int64_t k = 0; k < t.numel(); ++k) out.push_back(static_cast<int64_t>(flat_value(t, k)));
  return out;
}

// ---- max pooling ---------------------------------------------------------------------

TEST(QuantizedPool, MaxPoolHandExample) {
  // One 4x4 plane of integers 0..15 at scale 0.5, zero point 3.
  std::vector<float> values;
  for (int i = 0; i < 16; ++i) values.push_back(0.5f * static_cast<float>(i - 3));
  Tensor q = ops::quantize_per_tensor(from_vector<float>(values, {1, 1, 4, 4}), 0.5, 3, DType::UInt8);
  Tensor m = ops::max_pool2d(q, {.kernel = 2});
  EXPECT_TRUE(m.is_quantized());
  EXPECT_EQ(m.impl()->quant_params(), q.impl()->quant_params());
  EXPECT_EQ(ints(m), (std::vector<int64_t>{5, 7, 13, 15}));
}

// Max commutes with dequantizing (a monotonic map), so the float op on the
// dequantized input is the reference, for every window shape.
TEST(QuantizedPool, MaxPoolEqualsFloatMaxPoolOfTheDequantizedInput) {
  const MaxPool2dOptions options[] = {
      {.kernel = 2},
      {.kernel = 3, .stride = Size2d(2), .padding = 1},
      {.kernel = 3, .stride = Size2d(2), .padding = 1, .ceil_mode = true},
      {.kernel = {3, 2}, .stride = Size2d(1, 2), .padding = {1, 0}, .dilation = {2, 1}},
      {.kernel = 2, .stride = Size2d(1)},
  };
  for (DType dtype : {DType::UInt8, DType::Int8, DType::Int32}) {
    Tensor q = ops::quantize_per_tensor(random_floats({2, 3, 9, 7}, 3), 0.03, dtype == DType::UInt8 ? 90 : -4, dtype);
    for (const auto& o : options) {
      Tensor m = ops::max_pool2d(q, o);
      EXPECT_EQ(m.dtype(), dtype);
      EXPECT_TRUE(equal(ops::dequantize(m), ops::max_pool2d(ops::dequantize(q), o))) << dtype;
    }
    Tensor three_d = ops::max_pool2d(q.select(0, 1), {.kernel = 2});  // (C, H, W) input
    EXPECT_TRUE(equal(ops::dequantize(three_d), ops::max_pool2d(ops::dequantize(q.select(0, 1)), {.kernel = 2})));
  }
}

// The 2x2 window pools runs of rows per call: across planes when the height
// is even, stopping at each plane's end when it is odd; split over threads
// too.
TEST(QuantizedPool, TwoByTwoRunsOfRowsOverEvenAndOddHeights) {
  const int saved = get_num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const Shape& shape : {Shape{3, 50, 10, 12}, Shape{3, 50, 9, 12}, Shape{1, 1, 3, 5}}) {
      Tensor q = ops::quantize_per_tensor(random_floats(shape, 5), 0.02, 100, DType::UInt8);
      EXPECT_TRUE(equal(ops::dequantize(ops::max_pool2d(q, {.kernel = 2})),
                        ops::max_pool2d(ops::dequantize(q), {.kernel = 2})))
          << q.shape().size() << "-d, height " << shape[2] << " on " << threads << " threads";
    }
  }
  set_num_threads(saved);
}

// The AVX-512 and AVX2 row loops of the 2x2 max pool against the plain
// one, for widths around their 32-output blocks, one row and several, both
// 8-bit dtypes and extreme values.
using RowsU8 = void (*)(uint8_t*, const uint8_t*, int64_t, int64_t, int64_t);
using RowsS8 = void (*)(int8_t*, const int8_t*, int64_t, int64_t, int64_t);

void expect_two_by_two_rows_match_the_plain_loop(RowsU8 rows_u8, RowsS8 rows_s8, const char* isa) {
  for (int64_t ow : {1, 5, 14, 31, 32, 33, 64, 100}) {
    for (int64_t rows : {1, 3}) {
      const int64_t w = 2 * ow + 1;  // an odd row pitch: the last column is never read
      std::vector<double> r = pseudo_random(2 * rows * w, 0, 256, 40 + ow + rows);
      std::vector<uint8_t> u(r.size());
      for (size_t i = 0; i < r.size(); ++i) u[i] = static_cast<uint8_t>(r[i]);
      u[0] = 255, u[1] = 0;  // the extremes, in either dtype
      const auto* s = reinterpret_cast<const int8_t*>(u.data());
      std::vector<uint8_t> want(rows * ow), got(rows * ow, 7);
      std::vector<int8_t> want_s(rows * ow), got_s(rows * ow, 7);
      for (int64_t y = 0; y < rows; ++y) {
        const int64_t r0 = 2 * y * w, r1 = r0 + w;
        for (int64_t x = 0; x < ow; ++x) {
          want[y * ow + x] = std::max({u[r0 + 2 * x], u[r0 + 2 * x + 1], u[r1 + 2 * x], u[r1 + 2 * x + 1]});
          want_s[y * ow + x] = std::max({s[r0 + 2 * x], s[r0 + 2 * x + 1], s[r1 + 2 * x], s[r1 + 2 * x + 1]});
        }
      }
      rows_u8(got.data(), u.data(), w, ow, rows);
      rows_s8(got_s.data(), s, w, ow, rows);
      EXPECT_EQ(got, want) << isa << ", quint8, width " << ow << ", " << rows << " rows";
      EXPECT_EQ(got_s, want_s) << isa << ", qint8, width " << ow << ", " << rows << " rows";
    }
  }
}

TEST(QuantizedPool, TheAvx512TwoByTwoRowsMatchThePlainLoop) {
  if (cpu::simd_level() < cpu::SimdLevel::Avx512) GTEST_SKIP() << "this CPU has no AVX-512: only the plain loop exists";
  expect_two_by_two_rows_match_the_plain_loop(cpu::max_pool_2x2_rows_u8_avx512, cpu::max_pool_2x2_rows_s8_avx512,
                                              "AVX-512");
}

TEST(QuantizedPool, TheAvx2TwoByTwoRowsMatchThePlainLoop) {
  if (cpu::simd_level() < cpu::SimdLevel::Avx2) GTEST_SKIP() << "this CPU has no AVX2: only the plain loop exists";
  expect_two_by_two_rows_match_the_plain_loop(cpu::max_pool_2x2_rows_u8_avx2, cpu::max_pool_2x2_rows_s8_avx2, "AVX2");
}

TEST(QuantizedPool, MaxPoolWithIndicesOfAQuantizedTensorIsAnError) {
  Tensor q = ops::quantize_per_tensor(random_floats({1, 1, 4, 4}, 1), 0.1, 0, DType::Int8);
  expect_error([&] { ops::max_pool2d_with_indices(q, {.kernel = 2}); },
               "max_pool2d_with_indices: the input is a quantized tensor (qint8); quantized max pooling gives values "
               "only: call max_pool2d");
  Tensor pc = ops::quantize_per_channel(random_floats({1, 2, 4, 4}, 1), {0.1, 0.2}, {0, 0}, 1, DType::Int8);
  expect_error([&] { ops::max_pool2d(pc, {.kernel = 2}); },
               "max_pool2d: the input is quantized per channel (axis 1); quantized pooling takes per-tensor");
  expect_error([&] { ops::avg_pool2d(pc, {.kernel = 2}); }, "avg_pool2d: the input is quantized per channel");
  expect_error([&] { ops::max_pool2d(from_vector<int8_t>(std::vector<int8_t>(16, 1), {1, 1, 4, 4}), {.kernel = 2}); },
               "max_pool2d: expected a floating point input, got int8 (integer tensors are pooled only when quantized)");
}

// ---- average pooling -------------------------------------------------------------------

// torch's avg_pool2d on integers q (one plane of h x w), from its rules: the
// window [start, start + k) clipped to [-pad, size + pad) for the divisor
// when count_include_pad, to the input otherwise; the sum of q - zp rounded
// by average_value.
std::vector<int64_t> reference_avg_pool(const std::vector<int64_t>& q, int64_t h, int64_t w, int64_t zp,
                                        quant_math::QRange range, const AvgPool2dOptions& o, int64_t oh, int64_t ow) {
  Size2d stride = o.stride.value_or(o.kernel);
  std::vector<int64_t> out;
  for (int64_t oy = 0; oy < oh; ++oy) {
    for (int64_t ox = 0; ox < ow; ++ox) {
      int64_t y0 = oy * stride.h - o.padding.h, x0 = ox * stride.w - o.padding.w;
      int64_t y1 = std::min(y0 + o.kernel.h, h + o.padding.h), x1 = std::min(x0 + o.kernel.w, w + o.padding.w);
      int64_t padded_count = (y1 - y0) * (x1 - x0);
      int64_t ys = std::max<int64_t>(y0, 0), xs = std::max<int64_t>(x0, 0);
      int64_t ye = std::min(y1, h), xe = std::min(x1, w);
      int64_t sum = 0, inside = 0;
      for (int64_t y = ys; y < ye; ++y)
        for (int64_t x = xs; x < xe; ++x) sum += q[y * w + x] - zp, ++inside;
      if (inside == 0) {
        out.push_back(zp);
        continue;
      }
      int64_t divisor = o.divisor_override ? *o.divisor_override : o.count_include_pad ? padded_count : inside;
      out.push_back(quant_math::average_value(static_cast<int32_t>(sum), static_cast<int32_t>(divisor),
                                              static_cast<float>(zp), static_cast<float>(range.lo),
                                              static_cast<float>(range.hi)));
    }
  }
  return out;
}

TEST(QuantizedPool, AvgPoolMatchesTheReferenceForEveryOption) {
  const AvgPool2dOptions options[] = {
      {.kernel = 2},
      {.kernel = 3, .stride = Size2d(2), .padding = 1},
      {.kernel = 3, .stride = Size2d(2), .padding = 1, .count_include_pad = false},
      {.kernel = 3, .stride = Size2d(2), .padding = 1, .ceil_mode = true},
      {.kernel = 3, .stride = Size2d(2), .padding = 1, .ceil_mode = true, .count_include_pad = false},
      {.kernel = {2, 3}, .stride = Size2d(1, 2), .padding = {1, 1}, .divisor_override = 4},
      {.kernel = 2, .divisor_override = -3},
  };
  for (DType dtype : {DType::UInt8, DType::Int8}) {
    int64_t zp = dtype == DType::UInt8 ? 77 : -20;
    Tensor q = ops::quantize_per_tensor(random_floats({2, 2, 7, 8}, 4), 0.04, zp, dtype);
    quant_math::QRange range = quant_math::qrange(dtype);
    for (const auto& o : options) {
      Tensor a = ops::avg_pool2d(q, o);
      EXPECT_EQ(a.impl()->quant_params(), q.impl()->quant_params());
      int64_t oh = a.size(2), ow = a.size(3);
      EXPECT_EQ(a.shape(), ops::avg_pool2d(ops::dequantize(q), o).shape());
      for (int64_t n = 0; n < 2; ++n)
        for (int64_t c = 0; c < 2; ++c) {
          std::vector<int64_t> plane = ints(q.select(0, n).select(0, c));
          EXPECT_EQ(ints(a.select(0, n).select(0, c)), reference_avg_pool(plane, 7, 8, zp, range, o, oh, ow))
              << dtype << " kernel " << o.kernel.h << "x" << o.kernel.w;
        }
      // Within one step of the float average of the dequantized input
      // (saturation aside, which these values stay clear of).
      if (!o.divisor_override) {
        Tensor diff = ops::abs(ops::sub(ops::dequantize(a), ops::avg_pool2d(ops::dequantize(q), o)));
        EXPECT_LE(ops::max(diff).item<double>(), 0.04 * 0.5 + 1e-6);
      }
    }
  }
}

TEST(QuantizedPool, AvgPoolHandExampleRoundsHalfToEven) {
  std::vector<float> v = {1, 2, 1, 1, 3, 2, 2, 3, 0, 0, 0, 0, 0, 0, 1, 0};
  Tensor q = ops::quantize_per_tensor(from_vector<float>(v, {1, 4, 4}), 1.0, 10, DType::UInt8);
  // Layout: rows {1,2,1,1}, {3,2,2,3}, {0,0,0,0}, {0,0,1,0}; windows 2x2.
  Tensor a = ops::avg_pool2d(q, {.kernel = 2});
  // (1+2+3+2)/4 = 2; (1+1+2+3)/4 = 1.75 -> 2; (0+0+0+0)/4 = 0; (0+0+1+0)/4 = 0.25 -> 0.
  EXPECT_EQ(ints(a), (std::vector<int64_t>{12, 12, 10, 10}));
  // (1, 2) windows over two (1, 4) planes: 0.5 -> 0, 1 -> 1; 2.5 -> 2, 1.5 -> 2 (half to even).
  Tensor half = ops::quantize_per_tensor(from_vector<float>({1, 0, 1, 1, 5, 0, 3, 0}, {2, 1, 4}), 1.0, 0, DType::Int8);
  EXPECT_EQ(ints(ops::avg_pool2d(half, {.kernel = {1, 2}})), (std::vector<int64_t>{0, 1, 2, 2}));
}

TEST(QuantizedPool, AdaptiveAvgPoolMatchesTheReference) {
  for (DType dtype : {DType::UInt8, DType::Int8}) {
    int64_t zp = dtype == DType::UInt8 ? 128 : 5;
    Tensor q = ops::quantize_per_tensor(random_floats({3, 4, 7, 5}, 8), 0.02, zp, dtype);
    quant_math::QRange range = quant_math::qrange(dtype);
    for (Size2d size : {Size2d(1), Size2d(3, 2), Size2d(7, 5), Size2d(4, 4)}) {
      Tensor a = ops::adaptive_avg_pool2d(q, size);
      EXPECT_EQ(a.shape(), (Shape{3, 4, size.h, size.w}));
      EXPECT_EQ(a.impl()->quant_params(), q.impl()->quant_params());
      for (int64_t n = 0; n < 3; ++n)
        for (int64_t c = 0; c < 4; ++c)
          for (int64_t oy = 0; oy < size.h; ++oy)
            for (int64_t ox = 0; ox < size.w; ++ox) {
              int64_t y0 = oy * 7 / size.h, y1 = ((oy + 1) * 7 + size.h - 1) / size.h;
              int64_t x0 = ox * 5 / size.w, x1 = ((ox + 1) * 5 + size.w - 1) / size.w;
              int64_t sum = 0;
              for (int64_t y = y0; y < y1; ++y)
                for (int64_t x = x0; x < x1; ++x) sum += q.at<int64_t>({n, c, y, x}) - zp;
              int32_t expected = quant_math::average_value(static_cast<int32_t>(sum),
                                                           static_cast<int32_t>((y1 - y0) * (x1 - x0)),
                                                           static_cast<float>(zp), static_cast<float>(range.lo),
                                                           static_cast<float>(range.hi));
              EXPECT_EQ(a.at<int64_t>({n, c, oy, ox}), expected);
            }
    }
  }
  Tensor q32 = ops::quantize_per_tensor(random_floats({1, 1, 2, 2}, 1), 0.1, 0, DType::Int32);
  expect_error([&] { ops::adaptive_avg_pool2d(q32, 1); },
               "quantized adaptive_avg_pool2d: int32 inputs are not supported (quint8 or qint8");
}

// ---- channels-last inputs ----------------------------------------------------------------

// q with channels-last strides (Note [Channels-last quantized activations]
// in tensor/memory_layout.h), as an int8 convolution writes it.
Tensor channels_last(const Tensor& q) { return q.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2}); }

// Every pooling of a channels-last input gives the integers of the same
// pooling of its contiguous copy, in a channels-last output on its grid.
TEST(QuantizedPool, ChannelsLastInputsGiveTheSameIntegersInTheirLayout) {
  const MaxPool2dOptions max_options[] = {
      {.kernel = 2},
      {.kernel = 3, .stride = Size2d(2), .padding = 1, .ceil_mode = true},
      {.kernel = {3, 2}, .stride = Size2d(1, 2), .padding = {1, 0}, .dilation = {2, 1}},
  };
  const AvgPool2dOptions avg_options[] = {
      {.kernel = 2},
      {.kernel = 3, .stride = Size2d(2), .padding = 1, .ceil_mode = true, .count_include_pad = false},
      {.kernel = {2, 3}, .stride = Size2d(1, 2), .padding = {1, 1}, .divisor_override = 4},
  };
  auto expect_same = [](const Tensor& got, const Tensor& want, const std::string& what) {
    EXPECT_TRUE(is_channels_last(got) && !got.is_contiguous()) << what << detail::str(": strides ", got.strides());
    EXPECT_EQ(got.impl()->quant_params(), want.impl()->quant_params()) << what;
    EXPECT_EQ(ints(got), ints(want)) << what;
  };
  // LeNet's second pool (16 channels, 10x10) beside odd sizes.
  for (auto [dtype, shape] : std::vector<std::pair<DType, Shape>>{{DType::UInt8, {2, 5, 9, 7}},
                                                                  {DType::Int8, {2, 5, 9, 7}},
                                                                  {DType::UInt8, {3, 16, 10, 10}}}) {
    Tensor q = ops::quantize_per_tensor(random_floats(shape, 11), 0.03, dtype == DType::UInt8 ? 90 : -4, dtype);
    Tensor cl = channels_last(q);
    ASSERT_TRUE(is_channels_last(cl) && !cl.is_contiguous());
    for (const auto& o : max_options) expect_same(ops::max_pool2d(cl, o), ops::max_pool2d(q, o), "max_pool2d");
    for (const auto& o : avg_options) expect_same(ops::avg_pool2d(cl, o), ops::avg_pool2d(q, o), "avg_pool2d");
    for (Size2d size : {Size2d(3, 2), Size2d(9, 7), Size2d(4, 4)}) {
      expect_same(ops::adaptive_avg_pool2d(cl, size), ops::adaptive_avg_pool2d(q, size), "adaptive_avg_pool2d");
    }
    // To one pixel, as ResNet's global pooling: both layouts at once.
    Tensor global = ops::adaptive_avg_pool2d(cl, 1);
    EXPECT_EQ(ints(global), ints(ops::adaptive_avg_pool2d(q, 1)));
  }
}

// ---- add ----------------------------------------------------------------------------------

Tensor with_grid(Tensor t, double scale, int64_t zp) {
  auto p = std::make_shared<QuantParams>();
  p->scales = {scale};
  p->zero_points = {zp};
  t.impl()->set_quant_params(std::move(p));
  return t;
}

TEST(QuantizedAdd, MatchesAddValueWithAndWithoutRelu) {
  cpu::CpuQuantizedKernels kernels;
  for (DType dtype : {DType::UInt8, DType::Int8, DType::Int32}) {
    quant_math::QRange range = quant_math::qrange(dtype);
    int64_t za = dtype == DType::UInt8 ? 120 : -3, zb = dtype == DType::UInt8 ? 130 : 4,
            zo = dtype == DType::UInt8 ? 100 : 1;
    Tensor a = ops::quantize_per_tensor(random_floats({3, 1000}, 1), 0.02, za, dtype);
    Tensor b = ops::quantize_per_tensor(random_floats({3, 1000}, 2), 0.03, zb, dtype);
    for (bool relu : {false, true}) {
      Tensor out = with_grid(Tensor::empty({3, 1000}, dtype), 0.045, zo);
      kernels.add(out, a, b, relu);
      float lo = static_cast<float>(relu ? std::max<int64_t>(range.lo, zo) : range.lo);
      for (int64_t i = 0; i < out.numel(); ++i) {
        int32_t expected = quant_math::add_value(static_cast<int32_t>(flat_value(a, i)), za, 0.02f,
                                                 static_cast<int32_t>(flat_value(b, i)), zb, 0.03f, 1.0f / 0.045f,
                                                 static_cast<float>(zo), lo, static_cast<float>(range.hi));
        ASSERT_EQ(static_cast<int64_t>(flat_value(out, i)), expected) << dtype << " relu " << relu << " at " << i;
      }
    }
    // Strided operands and output.
    Tensor out = with_grid(Tensor::empty({1000, 3}, dtype), 0.045, zo).t();
    kernels.add(out, a, b.t().contiguous().t(), false);
    Tensor plain = with_grid(Tensor::empty({3, 1000}, dtype), 0.045, zo);
    kernels.add(plain, a, b, false);
    EXPECT_EQ(ints(out), ints(plain));
  }
  // A hand case: 1.0 + 0.5 on scale 0.5 zero point 0: 3; with a clamp.
  Tensor a = with_grid(from_vector<uint8_t>({12, 0}, {2}), 0.25, 8);   // 1.0, -2.0
  Tensor b = with_grid(from_vector<uint8_t>({1, 1}, {2}), 0.5, 0);     // 0.5, 0.5
  Tensor out = with_grid(Tensor::empty({2}, DType::UInt8), 0.5, 2);
  kernels.add(out, a, b, false);
  EXPECT_EQ(ints(out), (std::vector<int64_t>{5, 0}));  // 1.5 / 0.5 + 2 = 5; -1.5 / 0.5 + 2 = -1 -> 0
  kernels.add(out, a, b, true);
  EXPECT_EQ(ints(out), (std::vector<int64_t>{5, 2}));  // relu: at least the zero point
}

// ops::add and relu on two channels-last operands keep the layout and give
// the integers of the contiguous ones; mixed layouts still add right.
TEST(QuantizedAdd, ChannelsLastOperandsKeepTheirLayout) {
  Tensor a = ops::quantize_per_tensor(random_floats({2, 6, 5, 4}, 21), 0.02, 120, DType::UInt8);
  Tensor b = ops::quantize_per_tensor(random_floats({2, 6, 5, 4}, 22), 0.03, 130, DType::UInt8);
  Tensor ca = channels_last(a), cb = channels_last(b);
  for (bool relu : {false, true}) {
    Tensor want = ops::quantized_add(a, b, 0.045, 100, relu);
    Tensor got = ops::quantized_add(ca, cb, 0.045, 100, relu);
    EXPECT_TRUE(is_channels_last(got) && !got.is_contiguous()) << detail::str("strides ", got.strides());
    EXPECT_EQ(ints(got), ints(want)) << "relu " << relu;
    EXPECT_EQ(ints(ops::quantized_add(ca, b, 0.045, 100, relu)), ints(want)) << "mixed, relu " << relu;
  }
  Tensor r = ops::relu(ca);
  EXPECT_TRUE(is_channels_last(r) && !r.is_contiguous());
  EXPECT_EQ(r.impl()->quant_params(), ca.impl()->quant_params());
  EXPECT_EQ(ints(r), ints(ops::relu(a)));
  Tensor in_place = channels_last(a);
  ops::relu_(in_place);
  EXPECT_EQ(ints(in_place), ints(ops::relu(a)));
  for (int64_t v : ints(r)) EXPECT_GE(v, 120);
}

// Each SIMD loop this CPU runs (AVX2, AVX-512) gives the scalar loop's bytes.
TEST(QuantizedAdd, TheSimdLoopsMatchTheScalarOneBitForBit) {
  using U8Loop = void (*)(uint8_t*, const uint8_t*, const uint8_t*, int64_t, const cpu::QuantizedAddGrids&);
  using S8Loop = void (*)(int8_t*, const int8_t*, const int8_t*, int64_t, const cpu::QuantizedAddGrids&);
  struct Level {
    const char* name;
    cpu::SimdLevel level;
    U8Loop u8;
    S8Loop s8;
  };
  const Level levels[] = {
      {"avx2", cpu::SimdLevel::Avx2, cpu::quantized_add_u8_avx2, cpu::quantized_add_s8_avx2},
      {"avx512", cpu::SimdLevel::Avx512, cpu::quantized_add_u8_avx512, cpu::quantized_add_s8_avx512},
  };
  if (cpu::simd_level() < cpu::SimdLevel::Avx2) GTEST_SKIP() << "this CPU has no AVX2: only the scalar loop exists";
  for (const Level& level : levels) {
    if (cpu::simd_level() < level.level) continue;
    for (int64_t n : {0, 1, 15, 16, 17, 31, 32, 33, 100, 4097}) {
      std::vector<double> ra = pseudo_random(n, 0, 256, 3), rb = pseudo_random(n, 0, 256, 4);
      std::vector<uint8_t> a(n), b(n);
      for (int64_t i = 0; i < n; ++i) a[i] = static_cast<uint8_t>(ra[i]), b[i] = static_cast<uint8_t>(rb[i]);
      const cpu::QuantizedAddGrids grids[] = {{128, 0.02f, 120, 0.03f, 1.0f / 0.045f, 100.0f, 0.0f, 255.0f},
                                              {0, 1.0f, 0, 1.0f, 2.0f, 0.0f, 0.0f, 255.0f},  // exact halves
                                              {128, 0.02f, 120, 0.03f, 1.0f / 0.045f, 100.0f, 100.0f, 255.0f},
                                              {10, 0.7f, 250, 0.01f, 1.0f / 0.001f, 3.0f, 0.0f, 255.0f}};
      for (const auto& g : grids) {
        std::vector<uint8_t> ref(n), simd(n);
        cpu::quantized_add_u8_scalar(ref.data(), a.data(), b.data(), n, g);
        level.u8(simd.data(), a.data(), b.data(), n, g);
        EXPECT_EQ(ref, simd) << level.name << " u8 n=" << n;
        const auto* sa = reinterpret_cast<const int8_t*>(a.data());
        const auto* sb = reinterpret_cast<const int8_t*>(b.data());
        cpu::QuantizedAddGrids sg = g;
        sg.zero_point_a -= 128, sg.zero_point_b -= 128, sg.zero_point_out -= 128, sg.lo -= 128, sg.hi -= 128;
        std::vector<int8_t> sref(n), ssimd(n);
        cpu::quantized_add_s8_scalar(sref.data(), sa, sb, n, sg);
        level.s8(ssimd.data(), sa, sb, n, sg);
        EXPECT_EQ(sref, ssimd) << level.name << " s8 n=" << n;
      }
    }
  }
}

TEST(QuantizedAdd, RejectsPerChannelAndMismatchedTensors) {
  cpu::CpuQuantizedKernels kernels;
  Tensor a = ops::quantize_per_tensor(random_floats({2, 3}, 1), 0.1, 0, DType::UInt8);
  Tensor pc = ops::quantize_per_channel(random_floats({2, 3}, 1), {0.1, 0.1}, {0, 0}, 0, DType::UInt8);
  Tensor out = with_grid(Tensor::empty({2, 3}, DType::UInt8), 0.1, 0);
  expect_error([&] { kernels.add(out, a, pc, false); }, "quantized add: b is quantized per channel");
  expect_error([&] { kernels.add(out, a, random_floats({2, 3}, 1), false); }, "quantized add: b is not a quantized tensor (float32)");
  Tensor small = ops::quantize_per_tensor(random_floats({3}, 1), 0.1, 0, DType::UInt8);
  expect_error([&] { kernels.add(out, a, small, false); }, "quantized add: shapes [2, 3], [3] and output [2, 3] differ");
}

// ---- safetensors ------------------------------------------------------------------------

class QuantizedSafetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kiln_qsafetensors_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

void expect_same_params(const Tensor& a, const Tensor& b) {
  ASSERT_NE(a.impl()->quant_params(), nullptr);
  ASSERT_NE(b.impl()->quant_params(), nullptr);
  const QuantParams &p = *a.impl()->quant_params(), &q = *b.impl()->quant_params();
  EXPECT_EQ(p.scheme, q.scheme);
  EXPECT_EQ(p.axis, q.axis);
  EXPECT_EQ(p.scales, q.scales);  // bit for bit: 17 digits read back exactly
  EXPECT_EQ(p.zero_points, q.zero_points);
}

TEST_F(QuantizedSafetensors, RoundTripsEverySchemeAndKeepsPlainTensorsPlain) {
  Tensor per_tensor = ops::quantize_per_tensor(random_floats({4, 5}, 1), 0.1 / 3, 131, DType::UInt8);
  Tensor per_channel = ops::quantize_per_channel(random_floats({3, 2, 2}, 2), {0.1, 1.0 / 7, 3e-5}, {0, -1, 2}, 0,
                                                 DType::Int8);
  Tensor q32 = ops::quantize_per_tensor(random_floats({6}, 3), 1e-4, 0, DType::Int32);
  Tensor on_grid = random_floats({2, 2}, 4);  // a float tensor on a grid
  on_grid.impl()->set_quant_params(per_tensor.impl()->quant_params());
  Tensor plain = from_vector<int8_t>({1, 2, 3}, {3});
  TensorDict saved;
  saved.insert("a.weight", per_channel);
  saved.insert("a.act", per_tensor);
  saved.insert("a.bias", q32);
  saved.insert("fake", on_grid);
  saved.insert("plain", plain);
  save_safetensors(path("q.safetensors"), saved, {{"note", "x"}});
  std::map<std::string, std::string> metadata;
  TensorDict loaded = load_safetensors(path("q.safetensors"), &metadata);
  EXPECT_EQ(metadata, (std::map<std::string, std::string>{{"note", "x"}}));
  for (const char* name : {"a.weight", "a.act", "a.bias", "fake"}) {
    expect_same_params(saved.at(name), loaded.at(name));
    EXPECT_TRUE(equal(loaded.at(name), saved.at(name))) << name;
  }
  EXPECT_TRUE(loaded.at("a.weight").is_quantized());
  EXPECT_EQ(loaded.at("plain").impl()->quant_params(), nullptr);
  EXPECT_TRUE(equal(ops::dequantize(loaded.at("a.weight")), ops::dequantize(per_channel)));
}

TEST_F(QuantizedSafetensors, TheMetadataPrefixIsReserved) {
  TensorDict saved;
  saved.insert("w", from_vector<float>({1}, {1}));
  expect_error([&] { save_safetensors(path("x.safetensors"), saved, {{"kiln.quant.w", "{}"}}); },
               "metadata key 'kiln.quant.w' uses the prefix \"kiln.quant.\", which Kiln reserves");
}

// Replaces `from` by `to` (same length, so the header size stays right) in the file.
void patch_file(const std::string& file, const std::string& from, const std::string& to) {
  ASSERT_EQ(from.size(), to.size());
  std::ifstream in(file, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string bytes = buffer.str();
  size_t at = bytes.find(from);
  ASSERT_NE(at, std::string::npos) << "no '" << from << "' in the file";
  bytes.replace(at, from.size(), to);
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
}

TEST_F(QuantizedSafetensors, CorruptParamsNameTheFileAndTheTensor) {
  Tensor w = ops::quantize_per_channel(random_floats({2, 3}, 1), {0.5, 0.25}, {0, 1}, 0, DType::Int8);
  TensorDict saved;
  saved.insert("conv.weight", w);
  struct Case {
    std::string from, to, problem;
  };
  const Case cases[] = {
      {"per_channel", "per_chanel_", "unknown scheme \"per_chanel_\""},
      {"0.25]", "-1e9]", "is not a positive finite number"},
      {"[0,1]", "[0,x]", "are not valid JSON"},
      {"\\\"axis\\\":0", "\\\"axis\\\":1", "2 scales for axis 1 of size 3"},
      {"\\\"axis\\\":0", "\\\"axis\\\":7", "axis 7 is out of range for shape [2, 3]"},
      {"\"kiln.quant.conv.weight\"", "\"kiln.quant.conv.weighz\"", "holds the quantization parameters of a tensor the "
                                                                     "file does not hold"},
  };
  for (const Case& c : cases) {
    std::string file = path("w.safetensors");
    save_safetensors(file, saved);
    patch_file(file, c.from, c.to);
    expect_error([&] { load_safetensors(file); }, "load_safetensors: '" + file + "'");
    expect_error([&] { load_safetensors(file); }, c.problem);
    if (c.to.find("weighz") == std::string::npos) {
      expect_error([&] { load_safetensors(file); },
                   "tensor 'conv.weight': its quantization parameters (metadata field 'kiln.quant.conv.weight')");
    }
  }
}

}  // namespace
}  // namespace kiln
