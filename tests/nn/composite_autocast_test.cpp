// The composite layers under autocast take the rules of their parts (Note
// [Composite layers] in nn/functional_composite.h): conv1d and the
// recurrent layers' linears run in the lower precision, group_norm's
// layer_norm in float32; the float32 parameters still get float32 gradients.
// The LSTM's cell state and the GRU's interpolation take the promoted type
// of their float32 states, so their outputs are float32 (Note [Composite
// layers]).
#include <cmath>

#include "autograd/autocast.h"
#include "autograd/ops.h"
#include "nn/conv1d.h"
#include "nn/group_norm.h"
#include "nn/nn_test_util.h"
#include "nn/recurrent.h"

namespace kiln::nn {
namespace {

Tensor uniform32(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return ops::sub(ops::mul(rand(shape, DType::Float32, &gen), 2.0), 1.0);
}

// Largest |a - b| over the elements, as double.
double max_difference(const Tensor& a, const Tensor& b) {
  std::vector<double> va = testing::values_of(a), vb = testing::values_of(b);
  double d = 0;
  for (size_t i = 0; i < va.size(); ++i) d = std::max(d, std::abs(va[i] - vb[i]));
  return d;
}

TEST(CompositeLayersAutocast, FollowTheirPartsPolicies) {
  Conv1d conv(4, 6, 3, 1, 1);
  GroupNorm norm(2, 6);
  LSTM lstm(6, 5);
  Tensor x = uniform32({2, 4, 7}, 1);
  Tensor reference_conv = conv(x);
  Tensor reference_lstm = lstm(TensorList{norm(reference_conv).permute({2, 0, 1})})[0];
  Tensor y_conv, y_norm, y_lstm;
  {
    AutocastGuard autocast(DeviceType::CPU, DType::BFloat16);
    y_conv = conv(x);
    y_norm = norm(y_conv);
    y_lstm = lstm(TensorList{y_norm.permute({2, 0, 1})})[0];  // (L, N, 6)
  }
  EXPECT_EQ(y_conv.dtype(), DType::BFloat16);
  EXPECT_EQ(y_norm.dtype(), DType::Float32);
  EXPECT_EQ(y_lstm.dtype(), DType::Float32);
  // bfloat16 keeps 8 bits: close to the float32 results, but not equal to them.
  for (const auto& [got, want] : {std::pair{y_conv, reference_conv}, std::pair{y_lstm, reference_lstm}}) {
    const double d = max_difference(got, want);
    EXPECT_LT(d, 0.05);
    EXPECT_GT(d, 0.0);
  }
  kiln::sum(y_lstm.to(DType::Float32)).backward();
  for (const Tensor& p : conv.parameters()) EXPECT_EQ(p.grad().dtype(), DType::Float32);
  for (const Tensor& p : norm.parameters()) EXPECT_EQ(p.grad().dtype(), DType::Float32);
  for (const Tensor& p : lstm.parameters()) EXPECT_EQ(p.grad().dtype(), DType::Float32);
}

}  // namespace
}  // namespace kiln::nn
