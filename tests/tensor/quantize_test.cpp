// Quantized tensors: quantize_per_tensor / per_channel, dequantize,
// int_repr, requantize against hand-computed values and the arithmetic of
// Note [Quantization arithmetic]; every SIMD loop against the scalar one bit
// for bit; the errors of each front-end; and `to` on quantized tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tensor/cpu/cpu_features.h"
#include "tensor/cpu/cpu_quantized.h"
#include "tensor/cpu/quantize_simd.h"
#include "tensor/ops.h"
#include "tensor/quant_math.h"
#include "tensor/quantize.h"
#include "tests/tensor/test_util.h"

#ifdef KILN_WITH_CUDA
#include "tensor/cuda/device.h"
#endif

namespace kiln {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

Tensor floats(const std::vector<float>& values, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(values.size())};
  return from_vector<float>(values, shape);
}

Tensor random_floats(const Shape& shape, double lo, double hi, uint64_t seed) {
  std::vector<double> v = pseudo_random(shape_numel(shape), lo, hi, seed);
  return floats(std::vector<float>(v.begin(), v.end()), shape);
}

// The integers of a quantized (or plain integer) tensor, row-major, as int64.
std::vector<int64_t> ints(const Tensor& t) {
  std::vector<int64_t> out;
  for (int64_t k = 0; k < t.numel(); ++k) out.push_back(static_cast<int64_t>(flat_value(t, k)));
  return out;
}

// What Note [Quantization arithmetic] says x quantizes to, for one grid.
int64_t reference_quantize(float x, double scale, int64_t zero_point, DType dtype) {
  float s = quant_math::scale_as_float(scale);
  quant_math::QRange r = quant_math::qrange(dtype);
  float q = quant_math::quantize_value(x, quant_math::inverse_scale(s), static_cast<float>(zero_point),
                                       static_cast<float>(r.lo), static_cast<float>(r.hi));
  return q >= 2147483648.0f ? INT32_MAX : static_cast<int64_t>(q);
}

// ---- values ---------------------------------------------------------------------

TEST(Quantize, RoundsHalfToEvenAndSaturates) {
  Tensor x = floats({0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 3.49f, 1000.0f, -1000.0f});
  Tensor q = ops::quantize_per_tensor(x, 1.0, 0, DType::Int8);
  EXPECT_EQ(q.dtype(), DType::Int8);
  EXPECT_TRUE(q.is_quantized());
  EXPECT_EQ(ints(q), (std::vector<int64_t>{0, 2, 2, 0, -2, 3, 127, -128}));
  Tensor u = ops::quantize_per_tensor(x, 1.0, 0, DType::UInt8);
  EXPECT_EQ(ints(u), (std::vector<int64_t>{0, 2, 2, 0, 0, 3, 255, 0}));
}

TEST(Quantize, ANarrowerRangeClampsThere) {
  // reduce_range's [0, 127] (and [-64, 63]): what a FakeQuantize on that
  // grid clamps to, as integers; long enough for the SIMD loops.
  std::vector<float> v;
  for (int i = 0; i < 100; ++i) v.push_back(static_cast<float>(i * 3) - 20.5f);
  const Tensor x = floats(v);
  const Tensor u = ops::quantize_per_tensor(x, 1.0, 10, DType::UInt8, 0, 127);
  const Tensor s = ops::quantize_per_tensor(x, 1.0, 0, DType::Int8, -64, 63);
  for (int i = 0; i < 100; ++i) {
    const float r = std::nearbyint(v[i]);
    EXPECT_EQ(ints(u)[i], static_cast<int64_t>(std::fmin(std::fmax(r + 10, 0.0f), 127.0f))) << v[i];
    EXPECT_EQ(ints(s)[i], static_cast<int64_t>(std::fmin(std::fmax(r, -64.0f), 63.0f))) << v[i];
  }
  EXPECT_EQ(ops::q_zero_point(u), 10);
  // The full range is the plain op's.
  EXPECT_EQ(ints(ops::quantize_per_tensor(x, 1.0, 10, DType::UInt8, 0, 255)),
            ints(ops::quantize_per_tensor(x, 1.0, 10, DType::UInt8)));
}

TEST(Quantize, NaNGoesToTheLowEndAndInfinitiesSaturate) {
  Tensor x = floats({kNaN, kInf, -kInf, -0.0f});
  EXPECT_EQ(ints(ops::quantize_per_tensor(x, 0.1, 3, DType::Int8)), (std::vector<int64_t>{-128, 127, -128, 3}));
  EXPECT_EQ(ints(ops::quantize_per_tensor(x, 0.1, 3, DType::UInt8)), (std::vector<int64_t>{0, 255, 0, 3}));
  EXPECT_EQ(ints(ops::quantize_per_tensor(x, 0.1, 3, DType::Int32)),
            (std::vector<int64_t>{INT32_MIN, INT32_MAX, INT32_MIN, 3}));
}

TEST(Quantize, ScaleAndZeroPointOffsetTheGrid) {
  // 0.26 / 0.1 = 2.6 -> 3, + 128 = 131; -0.26 -> -3 + 128 = 125.
  Tensor q = ops::quantize_per_tensor(floats({0.26f, -0.26f, 0.0f}), 0.1, 128, DType::UInt8);
  EXPECT_EQ(ints(q), (std::vector<int64_t>{131, 125, 128}));
  EXPECT_DOUBLE_EQ(ops::q_scale(q), 0.1);
  EXPECT_EQ(ops::q_zero_point(q), 128);
  // dequantize: (131 - 128) * 0.1f
  Tensor back = ops::dequantize(q);
  EXPECT_EQ(back.dtype(), DType::Float32);
  EXPECT_FALSE(back.is_quantized());
  EXPECT_EQ(back.at<float>({0}), 3 * 0.1f);
  EXPECT_EQ(back.at<float>({1}), -3 * 0.1f);
  EXPECT_EQ(back.at<float>({2}), 0.0f);
}

TEST(Quantize, Int32HoldsLargeValuesAndSaturatesAtItsRange) {
  Tensor q = ops::quantize_per_tensor(floats({3e9f, -3e9f, 123456.0f}), 1.0, 0, DType::Int32);
  EXPECT_EQ(ints(q), (std::vector<int64_t>{INT32_MAX, INT32_MIN, 123456}));
  // Far from zero the int32 subtraction of dequantize_value would overflow:
  // the kernel does it in int64.
  Tensor big = ops::quantize_per_tensor(floats({-3e9f}), 1.0, 1000, DType::Int32);
  EXPECT_EQ(ops::dequantize(big).at<float>({0}), static_cast<float>(int64_t{INT32_MIN} - 1000));
}

// Every dtype, a large tensor (the parallel path) and the float64 error bound.
TEST(Quantize, MatchesTheReferenceAndRoundTripsWithinHalfAStep) {
  const double scale = 0.0371;
  for (DType dtype : {DType::UInt8, DType::Int8, DType::Int32}) {
    int64_t zp = dtype == DType::UInt8 ? 131 : dtype == DType::Int8 ? -7 : 1000;
    Tensor x = random_floats({100003}, -4.0, 4.0, 11);
    Tensor q = ops::quantize_per_tensor(x, scale, zp, dtype);
    Tensor back = ops::dequantize(q);
    const float* xs = x.data<float>();
    int64_t mismatches = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      int64_t expected = reference_quantize(xs[i], scale, zp, dtype);
      if (static_cast<int64_t>(flat_value(q, i)) != expected) ++mismatches;
      double real = flat_value(back, i);
      EXPECT_EQ(real, static_cast<float>(expected - zp) * static_cast<float>(scale));
      quant_math::QRange r = quant_math::qrange(dtype);
      bool inside = expected > r.lo && expected < r.hi;
      if (inside) {
        EXPECT_LE(std::abs(real - xs[i]), scale / 2 + 1e-6) << "x = " << xs[i];
      }
    }
    EXPECT_EQ(mismatches, 0) << dtype;
  }
}

TEST(Quantize, OtherFloatDTypesAreConvertedFirst) {
  Tensor x64 = from_vector<double>({0.26, -1.5, 7.0}, {3});
  Tensor q = ops::quantize_per_tensor(x64, 0.1, 0, DType::Int8);
  EXPECT_EQ(ints(q), ints(ops::quantize_per_tensor(x64.to(DType::Float32), 0.1, 0, DType::Int8)));
  Tensor half = x64.to(DType::Float16);
  EXPECT_EQ(ints(ops::quantize_per_tensor(half, 0.5, 0, DType::Int8)), (std::vector<int64_t>{1, -3, 14}));
}

TEST(Quantize, NonContiguousInputsAndOutputs) {
  Tensor x = random_floats({7, 9}, -2, 2, 3);
  Tensor xt = x.t();
  Tensor q = ops::quantize_per_tensor(xt, 0.02, 5, DType::Int8);
  EXPECT_EQ(ints(q), ints(ops::quantize_per_tensor(xt.contiguous(), 0.02, 5, DType::Int8)));
  // A transposed quantized tensor dequantizes to the transposed values.
  Tensor qx = ops::quantize_per_tensor(x, 0.02, 5, DType::Int8);
  EXPECT_TRUE(equal(ops::dequantize(qx.t()), ops::dequantize(qx).t().contiguous()));
  // The kernels write through strides too (the front-ends allocate
  // contiguous outputs, other callers may not).
  Tensor out = Tensor::empty({9, 7}, DType::Int8).t();
  out.impl()->set_quant_params(qx.impl()->quant_params());
  cpu::CpuQuantizedKernels kernels;
  kernels.quantize(out, x, -128, 127);
  EXPECT_EQ(ints(out), ints(qx));
  Tensor deq = Tensor::empty({9, 7}).t();
  kernels.dequantize(deq, qx);
  EXPECT_TRUE(equal(deq, ops::dequantize(qx)));
}

TEST(Quantize, EmptyTensors) {
  Tensor q = ops::quantize_per_tensor(Tensor::empty({0, 3}), 0.5, 0, DType::UInt8);
  EXPECT_EQ(q.shape(), (Shape{0, 3}));
  EXPECT_TRUE(q.is_quantized());
  EXPECT_EQ(ops::dequantize(q).shape(), (Shape{0, 3}));
}

TEST(QuantizePerChannel, EachChannelUsesItsOwnGrid) {
  Tensor x = random_floats({2, 3, 4}, -3, 3, 5);
  std::vector<double> scales{0.1, 0.2, 0.5};
  std::vector<int64_t> zps{0, 10, -3};
  for (int64_t axis : {1, -2}) {
    Tensor q = ops::quantize_per_channel(x, scales, zps, axis, DType::Int8);
    const auto& p = *q.impl()->quant_params();
    EXPECT_EQ(p.scheme, QuantParams::Scheme::PerChannel);
    EXPECT_EQ(p.axis, 1);
    Tensor back = ops::dequantize(q);
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t j = 0; j < 4; ++j) {
          int64_t expected = reference_quantize(x.at<float>({i, c, j}), scales[c], zps[c], DType::Int8);
          EXPECT_EQ(q.at<int64_t>({i, c, j}), expected);
          EXPECT_EQ(back.at<float>({i, c, j}),
                    static_cast<float>(expected - zps[c]) * static_cast<float>(scales[c]));
        }
  }
}

TEST(QuantizePerChannel, LastAndFirstAxes) {
  Tensor x = random_floats({5, 3}, -3, 3, 6);
  Tensor last = ops::quantize_per_channel(x, {0.1, 0.3, 0.05}, {1, 2, 3}, -1, DType::UInt8);
  Tensor first = ops::quantize_per_channel(x, {0.1, 0.3, 0.05, 0.2, 0.7}, {0, 0, 0, 0, 9}, 0, DType::Int32);
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t c = 0; c < 3; ++c) {
      float v = x.at<float>({i, c});
      EXPECT_EQ(last.at<int64_t>({i, c}), reference_quantize(v, std::vector<double>{0.1, 0.3, 0.05}[c], c + 1,
                                                               DType::UInt8));
      EXPECT_EQ(first.at<int64_t>({i, c}),
                reference_quantize(v, std::vector<double>{0.1, 0.3, 0.05, 0.2, 0.7}[i], i == 4 ? 9 : 0,
                                   DType::Int32));
    }
}

TEST(Requantize, MovesValuesOntoAnotherGrid) {
  Tensor x = random_floats({1000}, -5, 5, 7);
  for (DType dtype : {DType::UInt8, DType::Int8, DType::Int32}) {
    int64_t zp = dtype == DType::UInt8 ? 100 : 3;
    Tensor q = ops::quantize_per_tensor(x, 0.05, zp, dtype);
    Tensor r = ops::requantize(q, 0.13, dtype == DType::UInt8 ? 60 : -1);
    EXPECT_EQ(r.dtype(), dtype);
    EXPECT_DOUBLE_EQ(ops::q_scale(r), 0.13);
    for (int64_t i = 0; i < x.numel(); ++i) {
      float real = quant_math::dequantize_value(static_cast<int32_t>(flat_value(q, i)), static_cast<int32_t>(zp), 0.05f);
      EXPECT_EQ(static_cast<int64_t>(flat_value(r, i)),
                reference_quantize(real, 0.13, dtype == DType::UInt8 ? 60 : -1, dtype));
    }
  }
  // Per-channel input onto one grid.
  Tensor pc = ops::quantize_per_channel(x.view({10, 100}), std::vector<double>(10, 0.04), std::vector<int64_t>(10, 2),
                                        0, DType::Int8);
  Tensor r = ops::requantize(pc, 0.1, 0);
  Tensor direct = ops::quantize_per_tensor(ops::dequantize(pc), 0.1, 0, DType::Int8);
  EXPECT_EQ(ints(r), ints(direct));
}

TEST(IntRepr, IsAPlainCopyOfTheIntegers) {
  Tensor q = ops::quantize_per_tensor(floats({1.0f, -2.0f, 3.0f}), 0.5, 4, DType::Int8);
  Tensor raw = ops::int_repr(q);
  EXPECT_FALSE(raw.is_quantized());
  EXPECT_EQ(raw.impl()->quant_params(), nullptr);
  EXPECT_EQ(raw.dtype(), DType::Int8);
  EXPECT_EQ(ints(raw), (std::vector<int64_t>{6, 0, 10}));
  raw.data<int8_t>()[0] = 0;
  EXPECT_EQ(ints(q)[0], 6);  // a copy
}

// ---- every SIMD loop against the scalar one ----------------------------------

// Inputs that exercise every branch of the arithmetic: halfway points
// (ties to even), both zeros, NaN, infinities, values far outside the range.
std::vector<float> tricky_inputs(int64_t n, uint64_t seed) {
  std::vector<double> r = pseudo_random(n, -300, 300, seed);
  std::vector<float> v(r.begin(), r.end());
  const float specials[] = {kNaN, kInf, -kInf, -0.0f, 0.0f, 0.5f, 1.5f, 2.5f, -0.5f, -2.5f, 127.5f, 128.5f,
                            -128.5f, 255.5f, 1e30f, -1e30f, 3e9f, std::numeric_limits<float>::denorm_min()};
  for (int64_t i = 0; i < n; i += 3) v[i] = specials[(i / 3) % std::size(specials)];
  for (int64_t i = 1; i < n; i += 7) v[i] = std::round(v[i]) + 0.5f;  // exact halves
  return v;
}

struct QuantizeLoops {
  const char* name;
  void (*u8)(uint8_t*, const float*, int64_t, float, float, float, float);
  void (*s8)(int8_t*, const float*, int64_t, float, float, float, float);
  void (*du8)(float*, const uint8_t*, int64_t, int32_t, float);
  void (*ds8)(float*, const int8_t*, int64_t, int32_t, float);
};

std::vector<QuantizeLoops> simd_loops() {
  std::vector<QuantizeLoops> loops;
  if (cpu::simd_level() >= cpu::SimdLevel::Avx2)
    loops.push_back({"avx2", cpu::quantize_u8_avx2, cpu::quantize_s8_avx2, cpu::dequantize_u8_avx2,
                     cpu::dequantize_s8_avx2});
  if (cpu::simd_level() >= cpu::SimdLevel::Avx512)
    loops.push_back({"avx512", cpu::quantize_u8_avx512, cpu::quantize_s8_avx512, cpu::dequantize_u8_avx512,
                     cpu::dequantize_s8_avx512});
  return loops;
}

TEST(QuantizeSimd, EveryLevelMatchesTheScalarLoopBitForBit) {
  auto loops = simd_loops();
  if (loops.empty()) GTEST_SKIP() << "this CPU has no AVX2 (or KILN_SIMD=scalar): only the scalar loop exists";
  struct Grid {
    float inv_scale, zp;
  };
  const Grid grids[] = {{1.0f, 0.0f}, {1.0f / 0.0371f, 17.0f}, {1.0f / 3.0f, -5.0f}, {100.0f, 128.0f}};
  for (const auto& loop : loops) {
    for (int64_t n : {0, 1, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 1000, 4099}) {
      for (int64_t offset : {0, 1, 3}) {  // unaligned starts
        std::vector<float> in = tricky_inputs(n + offset, static_cast<uint64_t>(n + 1));
        for (const Grid& g : grids) {
          std::vector<uint8_t> u_ref(n + offset, 0xAB), u_simd(n + offset, 0xAB);
          cpu::quantize_u8_scalar(u_ref.data() + offset, in.data() + offset, n, g.inv_scale, g.zp, 0, 255);
          loop.u8(u_simd.data() + offset, in.data() + offset, n, g.inv_scale, g.zp, 0, 255);
          EXPECT_EQ(u_ref, u_simd) << loop.name << " u8 n=" << n << " offset=" << offset;
          std::vector<int8_t> s_ref(n + offset, 0x5A), s_simd(n + offset, 0x5A);
          float zp = g.zp - 128.0f;
          cpu::quantize_s8_scalar(s_ref.data() + offset, in.data() + offset, n, g.inv_scale, zp, -128, 127);
          loop.s8(s_simd.data() + offset, in.data() + offset, n, g.inv_scale, zp, -128, 127);
          EXPECT_EQ(s_ref, s_simd) << loop.name << " s8 n=" << n << " offset=" << offset;
          // A narrower clamp (reduce_range) too.
          loop.s8(s_simd.data() + offset, in.data() + offset, n, g.inv_scale, zp, -64, 63);
          cpu::quantize_s8_scalar(s_ref.data() + offset, in.data() + offset, n, g.inv_scale, zp, -64, 63);
          EXPECT_EQ(s_ref, s_simd) << loop.name << " s8 reduced n=" << n;

          // Dequantize every byte value, bit for bit (compared as bits so NaN-free equality is exact).
          std::vector<uint8_t> bytes(n + offset);
          for (int64_t i = 0; i < n + offset; ++i) bytes[i] = static_cast<uint8_t>(i * 37 + n);
          std::vector<float> d_ref(n + offset, -1.0f), d_simd(n + offset, -1.0f);
          cpu::dequantize_u8_scalar(d_ref.data() + offset, bytes.data() + offset, n, 131, 0.0371f);
          loop.du8(d_simd.data() + offset, bytes.data() + offset, n, 131, 0.0371f);
          EXPECT_EQ(0, std::memcmp(d_ref.data(), d_simd.data(), d_ref.size() * sizeof(float))) << loop.name;
          const auto* sbytes = reinterpret_cast<const int8_t*>(bytes.data());
          cpu::dequantize_s8_scalar(d_ref.data() + offset, sbytes + offset, n, -7, 3.0f);
          loop.ds8(d_simd.data() + offset, sbytes + offset, n, -7, 3.0f);
          EXPECT_EQ(0, std::memcmp(d_ref.data(), d_simd.data(), d_ref.size() * sizeof(float))) << loop.name;
        }
      }
    }
  }
}

// The scalar loops are the arithmetic itself.
TEST(QuantizeSimd, TheScalarLoopIsQuantMath) {
  std::vector<float> in = tricky_inputs(500, 9);
  std::vector<uint8_t> out(500);
  cpu::quantize_u8_scalar(out.data(), in.data(), 500, 1.0f / 0.5f, 3.0f, 0, 255);
  for (size_t i = 0; i < in.size(); ++i)
    EXPECT_EQ(out[i], reference_quantize(in[i], 0.5, 3, DType::UInt8)) << "x = " << in[i];
}

// ---- errors -----------------------------------------------------------------------

TEST(QuantizeErrors, BadScales) {
  Tensor x = floats({1.0f});
  expect_error([&] { ops::quantize_per_tensor(x, 0.0, 0, DType::UInt8); }, "quantize_per_tensor: scale must be positive and finite, got 0");
  expect_error([&] { ops::quantize_per_tensor(x, -0.5, 0, DType::UInt8); }, "got -0.5");
  expect_error([&] { ops::quantize_per_tensor(x, std::nan(""), 0, DType::UInt8); }, "positive and finite, got nan");
  expect_error([&] { ops::quantize_per_tensor(x, INFINITY, 0, DType::UInt8); }, "positive and finite, got inf");
  expect_error([&] { ops::quantize_per_tensor(x, 1e-40, 0, DType::UInt8); }, "scale 1e-40 is outside float32's range");
  expect_error([&] { ops::quantize_per_channel(floats({1, 2}), {0.1, 0.0}, {0, 0}, 0, DType::Int8); },
               "quantize_per_channel: scale of channel 1 must be positive and finite, got 0");
  expect_error([&] { ops::requantize(ops::quantize_per_tensor(x, 1, 0, DType::UInt8), -1, 0); },
               "requantize: scale must be positive");
}

TEST(QuantizeErrors, ZeroPointsOutsideTheRange) {
  Tensor x = floats({1.0f});
  expect_error([&] { ops::quantize_per_tensor(x, 0.1, 256, DType::UInt8); },
               "quantize_per_tensor: zero point 256 is outside quint8's range [0, 255]");
  expect_error([&] { ops::quantize_per_tensor(x, 0.1, -1, DType::UInt8); }, "zero point -1 is outside quint8's");
  expect_error([&] { ops::quantize_per_tensor(x, 0.1, 128, DType::Int8); },
               "zero point 128 is outside qint8's range [-128, 127]");
  expect_error([&] { ops::quantize_per_channel(floats({1, 2}), {0.1, 0.1}, {0, 300}, 0, DType::UInt8); },
               "zero point of channel 1 300 is outside quint8's range");
  expect_error([&] { ops::quantize_per_tensor(x, 0.1, 0, DType::UInt8, 0, 256); },
               "quantize_per_tensor: the range [0, 256] is not inside quint8's [0, 255]");
  expect_error([&] { ops::quantize_per_tensor(x, 0.1, 0, DType::Int8, 5, 4); },
               "quantize_per_tensor: the range [5, 4] is not inside qint8's [-128, 127]");
  cpu::CpuQuantizedKernels kernels;
  Tensor out = ops::quantize_per_tensor(x, 0.1, 0, DType::UInt8);
  expect_error([&] { kernels.quantize(out, x, -1, 255); }, "quantize: the range [-1, 255] is not inside");
}

TEST(QuantizeErrors, WrongDTypesAndInputs) {
  Tensor x = floats({1.0f});
  expect_error([&] { ops::quantize_per_tensor(x, 0.1, 0, DType::Float32); },
               "quantize_per_tensor: dtype float32 cannot hold quantized values");
  expect_error([&] { ops::quantize_per_tensor(x, 0.1, 0, DType::Int64); }, "dtype int64 cannot hold");
  expect_error([&] { ops::quantize_per_tensor(from_vector<int64_t>({1}, {1}), 0.1, 0, DType::Int8); },
               "quantize_per_tensor: expected a floating point input, got int64");
  Tensor q = ops::quantize_per_tensor(x, 0.1, 0, DType::Int8);
  expect_error([&] { ops::quantize_per_tensor(q, 0.1, 0, DType::Int8); },
               "quantize_per_tensor: the input is already quantized (qint8)");
  expect_error([&] { ops::quantize_per_tensor(Tensor(), 0.1, 0, DType::Int8); }, "the input is undefined");
  expect_error([&] { ops::dequantize(x); },
               "dequantize: input is not a quantized tensor (float32); quantize it first");
  expect_error([&] { ops::dequantize(from_vector<int8_t>({1}, {1})); }, "input is not a quantized tensor (int8)");
  expect_error([&] { ops::int_repr(x); }, "int_repr: input is not a quantized tensor");
  expect_error([&] { ops::requantize(x, 0.1, 0); }, "requantize: input is not a quantized tensor");
  expect_error([&] { ops::requantize(q, 0.1, 200); }, "requantize: zero point 200 is outside qint8's range");
  expect_error([&] { ops::quantized_dtype_name(DType::Float32); }, "float32 is not a quantized dtype");
}

TEST(QuantizeErrors, PerChannelShapes) {
  Tensor x = random_floats({2, 3}, -1, 1, 1);
  expect_error([&] { ops::quantize_per_channel(x, {0.1, 0.1}, {0, 0}, 1, DType::Int8); },
               "quantize_per_channel: got 2 scales for axis 1 of size 3 (shape [2, 3])");
  expect_error([&] { ops::quantize_per_channel(x, {0.1, 0.1, 0.1}, {0, 0}, 1, DType::Int8); },
               "quantize_per_channel: got 3 scales but 2 zero points");
  expect_error([&] { ops::quantize_per_channel(x, {0.1, 0.1}, {0, 0}, 2, DType::Int8); },
               "quantize_per_channel: axis 2 is out of range for a tensor of shape [2, 3]");
  expect_error([&] { ops::quantize_per_channel(Tensor::empty({}), {0.1}, {0}, 0, DType::Int8); },
               "a 0-dim tensor has no channel axis");
  auto bad = std::make_shared<QuantParams>();
  bad->scheme = QuantParams::Scheme::PerChannel;
  bad->axis = 0;
  bad->scales = {0.1, 0.2, 0.3};
  bad->zero_points = {0, 0, 0};
  expect_error([&] { ops::quantize(x, bad, DType::Int8); },
               "quantize_per_channel: 3 per-channel scales for axis 0 of size 2");
  auto two = std::make_shared<QuantParams>();
  two->scales = {0.1, 0.2};
  two->zero_points = {0, 0};
  expect_error([&] { ops::quantize(x, two, DType::Int8); }, "quantize_per_tensor: per-tensor parameters hold one scale, got 2");
  expect_error([&] { ops::quantize(x, nullptr, DType::Int8); }, "quantize: the parameters are null");
}

TEST(QuantizeErrors, ScaleAndZeroPointReaders) {
  Tensor pc = ops::quantize_per_channel(random_floats({2, 3}, -1, 1, 1), {0.1, 0.2}, {0, 1}, 0, DType::Int8);
  expect_error([&] { ops::q_scale(pc); }, "q_scale: the tensor is quantized per channel (2 scales along axis 0)");
  expect_error([&] { ops::q_zero_point(pc, "quantized_add"); }, "quantized_add: the tensor is quantized per channel");
  expect_error([&] { ops::q_scale(floats({1.0f})); }, "q_scale: the tensor (float32) carries no quantization parameters");
  // A float tensor on a grid has a scale to read.
  Tensor on_grid = floats({1.0f});
  on_grid.impl()->set_quant_params(ops::quantize_per_tensor(on_grid, 0.25, 3, DType::UInt8).impl()->quant_params());
  EXPECT_DOUBLE_EQ(ops::q_scale(on_grid), 0.25);
  EXPECT_EQ(ops::q_zero_point(on_grid), 3);
}

TEST(QuantizeErrors, CheckQuantizedNamesTheOpAndTheTensor) {
  Tensor q = ops::quantize_per_tensor(floats({1.0f}), 0.1, 0, DType::UInt8);
  expect_error([&] { ops::check_not_quantized(q, "conv2d", "input"); },
               "conv2d: input is a quantized tensor (quint8); dequantize it first");
  expect_error([&] { ops::check_quantized(floats({1.0f}), "quantized linear", "weight"); },
               "quantized linear: weight is not a quantized tensor (float32)");
  ops::check_quantized(q, "op", "input");
  ops::check_not_quantized(floats({1.0f}), "op", "input");
}

// ---- to on quantized tensors -----------------------------------------------------

TEST(QuantizedTo, ChangingTheDTypeIsAnError) {
  Tensor q = ops::quantize_per_tensor(floats({1.0f}), 0.1, 0, DType::UInt8);
  expect_error([&] { q.to(DType::Float32); },
               "to: cannot convert a quantized tensor (uint8 carrying quantization parameters) to float32; use "
               "dequantize()");
  expect_error([&] { q.to(DType::Int32); }, "to int32; use requantize() for another grid, or int_repr()");
  Tensor on_grid = floats({1.0f});
  on_grid.impl()->set_quant_params(q.impl()->quant_params());
  expect_error([&] { on_grid.to(DType::Int8); },
               "to: cannot convert a float32 tensor carrying quantization parameters (values on a grid) to int8");
  // Same dtype, same device: the tensor itself; another float dtype of a float on a grid keeps the grid.
  EXPECT_TRUE(q.to(DType::UInt8).is_same(q));
  EXPECT_EQ(q.to(kCPU).impl()->quant_params(), q.impl()->quant_params());
  EXPECT_EQ(on_grid.to(DType::Float64).impl()->quant_params(), q.impl()->quant_params());
}

TEST(QuantizedTo, CloneAndContiguousKeepTheParams) {
  Tensor q = ops::quantize_per_channel(random_floats({3, 4}, -1, 1, 2), {0.1, 0.2, 0.3}, {1, 2, 3}, 0, DType::Int8);
  Tensor c = q.clone();
  EXPECT_FALSE(c.is_same(q));
  EXPECT_EQ(c.impl()->quant_params(), q.impl()->quant_params());
  EXPECT_EQ(ints(c), ints(q));
  Tensor t = q.t().contiguous();  // a copy, with the axis the transpose gave it
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.impl()->quant_params()->axis, 1);
  EXPECT_TRUE(equal(ops::dequantize(t), ops::dequantize(q).t()));
}

// ---- devices ------------------------------------------------------------------------

TEST(QuantizeCuda, QuantizingACudaTensorIsNotSupported) {
#ifdef KILN_WITH_CUDA
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device on this machine (cuda::device_count() == 0)";
  Tensor x = floats({1.0f, 2.0f}).to(cuda_device(0));
  expect_error([&] { ops::quantize_per_tensor(x, 0.1, 0, DType::Int8); },
               "quantize_per_tensor: quantized kernels are not supported on cuda:0");
#else
  GTEST_SKIP() << "Kiln was built without CUDA";
#endif
}

}  // namespace
}  // namespace kiln
