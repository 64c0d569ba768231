// Differentiable collectives (distributed/functional.h) on 2 and 3 ranks
// against a single-process reference. Every rank builds every rank's input;
// rank r runs the collective on its own and takes the loss
// L_r = sum(y_r * y_r * w_r), quadratic so that second derivatives are not
// zero. In one process, the reference computes each rank's output from all
// the inputs with ordinary differentiable ops and differentiates
// L = sum_r L_r (Note [Differentiable collectives]). Rank r's output, its
// input gradient and its second derivative must be the reference's for rank
// r, and the gradient must also match central differences of the group's
// total loss taken across the ranks. Then send and recv in a pipeline, the
// version bumps of ProcessGroup's in-place collectives, and the errors.
#include "distributed/functional.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "distributed/init.h"
#include "store_test_util.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/random.h"

#ifdef KILN_WITH_GLOO
#include "multi_process.h"
#endif

namespace kiln::distributed::testing {
namespace {

namespace DF = kiln::distributed::functional;
using autograd::TensorList;

void expect_error_containing(const std::function<void()>& f, const std::vector<std::string>& parts) {
  const std::string message = error_of(f);
  for (const std::string& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
}

TEST(DifferentiableCollectives, WithoutAGroupOrADefaultGroupSayWhichFunctionNeedsOne) {
  ASSERT_FALSE(is_initialized());
  Tensor x = ones({2}, DType::Float64);
  expect_error_containing([&] { DF::all_reduce(x); },
                          {"all_reduce: no group was given and init_process_group has not been called"});
  expect_error_containing([&] { DF::recv({2}, DType::Float64, 0); }, {"recv: no group was given"});
}

#ifdef KILN_WITH_GLOO

using std::chrono::milliseconds;
constexpr milliseconds kTimeout(20000);
constexpr DType kF64 = DType::Float64;

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return std::numeric_limits<double>::infinity();
  return ops::max(ops::abs(ops::sub(a, b))).item<double>();
}

// Rank `rank`'s tensor of `shape` for purpose `salt`: the same on every rank.
Tensor data_of(int rank, const Shape& shape, uint64_t salt) {
  Generator gen;
  gen.manual_seed(1000 * salt + static_cast<uint64_t>(rank));
  return randn(shape, kF64, &gen);
}

Tensor loss_of(const Tensor& y, const Tensor& weight) { return kiln::sum(kiln::mul(kiln::mul(y, y), weight)); }

// Block `part` of `parts` equal blocks of x along dim (differentiable).
Tensor block(const Tensor& x, int64_t dim, int part, int parts) {
  const int64_t n = x.size(dim) / parts;
  return x.narrow(dim, part * n, n);
}

Tensor sum_of(const std::vector<Tensor>& xs) {
  Tensor total = xs[0];
  for (size_t s = 1; s < xs.size(); ++s) total = kiln::add(total, xs[s]);
  return total;
}

// One collective: what rank r runs on its input, and rank r's output computed
// in one process from every rank's input.
struct Case {
  std::string name;
  Shape input_shape;
  std::function<Tensor(const Tensor& x, ProcessGroup& group)> distributed;
  std::function<Tensor(const std::vector<Tensor>& xs, int rank)> reference;
};

// The group's total loss sum_r L_r with this rank's input `mine`, computed
// by every rank together.
double total_loss(const Case& c, const Tensor& mine, const Tensor& weight, ProcessGroup& group) {
  NoGradGuard no_grad;
  Tensor loss = loss_of(c.distributed(mine, group), weight).reshape({1}).clone();
  group.all_reduce(loss)->wait();
  return loss.item<double>();
}

// Central differences of the total loss in each element of each rank's input
// in turn, every rank in step (each evaluation is a collective); rank r
// checks the elements of its own input against `analytic`.
double worst_finite_difference(const Case& c, const Tensor& mine, const Tensor& weight, const Tensor& analytic,
                               ProcessGroup& group) {
  const double eps = 1e-6;
  double worst = 0;
  const Tensor flat_analytic = analytic.contiguous().view({-1});
  for (int owner = 0; owner < group.size(); ++owner) {
    for (int64_t i = 0; i < mine.numel(); ++i) {
      double f[2];
      for (int side = 0; side < 2; ++side) {
        Tensor x = mine.clone();
        if (owner == group.rank()) x.data<double>()[i] += side == 1 ? eps : -eps;
        f[side] = total_loss(c, x, weight, group);
      }
      if (owner != group.rank()) continue;
      const double numerical = (f[1] - f[0]) / (2 * eps);
      worst = std::max(worst, std::abs(numerical - flat_analytic.at<double>({i})));
    }
  }
  return worst;
}

Tensor or_zeros(const Tensor& t, const Tensor& like) { return t.defined() ? t.detach() : zeros_like(like); }

// Forward, gradient and second derivative of `c` on this rank against the
// reference (see the file comment).
void expect_matches_reference(ProcessGroup& group, const Case& c) {
  const int rank = group.rank(), world = group.size();
  std::vector<Tensor> leaves, weights, directions;
  for (int s = 0; s < world; ++s) leaves.push_back(data_of(s, c.input_shape, 1).requires_grad_());
  std::vector<Tensor> outputs;
  for (int s = 0; s < world; ++s) outputs.push_back(c.reference(leaves, s));
  std::vector<Tensor> losses;
  for (int s = 0; s < world; ++s) {
    weights.push_back(data_of(s, outputs[s].shape(), 2));
    directions.push_back(data_of(s, c.input_shape, 3));
    losses.push_back(loss_of(outputs[s], weights[s]));
  }
  const TensorList first = autograd::grad({sum_of(losses)}, leaves, {}, true, true, /*allow_unused=*/true);
  std::vector<Tensor> projections;
  for (int s = 0; s < world; ++s) {
    if (first[s].defined()) projections.push_back(kiln::sum(kiln::mul(first[s], directions[s])));
  }
  const TensorList second = autograd::grad({sum_of(projections)}, leaves, {}, false, false, true);
  const Tensor& input = leaves[rank];

  // backward(), as training runs it: no graph of the backward.
  Tensor x = input.detach().clone().requires_grad_();
  Tensor y = c.distributed(x, group);
  const double forward = max_abs_diff(y.detach(), outputs[rank].detach());
  loss_of(y, weights[rank]).backward();
  const double gradient = max_abs_diff(x.grad(), or_zeros(first[rank], input));

  // The gradient with create_graph, differentiated again along `directions`.
  Tensor x2 = input.detach().clone().requires_grad_();
  Tensor g = autograd::grad({loss_of(c.distributed(x2, group), weights[rank])}, {x2}, {}, true, true)[0];
  Tensor gg = autograd::grad({kiln::sum(kiln::mul(g, directions[rank]))}, {x2}, {}, false, false, true)[0];
  const double second_derivative = max_abs_diff(or_zeros(gg, input), or_zeros(second[rank], input));

  const double finite = worst_finite_difference(c, input.detach(), weights[rank], x.grad(), group);
  std::printf(
      "%s, rank %d of %d: max |difference| forward %.3g, gradient %.3g, second derivative %.3g, "
      "gradient - finite differences %.3g\n",
      c.name.c_str(), rank, world, forward, gradient, second_derivative, finite);
  EXPECT_LE(forward, 1e-12) << c.name;
  EXPECT_LE(gradient, 1e-12) << c.name;
  EXPECT_LE(second_derivative, 1e-12) << c.name;
  EXPECT_LE(finite, 1e-6) << c.name;
  EXPECT_TRUE(y.requires_grad()) << c.name;
}

// Runs `cases(world)` on 2 and on 3 ranks.
void run_cases_on_two_and_three_ranks(const std::function<std::vector<Case>(int world)>& cases) {
  for (int world : {2, 3}) {
    run_on_ranks(world, [&cases, world](int) {
      auto group = make_test_group("gloo", kTimeout);
      for (const Case& c : cases(world)) expect_matches_reference(*group, c);
    });
  }
}

TEST(DifferentiableCollectives, AllReduceMatchesTheSingleProcessReference) {
  run_cases_on_two_and_three_ranks([](int world) {
    return std::vector<Case>{
        {"all_reduce sum",
         {2, 3},
         [](const Tensor& x, ProcessGroup& g) { return DF::all_reduce(x, ReduceOp::Sum, &g); },
         [](const std::vector<Tensor>& xs, int) { return sum_of(xs); }},
        {"all_reduce avg",
         {4},
         [](const Tensor& x, ProcessGroup& g) { return DF::all_reduce(x, ReduceOp::Avg, &g); },
         [world](const std::vector<Tensor>& xs, int) { return kiln::div(sum_of(xs), double(world)); }},
    };
  });
}

TEST(DifferentiableCollectives, AllGatherMatchesTheSingleProcessReference) {
  run_cases_on_two_and_three_ranks([](int) {
    return std::vector<Case>{
        {"all_gather dim 0",
         {2, 3},
         [](const Tensor& x, ProcessGroup& g) { return DF::all_gather(x, 0, &g); },
         [](const std::vector<Tensor>& xs, int) { return kiln::cat(xs, 0); }},
        {"all_gather dim -1",
         {2, 3},
         [](const Tensor& x, ProcessGroup& g) { return DF::all_gather(x, -1, &g); },
         [](const std::vector<Tensor>& xs, int) { return kiln::cat(xs, 1); }},
    };
  });
}

TEST(DifferentiableCollectives, ReduceScatterMatchesTheSingleProcessReference) {
  run_cases_on_two_and_three_ranks([](int world) {
    return std::vector<Case>{
        {"reduce_scatter dim 0 sum",
         {2 * world, 3},
         [](const Tensor& x, ProcessGroup& g) { return DF::reduce_scatter(x, 0, ReduceOp::Sum, &g); },
         [world](const std::vector<Tensor>& xs, int r) { return block(sum_of(xs), 0, r, world); }},
        {"reduce_scatter dim 1 avg",
         {2, 2 * world},
         [](const Tensor& x, ProcessGroup& g) { return DF::reduce_scatter(x, 1, ReduceOp::Avg, &g); },
         [world](const std::vector<Tensor>& xs, int r) {
           return block(kiln::div(sum_of(xs), double(world)), 1, r, world);
         }},
    };
  });
}

TEST(DifferentiableCollectives, BroadcastAndReduceMatchTheSingleProcessReference) {
  run_cases_on_two_and_three_ranks([](int world) {
    const int last = world - 1;
    return std::vector<Case>{
        {"broadcast from the last rank",
         {2, 2},
         [last](const Tensor& x, ProcessGroup& g) { return DF::broadcast(x, last, &g); },
         [last](const std::vector<Tensor>& xs, int) { return xs[last]; }},
        {"reduce sum to rank 1",
         {3},
         [](const Tensor& x, ProcessGroup& g) { return DF::reduce(x, 1, ReduceOp::Sum, &g); },
         [](const std::vector<Tensor>& xs, int r) { return r == 1 ? sum_of(xs) : zeros({3}, kF64); }},
        {"reduce avg to rank 0",
         {2, 2},
         [](const Tensor& x, ProcessGroup& g) { return DF::reduce(x, 0, ReduceOp::Avg, &g); },
         [world](const std::vector<Tensor>& xs, int r) {
           return r == 0 ? kiln::div(sum_of(xs), double(world)) : zeros({2, 2}, kF64);
         }},
    };
  });
}

TEST(DifferentiableCollectives, AllToAllMatchesTheSingleProcessReference) {
  run_cases_on_two_and_three_ranks([](int world) {
    // Rank r receives block r of every rank's input, in rank order.
    auto reference = [world](int64_t split, int64_t concat) {
      return [world, split, concat](const std::vector<Tensor>& xs, int r) {
        std::vector<Tensor> received;
        for (const Tensor& x : xs) received.push_back(block(x, split, r, world));
        return kiln::cat(received, concat);
      };
    };
    auto distributed = [](int64_t split, int64_t concat) {
      return [split, concat](const Tensor& x, ProcessGroup& g) { return DF::all_to_all(x, split, concat, &g); };
    };
    return std::vector<Case>{
        {"all_to_all split 0 concat 1", {2 * world, 3}, distributed(0, 1), reference(0, 1)},
        {"all_to_all split 1 concat 0", {3, 2 * world}, distributed(1, 0), reference(1, 0)},
        {"all_to_all split 0 concat 0", {world, 2}, distributed(0, 0), reference(0, 0)},
    };
  });
}

TEST(DifferentiableCollectives, ARankWhoseInputNeedsNoGradientStillSendsItsGradientOn) {
  // Note [Differentiable collectives], when a node is recorded: rank 1's
  // buffer and rank 1's summand need no gradient, but rank 0's parameter
  // reached rank 1's loss, so rank 1's backward must take part.
  run_on_ranks(2, [](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    Tensor w = full({3}, 1.5, kF64);
    if (rank == 0) w.requires_grad_();
    Tensor y = DF::broadcast(w, 0, group.get());
    EXPECT_TRUE(y.requires_grad());
    // L = sum_r (r + 1) * sum(y_r): dL/dw_0 = 1 + 2.
    kiln::sum(kiln::mul(y, double(rank + 1))).backward();
    if (rank == 0) {
      EXPECT_EQ(max_abs_diff(w.grad(), full({3}, 3.0, kF64)), 0.0);
    }

    Tensor v = full({2}, 2.0, kF64);
    if (rank == 0) v.requires_grad_();
    Tensor total = DF::all_reduce(v, ReduceOp::Sum, group.get());
    kiln::sum(kiln::mul(total, double(rank + 1))).backward();
    if (rank == 0) {
      EXPECT_EQ(max_abs_diff(v.grad(), full({2}, 3.0, kF64)), 0.0);
    }
  });
}

TEST(DifferentiableCollectives, NothingIsRecordedWithoutGradModeOrForIntegers) {
  run_on_ranks(2, [](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    ProcessGroup* g = group.get();
    Tensor x = full({2, 2}, double(rank), kF64).requires_grad_();
    {
      NoGradGuard no_grad;
      EXPECT_FALSE(DF::all_reduce(x, ReduceOp::Sum, g).requires_grad());
      EXPECT_FALSE(DF::all_gather(x, 0, g).requires_grad());
      EXPECT_FALSE(DF::reduce_scatter(x, 0, ReduceOp::Sum, g).requires_grad());
      EXPECT_FALSE(DF::broadcast(x, 0, g).requires_grad());
      EXPECT_FALSE(DF::reduce(x, 0, ReduceOp::Sum, g).requires_grad());
      EXPECT_FALSE(DF::all_to_all(x, 0, 1, g).requires_grad());
      if (rank == 0) {
        EXPECT_FALSE(DF::send(x, 1, g).requires_grad());
      }
      if (rank == 1) {
        EXPECT_FALSE(DF::recv({2, 2}, kF64, 0, g).requires_grad());
      }
    }
    // Integers: the labels of a batch, say.
    Tensor labels = arange(4, DType::Int64);
    Tensor summed = DF::all_reduce(labels, ReduceOp::Sum, g);
    EXPECT_FALSE(summed.requires_grad());
    EXPECT_EQ(summed.at<int64_t>({3}), 6);
    if (rank == 0) {
      EXPECT_FALSE(DF::send(labels, 1, g).requires_grad());
    }
    if (rank == 1) {
      Tensor received = DF::recv({4}, DType::Int64, 0, g);
      EXPECT_FALSE(received.requires_grad());
      EXPECT_EQ(received.at<int64_t>({2}), 2);
    }
  });
}

// ---- send and recv ----

TEST(DifferentiableSendRecv, TwoStagesWithTwoMicrobatchesGetTheSingleProcessGradients) {
  // Rank 0: h = tanh(x * a), its own loss sum(h), sends h. Rank 1:
  // loss sum(h * h * b). Both microbatches go forward before either goes
  // backward, and the tokens are backpropagated in the order rank 1 sends
  // the gradients back.
  run_on_ranks(2, [](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    const Tensor a0 = data_of(0, {3}, 4), b0 = data_of(1, {3}, 4);
    std::vector<Tensor> inputs = {data_of(0, {3}, 5), data_of(1, {3}, 5)};

    // The reference: both stages in one process.
    Tensor a_ref = a0.clone().requires_grad_(), b_ref = b0.clone().requires_grad_();
    std::vector<Tensor> losses;
    for (const Tensor& x : inputs) {
      Tensor h = kiln::tanh(kiln::mul(x, a_ref));
      losses.push_back(kiln::add(kiln::sum(h), kiln::sum(kiln::mul(kiln::mul(h, h), b_ref))));
    }
    sum_of(losses).backward();

    if (rank == 0) {
      Tensor a = a0.clone().requires_grad_();
      std::vector<Tensor> objectives;
      for (const Tensor& x : inputs) {
        Tensor h = kiln::tanh(kiln::mul(x, a));
        Tensor token = DF::send(h, 1, group.get());
        EXPECT_EQ(token.dim(), 0);
        EXPECT_EQ(token.item<double>(), 0.0);
        EXPECT_EQ(token.grad_fn_name(), "SendBackward");
        objectives.push_back(kiln::add(kiln::sum(h), token));
      }
      for (const Tensor& objective : objectives) objective.backward();
      EXPECT_LE(max_abs_diff(a.grad(), a_ref.grad()), 1e-12);
    } else {
      Tensor b = b0.clone().requires_grad_();
      std::vector<Tensor> received;
      for (size_t m = 0; m < inputs.size(); ++m) received.push_back(DF::recv({3}, kF64, 0, group.get()));
      for (const Tensor& h : received) {
        EXPECT_EQ(h.grad_fn_name(), "RecvBackward");
        kiln::sum(kiln::mul(kiln::mul(h, h), b)).backward();
      }
      EXPECT_LE(max_abs_diff(b.grad(), b_ref.grad()), 1e-12);
    }
  });
}

TEST(DifferentiableSendRecv, AThreeStageChainPassesTheGradientBackThroughTheMiddleStage) {
  // 0: h0 = x * w0 -> 1: h1 = tanh(h0 * w1) -> 2: loss sum(h1 * h1 * w2).
  // Rank 1's backward receives from rank 2 and sends to rank 0 in one pass.
  run_on_ranks(3, [](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    const Tensor x = data_of(0, {4}, 6);
    std::vector<Tensor> w_ref;
    for (int s = 0; s < 3; ++s) w_ref.push_back(data_of(s, {4}, 7).requires_grad_());
    Tensor h1_ref = kiln::tanh(kiln::mul(kiln::mul(x, w_ref[0]), w_ref[1]));
    kiln::sum(kiln::mul(kiln::mul(h1_ref, h1_ref), w_ref[2])).backward();

    Tensor w = data_of(rank, {4}, 7).requires_grad_();
    if (rank == 0) {
      DF::send(kiln::mul(x, w), 1, group.get()).backward();
    } else if (rank == 1) {
      Tensor h0 = DF::recv({4}, kF64, 0, group.get());
      DF::send(kiln::tanh(kiln::mul(h0, w)), 2, group.get()).backward();
    } else {
      Tensor h1 = DF::recv({4}, kF64, 1, group.get());
      kiln::sum(kiln::mul(kiln::mul(h1, h1), w)).backward();
    }
    const double difference = max_abs_diff(w.grad(), w_ref[rank].grad());
    std::printf("rank %d: max |w.grad - single process| = %.3g\n", rank, difference);
    EXPECT_LE(difference, 1e-12);
  });
}

// ---- errors ----

TEST(DifferentiableCollectives, ReductionsWithoutAGradientAreRefusedOnInputsThatRequireGrad) {
  run_on_ranks(2, [](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    ProcessGroup* g = group.get();
    Tensor x = full({2}, double(rank + 1), kF64).requires_grad_();
    const std::string here = "rank " + std::to_string(rank) + " of group '" + group->name() + "'";
    expect_error_containing([&] { DF::all_reduce(x, ReduceOp::Max, g); },
                            {"all_reduce: ReduceOp max has no gradient (sum and avg do)", here, "requires grad"});
    expect_error_containing([&] { DF::reduce_scatter(x, 0, ReduceOp::Product, g); },
                            {"reduce_scatter: ReduceOp product has no gradient", here});
    expect_error_containing([&] { DF::reduce(x, 0, ReduceOp::Min, g); },
                            {"reduce: ReduceOp min has no gradient", here});
    // Without a gradient to take, they run.
    Tensor largest = DF::all_reduce(x.detach(), ReduceOp::Max, g);
    EXPECT_FALSE(largest.requires_grad());
    EXPECT_EQ(largest.at<double>({0}), 2.0);
  });
}

TEST(DifferentiableCollectives, DimsAndSizesThatCannotBeSplitAreErrorsNamingTheRankAndShape) {
  run_on_ranks(2, [](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    ProcessGroup* g = group.get();
    const std::string here = "rank " + std::to_string(rank) + " of group '" + group->name() + "'";
    Tensor x = zeros({3, 2}, kF64);
    expect_error_containing([&] { DF::all_gather(x, 2, g); },
                            {"all_gather: dim 2 is out of range for the input of shape [3, 2] on " + here});
    expect_error_containing([&] { DF::all_gather(scalar_tensor(1.0, kF64), 0, g); },
                            {"all_gather: the input of " + here + " is 0-d; dim needs at least 1 dim"});
    expect_error_containing([&] { DF::reduce_scatter(x, 0, ReduceOp::Sum, g); },
                            {"reduce_scatter: the input of " + here +
                             " has shape [3, 2], whose size 3 along dim 0 "
                             "is not a multiple of the group size 2"});
    expect_error_containing([&] { DF::all_to_all(x, -2, 1, g); },
                            {"all_to_all: the input of " + here, "along split_dim 0 is not a multiple"});
    expect_error_containing([&] { DF::all_to_all(x, 1, -3, g); }, {"all_to_all: concat_dim -3 is out of range"});
    expect_error_containing([&] { DF::broadcast(Tensor(), 0, g); },
                            {"broadcast: " + here + " passed an undefined tensor"});
    // The group's own checks still apply, e.g. to the root.
    expect_error_containing([&] { DF::broadcast(x, 2, g); }, {"broadcast: root 2 is outside group"});
  });
}

// ---- ProcessGroup's in-place collectives bump the version of what they write ----

TEST(CollectiveVersions, EveryTensorACollectiveWritesIsBumpedWhenItStarts) {
  run_on_ranks(2, [](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    // True when `written` is at a later version as soon as `start` returned,
    // before the backend has necessarily written anything.
    auto bumped_at_start = [](const Tensor& written, const std::function<WorkPtr()>& start) {
      const uint64_t before = written.version();
      WorkPtr work = start();
      const bool bumped = written.version() > before;
      work->wait();
      return bumped;
    };
    Tensor t = ones({4}, kF64);
    EXPECT_TRUE(bumped_at_start(t, [&] { return group->all_reduce(t); }));
    EXPECT_TRUE(bumped_at_start(t, [&] { return group->broadcast(t, 1); }));
    // Only the root's tensor is written.
    EXPECT_EQ(bumped_at_start(t, [&] { return group->reduce(t, 1); }), rank == 1);
    Tensor gathered = empty({8}, kF64), part = empty({2}, kF64);
    EXPECT_TRUE(bumped_at_start(gathered, [&] { return group->all_gather_into_tensor(gathered, t); }));
    EXPECT_TRUE(bumped_at_start(part, [&] { return group->reduce_scatter_tensor(part, t); }));
    const std::vector<Tensor> halves = {ones({2}, kF64), ones({2}, kF64)};
    EXPECT_TRUE(bumped_at_start(part, [&] { return group->reduce_scatter(part, halves); }));
    EXPECT_TRUE(
        bumped_at_start(part, [&] { return group->scatter(part, rank == 0 ? halves : std::vector<Tensor>{}, 0); }));
    if (rank == 0) group->send(t, 1);
    if (rank == 1) {
      EXPECT_TRUE(bumped_at_start(t, [&] { return group->irecv(t, 0); }));
    }
    // A non-contiguous tensor is written through a contiguous copy; the
    // tensor itself, and so its base, is bumped.
    Tensor base = ones({2, 3}, kF64);
    EXPECT_TRUE(bumped_at_start(base, [&] { return group->all_reduce(base.t()); }));
    // Outputs given as lists are written when wait() copies into them.
    std::vector<Tensor> outputs = {zeros({2}, kF64), zeros({2}, kF64)};
    const uint64_t before = outputs[1].version();
    group->all_gather(outputs, part)->wait();
    EXPECT_GT(outputs[1].version(), before);
  });
}

TEST(CollectiveVersions, BackwardRefusesASavedTensorThatACollectiveOverwrote) {
  run_on_ranks(2, [](int) {
    auto group = make_test_group("gloo", kTimeout);
    Tensor w = full({3}, 2.0, kF64);
    Tensor x = ones({3}, kF64).requires_grad_();
    Tensor y = kiln::mul(x, w);  // saves w for x's gradient
    group->all_reduce(w)->wait();
    expect_error_containing([&] { kiln::sum(y).backward(); },
                            {"MulBackward: a tensor saved for backward was modified by an in-place operation"});
  });
}

#endif  // KILN_WITH_GLOO

}  // namespace
}  // namespace kiln::distributed::testing
