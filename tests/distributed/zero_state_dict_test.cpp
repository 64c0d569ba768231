// ZeroRedundancyOptimizer's state dicts (consolidated into one rank, loaded
// on any number of ranks and by one optimizer in one process) and the errors
// that name bad input.
#include <gtest/gtest.h>

#ifdef KILN_WITH_GLOO

#include <cstdio>
#include <string>

#include "store_test_util.h"
#include "tensor/safetensors.h"
#include "zero_test_util.h"

namespace kiln::distributed::testing {
namespace {

namespace F = nn::functional;

bool same_dicts(const TensorDict& a, const TensorDict& b) {
  if (a.keys() != b.keys()) return false;
  for (const auto& [key, t] : a) {
    if (!equal(t.cpu().to(DType::Float64), b.at(key).cpu().to(DType::Float64))) return false;
  }
  return true;
}

TEST(ZeroRedundancyOptimizer, ConsolidatedStateDictsLoadOnAnyNumberOfRanksAndInOneProcess) {
  // 3 ranks train 10 steps at stage 2 and consolidate; the dict is a whole
  // Adam's (one process loads it and matches its own training); 3 fresh
  // ranks load it bit for bit, and 2 ranks load it from a file and go on
  // training as the 3 do.
  const std::string path = test_process_file("checkpoint");
  const Model m = Model::LeNet;
  const OptimizerFactory factory = optimizer_factory<optim::Adam>(adam());
  run_on_ranks(
      3,
      [&](int rank) {
        auto group = rank_group();
        ZeroRun run = make_zero(m, 2, factory, group);
        train_zero(m, run, Loop{.steps = 10});

        // Consolidated to every rank in turn: each then has the whole dict.
        TensorDict whole;
        for (int to = 0; to < 3; ++to) {
          run.opt->consolidate_state_dict(to);
          if (to == rank) whole = run.opt->state_dict();
        }
        run.opt->consolidate_state_dict(0);
        if (rank != 0) {
          const std::string elsewhere = error_of([&] { (void)run.opt->state_dict(); });
          EXPECT_NE(
              elsewhere.find("the state dict was consolidated to rank 0, not to this rank " + std::to_string(rank)),
              std::string::npos)
              << elsewhere;
        }

        // It is one Adam's over every parameter, within rounding of one
        // process's own.
        auto single_model = make_model(m, 7);
        auto single = factory({{single_model->parameters(), {}}});
        for (int s = 0; s < 10; ++s) {
          auto [x, y] = batch(m, s);
          single->zero_grad();
          F::cross_entropy(single_model->forward(x), y).backward();
          single->step();
        }
        const TensorDict expected = single->state_dict();
        ASSERT_EQ(whole.keys(), expected.keys());
        for (const auto& [key, t] : expected) {
          const Tensor got = whole.at(key).cpu();
          ASSERT_EQ(got.shape(), t.shape()) << key;
          const double scale = std::max(1e-300, max(abs(t)).item<double>());
          EXPECT_LE(max(abs(sub(got, t))).item<double>() / scale, 1e-10) << key;
        }
        single->load_state_dict(whole);
        EXPECT_TRUE(same_dicts(single->state_dict(), whole));

        // Three fresh ranks, with another lr, load it and hold the same.
        optim::AdamOptions other = adam();
        other.lr(0.5);
        ZeroRun fresh = make_zero(m, 2, optimizer_factory<optim::Adam>(other), group);
        fresh.opt->load_state_dict(whole);
        EXPECT_EQ(fresh.opt->lr(0), adam().lr());
        EXPECT_TRUE(same_dicts(fresh.opt->local_optimizer().state_dict(), run.opt->local_optimizer().state_dict()));
        if (rank == 0) {
          save_safetensors(path, whole);
          save_safetensors(path + ".model10", run.model->state_dict());
        }

        // The run goes on for 5 more steps, which the 2 ranks below repeat.
        train_zero(m, run, Loop{.steps = 5}, 10);
        if (rank == 0) save_safetensors(path + ".model15", run.model->state_dict());
      },
      slow_ranks());
  run_on_ranks(
      2,
      [&](int rank) {
        auto group = rank_group();
        ZeroRun run = make_zero(m, 1, factory, group);  // stage 1 now, beside DDP
        run.model->load_state_dict(load_safetensors(path + ".model10"));
        run.opt->load_state_dict(load_safetensors(path));
        train_zero(m, run, Loop{.steps = 5}, 10);
        auto three_ranks = make_model(m, 0);
        three_ranks->load_state_dict(load_safetensors(path + ".model15"));
        const double difference = relative_difference(*run.model, *three_ranks);
        std::printf("rank %d: resumed on 2 ranks from 3, 5 steps later: relative difference %.3g\n", rank, difference);
        EXPECT_LE(difference, 1e-10);
      },
      slow_ranks());
  // Only the test process: each rank process also runs the rest of the
  // body once its own run_on_ranks() call has returned.
  if (!in_rank_process()) {
    for (const char* suffix : {"", ".model10", ".model15"}) std::remove((path + suffix).c_str());
  }
}

TEST(ZeroRedundancyOptimizer, BadInputIsNamed) {
  run_on_ranks(2, [](int rank) {
    auto group = rank_group();
    const OptimizerFactory factory = optimizer_factory<optim::Adam>(adam());
    ZeroOptions options;
    options.group = group;
    auto linear = std::make_shared<nn::Linear>(4, 3);

    EXPECT_NE(error_of([&] {
                ZeroRedundancyOptimizer(std::vector<Tensor>{}, factory, options);
              }).find("ZeroRedundancyOptimizer: got an empty parameter list"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                ZeroRedundancyOptimizer({linear->weight, linear->weight}, factory, options);
              }).find("parameter 1 (group 0) is listed twice"),
              std::string::npos);
    ZeroOptions stage3 = options;
    stage3.stage = 3;
    EXPECT_NE(error_of([&] {
                ZeroRedundancyOptimizer(linear->parameters(), factory, stage3);
              }).find("stage must be 1 or 2, got 3"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                ZeroRedundancyOptimizer({linear->weight}, factory, options);
              }).find("1 parameters cannot be shared by 2 ranks"),
              std::string::npos);

    // A rank with another model is named, with the parameter, on every rank.
    auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 3),
                                                  std::make_shared<nn::Linear>(3, rank == 0 ? 2 : 5));
    const std::string differs = error_of([&] { ZeroRedundancyOptimizer(model->parameters(), factory, options); });
    EXPECT_NE(differs.find("ZeroRedundancyOptimizer: parameter 2 ('group 0 #2') is float32 [" +
                           std::string(rank == 0 ? "2, 3] on rank 0 but float32 [5, 3] on rank 1"
                                                 : "5, 3] on rank 1 but float32 [2, 3] on rank 0")),
              std::string::npos)
        << differs;

    // A factory that ignores the groups it is given.
    OptimizerFactory wrong = [&](const std::vector<optim::ParamGroup>&) -> std::unique_ptr<optim::Optimizer> {
      return std::make_unique<optim::Adam>(linear->parameters(), adam());
    };
    EXPECT_NE(error_of([&] {
                ZeroRedundancyOptimizer(linear->parameters(), wrong, options);
              }).find("holds other parameters than it was given"),
              std::string::npos);

    // Stage 2 names the parameters a backward did not reach.
    manual_seed(1);
    auto branchy = std::make_shared<Branchy>();
    branchy->use_second = false;
    ZeroOptions stage2 = options;
    stage2.stage = 2;
    ZeroRedundancyOptimizer opt(branchy->parameters(), factory, stage2);
    const std::string missing = error_of([&] { sum(branchy->forward(ones({2, 4}, DType::Float64))).backward(); });
    EXPECT_NE(missing.find("these parameters got no gradient in this backward: parameter 2 (group 0, float64 [3, 3]), "
                           "parameter 3 (group 0, float64 [3])"),
              std::string::npos)
        << missing;
    branchy->use_second = true;
    sum(branchy->forward(ones({2, 4}, DType::Float64))).backward();  // works again
    opt.step();

    // State dicts: before consolidating, and a part one rank refuses.
    EXPECT_NE(
        error_of([&] { (void)opt.state_dict(); }).find("call consolidate_state_dict(to_rank) on every rank first"),
        std::string::npos);
    opt.consolidate_state_dict(0);
    TensorDict whole;
    if (rank == 0) whole = opt.state_dict();
    // Rank 1 consolidates to itself too, to have the dict.
    opt.consolidate_state_dict(1);
    if (rank == 1) whole = opt.state_dict();
    const TensorDict before = opt.local_optimizer().state_dict();
    TensorDict bad;
    for (const auto& [key, t] : whole) bad.insert(key, key == "state.0.exp_avg" ? zeros({5}, DType::Float64) : t);
    const std::string refused = error_of([&] { opt.load_state_dict(bad); });
    if (opt.owners()[0] == rank) {
      EXPECT_NE(refused.find("'state.0.exp_avg' has shape [5] but parameter 0 has shape [3, 4]"), std::string::npos)
          << refused;
    } else {
      EXPECT_NE(refused.find("rank(s) " + std::to_string(opt.owners()[0]) + " could not load their part"),
                std::string::npos)
          << refused;
    }
    EXPECT_TRUE(same_dicts(opt.local_optimizer().state_dict(), before));
    EXPECT_NE(error_of([&] { opt.load_state_dict(TensorDict{}); }).find("the state dict has 0 param groups"),
              std::string::npos);
  });
}

}  // namespace
}  // namespace kiln::distributed::testing

#endif  // KILN_WITH_GLOO
