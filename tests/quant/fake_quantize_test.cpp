// Fake quantization: the forward bit for bit against the quantize /
// dequantize pair and torch, the straight-through gradient by hand, LSQ
// against torch 1.13, and the FakeQuantize module.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <sstream>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "quant/fake_quantize.h"
#include "quant/fake_quantize_kernel.h"
#include "tensor/cpu/cpu_features.h"
#include "quant_test_util.h"
#include "tensor/quant_math.h"
#ifdef KILN_WITH_CUDA
#include "tensor/cuda/device.h"
#endif
#include "tensor/quantize.h"

namespace kiln::quant {
namespace {

using quanttest::error_of;
using quanttest::py_list;
using quanttest::run_torch;
using quanttest::tensor_of;
using quanttest::same_bits;
using quanttest::values_f32;


// Random values around a grid of `scale`, with exact ties (x / scale =
// k + 0.5), values far outside [quant_min, quant_max] and a NaN.
std::vector<float> hard_values(float scale, int64_t n, uint64_t seed) {
  Generator gen(seed);
  std::vector<float> v = values_f32(ops::mul(randn({n}, DType::Float32, &gen), 60.0 * scale));
  for (int k = -300; k <= 300; k += 7) v.push_back((static_cast<float>(k) + 0.5f) * scale);
  v.push_back(1e30f);
  v.push_back(-1e30f);
  v.push_back(std::numeric_limits<float>::infinity());
  v.push_back(std::numeric_limits<float>::quiet_NaN());
  return v;
}

// The reference: quant_math's two steps, element by element.
float reference(float x, float scale, int32_t zp, float lo, float hi) {
  const float q = quant_math::quantize_value(x, quant_math::inverse_scale(scale), static_cast<float>(zp), lo, hi);
  return quant_math::dequantize_value(static_cast<int32_t>(q), zp, scale);
}

TEST(FakeQuantize, ForwardIsQuantizeThenDequantizeBitForBit) {
  // scale 0.5: x * inv_scale is exact, so the ties k + 0.5 are exact ties.
  for (auto [scale, zp, dtype] : {std::tuple{0.5, int64_t{128}, DType::UInt8}, std::tuple{0.0375, int64_t{-3}, DType::Int8},
                                  std::tuple{1.0 / 3.0, int64_t{0}, DType::Int8}}) {
    const auto range = quant_math::qrange(dtype);
    std::vector<float> v = hard_values(static_cast<float>(scale), 5000, 7);
    Tensor x = tensor_of(v);
    Tensor y = fake_quantize(x, scale, zp, range.lo, range.hi);
    Tensor expected = ops::dequantize(ops::quantize_per_tensor(x, scale, zp, dtype));
    std::vector<float> got = values_f32(y), want = values_f32(expected);
    ASSERT_EQ(got.size(), v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      ASSERT_TRUE(same_bits(got[i], want[i])) << "x=" << v[i] << " scale=" << scale << ": " << got[i] << " vs " << want[i];
      ASSERT_TRUE(same_bits(got[i], reference(v[i], static_cast<float>(scale), zp, range.lo, range.hi)));
    }
  }
  // Ties go to even: 0.25 / 0.5 = 0.5 -> 0, 0.75 / 0.5 = 1.5 -> 2.
  EXPECT_EQ(values_f32(fake_quantize(tensor_of({0.25f, 0.75f, -0.25f}), 0.5, 0, -128, 127)),
            (std::vector<float>{0.0f, 1.0f, -0.0f}));
  // Saturation and NaN (to quant_min).
  EXPECT_EQ(values_f32(fake_quantize(tensor_of({100.0f, -100.0f, NAN}), 0.5, 2, 0, 15)),
            (std::vector<float>{6.5f, -1.0f, -1.0f}));
}

TEST(FakeQuantize, PerChannelBitForBit) {
  Generator gen(3);
  Tensor x = ops::mul(randn({4, 3, 50}, DType::Float32, &gen), 3.0);
  std::vector<double> scales = {0.02, 0.5, 0.125};
  std::vector<int64_t> zps = {0, -7, 100};
  Tensor y = fake_quantize_per_channel(x, scales, zps, 1, -128, 127);
  Tensor expected = ops::dequantize(ops::quantize_per_channel(x, scales, zps, 1, DType::Int8));
  std::vector<float> got = values_f32(y), want = values_f32(expected), xs = values_f32(x);
  for (size_t i = 0; i < got.size(); ++i) {
    const size_t c = (i / 50) % 3;
    ASSERT_TRUE(same_bits(got[i], want[i])) << i;
    ASSERT_TRUE(same_bits(got[i], reference(xs[i], static_cast<float>(scales[c]), static_cast<int32_t>(zps[c]), -128, 127)));
  }
  // Negative axis, and a non-contiguous input.
  Tensor xt = x.transpose(0, 2);  // (50, 3, 4)
  Tensor yt = fake_quantize_per_channel(xt, scales, zps, -2, -128, 127);
  EXPECT_EQ(values_f32(yt), values_f32(y.transpose(0, 2)));
  EXPECT_EQ(y.impl()->quant_params(), nullptr) << "per-channel results carry no grid";
}

TEST(FakeQuantize, ResultCarriesItsGridAndKeepsDtype) {
  Tensor x = tensor_of({0.3f, -1.2f, 7.0f});
  Tensor y = fake_quantize(x, 0.1, 10, 0, 255);
  ASSERT_NE(y.impl()->quant_params(), nullptr);
  EXPECT_EQ(y.impl()->quant_params()->scales, (std::vector<double>{static_cast<float>(0.1)}));
  EXPECT_EQ(y.impl()->quant_params()->zero_points, (std::vector<int64_t>{10}));
  EXPECT_EQ(y.dtype(), DType::Float32);
  // float64: the float32 results, exactly.
  Tensor y64 = fake_quantize(x.to(DType::Float64), 0.1, 10, 0, 255);
  EXPECT_EQ(y64.dtype(), DType::Float64);
  EXPECT_EQ(values_f32(y64), values_f32(y));
  EXPECT_EQ(fake_quantize(x.to(DType::BFloat16), 0.1, 10, 0, 255).dtype(), DType::BFloat16);
  EXPECT_EQ(fake_quantize(empty({0, 3}), 0.1, 10, 0, 255).shape(), (Shape{0, 3}));
}

TEST(FakeQuantize, StraightThroughGradient) {
  // scale 0.5, zero point 2, range [0, 15]: x / 0.5 + 2 in range for x in [-1, 6.5].
  // -1.3 / 0.5 = -2.6 -> -3, + 2 = -1: out; -0.6 -> -1.2 -> -1 + 2 = 1: in;
  // 6.5 -> 13 + 2 = 15: in; 6.8 -> 13.6 -> 14 + 2 = 16: out.
  std::vector<float> v = {-1.3f, -1.0f, -0.6f, 0.0f, 3.3f, 6.5f, 6.8f, 100.0f, NAN};
  std::vector<float> mask = {0, 1, 1, 1, 1, 1, 0, 0, 0};
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Tensor x = tensor_of(v).to(dtype).requires_grad_();
    Tensor y = fake_quantize(x, 0.5, 2, 0, 15);
    Tensor g = tensor_of({1, 2, 3, 4, 5, 6, 7, 8, 9}).to(dtype);
    kiln::sum(kiln::mul(y, g)).backward();
    std::vector<float> grad = values_f32(x.grad());
    for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(grad[i], mask[i] * static_cast<float>(i + 1)) << "x=" << v[i];
    EXPECT_EQ(x.grad().dtype(), dtype);
  }
  // Per channel: each channel's own range.
  Tensor x = tensor_of({1.0f, 1.0f}, {2, 1}).requires_grad_();
  kiln::sum(fake_quantize_per_channel(x, {0.5, 0.01}, {0, 0}, 0, -10, 10)).backward();
  EXPECT_EQ(values_f32(x.grad()), (std::vector<float>{1.0f, 0.0f}));
}

TEST(FakeQuantize, Avx2LoopMatchesBaselineLoop) {
  // The loop compiled here (baseline x86-64) against the library's AVX2 build.
  if (!cpu::int8_features().avx2) GTEST_SKIP() << "this CPU has no AVX2";
  std::vector<float> v = hard_values(0.07f, 3000, 8);
  const int64_t channels = 2, inner = static_cast<int64_t>(v.size()) / 2;
  std::vector<float> out_a(v.size()), out_b(v.size());
  std::unique_ptr<bool[]> mask_a(new bool[v.size()]), mask_b(new bool[v.size()]);
  const float scales[] = {0.07f, 0.3f}, inv[] = {1.0f / 0.07f, 1.0f / 0.3f};
  const int32_t zps[] = {3, -100};
  detail::FakeQuantizeArgs a{v.data(), out_a.data(), mask_a.get(), channels, inner, channels, scales, inv, zps, -128, 127};
  detail::FakeQuantizeArgs b = a;
  b.out = out_b.data();
  b.mask = mask_b.get();
  detail::fake_quantize_rows(a, 0, channels);
  detail::fake_quantize_rows_avx2(b, 0, channels);
  for (int64_t i = 0; i < channels * inner; ++i) {
    ASSERT_TRUE(same_bits(out_a[i], out_b[i])) << i;
    ASSERT_EQ(mask_a[i], mask_b[i]) << i;
  }
}

TEST(FakeQuantize, CudaMatchesCpu) {
#ifdef KILN_WITH_CUDA
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device on this machine (cuda::device_count() == 0)";
  const Device gpu = cuda_device(0);
  std::vector<float> v = hard_values(0.1f, 2000, 4);
  Tensor x = tensor_of(v);
  Tensor xg = x.to(gpu).requires_grad_();
  Tensor yg = fake_quantize(xg, 0.1, 5, -128, 127);
  EXPECT_EQ(yg.device(), gpu);
  kiln::sum(yg).backward();
  Tensor xc = x.clone().requires_grad_();
  Tensor yc = fake_quantize(xc, 0.1, 5, -128, 127);
  kiln::sum(yc).backward();
  std::vector<float> a = values_f32(yg), b = values_f32(yc);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_TRUE(same_bits(a[i], b[i])) << i;
  EXPECT_EQ(values_f32(xg.grad()), values_f32(xc.grad()));
  Tensor w = tensor_of(std::vector<float>(v.begin(), v.begin() + 2002), {2, 1001});  // without the NaN
  EXPECT_EQ(values_f32(fake_quantize_per_channel(w.to(gpu), {0.1, 0.2}, {0, 1}, 0, -8, 7)),
            values_f32(fake_quantize_per_channel(w, {0.1, 0.2}, {0, 1}, 0, -8, 7)));
#else
  GTEST_SKIP() << "Kiln was built without CUDA";
#endif
}

// ---- against torch ---------------------------------------------------------------

TEST(FakeQuantizeVsTorch, ForwardAndMask) {
  KILN_SKIP_WITHOUT_TORCH();
  std::vector<float> v = hard_values(0.05f, 300, 11);
  // Without the NaN, infinity and +-1e30: torch converts nearbyint(x / scale)
  // to int64 before clamping, which overflows there (1e30 comes out as
  // quant_min); quant_math clamps the float first (quant_max).
  v.resize(v.size() - 4);
  Tensor x = tensor_of(v).requires_grad_();
  Tensor y = fake_quantize(x, 0.05, 3, -128, 127);
  kiln::sum(y).backward();
  Generator gen(5);
  Tensor w = ops::mul(randn({6, 40}, DType::Float32, &gen), 2.0);
  Tensor wr = w.clone().requires_grad_();
  Tensor yw = fake_quantize_per_channel(wr, {0.01, 0.02, 0.03, 0.5, 0.011, 0.07}, {0, 1, -1, 5, 0, 0}, 0, -128, 127);
  kiln::sum(yw).backward();
  std::ostringstream script;
  script << "x = torch.tensor(" << py_list(v) << ", requires_grad=True)\n"
         << "y = torch.fake_quantize_per_tensor_affine(x, 0.05, 3, -128, 127)\ny.sum().backward()\nemit(y)\nemit(x.grad)\n"
         << "w = torch.tensor(" << py_list(values_f32(w)) << ").reshape(6, 40).requires_grad_()\n"
         << "yw = torch.fake_quantize_per_channel_affine(w, torch.tensor([0.01, 0.02, 0.03, 0.5, 0.011, 0.07]), "
            "torch.tensor([0, 1, -1, 5, 0, 0], dtype=torch.int32), 0, -128, 127)\n"
         << "yw.sum().backward()\nemit(yw)\nemit(w.grad)\n";
  auto lines = run_torch(script.str());
  ASSERT_EQ(lines.size(), 4u);
  const std::vector<std::vector<float>> ours = {values_f32(y), values_f32(x.grad()), values_f32(yw), values_f32(wr.grad())};
  const char* names[] = {"per-tensor output", "per-tensor grad", "per-channel output", "per-channel grad"};
  for (size_t k = 0; k < 4; ++k) {
    ASSERT_EQ(lines[k].size(), ours[k].size()) << names[k];
    for (size_t i = 0; i < ours[k].size(); ++i) {
      ASSERT_TRUE(same_bits(ours[k][i], static_cast<float>(lines[k][i])))
          << names[k] << " at " << i << ": " << ours[k][i] << " vs torch " << lines[k][i];
    }
  }
}

TEST(FakeQuantizeVsTorch, LearnableGradients) {
  KILN_SKIP_WITHOUT_TORCH();
  std::vector<float> v = quanttest::pattern(200, -1.5f, 4.0f, 9);
  std::vector<float> g = quanttest::pattern(200, -1.0f, 1.0f, 10);
  // Per tensor, zero point 2.5 (rounded differently by torch's forward and
  // backward), grad_factor 0.3; per channel along dim 1 of (10, 4, 5).
  Tensor x = tensor_of(v).requires_grad_();
  Tensor scale = tensor_of({0.04f}).requires_grad_();
  Tensor zp = tensor_of({2.5f}).requires_grad_();
  Tensor y = fake_quantize_learnable(x, scale, zp, 0, 63, 0.3);
  kiln::sum(kiln::mul(y, tensor_of(g))).backward();
  Tensor xc = tensor_of(v, {10, 4, 5}).requires_grad_();
  Tensor scales = tensor_of({0.01f, 0.05f, 0.2f, 0.03f}).requires_grad_();
  Tensor zps = tensor_of({0.0f, 3.5f, -2.4f, 10.0f}).requires_grad_();
  Tensor yc = fake_quantize_learnable_per_channel(xc, scales, zps, 1, -32, 31, 1.0);
  kiln::sum(kiln::mul(yc, tensor_of(g, {10, 4, 5}))).backward();
  std::ostringstream script;
  script << "g = torch.tensor(" << py_list(g) << ")\n"
         << "x = torch.tensor(" << py_list(v) << ", requires_grad=True)\n"
         << "s = torch.tensor([0.04], requires_grad=True)\nz = torch.tensor([2.5], requires_grad=True)\n"
         << "y = torch._fake_quantize_learnable_per_tensor_affine(x, s, z, 0, 63, 0.3)\n(y * g).sum().backward()\n"
         << "emit(y)\nemit(x.grad)\nemit(s.grad, z.grad)\n"
         << "xc = torch.tensor(" << py_list(v) << ").reshape(10, 4, 5).requires_grad_()\n"
         << "sc = torch.tensor([0.01, 0.05, 0.2, 0.03], requires_grad=True)\n"
         << "zc = torch.tensor([0.0, 3.5, -2.4, 10.0], requires_grad=True)\n"
         << "yc = torch._fake_quantize_learnable_per_channel_affine(xc, sc, zc, 1, -32, 31, 1.0)\n"
         << "(yc * g.reshape(10, 4, 5)).sum().backward()\nemit(yc)\nemit(xc.grad)\nemit(sc.grad, zc.grad)\n";
  auto lines = run_torch(script.str());
  ASSERT_EQ(lines.size(), 6u);
  auto expect_close = [](const std::vector<float>& ours, const std::vector<double>& theirs, double rtol,
                         const char* what) {
    ASSERT_EQ(ours.size(), theirs.size()) << what;
    for (size_t i = 0; i < ours.size(); ++i) {
      EXPECT_NEAR(ours[i], theirs[i], rtol * (1.0 + std::abs(theirs[i]))) << what << " at " << i;
    }
  };
  // Outputs and input gradients elementwise exactly; the scale and zero-point
  // sums to the summation order (torch sums float32 products in float32).
  expect_close(values_f32(y), lines[0], 0, "per-tensor output");
  expect_close(values_f32(x.grad()), lines[1], 0, "per-tensor x grad");
  expect_close({values_f32(scale.grad())[0], values_f32(zp.grad())[0]}, lines[2], 1e-5, "per-tensor scale, zp grads");
  expect_close(values_f32(yc), lines[3], 0, "per-channel output");
  expect_close(values_f32(xc.grad()), lines[4], 0, "per-channel x grad");
  std::vector<float> sz = values_f32(scales.grad());
  for (float z : values_f32(zps.grad())) sz.push_back(z);
  expect_close(sz, lines[5], 1e-5, "per-channel scale, zp grads");
}

TEST(FakeQuantizeVsTorch, ModuleOverBatches) {
  KILN_SKIP_WITHOUT_TORCH();
  // torch.ao's default QAT activation fake-quant: MovingAverageMinMax,
  // quint8 affine, over three batches; the third after freezing the observer.
  std::vector<std::vector<float>> batches = {quanttest::pattern(50, -1.0f, 2.0f, 1), quanttest::pattern(50, -2.0f, 1.0f, 2),
                                             quanttest::pattern(50, -4.0f, 4.0f, 3)};
  FakeQuantize fq(std::make_shared<MovingAverageMinMaxObserver>());
  std::vector<std::vector<float>> ours;
  std::ostringstream script;
  script << "import torch.ao.quantization as Q\n"
         << "fq = Q.FakeQuantize(observer=Q.MovingAverageMinMaxObserver, quant_min=0, quant_max=255)\n";
  for (size_t b = 0; b < batches.size(); ++b) {
    if (b == 2) {
      fq.disable_observer();
      script << "fq.disable_observer()\n";
    }
    ours.push_back(values_f32(fq(tensor_of(batches[b]))));
    script << "emit(fq(torch.tensor(" << py_list(batches[b]) << ")))\n";
  }
  script << "emit(fq.scale, fq.zero_point)\n";
  auto lines = run_torch(script.str());
  ASSERT_EQ(lines.size(), 4u);
  for (size_t b = 0; b < 3; ++b) {
    ASSERT_EQ(lines[b].size(), ours[b].size());
    for (size_t i = 0; i < ours[b].size(); ++i) ASSERT_TRUE(same_bits(ours[b][i], static_cast<float>(lines[b][i]))) << b;
  }
  EXPECT_EQ(static_cast<double>(values_f32(fq.scale)[0]), lines[3][0]);
  EXPECT_EQ(static_cast<double>(fq.zero_point.data<int32_t>()[0]), lines[3][1]);
}

// ---- the module ---------------------------------------------------------------------

TEST(FakeQuantizeModule, EnableDisable) {
  auto fq = std::make_shared<FakeQuantize>(std::make_shared<MinMaxObserver>());
  EXPECT_TRUE(fq->is_observer_enabled());
  EXPECT_TRUE(fq->is_fake_quant_enabled());
  Tensor x = tensor_of({-1.0f, 0.1234f, 3.0f});
  Tensor y = (*fq)(x);
  QParams qp = fq->qparams();
  EXPECT_EQ(qp.scales[0], static_cast<double>(4.0f / 255.0f));
  EXPECT_EQ(qp.zero_points[0], 64);
  EXPECT_EQ(values_f32(y), values_f32(fake_quantize(x, qp)));
  ASSERT_NE(y.impl()->quant_params(), nullptr) << "the output carries its grid";
  EXPECT_EQ(y.impl()->quant_params()->zero_points[0], 64);

  // Observer off: the grid stays although the range grows.
  fq->disable_observer();
  Tensor wide = tensor_of({-10.0f, 10.0f});
  Tensor yw = (*fq)(wide);
  EXPECT_EQ(fq->qparams().scales, qp.scales);
  EXPECT_EQ(values_f32(yw), values_f32(fake_quantize(wide, qp)));
  EXPECT_EQ(*fq->activation_post_process->calculate_qparams().scales.data(), qp.scales[0]);

  // Fake quant off: the input itself comes back; the observer still runs when on.
  fq->disable_fake_quant();
  fq->enable_observer();
  Tensor same = (*fq)(wide);
  EXPECT_TRUE(same.is_same(wide));
  EXPECT_EQ(fq->qparams().scales[0], static_cast<double>(20.0f / 255.0f));
  EXPECT_TRUE(fq->has_statistics());

  std::ostringstream os;
  fq->pretty_print(os);
  EXPECT_NE(os.str().find("FakeQuantize(\n  fake_quant_enabled=False, observer_enabled=True, quant_min=0, quant_max=255"),
            std::string::npos)
      << os.str();
  EXPECT_NE(os.str().find("(activation_post_process): MinMaxObserver("), std::string::npos) << os.str();
}

TEST(FakeQuantizeModule, WorksAfterModuleTo) {
  // Module::to converts the floating state (min/max, histogram, scale) to
  // float64; observers and the module read and write it whatever its dtype.
  for (bool histogram : {false, true}) {
    std::shared_ptr<Observer> obs = histogram ? std::shared_ptr<Observer>(std::make_shared<HistogramObserver>())
                                              : std::make_shared<MinMaxObserver>();
    auto fq = std::make_shared<FakeQuantize>(obs);
    Tensor x = tensor_of(quanttest::pattern(500, -2.0f, 3.0f));
    Tensor y32 = (*fq)(x);
    const QParams before = fq->qparams();
    auto fq64 = std::make_shared<FakeQuantize>(histogram ? std::shared_ptr<Observer>(std::make_shared<HistogramObserver>())
                                                         : std::make_shared<MinMaxObserver>());
    fq64->to(DType::Float64);
    EXPECT_EQ(fq64->scale.dtype(), DType::Float64);
    Tensor y64 = (*fq64)(x);
    EXPECT_EQ(fq64->qparams().scales, before.scales) << "histogram " << histogram;
    EXPECT_EQ(fq64->qparams().zero_points, before.zero_points);
    EXPECT_EQ(values_f32(y64), values_f32(y32));
  }
  auto pc = std::make_shared<PerChannelMinMaxObserver>(0);
  pc->to(DType::Float64);
  (*pc)(tensor_of({1.0f, -2.0f}, {2, 1}));
  EXPECT_EQ(pc->min_val.dtype(), DType::Float64);
  EXPECT_EQ(pc->calculate_qparams().scales.size(), 2u);
}

TEST(FakeQuantizeModule, PerChannelAndStateDictRoundTrip) {
  auto make = [] {
    ObserverOptions o = PerChannelMinMaxObserver::per_channel_defaults();
    o.dtype = DType::Int8;
    o.qscheme = QScheme::PerChannelSymmetric;
    return std::make_shared<FakeQuantize>(std::make_shared<PerChannelMinMaxObserver>(0, o));
  };
  auto fq = make();
  Generator gen(2);
  Tensor w = randn({5, 7}, DType::Float32, &gen);
  Tensor y = (*fq)(w);
  QParams qp = fq->qparams();
  EXPECT_TRUE(qp.per_channel);
  EXPECT_EQ(qp.axis, 0);
  ASSERT_EQ(qp.scales.size(), 5u);
  EXPECT_EQ(qp.zero_points, std::vector<int64_t>(5, 0));
  EXPECT_EQ(values_f32(y), values_f32(fake_quantize_per_channel(w, qp.scales, qp.zero_points, 0, -128, 127)));

  TensorDict state = fq->state_dict();
  EXPECT_EQ(state.keys(), (std::vector<std::string>{"fake_quant_enabled", "observer_enabled", "scale", "zero_point",
                                                   "activation_post_process.eps", "activation_post_process.min_val",
                                                   "activation_post_process.max_val"}));
  fq->disable_observer();
  auto fresh = make();
  fresh->load_state_dict(fq->state_dict());
  EXPECT_FALSE(fresh->is_observer_enabled());
  EXPECT_EQ(fresh->qparams().scales, qp.scales);
  EXPECT_EQ(values_f32((*fresh)(w)), values_f32(y));
  EXPECT_EQ(fresh->calculate_qparams().scales, qp.scales);
}

TEST(FakeQuantizeModule, LearnableScaleGetsGradients) {
  FakeQuantizeOptions options;
  options.learnable = true;
  options.use_grad_scaling = true;
  auto fq = std::make_shared<FakeQuantize>(std::make_shared<MovingAverageMinMaxObserver>(), options);
  EXPECT_EQ(fq->parameters().size(), 2u);
  Tensor x = tensor_of(quanttest::pattern(100, -1.0f, 3.0f));
  (*fq)(x);  // calibrates scale and zero point
  const QParams calibrated = fq->qparams();
  fq->disable_observer();
  Tensor xr = x.clone().requires_grad_();
  Tensor y = (*fq)(xr);
  EXPECT_EQ(values_f32(y), values_f32(fake_quantize(x, calibrated)));
  kiln::sum(kiln::mul(y, y)).backward();
  ASSERT_TRUE(fq->scale.grad().defined());
  ASSERT_TRUE(fq->zero_point.grad().defined());
  EXPECT_TRUE(xr.grad().defined());
  // Against the op itself with grad_factor 1 / sqrt(numel * quant_max).
  Tensor s = fq->scale.detach().clone().requires_grad_(), z = fq->zero_point.detach().clone().requires_grad_();
  Tensor y2 = fake_quantize_learnable(x, s, z, 0, 255, 1.0 / std::sqrt(100.0 * 255.0));
  kiln::sum(kiln::mul(y2, y2)).backward();
  EXPECT_EQ(values_f32(s.grad()), values_f32(fq->scale.grad()));
  EXPECT_EQ(values_f32(z.grad()), values_f32(fq->zero_point.grad()));
  // A scale stepped below eps is clamped back before use.
  {
    NoGradGuard no_grad;
    fq->scale.data<float>()[0] = -1.0f;
  }
  (*fq)(x);
  EXPECT_EQ(values_f32(fq->scale)[0], std::numeric_limits<float>::epsilon());
}

TEST(FakeQuantize, Errors) {
  Tensor x = tensor_of({1.0f, 2.0f}, {1, 2});
  EXPECT_NE(error_of([&] { fake_quantize(x, 0.1, 0, 10, 5); }).find("fake_quantize: quant_min (10) must not exceed quant_max (5)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { fake_quantize(x, 0.0, 0, 0, 255); }).find("fake_quantize: scale must be positive and finite, got 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { fake_quantize(x, -1.0, 0, 0, 255); }).find("scale must be positive"), std::string::npos);
  EXPECT_NE(error_of([&] { fake_quantize(x, NAN, 0, 0, 255); }).find("scale must be positive"), std::string::npos);
  EXPECT_NE(error_of([&] { fake_quantize(x, 0.1, 300, 0, 255); }).find("fake_quantize: zero_point 300 is outside [0, 255]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { fake_quantize(x.to(DType::Int32), 0.1, 0, 0, 255); }).find("fake_quantize: expects a floating input, got int32"),
            std::string::npos);
  EXPECT_NE(error_of([&] { fake_quantize_per_channel(x, {0.1}, {0}, 2, -128, 127); })
                .find("fake_quantize_per_channel: axis 2 is out of range for an input of shape [1, 2]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { fake_quantize_per_channel(x, {0.1}, {0}, 1, -128, 127); })
                .find("fake_quantize_per_channel: 1 scales and 1 zero points for 2 channels (dim 1 of shape [1, 2])"),
            std::string::npos);
  EXPECT_NE(error_of([&] { fake_quantize_per_channel(x, {0.1, -0.2}, {0, 0}, 1, -128, 127); })
                .find("scale must be positive and finite, got -0.2 (channel 1)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { fake_quantize_learnable(x, tensor_of({0.1f, 0.2f}), tensor_of({0.0f}), 0, 255); })
                .find("fake_quantize_learnable: scale and zero_point must hold 1 value(s)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { fake_quantize_learnable(x, tensor_of({0.0f}), tensor_of({0.0f}), 0, 255); })
                .find("fake_quantize_learnable: scale must be positive"),
            std::string::npos);
  EXPECT_NE(error_of([&] { FakeQuantize(nullptr); }).find("FakeQuantize: the observer is null"), std::string::npos);
  // A per-channel FakeQuantize whose grid does not fit the input.
  auto fq = std::make_shared<FakeQuantize>(std::make_shared<PerChannelMinMaxObserver>(1));
  (*fq)(zeros({2, 3}));
  fq->disable_observer();
  EXPECT_NE(error_of([&] { (*fq)(zeros({2, 4})); }).find("FakeQuantize: holds 3 channel scales but the input of shape [2, 4] has 4 channels"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln::quant
