// The communication hooks of Note [DDP communication hooks] (comm_hook.h)
// on 2 and 3 gloo ranks, each bucket built by hand as the reducer lays it
// out: one flat float32 buffer, the gradients views into it. Every rank can
// compute every rank's data (a function of the rank, or a seeded generator),
// so each rank computes the exact average itself, in float64, and compares.
#include <gtest/gtest.h>

#ifdef KILN_WITH_GLOO

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "distributed/ddp/comm_hook.h"
#include "distributed/ddp/powersgd_hook.h"
#include "multi_process.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/random.h"

namespace kiln::distributed::testing {
namespace {

constexpr auto kTimeout = std::chrono::seconds(20);

// ---- buckets and data -------------------------------------------------------------

// A zeroed float32 bucket holding gradients of `shapes`, one after another.
GradBucket make_bucket(const std::vector<Shape>& shapes, size_t index = 0) {
  int64_t total = 0;
  for (const Shape& shape : shapes) total += shape_numel(shape);
  GradBucket bucket;
  bucket.index = index;
  bucket.buffer = zeros({total});  // (total)
  int64_t offset = 0;
  for (size_t k = 0; k < shapes.size(); ++k) {
    const int64_t numel = shape_numel(shapes[k]);
    bucket.gradients.push_back(bucket.buffer.narrow(0, offset, numel).view(shapes[k]));
    bucket.parameter_names.push_back("param" + std::to_string(k));
    offset += numel;
  }
  return bucket;
}

// Sets element i of the buffer to value(i).
void fill(GradBucket& bucket, const std::function<double(int64_t)>& value) {
  float* data = bucket.buffer.data<float>();
  for (int64_t i = 0; i < bucket.buffer.numel(); ++i) data[i] = static_cast<float>(value(i));
}

// Rank w's gradient of `shape` in step `step`: N(0, 1) from a seed of its own.
Tensor rank_gradient(int w, const Shape& shape, uint64_t step, uint64_t salt = 0) {
  Generator gen(100000 * salt + 1000 * step + static_cast<uint64_t>(w));
  return randn(shape, DType::Float32, &gen);
}

// The float64 average over `world` ranks of rank_gradient(w, shape, step, salt).
Tensor exact_average(int world, const Shape& shape, uint64_t step, uint64_t salt = 0) {
  Tensor sum = zeros(shape, DType::Float64);
  for (int w = 0; w < world; ++w) ops::add_(sum, rank_gradient(w, shape, step, salt).to(DType::Float64));
  return ops::div(sum, world);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return ops::amax(ops::abs(ops::sub(a.to(DType::Float64), b.to(DType::Float64)))).item<double>();
}

double max_abs(const Tensor& a) { return ops::amax(ops::abs(a.to(DType::Float64))).item<double>(); }

// Runs body(rank, world) on 2 ranks, then on 3.
void on_two_and_three_ranks(const std::function<void(int rank, int world)>& body) {
  for (int world : {2, 3}) run_on_ranks(world, [&](int rank) { body(rank, world); });
}

// ---- allreduce_hook ---------------------------------------------------------------

TEST(CommHook, AllreduceHookAveragesExactly) {
  on_two_and_three_ranks([](int rank, int world) {
    auto group = make_test_group("gloo", kTimeout);
    GradBucket bucket = make_bucket({{3, 4}, {5}});
    // Small integers: every sum, and the average i + 5 (world - 1), is exact.
    fill(bucket, [&](int64_t i) { return double(i + 10 * rank); });
    allreduce_hook()->start(*group, bucket)->wait();
    for (int64_t i = 0; i < bucket.buffer.numel(); ++i) {
      EXPECT_EQ(bucket.buffer.at<float>({i}), float(i + 5 * (world - 1))) << "element " << i;
    }
  });
}

// ---- fp16 and bf16 compression ----------------------------------------------------

// Checks a 16-bit hook against the float64 average. With u the unit
// roundoff of `wire` (2^-11 float16, 2^-8 bfloat16), the result is within
// u sum_w |x_w| of it (Note [Dividing before the narrow sum] in
// distributed/ddp/compress_hooks.cpp), plus 1e-6 relative for the float32
// division; and every element is a `wire` value, the sign that the sum
// really travelled in 16 bits.
void check_narrow_hook(CommHook& hook, DType wire, double u, int rank, int world) {
  auto group = make_test_group("gloo", kTimeout);
  const int64_t n = 64;
  // Element n - 1 is 1 + 2^-13 on every rank: exact in float32, not in
  // either 16-bit type, so the average must come back rounded.
  auto value = [n](int w, int64_t i) {
    return i == n - 1 ? 1.0 + std::ldexp(1.0, -13) : double(float(3.0 * (1 + w) * std::sin(0.37 * i + w)));
  };
  GradBucket bucket = make_bucket({{8, 7}, {n - 56}});
  fill(bucket, [&](int64_t i) { return value(rank, i); });
  hook.start(*group, bucket)->wait();
  ASSERT_EQ(bucket.buffer.dtype(), DType::Float32);
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0, sum_abs = 0;
    for (int w = 0; w < world; ++w) {
      sum += value(w, i);
      sum_abs += std::abs(value(w, i));
    }
    const double average = sum / world;
    const double got = bucket.buffer.at<double>({i});
    EXPECT_NEAR(got, average, u * sum_abs + 1e-6 * std::abs(average)) << "element " << i;
    EXPECT_EQ(bucket.buffer.narrow(0, i, 1).to(wire).to(DType::Float32).at<float>({0}), float(got))
        << "element " << i << " is not a " << wire << " value";
  }
  EXPECT_NE(bucket.buffer.at<double>({n - 1}), 1.0 + std::ldexp(1.0, -13));

  // 40000 fits float16 (max 65504), but world of them do not: dividing
  // before the sum keeps every partial sum at most 40000.
  fill(bucket, [](int64_t) { return 40000.0; });
  hook.start(*group, bucket)->wait();
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(bucket.buffer.at<double>({i}), 40000.0, u * 40000.0 * world) << "element " << i;
  }
}

TEST(CommHook, Fp16CompressAveragesWithinFloat16Rounding) {
  on_two_and_three_ranks([](int rank, int world) {
    auto hook = fp16_compress_hook();
    EXPECT_EQ(hook->name(), "fp16_compress");
    check_narrow_hook(*hook, DType::Float16, std::ldexp(1.0, -11), rank, world);
  });
}

TEST(CommHook, Bf16CompressAveragesWithinBfloat16Rounding) {
  on_two_and_three_ranks([](int rank, int world) {
    auto hook = bf16_compress_hook();
    EXPECT_EQ(hook->name(), "bf16_compress");
    check_narrow_hook(*hook, DType::BFloat16, std::ldexp(1.0, -8), rank, world);
  });
}

// ---- PowerSGD: the pieces -----------------------------------------------------------

TEST(PowerSGD, OrthogonalizeColumnsGivesOrthonormalColumns) {
  Generator gen(7);
  Tensor p = randn({7, 3}, DType::Float32, &gen);
  powersgd::orthogonalize_columns(p);
  EXPECT_LT(max_abs_diff(ops::mm(p.t(), p), eye(3)), 1e-6);
}

TEST(PowerSGD, OrthogonalizeColumnsKeepsZeroColumnsZeroAndDependentOnesOrthogonal) {
  Generator gen(8);
  // Column 1 is zero: it must stay zero, not become NaN.
  Tensor p = zeros({5, 2});
  p.narrow(1, 0, 1).copy_(randn({5, 1}, DType::Float32, &gen));
  powersgd::orthogonalize_columns(p);
  EXPECT_NEAR(ops::sum(ops::mul(p.narrow(1, 0, 1), p.narrow(1, 0, 1))).item<double>(), 1.0, 1e-6);
  EXPECT_EQ(max_abs(p.narrow(1, 1, 1)), 0.0);
  // Column 1 is 3 x column 0: what is left after projecting is rounding
  // noise, which must come out orthogonal to column 0 (Note
  // [Orthogonalizing P and Q]).
  Tensor q = zeros({6, 2});
  Tensor first = randn({6, 1}, DType::Float32, &gen);
  q.narrow(1, 0, 1).copy_(first);
  q.narrow(1, 1, 1).copy_(ops::mul(first, 3.0));
  powersgd::orthogonalize_columns(q);
  EXPECT_LT(std::abs(ops::sum(ops::mul(q.narrow(1, 0, 1), q.narrow(1, 1, 1))).item<double>()), 1e-6);
  EXPECT_LE(max_abs(q.narrow(1, 1, 1)), 1.0 + 1e-6);
}

TEST(PowerSGD, CompressesWhenTheVolumeShrinksByTheRate) {
  EXPECT_TRUE(powersgd::worth_compressing(8, 6, 1, 2.0));   // 48 numbers vs 14
  EXPECT_TRUE(powersgd::worth_compressing(4, 4, 1, 2.0));   // 16 vs 8: exactly the rate
  EXPECT_FALSE(powersgd::worth_compressing(2, 2, 1, 2.0));  // 4 vs 4
  EXPECT_FALSE(powersgd::worth_compressing(4, 3, 3, 2.0));  // full rank never gains
  EXPECT_TRUE(powersgd::worth_compressing(4, 3, 3, 0.0));
}

TEST(PowerSGD, RejectsBadOptions) {
  PowerSGDOptions options;
  options.matrix_approximation_rank = 0;
  EXPECT_THROW(powersgd_hook(options), Error);
  options.matrix_approximation_rank = 2;
  EXPECT_EQ(powersgd_hook(options)->name(), "powersgd(rank=2)");
}

// ---- PowerSGD on ranks --------------------------------------------------------------

TEST(PowerSGD, BeforeStartIterationAveragesExactlyThenCompresses) {
  on_two_and_three_ranks([](int rank, int world) {
    auto group = make_test_group("gloo", kTimeout);
    PowerSGDOptions options;
    options.start_iteration = 3;
    auto hook = powersgd_hook(options);
    GradBucket bucket = make_bucket({{8, 6}, {6}});
    for (int64_t step = 0; step < 3; ++step) {
      bucket.iteration = step;
      fill(bucket, [&](int64_t i) { return double(i + 10 * rank + step); });
      hook->start(*group, bucket)->wait();
      for (int64_t i = 0; i < bucket.buffer.numel(); ++i) {
        EXPECT_EQ(bucket.buffer.at<float>({i}), float(i + 5 * (world - 1) + step)) << "step " << step;
      }
    }
    // From step 3 on, a full-rank matrix comes back as a rank-1 approximation.
    bucket.iteration = 3;
    bucket.gradients[0].copy_(rank_gradient(rank, {8, 6}, 3));
    hook->start(*group, bucket)->wait();
    EXPECT_GT(max_abs_diff(bucket.gradients[0], exact_average(world, {8, 6}, 3)), 1e-2);
  });
}

// r >= min(n, m): P P^T projects onto a space that holds all of the
// average's columns, so the approximation is the average up to float32
// rounding of a few small products and one orthogonalization.
TEST(PowerSGD, FullRankApproximationIsExact) {
  on_two_and_three_ranks([](int rank, int world) {
    auto group = make_test_group("gloo", kTimeout);
    PowerSGDOptions options;
    options.matrix_approximation_rank = 4;
    options.start_iteration = 0;
    options.min_compression_rate = 0;  // full rank never saves volume
    auto hook = powersgd_hook(options);
    const std::vector<Shape> shapes = {{4, 3}, {3, 5}, {2, 3, 2}};  // r = 3, 3, 2
    GradBucket bucket = make_bucket(shapes);
    for (int64_t step = 0; step < 3; ++step) {  // steps 1 and 2 start from the warm Q
      bucket.iteration = step;
      for (size_t k = 0; k < shapes.size(); ++k) bucket.gradients[k].copy_(rank_gradient(rank, shapes[k], step, k));
      hook->start(*group, bucket)->wait();
      for (size_t k = 0; k < shapes.size(); ++k) {
        const Tensor expected = exact_average(world, shapes[k], step, k);
        EXPECT_LT(max_abs_diff(bucket.gradients[k], expected), 1e-5 * std::max(1.0, max_abs(expected)))
            << "gradient " << k << ", step " << step;
      }
    }
  });
}

// M_w = s_w u v^T on every rank: P is u's direction on the first step, and
// P P^T M_avg = M_avg. At rank 2 the second column of P is rounding noise,
// which must not add a direction (Note [Orthogonalizing P and Q]).
TEST(PowerSGD, SharedRankOneDirectionIsExact) {
  on_two_and_three_ranks([](int rank, int world) {
    auto group = make_test_group("gloo", kTimeout);
    const double scales[] = {1.0, -0.5, 2.5};
    Generator gen(42);
    const Tensor u = randn({8, 1}, DType::Float32, &gen);
    const Tensor v = randn({1, 6}, DType::Float32, &gen);
    double mean_scale = 0;
    for (int w = 0; w < world; ++w) mean_scale += scales[w] / world;
    const Tensor expected = ops::mul(ops::mm(u, v).to(DType::Float64), mean_scale);
    for (int64_t r : {1, 2}) {
      PowerSGDOptions options;
      options.matrix_approximation_rank = r;
      options.start_iteration = 0;
      options.min_compression_rate = 1;  // (8 * 6) / ((8 + 6) r): 3.4 at r = 1, 1.7 at r = 2
      auto hook = powersgd_hook(options);
      GradBucket bucket = make_bucket({{8, 6}});
      for (int64_t step = 0; step < 3; ++step) {
        bucket.iteration = step;
        bucket.gradients[0].copy_(ops::mul(ops::mm(u, v), scales[rank]));
        hook->start(*group, bucket)->wait();
        EXPECT_LT(max_abs_diff(bucket.gradients[0], expected), 1e-5 * max_abs(expected))
            << "rank " << r << ", step " << step;
      }
    }
  });
}

// A constant, full-rank (6, 5) gradient per rank, compressed to rank 1:
// each step alone is far from the average, but with error feedback the
// applied updates add up to k x average minus the mean error E (Note
// [PowerSGD step], step 8), and E stays bounded. Bound: were P the exact top
// singular direction of avg + E, a step would keep at most
// d = sqrt(1 - 1/5) of its Frobenius norm, so |E| <= d / (1 - d) |avg| =
// 8.5 |avg|. Warm-started power iteration stays near 4 |avg| here (3.6 to
// 5.9 over 5 seeds, two shapes, 400 steps, 2 and 3 ranks, with no growth
// between the first and second 200 steps). Without feedback what rank 1
// drops is lost every step, and the shortfall grows linearly past the bound.
TEST(PowerSGD, ErrorFeedbackKeepsTheAccumulatedShortfallBounded) {
  on_two_and_three_ranks([](int rank, int world) {
    auto group = make_test_group("gloo", kTimeout);
    const Shape shape = {6, 5};
    const Tensor gradient = rank_gradient(rank, shape, 0);
    const Tensor average = exact_average(world, shape, 0);
    auto frobenius = [](const Tensor& t) { return std::sqrt(ops::sum(ops::mul(t, t)).item<double>()); };
    const double d = std::sqrt(1.0 - 1.0 / 5);
    const double bound = d / (1 - d) * frobenius(average);
    const int64_t steps = 200;
    for (bool feedback : {false, true}) {
      PowerSGDOptions options;
      options.start_iteration = 0;
      options.use_error_feedback = feedback;
      auto hook = powersgd_hook(options);
      GradBucket bucket = make_bucket({shape});
      Tensor applied = zeros(shape, DType::Float64);  // sum of the updates so far
      double shortfall = 0;                           // |applied - k average|, Frobenius
      double worst = 0;                               // its max over the steps
      for (int64_t step = 0; step < steps; ++step) {
        bucket.iteration = step;
        bucket.gradients[0].copy_(gradient);
        hook->start(*group, bucket)->wait();
        if (step == 0) {
          EXPECT_GT(max_abs_diff(bucket.gradients[0], average), 0.1 * max_abs(average));
        }
        ops::add_(applied, bucket.gradients[0].to(DType::Float64));
        shortfall = frobenius(ops::sub(applied, ops::mul(average, double(step + 1))));
        worst = std::max(worst, shortfall);
      }
      if (feedback) {
        EXPECT_LT(worst, bound) << "the error grew";
      } else {
        EXPECT_GT(shortfall, 10 * bound) << "rank 1 should lose part of a full-rank average every step";
      }
    }
  });
}

// Biases, scalars and matrices too small to gain take the exact all_reduce,
// step after step, with error feedback on.
TEST(PowerSGD, OneDimensionalAndSmallGradientsAreExact) {
  on_two_and_three_ranks([](int rank, int world) {
    auto group = make_test_group("gloo", kTimeout);
    PowerSGDOptions options;
    options.start_iteration = 0;
    auto hook = powersgd_hook(options);
    // (6) bias, (8, 6) compressed, (2, 2) too small, () scalar, (3) bias.
    GradBucket bucket = make_bucket({{6}, {8, 6}, {2, 2}, {}, {3}});
    const std::vector<size_t> exact = {0, 2, 3, 4};
    for (int64_t step = 0; step < 3; ++step) {
      bucket.iteration = step;
      fill(bucket, [&](int64_t i) { return double((i * 7 + 3 * rank + step) % 11 + 5 * rank); });
      // An exact integer sum, divided in float32 as the all_reduce does.
      Tensor expected = empty({bucket.buffer.numel()});
      for (int64_t i = 0; i < bucket.buffer.numel(); ++i) {
        int64_t sum = 0;
        for (int w = 0; w < world; ++w) sum += (i * 7 + 3 * w + step) % 11 + 5 * w;
        expected.data<float>()[i] = static_cast<float>(sum) / static_cast<float>(world);
      }
      const Tensor expected_matrix = expected.narrow(0, 6, 48).clone();
      hook->start(*group, bucket)->wait();
      int64_t offset = 0;
      for (size_t k = 0; k < bucket.gradients.size(); ++k) {
        const int64_t numel = bucket.gradients[k].numel();
        if (std::find(exact.begin(), exact.end(), k) != exact.end()) {
          EXPECT_EQ(max_abs_diff(bucket.gradients[k].reshape({-1}), expected.narrow(0, offset, numel)), 0.0)
              << "gradient " << k << ", step " << step;
        }
        offset += numel;
      }
      // ... while the (8, 6) matrix really is compressed.
      EXPECT_GT(max_abs_diff(bucket.gradients[1].reshape({-1}), expected_matrix), 1e-2);
    }
  });
}

// Two buckets in flight at once, as the reducer launches them: each keeps
// its own Q and errors, and the collectives of both interleave in the same
// order on every rank.
TEST(PowerSGD, BucketsInFlightTogetherKeepTheirOwnState) {
  on_two_and_three_ranks([](int rank, int world) {
    auto group = make_test_group("gloo", kTimeout);
    PowerSGDOptions options;
    options.matrix_approximation_rank = 8;
    options.start_iteration = 0;
    options.min_compression_rate = 0;
    auto hook = powersgd_hook(options);
    const std::vector<Shape> shapes = {{5, 4}, {3, 7, 2}};
    GradBucket buckets[2] = {make_bucket({shapes[0], {4}}, 0), make_bucket({shapes[1]}, 1)};
    for (int64_t step = 0; step < 2; ++step) {
      std::unique_ptr<PendingReduction> pending[2];
      for (size_t b = 0; b < 2; ++b) {
        buckets[b].iteration = step;
        buckets[b].gradients[0].copy_(rank_gradient(rank, shapes[b], step, b));
        if (b == 0) ops::fill_(buckets[b].gradients[1], 0);
        pending[b] = hook->start(*group, buckets[b]);
      }
      for (size_t b = 0; b < 2; ++b) {
        pending[b]->wait();
        const Tensor expected = exact_average(world, shapes[b], step, b);
        EXPECT_LT(max_abs_diff(buckets[b].gradients[0], expected), 1e-5 * std::max(1.0, max_abs(expected)))
            << "bucket " << b << ", step " << step;
      }
    }
  });
}

}  // namespace
}  // namespace kiln::distributed::testing

#endif  // KILN_WITH_GLOO
