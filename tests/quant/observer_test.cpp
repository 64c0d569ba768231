// The observers: qparams by hand and against torch.ao.quantization 1.13 on
// the same inputs, statistics, state dicts and every error.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "nn/container.h"
#include "quant/observer.h"
#include "quant_test_util.h"
#include "tensor/ops.h"

namespace kiln::quant {
namespace {

using quanttest::error_of;
using quanttest::py_list;
using quanttest::run_torch;
using quanttest::tensor_of;


ObserverOptions opts(DType dtype, QScheme qscheme, bool reduce_range = false) {
  ObserverOptions o;
  o.dtype = dtype;
  o.qscheme = qscheme;
  o.reduce_range = reduce_range;
  return o;
}

// ---- by hand -------------------------------------------------------------------

TEST(MinMaxObserver, AffineQuint8ByHand) {
  MinMaxObserver obs;
  Tensor x = tensor_of({-1.0f, 0.5f, 3.0f});
  Tensor y = obs(x);
  EXPECT_TRUE(y.is_same(x)) << "forward returns its input itself";
  QParams qp = obs.calculate_qparams();
  // scale = (3 - -1) / 255 in float32; zero point = 0 - round(-1 / scale) = round(63.75) = 64.
  const float scale = 4.0f / 255.0f;
  ASSERT_EQ(qp.scales.size(), 1u);
  EXPECT_EQ(qp.scales[0], static_cast<double>(scale));
  EXPECT_EQ(qp.zero_points[0], 64);
  EXPECT_EQ(qp.dtype, DType::UInt8);
  EXPECT_FALSE(qp.per_channel);
  EXPECT_EQ(qp.quant_min, 0);
  EXPECT_EQ(qp.quant_max, 255);
  auto params = qp.quant_params();
  EXPECT_EQ(params->scheme, QuantParams::Scheme::PerTensor);
  EXPECT_EQ(params->zero_points[0], 64);
}

TEST(MinMaxObserver, SymmetricByHand) {
  MinMaxObserver s8(opts(DType::Int8, QScheme::PerTensorSymmetric));
  s8(tensor_of({-1.0f, 3.0f}));
  QParams qp = s8.calculate_qparams();
  EXPECT_EQ(qp.scales[0], static_cast<double>(3.0f / 127.5f));
  EXPECT_EQ(qp.zero_points[0], 0);
  MinMaxObserver u8(opts(DType::UInt8, QScheme::PerTensorSymmetric));
  u8(tensor_of({-1.0f, 3.0f}));
  EXPECT_EQ(u8.calculate_qparams().zero_points[0], 128);
}

TEST(MinMaxObserver, RangeAlwaysHoldsZeroAndScaleAtLeastEps) {
  // All positive: min becomes 0, so the zero point is quant_min.
  MinMaxObserver pos;
  pos(tensor_of({2.0f, 5.0f}));
  EXPECT_EQ(pos.calculate_qparams().zero_points[0], 0);
  EXPECT_EQ(pos.calculate_qparams().scales[0], static_cast<double>(5.0f / 255.0f));
  // All zeros: the scale is eps.
  MinMaxObserver zero;
  zero(zeros({4}));
  EXPECT_EQ(zero.calculate_qparams().scales[0], static_cast<double>(std::numeric_limits<float>::epsilon()));
  ObserverOptions big_eps;
  big_eps.eps = 0.5;
  MinMaxObserver clamped(big_eps);
  clamped(tensor_of({-1.0f, 1.0f}));
  EXPECT_EQ(clamped.calculate_qparams().scales[0], 0.5);
}

TEST(MinMaxObserver, ReduceRangeAndCustomRange) {
  MinMaxObserver reduced(opts(DType::UInt8, QScheme::PerTensorAffine, true));
  EXPECT_EQ(reduced.quant_min(), 0);
  EXPECT_EQ(reduced.quant_max(), 127);
  MinMaxObserver reduced8(opts(DType::Int8, QScheme::PerTensorAffine, true));
  EXPECT_EQ(reduced8.quant_min(), -64);
  EXPECT_EQ(reduced8.quant_max(), 63);
  ObserverOptions custom = opts(DType::Int8, QScheme::PerTensorAffine, true);
  custom.quant_min = -15;
  custom.quant_max = 15;
  MinMaxObserver halved(custom);
  EXPECT_EQ(halved.quant_min(), -8) << "Python's -15 // 2";
  EXPECT_EQ(halved.quant_max(), 7);
  ObserverOptions nibble = opts(DType::UInt8, QScheme::PerTensorSymmetric);
  nibble.quant_min = 0;
  nibble.quant_max = 15;
  MinMaxObserver sym(nibble);
  sym(tensor_of({-1.0f, 2.0f}));
  EXPECT_EQ(sym.calculate_qparams().zero_points[0], 7) << "(0 + 15) // 2 with a custom range";
  EXPECT_EQ(sym.calculate_qparams().scales[0], static_cast<double>(2.0f / 7.5f));
}

TEST(MinMaxObserver, RunningMinMaxEmptyAndReset) {
  MinMaxObserver obs;
  EXPECT_FALSE(obs.has_statistics());
  QParams before = obs.calculate_qparams();
  EXPECT_EQ(before.scales[0], 1.0);
  EXPECT_EQ(before.zero_points[0], 0);
  obs(empty({0, 3}));
  EXPECT_FALSE(obs.has_statistics()) << "an empty tensor is ignored";
  obs(tensor_of({1.0f, 2.0f}));
  obs(tensor_of({-0.5f, 1.5f}, {2, 1}));
  obs(empty({0}));
  EXPECT_TRUE(obs.has_statistics());
  EXPECT_EQ(*obs.min_val.data<float>(), -0.5f);
  EXPECT_EQ(*obs.max_val.data<float>(), 2.0f);
  obs.reset_min_max_vals();
  EXPECT_FALSE(obs.has_statistics());
}

TEST(MinMaxObserver, ObservesOtherFloatDtypesAndLayouts) {
  MinMaxObserver obs;
  Tensor x = tensor_of({-2.0f, 1.0f, 4.0f, 0.25f, 3.0f, -1.0f}, {2, 3}).to(DType::Float64).transpose(0, 1);
  obs(x);
  EXPECT_EQ(*obs.min_val.data<float>(), -2.0f);
  EXPECT_EQ(*obs.max_val.data<float>(), 4.0f);
  MinMaxObserver half;
  half(tensor_of({-1.0f, 0.5f}).to(DType::BFloat16));
  EXPECT_EQ(*half.max_val.data<float>(), 0.5f);
}

TEST(MovingAverageMinMaxObserver, AveragesByHand) {
  MovingAverageMinMaxObserver obs(0.5);
  obs(tensor_of({-2.0f, 2.0f}));
  obs(tensor_of({0.0f, 6.0f}));
  EXPECT_EQ(*obs.min_val.data<float>(), -1.0f);  // -2 + 0.5 * (0 - -2)
  EXPECT_EQ(*obs.max_val.data<float>(), 4.0f);   // 2 + 0.5 * (6 - 2)
  EXPECT_EQ(MovingAverageMinMaxObserver().averaging_constant, 0.01);
}

TEST(PerChannelMinMaxObserver, PerChannelByHand) {
  PerChannelMinMaxObserver obs(1);
  // x: (2, 3, 2); channel c along dim 1.
  std::vector<float> v = {-1, 1, 0, 2, -3, 0, /**/ 0, 5, 1, 1, 0, 0.5};
  obs(tensor_of(v, {2, 3, 2}));
  ASSERT_EQ(obs.min_val.shape(), (Shape{3}));
  EXPECT_EQ(obs.min_val.data<float>()[0], -1.0f);
  EXPECT_EQ(obs.max_val.data<float>()[0], 5.0f);
  EXPECT_EQ(obs.min_val.data<float>()[1], 0.0f);
  EXPECT_EQ(obs.max_val.data<float>()[1], 2.0f);
  EXPECT_EQ(obs.min_val.data<float>()[2], -3.0f);
  EXPECT_EQ(obs.max_val.data<float>()[2], 0.5f);
  QParams qp = obs.calculate_qparams();
  EXPECT_TRUE(qp.per_channel);
  EXPECT_EQ(qp.axis, 1);
  ASSERT_EQ(qp.scales.size(), 3u);
  EXPECT_EQ(qp.scales[1], static_cast<double>(2.0f / 255.0f));
  EXPECT_EQ(qp.zero_points[1], 0);
  auto params = qp.quant_params();
  EXPECT_EQ(params->scheme, QuantParams::Scheme::PerChannel);
  EXPECT_EQ(params->axis, 1);
  // Negative ch_axis counts from the end.
  PerChannelMinMaxObserver last(-1);
  last(tensor_of(v, {2, 3, 2}));
  EXPECT_EQ(last.calculate_qparams().axis, 2);
  EXPECT_EQ(last.min_val.numel(), 2);
}

TEST(HistogramObserver, CountsAndMergesKeepTheTotal) {
  HistogramObserver obs({}, /*bins=*/8, /*upsample_rate=*/4);
  obs(tensor_of({0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f}));
  // 8 bins over [0, 8], the top value in the last bin.
  std::vector<float> h = quanttest::values_f32(obs.histogram);
  EXPECT_EQ(h, (std::vector<float>{1, 1, 1, 1, 1, 1, 1, 2}));
  // A batch inside the range adds to the same bins.
  obs(tensor_of({0.5f, 7.5f}));
  h = quanttest::values_f32(obs.histogram);
  EXPECT_EQ(h[0], 2.0f);
  EXPECT_EQ(h[7], 3.0f);
  // A batch below the range doubles it: bins become 2 wide, the old ones merge pairwise.
  obs(tensor_of({-8.0f}));
  EXPECT_EQ(*obs.min_val.data<float>(), -8.0f);
  EXPECT_EQ(*obs.max_val.data<float>(), 8.0f);
  h = quanttest::values_f32(obs.histogram);
  double total = 0;
  for (float c : h) total += c;
  EXPECT_EQ(total, 12.0);
  EXPECT_EQ(h, (std::vector<float>{1, 0, 0, 0, 3, 2, 2, 4}));
}

TEST(HistogramObserver, SearchDropsOutliers) {
  // 200000 values in [-1, 1] and one at 100: spreading 256 levels over
  // [-1, 100] costs the bulk more squared error than clipping the outlier
  // (with 100000 values it does not, and torch keeps the outlier too).
  std::vector<float> v = quanttest::pattern(200000, -1.0f, 1.0f);
  v.push_back(-1.0f);
  v.push_back(100.0f);
  HistogramObserver hist;
  hist(tensor_of(v));
  auto [lo, hi] = hist.search_range();
  EXPECT_EQ(lo, -1.0f);
  EXPECT_LT(hi, 1.0f);
  EXPECT_GT(hi, 0.9f);
  MinMaxObserver minmax;
  minmax(tensor_of(v));
  EXPECT_LT(hist.calculate_qparams().scales[0], minmax.calculate_qparams().scales[0] / 10);
  // A constant input: the range is that value (and 0).
  HistogramObserver constant;
  constant(full({5}, 2.0f));
  EXPECT_EQ(constant.calculate_qparams().scales[0], static_cast<double>(2.0f / 255.0f));
}

// ---- against torch -------------------------------------------------------------------

std::string py_dtype(DType d) { return d == DType::UInt8 ? "torch.quint8" : "torch.qint8"; }

std::string py_args(const ObserverOptions& o) {
  std::ostringstream os;
  os << "dtype=" << py_dtype(o.dtype) << ", qscheme=" << qscheme_name(o.qscheme)
     << ", reduce_range=" << (o.reduce_range ? "True" : "False");
  if (o.quant_min) os << ", quant_min=" << *o.quant_min << ", quant_max=" << *o.quant_max;
  os.precision(17);
  os << ", eps=" << o.eps;
  return os.str();
}

// The option sets of a per-tensor or a per-channel observer.
std::vector<ObserverOptions> option_sets(bool per_channel) {
  std::vector<ObserverOptions> sets;
  const QScheme affine = per_channel ? QScheme::PerChannelAffine : QScheme::PerTensorAffine;
  const QScheme symmetric = per_channel ? QScheme::PerChannelSymmetric : QScheme::PerTensorSymmetric;
  for (DType d : {DType::UInt8, DType::Int8}) {
    for (QScheme q : {affine, symmetric}) {
      for (bool reduce : {false, true}) {
        if (reduce && q == symmetric && d == DType::UInt8) continue;  // an error, tested below
        sets.push_back(opts(d, q, reduce));
      }
    }
  }
  ObserverOptions custom = opts(DType::Int8, affine);
  custom.quant_min = -8;
  custom.quant_max = 7;
  sets.push_back(custom);
  ObserverOptions custom_u = opts(DType::UInt8, symmetric);
  custom_u.quant_min = 0;
  custom_u.quant_max = 15;
  sets.push_back(custom_u);
  ObserverOptions big_eps = opts(DType::UInt8, affine);
  big_eps.eps = 0.25;
  sets.push_back(big_eps);
  return sets;
}

void expect_same_qparams(const QParams& qp, const std::vector<double>& torch_line, const std::string& what) {
  ASSERT_EQ(torch_line.size(), 2 * qp.scales.size()) << what;
  const size_t n = qp.scales.size();
  for (size_t c = 0; c < n; ++c) {
    EXPECT_EQ(qp.scales[c], torch_line[c]) << what << " scale " << c;
    EXPECT_EQ(static_cast<double>(qp.zero_points[c]), torch_line[n + c]) << what << " zero point " << c;
  }
}

TEST(ObserverVsTorch, MinMaxAndMovingAverage) {
  KILN_SKIP_WITHOUT_TORCH();
  // Three batches, one all positive, one skewed negative.
  std::vector<std::vector<float>> batches = {quanttest::pattern(64, -0.7f, 2.3f, 1),
                                             quanttest::pattern(64, 0.1f, 1.1f, 2),
                                             quanttest::pattern(64, -3.1f, 0.4f, 3)};
  std::ostringstream script;
  script << "import torch.ao.quantization.observer as O\nbatches = [";
  for (const auto& b : batches) script << "torch.tensor(" << py_list(b) << "),";
  script << "]\n";
  std::vector<QParams> ours;
  for (const ObserverOptions& o : option_sets(false)) {
    MinMaxObserver mm(o);
    MovingAverageMinMaxObserver ma(0.25, o);
    for (const auto& b : batches) {
      mm(tensor_of(b));
      ma(tensor_of(b));
    }
    ours.push_back(mm.calculate_qparams());
    ours.push_back(ma.calculate_qparams());
    script << "for ob in [O.MinMaxObserver(" << py_args(o) << "), O.MovingAverageMinMaxObserver(averaging_constant=0.25, "
           << py_args(o) << ")]:\n"
           << "    for b in batches: ob(b)\n"
           << "    s, z = ob.calculate_qparams()\n    emit(s, z)\n";
  }
  auto lines = run_torch(script.str());
  ASSERT_EQ(lines.size(), ours.size());
  for (size_t i = 0; i < ours.size(); ++i) {
    expect_same_qparams(ours[i], lines[i], (i % 2 ? "MovingAverage " : "MinMax ") + py_args(option_sets(false)[i / 2]));
  }
}

TEST(ObserverVsTorch, PerChannel) {
  KILN_SKIP_WITHOUT_TORCH();
  const Shape shape = {3, 4, 5};
  std::vector<float> a = quanttest::pattern(60, -1.3f, 0.9f, 4), b = quanttest::pattern(60, -0.2f, 2.7f, 5);
  std::ostringstream script;
  script << "import torch.ao.quantization.observer as O\n"
         << "a = torch.tensor(" << py_list(a) << ").reshape(3, 4, 5)\n"
         << "b = torch.tensor(" << py_list(b) << ").reshape(3, 4, 5)\n";
  std::vector<QParams> ours;
  std::vector<std::string> names;
  for (int64_t axis : {0, 1, 2}) {
    for (const ObserverOptions& o : option_sets(true)) {
      PerChannelMinMaxObserver obs(axis, o);
      obs(tensor_of(a, shape));
      obs(tensor_of(b, shape));
      ours.push_back(obs.calculate_qparams());
      EXPECT_EQ(ours.back().axis, axis);
      names.push_back("axis " + std::to_string(axis) + " " + py_args(o));
      script << "ob = O.PerChannelMinMaxObserver(ch_axis=" << axis << ", " << py_args(o) << ")\n"
             << "ob(a); ob(b)\ns, z = ob.calculate_qparams()\nemit(s, z)\n";
    }
  }
  auto lines = run_torch(script.str());
  ASSERT_EQ(lines.size(), ours.size());
  for (size_t i = 0; i < ours.size(); ++i) expect_same_qparams(ours[i], lines[i], names[i]);
}

TEST(ObserverVsTorch, Histogram) {
  KILN_SKIP_WITHOUT_TORCH();
  // One batch each, with integer minimum and maximum (torch 1.13 bins over
  // [int(min), int(max)], Note [Histogram observer]): a bulk with outliers
  // on one or both sides, and a one-sided one.
  std::vector<std::vector<float>> inputs;
  std::vector<float> two_sided = quanttest::pattern(5000, -1.0f, 1.5f, 6);
  two_sided.push_back(-4.0f);
  two_sided.push_back(9.0f);
  inputs.push_back(two_sided);
  std::vector<float> positive = quanttest::pattern(3000, 0.0f, 2.0f, 7);
  positive.push_back(0.0f);
  positive.push_back(20.0f);
  inputs.push_back(positive);
  std::vector<float> dense = quanttest::pattern(4000, -3.0f, 3.0f, 8);
  dense.push_back(-3.0f);
  dense.push_back(3.0f);
  inputs.push_back(dense);
  std::ostringstream script;
  script << "import torch.ao.quantization.observer as O\n";
  std::vector<QParams> ours;
  std::vector<std::string> names;
  for (size_t k = 0; k < inputs.size(); ++k) {
    script << "x = torch.tensor(" << py_list(inputs[k]) << ")\n";
    for (const ObserverOptions& o : option_sets(false)) {
      if (o.quant_min) continue;  // custom ranges: covered by the min/max observers
      HistogramObserver obs(o);
      obs(tensor_of(inputs[k]));
      ours.push_back(obs.calculate_qparams());
      names.push_back("input " + std::to_string(k) + " " + py_args(o));
      script << "ob = O.HistogramObserver(" << py_args(o) << ")\nob(x)\ns, z = ob.calculate_qparams()\nemit(s, z)\n";
    }
  }
  auto lines = run_torch(script.str());
  ASSERT_EQ(lines.size(), ours.size());
  for (size_t i = 0; i < ours.size(); ++i) expect_same_qparams(ours[i], lines[i], names[i]);
}

// ---- state, printing, errors ---------------------------------------------------------

TEST(Observer, StateDictRoundTrip) {
  PerChannelMinMaxObserver obs(0, PerChannelMinMaxObserver::per_channel_defaults());
  obs(tensor_of(quanttest::pattern(12, -1.0f, 2.0f), {3, 4}));
  TensorDict state = obs.state_dict();
  EXPECT_EQ(state.keys(), (std::vector<std::string>{"eps", "min_val", "max_val"}));
  PerChannelMinMaxObserver fresh(0, PerChannelMinMaxObserver::per_channel_defaults());
  Tensor handle = fresh.min_val;
  fresh.load_state_dict(state);
  EXPECT_TRUE(fresh.has_statistics());
  EXPECT_TRUE(handle.is_same(fresh.min_val)) << "the buffer is resized in place";
  EXPECT_EQ(fresh.calculate_qparams().scales, obs.calculate_qparams().scales);
  EXPECT_EQ(fresh.calculate_qparams().zero_points, obs.calculate_qparams().zero_points);

  HistogramObserver hist;
  hist(tensor_of(quanttest::pattern(100, -2.0f, 2.0f)));
  HistogramObserver hist2;
  hist2.load_state_dict(hist.state_dict());
  EXPECT_EQ(hist.state_dict().keys(), (std::vector<std::string>{"eps", "histogram", "min_val", "max_val"}));
  EXPECT_EQ(hist2.calculate_qparams().scales, hist.calculate_qparams().scales);
}

TEST(Observer, SitsInAModelAndPrints) {
  auto seq = std::make_shared<nn::Sequential>();
  seq->push_back(std::make_shared<MinMaxObserver>());
  Tensor x = tensor_of({-1.0f, 2.0f});
  Tensor y = (*seq)(x);
  EXPECT_EQ(quanttest::values_f32(y), quanttest::values_f32(x));
  std::ostringstream os;
  seq->pretty_print(os);
  EXPECT_NE(os.str().find("MinMaxObserver(min_val=-1.0, max_val=2.0, dtype=torch.quint8, "
                          "qscheme=torch.per_tensor_affine, reduce_range=False, quant_min=0, quant_max=255)"),
            std::string::npos)
      << os.str();
  EXPECT_TRUE(seq->state_dict().contains("0.min_val"));
}

TEST(Observer, Errors) {
  EXPECT_NE(error_of([] { MinMaxObserver(opts(DType::UInt8, QScheme::PerChannelAffine)); })
                .find("MinMaxObserver: qscheme torch.per_channel_affine is per-channel"),
            std::string::npos);
  EXPECT_NE(error_of([] { PerChannelMinMaxObserver(0, opts(DType::Int8, QScheme::PerTensorSymmetric)); })
                .find("PerChannelMinMaxObserver: qscheme torch.per_tensor_symmetric is per-tensor"),
            std::string::npos);
  EXPECT_NE(error_of([] { HistogramObserver(opts(DType::UInt8, QScheme::PerTensorSymmetric, true)); })
                .find("HistogramObserver: reduce_range is not supported with symmetric quantization to quint8"),
            std::string::npos);
  EXPECT_NE(error_of([] { MinMaxObserver(opts(DType::Int32, QScheme::PerTensorAffine)); })
                .find("dtype must be uint8 (quint8) or int8 (qint8), got int32"),
            std::string::npos);
  ObserverOptions o;
  o.quant_min = 0;
  EXPECT_NE(error_of([&] { MinMaxObserver{o}; }).find("quant_min and quant_max must be given together"),
            std::string::npos);
  o.quant_min = 1;
  o.quant_max = 10;
  EXPECT_NE(error_of([&] { MinMaxObserver{o}; }).find("the quantization range [1, 10] must include 0"),
            std::string::npos);
  o.quant_min = 0;
  o.quant_max = 0;
  EXPECT_NE(error_of([&] { MinMaxObserver{o}; }).find("quant_min (0) must be less than quant_max (0)"),
            std::string::npos);
  o.quant_max = 300;
  EXPECT_NE(error_of([&] { MinMaxObserver{o}; }).find("[0, 300] does not fit uint8 ([0, 255])"), std::string::npos);
  ObserverOptions neg_eps;
  neg_eps.eps = 0;
  EXPECT_NE(error_of([&] { MinMaxObserver{neg_eps}; }).find("eps must be positive"), std::string::npos);
  EXPECT_NE(error_of([] { MovingAverageMinMaxObserver(1.5); }).find("averaging_constant must be in (0, 1]"),
            std::string::npos);

  // Non-finite values name the observer and the index; the statistics stay.
  MinMaxObserver obs;
  obs(tensor_of({1.0f}));
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  EXPECT_NE(error_of([&] { obs(tensor_of({0.0f, nan})); }).find("MinMaxObserver: input of shape [2] has a non-finite value (nan) at flat index 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { obs(tensor_of({-inf})); }).find("non-finite value (-inf) at flat index 0"), std::string::npos);
  EXPECT_EQ(*obs.min_val.data<float>(), 1.0f);
  HistogramObserver hist;
  EXPECT_NE(error_of([&] { hist(tensor_of({inf})); }).find("HistogramObserver: input"), std::string::npos);
  EXPECT_FALSE(hist.has_statistics());
  EXPECT_NE(error_of([&] { obs(tensor_of({1.0f}).to(DType::Int64)); }).find("MinMaxObserver: observes floating tensors, got int64"),
            std::string::npos);

  PerChannelMinMaxObserver pc(2);
  EXPECT_NE(error_of([&] { pc(zeros({2, 2})); }).find("ch_axis 2 is out of range for an input of shape [2, 2]"),
            std::string::npos);
  pc(zeros({1, 2, 3}));
  EXPECT_NE(error_of([&] { pc(zeros({1, 2, 4})); }).find("has 4 channels along dim 2, but the observer has seen 3"),
            std::string::npos);
  EXPECT_NE(error_of([] { PerChannelMinMaxObserver p(0); p(scalar_tensor(1.0f)); }).find("0-dim"), std::string::npos);
}

}  // namespace
}  // namespace kiln::quant
