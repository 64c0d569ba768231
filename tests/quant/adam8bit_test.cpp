// Adam8bit: the dynamic maps, block-wise quantization, each step against a
// float64 transcription of the algorithm (Note [Block-wise 8-bit optimizer
// state]), training against float32 Adam, memory, state dicts and errors.
#include "quant/adam8bit.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kiln.h"
#include "optim/adam.h"
#include "optim/lr_scheduler.h"
#include "optim/one_cycle_lr.h"
#ifdef KILN_WITH_CUDA
#include "tensor/cuda/device.h"
#endif
#include "tensor/test_util.h"

namespace kiln {
namespace {

using quant::Adam8bit;
using quant::Adam8bitOptions;
using quant::AdamW8bit;
using quant::AdamW8bitOptions;
using quant::DynamicMap;

Tensor make_param(const std::vector<double>& values, const Shape& shape, DType dtype = DType::Float32) {
  Tensor p = from_vector<double>(values, shape).to(dtype);
  p.requires_grad_();
  return p;
}

std::vector<double> values_of(const Tensor& t) {
  std::vector<double> out(t.numel());
  for (int64_t k = 0; k < t.numel(); ++k) out[k] = flat_value(t, k);
  return out;
}

std::vector<uint8_t> codes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::vector<uint8_t>(c.data<uint8_t>(), c.data<uint8_t>() + c.numel());
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

// The index of the entry of `map` nearest x, by looking at all 256 (ties
// to the lower index), in float64.
int brute_force_nearest(const DynamicMap& map, double x) {
  int best = 0;
  for (int k = 1; k < 256; ++k)
    if (std::abs(x - map.values[k]) < std::abs(x - map.values[best])) best = k;
  return best;
}

// ---- the maps ----

TEST(DynamicMap, SignedMapHasTheConstructionsEntries) {
  const DynamicMap& map = quant::signed_dynamic_map();
  for (int k = 0; k + 1 < 256; ++k) ASSERT_LT(map.values[k], map.values[k + 1]) << "entry " << k;
  EXPECT_EQ(map.values[127], 0.0f);
  EXPECT_EQ(map.values[255], 1.0f);
  // The decade 1e-6 has one mean, (0.1 + 1) / 2; the decade 1 has 64, the
  // largest (1 - 0.9 / 128).
  EXPECT_EQ(map.values[128], static_cast<float>(0.55e-6));
  EXPECT_EQ(map.values[126], static_cast<float>(-0.55e-6));
  EXPECT_EQ(map.values[129], static_cast<float>(1e-5 * (0.1 + 0.9 * 0.25)));
  EXPECT_EQ(map.values[254], static_cast<float>(0.99296875));
  EXPECT_EQ(map.values[0], static_cast<float>(-0.99296875));
  // Symmetric except for 1.0, which has no negative partner.
  for (int i = 0; i < 127; ++i) EXPECT_EQ(map.values[126 - i], -map.values[128 + i]) << i;
  // 2^i positive entries in decade i: [0.1, 1) * 10^(i-6).
  for (int i = 0; i < 7; ++i) {
    const double lo = 0.1 * std::pow(10.0, i - 6), hi = std::pow(10.0, i - 6);
    const auto count = std::count_if(map.values.begin(), map.values.end(), [&](float v) { return v > lo && v < hi; });
    EXPECT_EQ(count, 1 << i) << "decade " << i;
  }
}

TEST(DynamicMap, UnsignedMapHasTwiceTheEntriesPerDecade) {
  const DynamicMap& map = quant::unsigned_dynamic_map();
  for (int k = 0; k + 1 < 256; ++k) ASSERT_LT(map.values[k], map.values[k + 1]) << "entry " << k;
  EXPECT_EQ(map.values[0], 0.0f);
  EXPECT_EQ(map.values[255], 1.0f);
  // linspace(0.1, 1, 3) = 0.1, 0.55, 1: means 0.325 and 0.775.
  EXPECT_EQ(map.values[1], static_cast<float>(0.325e-6));
  EXPECT_EQ(map.values[2], static_cast<float>(0.775e-6));
  EXPECT_EQ(map.values[254], static_cast<float>(1.0 - 0.9 / 256));
  for (int i = 0; i < 7; ++i) {
    const double lo = 0.1 * std::pow(10.0, i - 6), hi = std::pow(10.0, i - 6);
    const auto count = std::count_if(map.values.begin(), map.values.end(), [&](float v) { return v > lo && v < hi; });
    EXPECT_EQ(count, 2 << i) << "decade " << i;
  }
}

TEST(DynamicMap, NearestIsTheClosestEntryWithTiesToTheLowerOne) {
  for (const DynamicMap* map : {&quant::signed_dynamic_map(), &quant::unsigned_dynamic_map()}) {
    for (int k = 0; k < 256; ++k) EXPECT_EQ(map->nearest(map->values[k]), k);
    for (int k = 0; k + 1 < 256; ++k) {
      const float mid = map->midpoints[k];
      EXPECT_EQ(map->nearest(mid), k);
      EXPECT_EQ(map->nearest(std::nextafter(mid, 2.0f)), k + 1);
    }
    EXPECT_EQ(map->nearest(-5.0f), 0);
    EXPECT_EQ(map->nearest(5.0f), 255);
    for (double x : pseudo_random(2000, -1.0, 1.0, 3)) {
      // Cubing spreads the values over the decades the map covers.
      const float xf = static_cast<float>(x * x * x);
      const int expected = brute_force_nearest(*map, xf);
      const int got = map->nearest(xf);
      if (got != expected) {  // only a value on a midpoint (rounded to float32) may differ
        EXPECT_EQ(std::abs(xf - map->values[got]), std::abs(xf - map->values[expected])) << xf;
      }
    }
  }
}

// ---- block-wise quantization ----

TEST(BlockwiseQuantize, EachBlockIsScaledByItsOwnAbsmax) {
  const int64_t block = 64;
  std::vector<double> x = pseudo_random(300, -1e-3, 1e-3, 4);  // 5 blocks, the last of 44
  x[10] = 5.0;                                                  // an outlier in block 0
  for (int k = 128; k < 192; ++k) x[k] = 0.0;                   // block 2: zeros
  const Tensor t = from_vector<double>(x, {3, 100}).to(DType::Float32);
  const DynamicMap& map = quant::signed_dynamic_map();
  quant::BlockwiseCodes q = quant::quantize_blockwise(t, map, block);
  ASSERT_EQ(q.codes.shape(), (Shape{3, 100}));
  ASSERT_EQ(q.codes.dtype(), DType::UInt8);
  ASSERT_EQ(q.absmax.shape(), (Shape{5}));
  const std::vector<double> xs = values_of(t);
  const std::vector<uint8_t> codes = codes_of(q.codes);
  const std::vector<double> absmax = values_of(q.absmax);
  const std::vector<double> back = values_of(quant::dequantize_blockwise(q, map, block));
  for (int64_t b = 0; b < 5; ++b) {
    double expected_absmax = 0.0;
    for (int64_t k = b * block; k < std::min<int64_t>(300, (b + 1) * block); ++k)
      expected_absmax = std::max(expected_absmax, std::abs(xs[k]));
    EXPECT_EQ(absmax[b], expected_absmax) << "block " << b;
  }
  EXPECT_EQ(absmax[2], 0.0);
  for (int64_t k = 0; k < 300; ++k) {
    const double a = absmax[k / block];
    const double scaled = a > 0 ? static_cast<double>(static_cast<float>(xs[k]) / static_cast<float>(a)) : 0.0;
    const int expected = brute_force_nearest(map, scaled);
    if (codes[k] != expected) {
      EXPECT_EQ(std::abs(scaled - map.values[codes[k]]), std::abs(scaled - map.values[expected])) << "element " << k;
    }
    EXPECT_EQ(back[k], static_cast<float>(map.values[codes[k]] * static_cast<float>(a))) << "element " << k;
    // No value moves by more than half the map's widest gap (0.9 / 64, in
    // the top decade) times its own block's absmax.
    EXPECT_LE(std::abs(back[k] - xs[k]), 0.9 / 128 * a * 1.0001) << "element " << k;
  }
  // Block 1 (no outlier) keeps its values above 1e-4 (a tenth of its
  // absmax, in the map's top decade of 64 entries) to 4.5 / 64 of their
  // size. With one absmax for the whole tensor (the outlier's 5.0) they would
  // be scaled to 2e-5..2e-4, into decades of 4 and 8 entries, and lose far
  // more: the precision an outlier costs stays in its block.
  const std::vector<double> whole = values_of(quant::dequantize_blockwise(quant::quantize_blockwise(t, map, 300), map, 300));
  double blockwise_error = 0.0, whole_error = 0.0;
  for (int64_t k = block; k < 2 * block; ++k) {
    if (std::abs(xs[k]) <= 1e-4) continue;
    blockwise_error = std::max(blockwise_error, std::abs(back[k] - xs[k]) / std::abs(xs[k]));
    whole_error = std::max(whole_error, std::abs(whole[k] - xs[k]) / std::abs(xs[k]));
  }
  EXPECT_LE(blockwise_error, 4.5 / 64 * 1.0001);
  EXPECT_GT(whole_error, 0.2);
}

TEST(BlockwiseQuantize, UnsignedMapRoundTripsNonNegativeValues) {
  std::vector<double> x = pseudo_random(5000, 0.0, 1.0, 5);
  for (double& v : x) v = v * v * v * v;  // many decades
  const Tensor t = from_vector<double>(x, {5000}).to(DType::Float32);
  const DynamicMap& map = quant::unsigned_dynamic_map();
  const Tensor back = quant::dequantize_blockwise(quant::quantize_blockwise(t, map, 2048), map, 2048);
  const std::vector<double> b = values_of(back), xs = values_of(t);
  for (int64_t k = 0; k < 5000; ++k) {
    EXPECT_GE(b[k], 0.0);
    EXPECT_LE(std::abs(b[k] - xs[k]), 0.9 / 256 * 1.0001) << k;  // absmax is ~1 in every block
    // A value in decade i (of 2^(i+1) entries spaced 0.9 * 10^(i-6) / 2^(i+1))
    // is kept to half a spacing: at worst, at the decade's bottom, 4.5 / 2^(i+1)
    // of itself. Checked from 1e-4 up (absmax is below 1, so the scaled value
    // is in the same decade or the next).
    if (xs[k] < 1e-4) continue;
    const int decade = static_cast<int>(std::floor(std::log10(xs[k]))) + 6;
    EXPECT_LE(std::abs(b[k] - xs[k]) / xs[k], 4.5 / (2 << decade) * 1.0001) << k;
  }
}

TEST(BlockwiseQuantize, RefusesBadInput) {
  const Tensor x = from_vector<float>({1.0f, 2.0f}, {2});
  const DynamicMap& map = quant::signed_dynamic_map();
  expect_error([&] { quant::quantize_blockwise(x, map, 0); }, "quantize_blockwise: block_size must be >= 1, got 0");
  expect_error([&] { quant::quantize_blockwise(x.to(DType::Float64), map, 2); },
               "quantize_blockwise: expected a float32 tensor, got float64");
  expect_error([&] { quant::quantize_blockwise(from_vector<float>({1.0f, NAN}, {2}), map, 2); },
               "quantize_blockwise: element 1 is nan");
  quant::BlockwiseCodes q = quant::quantize_blockwise(x, map, 1);
  expect_error([&] { quant::dequantize_blockwise(q, map, 2); }, "2 codes in blocks of 2 need 1 absmax values, got 2");
}

// ---- one step against a float64 transcription ----

struct Reference {
  double lr, beta1, beta2, eps, weight_decay;
  bool maximize, decoupled;
};

// The state of one parameter as doubles, and the float64 step of Note
// [Block-wise 8-bit optimizer state] applied to it.
struct ParamState {
  std::vector<double> p, m, v;            // m, v: the moments (dequantized when quantized)
  std::vector<uint8_t> m_codes, v_codes;  // quantized only
  std::vector<double> m_absmax, v_absmax;
  std::vector<double> m_scaled, v_scaled;  // m / absmax after the step (for code checks)
};

void reference_step(const Reference& r, double t, const std::vector<double>& g_in, bool quantized, int64_t block,
                    ParamState& s) {
  const int64_t n = static_cast<int64_t>(s.p.size());
  const double c1 = 1.0 - std::pow(r.beta1, t), c2 = std::sqrt(1.0 - std::pow(r.beta2, t));
  for (int64_t i = 0; i < n; ++i) {
    double g = r.maximize ? -g_in[i] : g_in[i];
    if (!std::isfinite(g)) {
      s.m[i] = s.v[i] = 0.0;
      continue;
    }
    if (!r.decoupled) g += r.weight_decay * s.p[i];
    s.m[i] = r.beta1 * s.m[i] + (1.0 - r.beta1) * g;
    s.v[i] = r.beta2 * s.v[i] + (1.0 - r.beta2) * g * g;
    if (r.decoupled) s.p[i] *= 1.0 - r.lr * r.weight_decay;
    s.p[i] += -r.lr * c2 / c1 * s.m[i] / (std::sqrt(s.v[i]) + r.eps * c2);
  }
  if (!quantized) return;
  const DynamicMap& mm = quant::signed_dynamic_map();
  const DynamicMap& vm = quant::unsigned_dynamic_map();
  s.m_scaled.assign(n, 0.0);
  s.v_scaled.assign(n, 0.0);
  for (int64_t b = 0; b * block < n; ++b) {
    const int64_t end = std::min(n, (b + 1) * block);
    double ma = 0.0, va = 0.0;
    for (int64_t i = b * block; i < end; ++i) {
      ma = std::max(ma, std::abs(s.m[i]));
      va = std::max(va, s.v[i]);
    }
    s.m_absmax[b] = ma;
    s.v_absmax[b] = va;
    for (int64_t i = b * block; i < end; ++i) {
      s.m_scaled[i] = ma > 0 ? s.m[i] / ma : 0.0;
      s.v_scaled[i] = va > 0 ? s.v[i] / va : 0.0;
      s.m_codes[i] = static_cast<uint8_t>(brute_force_nearest(mm, s.m_scaled[i]));
      s.v_codes[i] = static_cast<uint8_t>(brute_force_nearest(vm, s.v_scaled[i]));
    }
  }
}

// The optimizer's state of `param` as a ParamState (moments dequantized).
ParamState read_state(const optim::Optimizer& opt, const Tensor& param, bool quantized, int64_t block) {
  ParamState s;
  s.p = values_of(param);
  const TensorDict& st = opt.state(param);
  if (st.empty()) {
    s.m = s.v = std::vector<double>(param.numel(), 0.0);
    s.m_codes.assign(param.numel(), 127);
    s.v_codes.assign(param.numel(), 0);
    s.m_absmax = s.v_absmax = std::vector<double>(quant::num_blocks(param.numel(), block), 0.0);
    return s;
  }
  if (!quantized) {
    s.m = values_of(st.at("exp_avg"));
    s.v = values_of(st.at("exp_avg_sq"));
    return s;
  }
  s.m_codes = codes_of(st.at("exp_avg"));
  s.v_codes = codes_of(st.at("exp_avg_sq"));
  s.m_absmax = values_of(st.at("exp_avg_absmax"));
  s.v_absmax = values_of(st.at("exp_avg_sq_absmax"));
  s.m = values_of(quant::dequantize_blockwise({st.at("exp_avg"), st.at("exp_avg_absmax")},
                                              quant::signed_dynamic_map(), block));
  s.v = values_of(quant::dequantize_blockwise({st.at("exp_avg_sq"), st.at("exp_avg_sq_absmax")},
                                              quant::unsigned_dynamic_map(), block));
  return s;
}

// Codes may differ from the float64 reference's only by one, where the
// reference's scaled value is on the midpoint between the two up to float32
// rounding of the moment (whose terms may cancel: allow 1e-6 absolute).
void expect_codes_match(const std::vector<uint8_t>& got, const std::vector<uint8_t>& expected,
                        const std::vector<double>& scaled, const DynamicMap& map, const std::string& what) {
  int differ = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == expected[i]) continue;
    ++differ;
    ASSERT_EQ(std::abs(int(got[i]) - int(expected[i])), 1) << what << " element " << i << " scaled " << scaled[i];
    const double mid = (double(map.values[got[i]]) + double(map.values[expected[i]])) / 2;
    EXPECT_LE(std::abs(scaled[i] - mid), 1e-6 + 1e-5 * std::abs(mid)) << what << " element " << i;
  }
  EXPECT_LE(differ, static_cast<int>(got.size() / 500 + 1)) << what;
}

void check_against_reference(const Reference& r, bool decoupled_class, int steps) {
  const int64_t block = 256;
  // 5000 elements: 20 blocks, the last of 136, quantized; 300 keep float32.
  std::vector<Tensor> params = {make_param(pseudo_random(5000, -1, 1, 7), {50, 100}),
                                make_param(pseudo_random(300, -1, 1, 8), {300})};
  std::unique_ptr<Adam8bit> opt;
  if (decoupled_class) {
    opt = std::make_unique<AdamW8bit>(params, AdamW8bitOptions(r.lr)
                                                  .beta1(r.beta1)
                                                  .beta2(r.beta2)
                                                  .eps(r.eps)
                                                  .weight_decay(r.weight_decay)
                                                  .maximize(r.maximize)
                                                  .block_size(block));
  } else {
    opt = std::make_unique<Adam8bit>(params, Adam8bitOptions(r.lr)
                                                 .beta1(r.beta1)
                                                 .beta2(r.beta2)
                                                 .eps(r.eps)
                                                 .weight_decay(r.weight_decay)
                                                 .maximize(r.maximize)
                                                 .block_size(block));
  }
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < params.size(); ++i) {
      const bool quantized = i == 0;
      std::vector<double> g = pseudo_random(params[i].numel(), -1, 1, 100 * s + i);
      for (size_t k = 0; k < g.size(); ++k) g[k] *= (k % 700 == 3) ? 50.0 : 1.0 / (1 + s);  // outliers
      if (s == 2 && quantized) g[17] = NAN, g[4000] = -INFINITY;
      params[i].set_grad(from_vector<double>(g, params[i].shape()).to(DType::Float32));
      g = values_of(params[i].grad());
      // Each step starts from the optimizer's own state, so that a code that
      // rounded the other way does not carry into the next comparison.
      ParamState ref = read_state(*opt, params[i], quantized, block);
      const std::vector<double> p_before = ref.p;
      reference_step(r, s + 1, g, quantized, block, ref);
      opt->step();
      opt->zero_grad();  // the next step updates only the next parameter
      const std::string what = "step " + std::to_string(s) + " param " + std::to_string(i);
      const ParamState got = read_state(*opt, params[i], quantized, block);
      for (size_t k = 0; k < ref.p.size(); ++k)
        ASSERT_NEAR(got.p[k], ref.p[k], 2.5e-7 * std::abs(ref.p[k]) + 1e-5 * r.lr) << what << " element " << k;
      if (s == 2 && quantized) {
        EXPECT_EQ(got.p[17], p_before[17]);
        EXPECT_EQ(got.p[4000], p_before[4000]);
      }
      if (quantized) {
        for (size_t b = 0; b < ref.m_absmax.size(); ++b) {
          EXPECT_NEAR(got.m_absmax[b], ref.m_absmax[b], 1e-5 * ref.m_absmax[b]) << what << " block " << b;
          EXPECT_NEAR(got.v_absmax[b], ref.v_absmax[b], 1e-5 * ref.v_absmax[b]) << what << " block " << b;
        }
        expect_codes_match(got.m_codes, ref.m_codes, ref.m_scaled, quant::signed_dynamic_map(), what + " exp_avg");
        expect_codes_match(got.v_codes, ref.v_codes, ref.v_scaled, quant::unsigned_dynamic_map(),
                           what + " exp_avg_sq");
      } else {
        for (size_t k = 0; k < ref.m.size(); ++k) {
          EXPECT_NEAR(got.m[k], ref.m[k], 1e-6 * (std::abs(ref.m[k]) + std::abs(g[k]))) << what << " element " << k;
          EXPECT_NEAR(got.v[k], ref.v[k], 1e-6 * ref.v[k] + 1e-12) << what << " element " << k;
        }
      }
    }
  }
  EXPECT_EQ(opt->state(params[0]).at("step").item<double>(), steps);
}

TEST(Adam8bit, EachStepIsTheFloat64ReferenceUpToFloat32Rounding) {
  check_against_reference({.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0,
                           .maximize = false, .decoupled = false},
                          /*decoupled_class=*/false, 5);
}

TEST(Adam8bit, L2WeightDecayAndOtherBetasMatchTheReference) {
  check_against_reference({.lr = 3e-3, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1,
                           .maximize = false, .decoupled = false},
                          false, 4);
}

TEST(AdamW8bit, DecoupledDecayAndMaximizeMatchTheReference) {
  check_against_reference({.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.5,
                           .maximize = true, .decoupled = true},
                          true, 4);
}

TEST(Adam8bit, FirstStepMovesEachElementByAboutLr) {
  // As float32 Adam: the first update is lr * g / (|g| + eps') whatever the
  // quantization (the parameter sees the float32 moments).
  Tensor p = make_param(std::vector<double>(4096, 1.0), {4096});
  Adam8bit opt({p}, Adam8bitOptions(0.1));
  std::vector<double> g = pseudo_random(4096, -2, 2, 9);
  p.set_grad(from_vector<double>(g, {4096}).to(DType::Float32));
  opt.step();
  const std::vector<double> after = values_of(p);
  for (int k = 0; k < 4096; ++k) EXPECT_NEAR(after[k], 1.0 - 0.1 * (g[k] > 0 ? 1 : -1), 1e-5) << k;
  EXPECT_EQ(opt.state(p).at("exp_avg").dtype(), DType::UInt8);
}

TEST(Adam8bit, Float64ParametersGetTheFloat32Update) {
  const std::vector<double> init = pseudo_random(5000, -1, 1, 10);
  Tensor p32 = make_param(init, {5000});
  Tensor p64 = make_param(values_of(p32), {5000}, DType::Float64);
  Adam8bit opt32({p32}, Adam8bitOptions(1e-2));
  Adam8bit opt64({p64}, Adam8bitOptions(1e-2));
  for (int s = 0; s < 3; ++s) {
    const Tensor g = from_vector<double>(pseudo_random(5000, -1, 1, 20 + s), {5000}).to(DType::Float32);
    p32.set_grad(g);
    p64.set_grad(g.to(DType::Float64));
    opt32.step();
    opt64.step();
    EXPECT_TRUE(bitwise_equal(p64.to(DType::Float32), p32)) << "step " << s;
    EXPECT_TRUE(bitwise_equal(opt64.state(p64).at("exp_avg"), opt32.state(p32).at("exp_avg")));
  }
}

// ---- training ----

// Least squares: 8-bit and float32 Adam from the same start.
double train_regression(bool eight_bit, int steps) {
  manual_seed(1);
  const Tensor x = randn({256, 64});
  const Tensor w_true = randn({64, 32});
  const Tensor y = ops::add(ops::matmul(x, w_true), ops::mul(randn({256, 32}), 0.01));
  Tensor w = ops::mul(randn({64, 32}), 0.1);
  w.requires_grad_();
  std::unique_ptr<optim::Optimizer> opt;
  if (eight_bit) {
    opt = std::make_unique<Adam8bit>(std::vector<Tensor>{w}, Adam8bitOptions(1e-2).block_size(256).min_8bit_size(0));
  } else {
    opt = std::make_unique<optim::Adam>(std::vector<Tensor>{w}, optim::AdamOptions(1e-2));
  }
  double loss_value = 0.0;
  for (int s = 0; s < steps; ++s) {
    opt->zero_grad();
    Tensor loss = nn::functional::mse_loss(matmul(x, w), y);
    loss.backward();
    opt->step();
    loss_value = loss.item<double>();
  }
  return loss_value;
}

TEST(Adam8bit, ConvergesOnRegressionAsFloat32Adam) {
  const double start = train_regression(false, 1);
  const double adam = train_regression(false, 400);
  const double adam8 = train_regression(true, 400);
  EXPECT_LT(adam, 1e-2 * start);
  EXPECT_NEAR(adam8, adam, 0.05 * adam) << "float32 Adam " << adam << ", 8-bit " << adam8;
}

std::vector<Tensor> lenet_step_grads(nn::LeNet& model) {
  manual_seed(2);
  const Tensor images = randn({8, 3, 32, 32});
  const Tensor labels = randint(0, 10, {8});
  model.zero_grad();
  nn::functional::cross_entropy(model.forward(images), labels).backward();
  return model.parameters();
}

TEST(Adam8bit, LeNetStateIsAtMost30PercentOfAdams) {
  manual_seed(0);
  nn::LeNet model;
  optim::Adam adam(model.parameters(), optim::AdamOptions());
  Adam8bit adam8(model.parameters(), Adam8bitOptions());
  Adam8bit adam8_all(model.parameters(), Adam8bitOptions().min_8bit_size(0));
  lenet_step_grads(model);
  adam.step();
  adam8.step();
  adam8_all.step();
  const int64_t full = quant::optimizer_state_bytes(adam);
  // 62,006 parameters: 8 bytes each, and one float64 step per tensor.
  EXPECT_EQ(full, 62006 * 8 + 10 * 8);
  // fc1 (48,000: 24 blocks) and fc2 (10,080: 5 blocks) are quantized at the
  // default min_8bit_size (4096); the other 3,926 elements keep float32.
  EXPECT_EQ(adam8.state_bytes(), 58080 * 2 + (24 + 5) * 2 * 4 + 3926 * 8 + 10 * 8);
  EXPECT_LE(adam8.state_bytes(), 0.30 * full);
  // Quantizing every tensor: one block or more each.
  EXPECT_EQ(adam8_all.state_bytes(), 62006 * 2 + (1 + 1 + 2 + 1 + 24 + 1 + 5 + 1 + 1 + 1) * 2 * 4 + 10 * 8);
  EXPECT_LE(adam8_all.state_bytes(), 0.26 * full);
}

// ---- state dicts ----

TEST(Adam8bit, StateDictRoundTripContinuesBitForBit) {
  manual_seed(3);
  auto run = [](nn::LeNet& model, optim::Optimizer& opt, int steps, uint64_t seed) {
    for (int s = 0; s < steps; ++s) {
      manual_seed(seed + s);
      opt.zero_grad();
      nn::functional::cross_entropy(model.forward(randn({4, 3, 32, 32})), randint(0, 10, {4})).backward();
      opt.step();
    }
  };
  nn::LeNet a;
  AdamW8bit opt_a(a.parameters(), AdamW8bitOptions(3e-3).block_size(512));
  run(a, opt_a, 3, 100);
  // Through a file, as a checkpoint would go.
  const std::string path = ::testing::TempDir() + "adam8bit_state_" + std::to_string(getpid()) + ".safetensors";
  save_safetensors(path, opt_a.state_dict());
  const TensorDict model_state = a.state_dict();
  nn::LeNet b;
  b.load_state_dict(model_state);
  AdamW8bit opt_b(b.parameters(), AdamW8bitOptions(1.0).block_size(512));
  opt_b.load_state_dict(load_safetensors(path));
  EXPECT_EQ(opt_b.lr(0), 3e-3);
  EXPECT_EQ(opt_b.state(b.fc1->weight).at("exp_avg").dtype(), DType::UInt8);
  run(a, opt_a, 3, 200);
  run(b, opt_b, 3, 200);
  const auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(bitwise_equal(pa[i], pb[i])) << "parameter " << i;
    for (const auto& [name, t] : opt_a.state(pa[i]))
      EXPECT_TRUE(bitwise_equal(t, opt_b.state(pb[i]).at(name))) << "parameter " << i << " " << name;
  }
}

TEST(Adam8bit, LoadingStateOfAnotherBlockSizeOrMin8bitSizeFails) {
  Tensor p = make_param(pseudo_random(5000, -1, 1, 11), {5000});
  Adam8bit saved({p}, Adam8bitOptions().block_size(1024));
  p.set_grad(ones({5000}));
  saved.step();
  const TensorDict dict = saved.state_dict();
  Adam8bit other_blocks({p}, Adam8bitOptions().block_size(2048));
  expect_error([&] { other_blocks.load_state_dict(dict); },
               "Adam8bit::load_state_dict: 'state.0.exp_avg_absmax' is float32 of shape [5] but Adam8bit keeps "
               "float32 of shape [3] for parameter 0");
  Adam8bit float_state({p}, Adam8bitOptions().min_8bit_size(10000));
  expect_error([&] { float_state.load_state_dict(dict); },
               "'state.0.exp_avg' is uint8 of shape [5000] but Adam8bit keeps float32 of shape [5000]");
  // Changing the block size after the first step is refused at the next.
  saved.options(0).block_size(512);
  expect_error([&] { saved.step(); }, "Adam8bit::step: parameter 0 (group 0)'s 'exp_avg_absmax' is float32 of shape [5]");
}

// ---- the Optimizer machinery ----

TEST(Adam8bit, SchedulersAndParamGroupsDriveIt) {
  Tensor a = make_param(pseudo_random(5000, -1, 1, 12), {5000});
  Tensor b = make_param(pseudo_random(10, -1, 1, 13), {10});
  const std::vector<optim::ParamGroup> groups = {{{a}, {}}, {{b}, {{"lr", 0.5}, {"beta1", 0.5}}}};
  Adam8bit opt(groups, Adam8bitOptions(0.1));
  EXPECT_EQ(opt.lr(1), 0.5);
  EXPECT_EQ(opt.hyperparameter(1, "beta1"), 0.5);
  optim::StepLR schedule(opt, 1, 0.5);
  a.set_grad(ones({5000}));
  opt.step();
  schedule.step();
  EXPECT_DOUBLE_EQ(opt.lr(0), 0.05);
  EXPECT_DOUBLE_EQ(opt.lr(1), 0.25);
  EXPECT_FALSE(opt.state(a).empty());
  EXPECT_TRUE(opt.state(b).empty());  // no grad: no state
  optim::OneCycleLR cycle(opt, 0.1, 10);
  EXPECT_NE(opt.hyperparameter(0, "beta1"), 0.9);  // OneCycleLR cycles beta1
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

// ---- errors ----

TEST(Adam8bit, RefusesBadHyperparameters) {
  Tensor p = make_param({1.0, 2.0}, {2});
  expect_error([&] { Adam8bit({p}, Adam8bitOptions(-1.0)); }, "Adam8bit: invalid learning rate -1 (must be >= 0)");
  expect_error([&] { Adam8bit({p}, Adam8bitOptions().beta1(1.0)); }, "Adam8bit: invalid beta1 1 (must be in [0, 1))");
  expect_error([&] { Adam8bit({p}, Adam8bitOptions().beta2(-0.1)); }, "Adam8bit: invalid beta2 -0.1");
  expect_error([&] { Adam8bit({p}, Adam8bitOptions().eps(-1.0)); }, "Adam8bit: invalid eps -1");
  expect_error([&] { Adam8bit({p}, Adam8bitOptions().weight_decay(-1.0)); }, "Adam8bit: invalid weight_decay -1");
  expect_error([&] { Adam8bit({p}, Adam8bitOptions().block_size(0)); },
               "Adam8bit: invalid block_size 0 (must be >= 1)");
  expect_error([&] { Adam8bit({p}, Adam8bitOptions().min_8bit_size(-1)); }, "Adam8bit: invalid min_8bit_size -1");
  expect_error([&] { AdamW8bit({p}, AdamW8bitOptions().block_size(-4)); }, "AdamW8bit: invalid block_size -4");
  Adam8bit opt({p}, Adam8bitOptions());
  expect_error([&] { opt.set_hyperparameter(0, "beta2", 1.5); },
               "Adam8bit::set_hyperparameters: invalid beta2 1.5 (must be in [0, 1))");
  expect_error([&] { opt.set_hyperparameter(0, "amsgrad", 1); }, "unknown hyperparameter 'amsgrad'");
}

TEST(Adam8bit, RefusesCudaParametersNamingTheDevice) {
  // The check runs before any memory is touched, so a tensor that only
  // claims to be on the GPU tests it on any machine.
  Tensor p = tensor_claiming_device(cuda_device(0), 8);
  p.requires_grad_();
  p.set_grad(tensor_claiming_device(cuda_device(0), 8));
  AdamW8bit opt({p}, AdamW8bitOptions());
  expect_error([&] { opt.step(); },
               "AdamW8bit::step: parameter 0 (group 0) is on cuda:0 (its grad on cuda:0); AdamW8bit has no CUDA "
               "implementation");
}

#ifdef KILN_WITH_CUDA
TEST(Adam8bit, RefusesRealCudaParameters) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device on this machine (cuda::device_count() == 0)";
  Tensor p = ones({4096}).cuda();
  p.requires_grad_();
  p.set_grad(ones({4096}).cuda());
  Adam8bit opt({p}, Adam8bitOptions());
  expect_error([&] { opt.step(); }, "Adam8bit::step: parameter 0 (group 0) is on cuda:0");
}
#endif

}  // namespace
}  // namespace kiln
