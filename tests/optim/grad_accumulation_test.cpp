// Gradient accumulation: k micro-batches, each loss divided by k, then one
// step, give the same update as one step on the batch k times larger.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln.h"

namespace kiln {
namespace {

namespace F = nn::functional;

std::vector<double> flat_params(nn::Module& m) {
  std::vector<double> out;
  for (const Tensor& p : m.parameters()) {
    Tensor c = p.contiguous();
    out.insert(out.end(), c.data<double>(), c.data<double>() + c.numel());
  }
  return out;
}

TEST(GradientAccumulation, MicroBatchesGiveTheSameUpdateAsOneLargeBatch) {
  const int64_t k = 4, micro = 8;
  manual_seed(5);
  Tensor images = randn({k * micro, 3, 32, 32}, DType::Float64);
  Tensor labels = randint(0, 10, {k * micro});
  auto make = [](nn::LeNet& net) {
    net.to(DType::Float64);
    return optim::SGD(net.parameters(), optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-2));
  };

  manual_seed(9);
  nn::LeNet whole;
  optim::SGD whole_opt = make(whole);
  manual_seed(9);
  nn::LeNet accumulated;
  optim::SGD accumulated_opt = make(accumulated);
  ASSERT_EQ(flat_params(whole), flat_params(accumulated));

  for (int step = 0; step < 2; ++step) {
    whole_opt.zero_grad();
    F::cross_entropy(whole(images), labels).backward();
    whole_opt.step();

    accumulated_opt.zero_grad();
    for (int64_t i = 0; i < k; ++i) {
      Tensor x = images.narrow(0, i * micro, micro);
      Tensor y = labels.narrow(0, i * micro, micro);
      (F::cross_entropy(accumulated(x), y) / static_cast<double>(k)).backward();
    }
    accumulated_opt.step();
  }
  std::vector<double> a = flat_params(whole), b = flat_params(accumulated);
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]) / (std::fabs(a[i]) + 1e-3));
  EXPECT_LT(worst, 1e-12) << "k micro-batches and one large batch must give the same update";
  // And the update was not trivially zero.
  manual_seed(9);
  nn::LeNet untouched;
  untouched.to(DType::Float64);
  EXPECT_NE(flat_params(untouched), a);
}

}  // namespace
}  // namespace kiln
