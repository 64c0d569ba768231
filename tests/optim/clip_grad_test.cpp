// clip_grad_norm_ and clip_grad_value_ against hand-computed norms.
#include "optim/clip_grad.h"

#include <limits>

#include "optim_test_util.h"

namespace kiln {

using namespace kiln::optim;
namespace {

// Two parameters with grads (3, 4) and (-12,), and one without a grad.
struct Grads {
  std::vector<Tensor> params = {make_param({0, 0}, {2}), make_param({0}, {1}), make_param({0, 0, 0}, {3})};
  Grads() {
    set_grad_values(params[0], {3.0, 4.0});
    set_grad_values(params[1], {-12.0});
  }
};

TEST(ClipGradNorm, LeavesGradsBelowTheLimitAlone) {
  Grads g;
  EXPECT_EQ(clip_grad_norm_(g.params, 26.0), 13.0);  // sqrt(9 + 16 + 144)
  EXPECT_EQ(values_of(g.params[0].grad()), (std::vector<double>{3.0, 4.0}));
  EXPECT_EQ(values_of(g.params[1].grad()), (std::vector<double>{-12.0}));
  EXPECT_FALSE(g.params[2].grad().defined());
}

TEST(ClipGradNorm, ScalesAllGradsByOneCoefficient) {
  Grads g;
  EXPECT_EQ(clip_grad_norm_(g.params, 6.5), 13.0);
  // The coefficient max_norm / (norm + 1e-6) is rounded to the grads' float32.
  const float coef = static_cast<float>(6.5 / (13.0 + 1e-6));
  EXPECT_EQ(values_of(g.params[0].grad()), (std::vector<double>{3.0f * coef, 4.0f * coef}));
  EXPECT_EQ(values_of(g.params[1].grad()), (std::vector<double>{-12.0f * coef}));
  // The clipped grads have (almost exactly) the requested norm.
  EXPECT_NEAR(clip_grad_norm_(g.params, 100.0), 6.5, 1e-5);
}

TEST(ClipGradNorm, OtherNorms) {
  {
    Grads g;
    EXPECT_EQ(clip_grad_norm_(g.params, 100.0, 1.0), 19.0);
  }
  {
    Grads g;
    EXPECT_NEAR(clip_grad_norm_(g.params, 100.0, 3.0), std::cbrt(27.0 + 64.0 + 1728.0), 1e-12);
  }
  {
    Grads g;
    const double inf = std::numeric_limits<double>::infinity();
    EXPECT_EQ(clip_grad_norm_(g.params, 6.0, inf), 12.0);
    const float coef = static_cast<float>(6.0 / (12.0 + 1e-6));
    EXPECT_EQ(values_of(g.params[1].grad()), (std::vector<double>{-12.0f * coef}));
  }
}

TEST(ClipGradNorm, NoGradsGiveZero) {
  std::vector<Tensor> params = {make_param({1, 2}, {2})};
  EXPECT_EQ(clip_grad_norm_(params, 1.0), 0.0);
  EXPECT_EQ(clip_grad_norm_({}, 1.0), 0.0);
}

TEST(ClipGradNorm, NonFiniteNorms) {
  const double inf = std::numeric_limits<double>::infinity();
  Grads g;
  set_grad_values(g.params[0], {inf, 1.0});
  expect_error([&] { clip_grad_norm_(g.params, 1.0, 2.0, /*error_if_nonfinite=*/true); },
               "clip_grad_norm_: the total norm of order 2 of the gradients is inf, so it cannot be clipped; pass "
               "error_if_nonfinite = false to scale the gradients by it anyway");
  EXPECT_EQ(values_of(g.params[0].grad())[1], 1.0);  // the refusal changed nothing
  // As PyTorch: the coefficient is max_norm / inf = 0, so inf * 0 = NaN and the rest become 0.
  EXPECT_EQ(clip_grad_norm_(g.params, 1.0), inf);
  EXPECT_TRUE(std::isnan(values_of(g.params[0].grad())[0]));
  EXPECT_EQ(values_of(g.params[0].grad())[1], 0.0);

  Grads h;
  set_grad_values(h.params[1], {std::nan("")});
  EXPECT_TRUE(std::isnan(clip_grad_norm_(h.params, 1.0, inf)));
  EXPECT_TRUE(std::isnan(values_of(h.params[0].grad())[0]));
  expect_error([&] { clip_grad_norm_(h.params, 1.0, inf, true); }, "of order inf of the gradients is nan");
}

TEST(ClipGradNorm, RejectsNonPositiveNormTypes) {
  Grads g;
  expect_error([&] { clip_grad_norm_(g.params, 1.0, 0.0); },
               "clip_grad_norm_: norm_type must be positive or infinity, got 0");
  expect_error([&] { clip_grad_norm_(g.params, 1.0, -std::numeric_limits<double>::infinity()); },
               "norm_type must be positive or infinity, got -inf");
}

TEST(ClipGradValue, ClampsEveryElement) {
  Grads g;
  clip_grad_value_(g.params, 3.5);
  EXPECT_EQ(values_of(g.params[0].grad()), (std::vector<double>{3.0, 3.5}));
  EXPECT_EQ(values_of(g.params[1].grad()), (std::vector<double>{-3.5}));
  EXPECT_FALSE(g.params[2].grad().defined());
  expect_error([&] { clip_grad_value_(g.params, -1.0); }, "clip_grad_value_: clip_value must be >= 0, got -1");
}

}  // namespace
}  // namespace kiln
