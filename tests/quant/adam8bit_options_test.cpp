// Adam8bit's and AdamW8bit's option builders (Note [Option builders] in
// tensor/arg.h): every field a chained setter and getter, AdamW8bit's
// carried over to the Adam8bit options it runs with, and the errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln.h"
#include "quant/adam8bit.h"

namespace kiln {
namespace {

void expect_error(const std::function<void()>& fn, const std::string& expected) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find(expected), std::string::npos) << e.message();
    return;
  }
  ADD_FAILURE() << "expected kiln::Error containing: " << expected;
}

TEST(Adam8bitOptionsBuilder, SetsEveryField) {
  const quant::Adam8bitOptions o = quant::Adam8bitOptions(2e-3)
                                       .beta1(0.8)
                                       .beta2(0.95)
                                       .eps(1e-6)
                                       .weight_decay(0.1)
                                       .maximize(true)
                                       .decoupled_weight_decay(true)
                                       .block_size(256)
                                       .min_8bit_size(0);
  EXPECT_EQ(o.lr(), 2e-3);
  EXPECT_EQ(o.beta1(), 0.8);
  EXPECT_EQ(o.beta2(), 0.95);
  EXPECT_EQ(o.eps(), 1e-6);
  EXPECT_EQ(o.weight_decay(), 0.1);
  EXPECT_TRUE(o.maximize());
  EXPECT_TRUE(o.decoupled_weight_decay());
  EXPECT_EQ(o.block_size(), 256);
  EXPECT_EQ(o.min_8bit_size(), 0);
  const quant::Adam8bitOptions d;
  EXPECT_EQ(d.lr(), 1e-3);
  EXPECT_EQ(d.block_size(), 2048);
  EXPECT_EQ(d.min_8bit_size(), 4096);
}

TEST(Adam8bitOptionsBuilder, AdamW8bitRunsAsAdam8bitWithDecoupledDecay) {
  const quant::AdamW8bitOptions o =
      quant::AdamW8bitOptions(5e-3).beta1(0.85).beta2(0.9).eps(1e-7).maximize(true).block_size(512).min_8bit_size(8);
  EXPECT_EQ(o.weight_decay(), 1e-2);
  Tensor p = randn({64});
  p.requires_grad_();
  quant::AdamW8bit opt({p}, o);
  const quant::Adam8bitOptions& seen = opt.defaults();
  EXPECT_EQ(seen.lr(), 5e-3);
  EXPECT_EQ(seen.beta1(), 0.85);
  EXPECT_EQ(seen.beta2(), 0.9);
  EXPECT_EQ(seen.eps(), 1e-7);
  EXPECT_EQ(seen.weight_decay(), 1e-2);
  EXPECT_TRUE(seen.maximize());
  EXPECT_TRUE(seen.decoupled_weight_decay());
  EXPECT_EQ(seen.block_size(), 512);
  EXPECT_EQ(seen.min_8bit_size(), 8);
  EXPECT_EQ(opt.hyperparameter(0, "beta1"), 0.85);
  EXPECT_TRUE(quant::quantizes_state(seen, p));
}

TEST(Adam8bitOptionsBuilder, InvalidValuesNameTheOptimizerAndTheField) {
  Tensor p = randn({4});
  p.requires_grad_();
  expect_error([&] { quant::Adam8bit({p}, quant::Adam8bitOptions().block_size(0)); },
               "Adam8bit: invalid block_size 0 (must be >= 1)");
  expect_error([&] { quant::Adam8bit({p}, quant::Adam8bitOptions().beta2(1.5)); },
               "Adam8bit: invalid beta2 1.5 (must be in [0, 1))");
  expect_error([&] { quant::AdamW8bit({p}, quant::AdamW8bitOptions(-1)); },
               "AdamW8bit: invalid learning rate -1 (must be >= 0)");
  expect_error([&] { quant::AdamW8bit({p}, quant::AdamW8bitOptions().min_8bit_size(-2)); },
               "AdamW8bit: invalid min_8bit_size -2");
}

}  // namespace
}  // namespace kiln
