// FSDP state dicts and sharded checkpoints (distributed/fsdp/state_dict.h).
// The resharding test is the issue's: a float64 GPT trains under FSDP on 4
// ranks, is saved, resumes on 2 ranks with other wrapping, is saved, resumes
// on 3, is saved, and resumes in one process; after each load the state
// saved again is bit for bit what was loaded, and the losses of the whole
// relay are those of one uninterrupted single-process run.
#include <gtest/gtest.h>

#ifdef KILN_WITH_GLOO

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "checkpoint_test_util.h"
#include "distributed/checkpoint/sharded_checkpoint.h"
#include "distributed/fsdp/fully_sharded_data_parallel.h"
#include "distributed/fsdp/state_dict.h"
#include "fsdp_test_util.h"
#include "multi_process.h"
#include "nn/linear.h"
#include "nn/models/gpt.h"
#include "optim/adam.h"
#include "optim/optim_test_util.h"
#include "optim/sgd.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/random.h"
#include "tensor/safetensors.h"

#ifdef KILN_WITH_CUDA
#include "tensor/cuda/device.h"
#endif

namespace kiln::distributed::testing {
namespace {

using fsdp::FSDPOptions;
using fsdp::FullyShardedDataParallel;
using fsdp::ShardingStrategy;

constexpr std::chrono::milliseconds kTimeout(30000);
constexpr int64_t kBatch = 12;  // rows split evenly over 1, 2, 3 and 4 ranks

RankOptions slow_ranks() {
  RankOptions options;
  options.deadline = std::chrono::seconds(180);
  return options;
}

std::pair<Tensor, Tensor> gpt_batch(int step) { return testing::gpt_batch(step, kBatch, 700); }

// Adam over nanoGPT's two groups (matrices decay, the rest do not), built
// from the full parameters before any wrapping.
std::unique_ptr<optim::Adam> make_adam(nn::Module& model) {
  optim::AdamOptions o(3e-3);
  return std::make_unique<optim::Adam>(optim::weight_decay_groups(model.parameters(), 0.05), o);
}

// One step of every rank's rows; returns the whole batch's loss (the mean
// of the ranks' equal shares).
double fsdp_step(FullyShardedDataParallel& fsdp, optim::Optimizer& opt, ProcessGroup& group, int step) {
  auto [x, y] = gpt_batch(step);
  opt.zero_grad();
  Tensor loss = nn::GPT::loss_from_logits(fsdp.forward(rows_of(x, group.rank(), group.size())),
                                          rows_of(y, group.rank(), group.size()));
  loss.backward();
  opt.step();
  Tensor total = loss.detach().reshape({1}).clone();
  group.all_reduce(total)->wait();
  return total.item<double>() / group.size();
}

double plain_step(nn::Module& model, optim::Optimizer& opt, int step) {
  auto [x, y] = gpt_batch(step);
  opt.zero_grad();
  Tensor loss = nn::GPT::loss_from_logits(model.forward(x), y);
  loss.backward();
  opt.step();
  return loss.item<double>();
}

void write_numbers(const std::string& path, const std::vector<double>& values) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  for (double v : values) std::fprintf(f, "%.17g\n", v);
  std::fclose(f);
}

std::vector<double> read_numbers(const std::string& path) {
  std::ifstream in(path);
  std::vector<double> values;
  for (double v; in >> v;) values.push_back(v);
  return values;
}

double relative_difference(const Tensor& a, const Tensor& b) {
  Tensor x = a.to(DType::Float64), y = b.to(DType::Float64);
  const double scale = std::max(1.0, ops::max(ops::abs(y)).item<double>());
  return ops::max(ops::abs(ops::sub(x, y))).item<double>() / scale;
}

// ---- the relay: 4 ranks -> 2 -> 3 -> one process -------------------------------

constexpr int kStepsPerLeg = 3;

struct Leg {
  int world;
  ShardingStrategy strategy;
  // Which blocks are units of their own (none: the whole model is one unit).
  std::vector<std::string> units;
  std::optional<std::string> load_from;  // the checkpoint to resume from
  std::string save_to;
  int first_step;
};

// One leg on `rank`: a model of other weights (the load must replace them),
// resumed, checked, trained, saved; rank 0 writes the losses.
void run_leg(const SharedDir& shared, const Leg& leg, int rank) {
  auto group = make_test_group("gloo", kTimeout);
  auto model = make_gpt(leg.load_from ? 100 + leg.world : 11);
  auto opt = make_adam(*model);
  FSDPOptions options;
  options.group = group;
  options.strategy = leg.strategy;
  if (!leg.units.empty()) options.wrap_policy = fsdp::wrap_by_names(*model, leg.units);
  auto fsdp = std::make_shared<FullyShardedDataParallel>(model, options);
  if (leg.load_from) {
    const std::string from = shared / *leg.load_from;
    fsdp::load_sharded_checkpoint(from, *fsdp, opt.get());
    EXPECT_EQ(fsdp::checkpoint_metadata(from).at("step"), std::to_string(leg.first_step));
    // Saved again at once, on this world size, it must be what was loaded
    // (the test process compares the two bit for bit).
    fsdp::save_sharded_checkpoint(shared / (*leg.load_from + "-again"), *fsdp, opt.get(),
                                  fsdp::checkpoint_metadata(from));
  }
  std::vector<double> losses;
  for (int s = leg.first_step; s < leg.first_step + kStepsPerLeg; ++s)
    losses.push_back(fsdp_step(*fsdp, *opt, *group, s));
  fsdp::save_sharded_checkpoint(shared / leg.save_to, *fsdp, opt.get(),
                                {{"step", std::to_string(leg.first_step + kStepsPerLeg)}});
  if (rank == 0) write_numbers(shared / ("losses-" + leg.save_to), losses);
}

// `a` and `b` hold the same tensors, bit for bit, and the same metadata.
void expect_same_checkpoint(const std::string& a, const std::string& b) {
  std::map<std::string, std::string> meta_a, meta_b;
  expect_bit_equal(checkpoint::consolidate(b, &meta_b), checkpoint::consolidate(a, &meta_a), b + " against " + a);
  EXPECT_EQ(meta_a, meta_b);
}

TEST(FSDPStateDict, ASaveOnFourRanksResumesOnTwoThenThreeThenOneProcess) {
  SharedDir shared("fsdp-relay");
  const std::vector<Leg> legs = {
      {4,
       ShardingStrategy::FullShard,
       {"transformer.h.0", "transformer.h.1", "transformer.h.2"},
       std::nullopt,
       "after-4",
       0},
      {2, ShardingStrategy::ShardGradOp, {}, "after-4", "after-2", kStepsPerLeg},
      {3, ShardingStrategy::FullShard, {"transformer.h.1"}, "after-2", "after-3", 2 * kStepsPerLeg},
  };
  for (const Leg& leg : legs)
    run_on_ranks(
        leg.world, [&](int rank) { run_leg(shared, leg, rank); }, slow_ranks());
  if (in_rank_process()) return;

  // The last leg: one process, the plain model.
  auto model = make_gpt(999);
  auto opt = make_adam(*model);
  fsdp::load_sharded_checkpoint(shared / "after-3", *model, opt.get());
  fsdp::save_sharded_checkpoint(shared / "after-3-again", *model, opt.get(),
                                fsdp::checkpoint_metadata(shared / "after-3"));
  std::vector<double> last_losses;
  for (int s = 3 * kStepsPerLeg; s < 4 * kStepsPerLeg; ++s) last_losses.push_back(plain_step(*model, *opt, s));

  // Each load, saved again on another world size, is bit for bit what was saved.
  for (const char* name : {"after-4", "after-2", "after-3"})
    expect_same_checkpoint(shared / name, shared / (std::string(name) + "-again"));
  // The checkpoint holds Adam's state by parameter name, and its step count.
  const TensorDict after_2 = checkpoint::consolidate(shared / "after-2");
  EXPECT_EQ(after_2.at("optimizer.state.transformer.wte.weight.step").item<double>(), 2.0 * kStepsPerLeg);
  EXPECT_EQ(after_2.at("optimizer.state.transformer.h.1.mlp.c_fc.weight.exp_avg").shape(), (Shape{64, 16}));
  EXPECT_FALSE(after_2.contains("model.lm_head.weight"));  // tied: saved once, under its first name
  EXPECT_EQ(checkpoint::read_index(shared / "after-3").world_size, 3);

  // The relay's losses are those of one process training straight through.
  auto reference = make_gpt(11);
  auto reference_opt = make_adam(*reference);
  std::vector<double> relay;
  for (const char* name : {"after-4", "after-2", "after-3"}) {
    const std::vector<double> leg = read_numbers(shared / ("losses-" + std::string(name)));
    ASSERT_EQ(leg.size(), static_cast<size_t>(kStepsPerLeg)) << name;
    relay.insert(relay.end(), leg.begin(), leg.end());
  }
  relay.insert(relay.end(), last_losses.begin(), last_losses.end());
  for (int s = 0; s < 4 * kStepsPerLeg; ++s) {
    const double expected = plain_step(*reference, *reference_opt, s);
    EXPECT_NEAR(relay[s], expected, 1e-10 * std::abs(expected)) << "step " << s;
  }
  const auto mine = model->parameters(), theirs = reference->parameters();
  for (size_t i = 0; i < mine.size(); ++i) EXPECT_LE(relative_difference(mine[i], theirs[i]), 1e-10) << i;
}

// ---- full state dicts -----------------------------------------------------------

TEST(FSDPStateDict, FullStateDictsLoadIntoAPlainModuleAndOptimizer) {
  run_on_ranks(
      3,
      [](int rank) {
        auto group = make_test_group("gloo", kTimeout);
        auto model = make_gpt(11);
        auto opt = make_adam(*model);
        auto fsdp = shard_by_block(model, group);
        for (int s = 0; s < 2; ++s) fsdp_step(*fsdp, *opt, *group, s);

        const TensorDict on_rank0 = fsdp::full_state_dict(*fsdp);
        const TensorDict everywhere = fsdp::full_state_dict(*fsdp, /*rank0_only=*/false);
        const TensorDict optimizer_on_rank0 = fsdp::full_optimizer_state_dict(*fsdp, *opt);
        const TensorDict optimizer_everywhere = fsdp::full_optimizer_state_dict(*fsdp, *opt, false);
        const std::vector<Tensor> gathered = full_parameters(*fsdp);
        EXPECT_EQ(on_rank0.empty(), rank != 0);
        EXPECT_EQ(optimizer_on_rank0.empty(), rank != 0);

        // A plain GPT of other weights takes the full state dict, tied keys and all.
        auto plain = make_gpt(77);
        EXPECT_EQ(everywhere.keys(), plain->state_dict().keys());
        EXPECT_TRUE(everywhere.contains("lm_head.weight"));
        plain->load_state_dict(everywhere);
        const auto plain_params = plain->parameters();
        ASSERT_EQ(plain_params.size(), gathered.size());
        for (size_t i = 0; i < gathered.size(); ++i) EXPECT_TRUE(bit_equal(plain_params[i], gathered[i])) << i;
        if (rank == 0) expect_bit_equal(on_rank0, everywhere, "rank 0's full state dict");
        if (rank == 0) expect_bit_equal(optimizer_on_rank0, optimizer_everywhere, "rank 0's optimizer state dict");

        // The plain Adam takes the full optimizer state: one more step of
        // each on the same batch leaves the same parameters.
        auto plain_opt = make_adam(*plain);
        plain_opt->load_state_dict(optimizer_everywhere);
        EXPECT_EQ(optimizer_everywhere.at("state.0.exp_avg").shape(), plain_params[0].shape());
        EXPECT_EQ(optimizer_everywhere.at("state.0.step").item<double>(), 2.0);
        plain_step(*plain, *plain_opt, 2);
        fsdp_step(*fsdp, *opt, *group, 2);
        const std::vector<Tensor> after = full_parameters(*fsdp);
        for (size_t i = 0; i < after.size(); ++i) EXPECT_LE(relative_difference(plain_params[i], after[i]), 1e-10) << i;
      },
      slow_ranks());
}

// A full state dict written with save_safetensors loads into PyTorch's twin
// of the GPT (scripts/gpt_torch.py), which then computes Kiln's logits.
TEST(FSDPStateDict, AFullStateDictLoadsInPyTorch) {
  if (!torch_available()) GTEST_SKIP() << "no torch for /usr/bin/python3";
  SharedDir shared("fsdp-torch");
  run_on_ranks(
      2,
      [&](int rank) {
        auto group = make_test_group("gloo", kTimeout);
        auto model = make_gpt(11);
        auto opt = make_adam(*model);
        auto fsdp = shard_by_block(model, group);
        for (int s = 0; s < 2; ++s) fsdp_step(*fsdp, *opt, *group, s);
        const TensorDict full = fsdp::full_state_dict(*fsdp);
        if (rank == 0) save_safetensors(shared / "full.safetensors", full);
      },
      slow_ranks());
  if (in_rank_process()) return;

  auto plain = make_gpt(77);
  plain->load_state_dict(load_safetensors(shared / "full.safetensors"));
  const Tensor tokens = gpt_batch(5).first;
  save_safetensors(shared / "tokens.safetensors", {{"x", tokens}});
  const std::string script =
      std::string("import sys\nsys.path.insert(0, '") + KILN_SOURCE_DIR + "/scripts')\n" +
      "try:\n    from safetensors.torch import load_file\n"
      "except ImportError:\n    from safetensors_torch import load_file\n"
      "import torch, safetensors_torch\n"
      "from gpt_torch import GPT, GPTConfig\n"
      "model = GPT(GPTConfig(vocab_size=29, block_size=8, n_layer=3, n_head=2, n_embd=16)).double()\n"
      "model.load_state_dict(load_file('" +
      shared / "full.safetensors" +
      "'), strict=True)\n"
      "logits, _ = model(load_file('" +
      shared / "tokens.safetensors" +
      "')['x'])\n"
      "safetensors_torch.save_file({'logits': logits.detach()}, '" +
      shared / "logits.safetensors" +
      "')\n"
      "print('loaded', len(model.state_dict()))\n";
  const std::optional<std::string> printed = run_python(script);
  ASSERT_TRUE(printed.has_value());
  EXPECT_NE(printed->find("loaded"), std::string::npos) << *printed;
  const Tensor torch_logits = load_safetensors(shared / "logits.safetensors").at("logits");
  EXPECT_LE(relative_difference(plain->forward(tokens), torch_logits), 1e-12);
}

// ---- replicas, strategies, one process ------------------------------------------------

// Under HYBRID_SHARD and NO_SHARD the ranks of other replica groups hold
// copies: only the first group's ranks write, so each element is saved once.
TEST(FSDPStateDict, ReplicasWriteNothingTwice) {
  SharedDir shared("fsdp-replicas");
  for (auto [world, strategy, shard] :
       {std::tuple{4, ShardingStrategy::HybridShard, 2}, std::tuple{2, ShardingStrategy::NoShard, 0}}) {
    const std::string dir = shared / fsdp::sharding_strategy_name(strategy);
    run_on_ranks(
        world,
        [&, strategy = strategy, shard = shard](int rank) {
          auto group = make_test_group("gloo", kTimeout);
          auto model = make_gpt(11);
          auto opt = make_adam(*model);
          FSDPOptions options;
          options.group = group;
          options.strategy = strategy;
          options.hybrid_shard_size = shard;
          options.wrap_policy = fsdp::wrap_by_class<nn::gpt::Block>();
          auto fsdp = std::make_shared<FullyShardedDataParallel>(model, options);
          fsdp_step(*fsdp, *opt, *group, 0);
          fsdp::save_sharded_checkpoint(dir, *fsdp, opt.get());
          const TensorDict full = fsdp::full_state_dict(*fsdp, false);
          const TensorDict consolidated = checkpoint::consolidate(dir);
          for (const auto& [name, t] : fsdp->module().named_parameters())
            EXPECT_TRUE(bit_equal(consolidated.at("model." + name), full.at(name))) << name;
          // Every piece of a parameter comes from the first replica group.
          const int writers = strategy == ShardingStrategy::NoShard ? 1 : shard;
          for (const auto& t : checkpoint::read_index(dir).tensors)
            for (const auto& p : t.pieces) EXPECT_LT(p.rank, writers) << t.name;
          (void)rank;
        },
        slow_ranks());
  }
}

// A module in one process: saved and loaded whole, bit for bit; and each way
// a checkpoint can disagree with the model or optimizer is an error.
TEST(FSDPStateDict, OneProcessRoundTripAndMismatches) {
  SharedDir shared("fsdp-one-process");
  const std::string dir = shared / "ckpt";
  auto model = make_gpt(11);
  auto opt = make_adam(*model);
  for (int s = 0; s < 2; ++s) plain_step(*model, *opt, s);
  fsdp::save_sharded_checkpoint(dir, *model, opt.get(), {{"step", "2"}});
  EXPECT_EQ(fsdp::checkpoint_metadata(dir), (std::map<std::string, std::string>{{"step", "2"}}));

  auto copy = make_gpt(12);
  auto copy_opt = make_adam(*copy);
  fsdp::load_sharded_checkpoint(dir, *copy, copy_opt.get());
  expect_bit_equal(copy->state_dict(), model->state_dict(), "the model loaded");
  expect_bit_equal(copy_opt->state_dict(), opt->state_dict(), "the optimizer loaded");
  plain_step(*model, *opt, 2);
  plain_step(*copy, *copy_opt, 2);
  expect_bit_equal(copy->state_dict(), model->state_dict(), "a step later");

  const std::string at = "load_sharded_checkpoint: '" + dir + "': ";
  optim::SGDOptions sgd_options(0.1);
  optim::SGD sgd(copy->parameters(), sgd_options);
  expect_checkpoint_error([&] { fsdp::load_sharded_checkpoint(dir, *copy, &sgd); },
                          {at + "the checkpoint holds the state of Adam, not of SGD"});
  optim::Adam one_group(copy->parameters(), optim::AdamOptions());
  expect_checkpoint_error([&] { fsdp::load_sharded_checkpoint(dir, *copy, &one_group); },
                          {at + "the checkpoint's Adam has 2 param groups but this one has 1"});
  auto groups = optim::weight_decay_groups(copy->parameters(), 0.05);
  std::swap(groups[0], groups[1]);
  optim::Adam swapped(groups, optim::AdamOptions());
  expect_checkpoint_error(
      [&] { fsdp::load_sharded_checkpoint(dir, *copy, &swapped); },
      {at + "parameter '", "' is in param group 0 of the optimizer but in group 1 of the checkpoint"});
  auto fewer = optim::weight_decay_groups(copy->parameters(), 0.05);
  fewer[1].params.pop_back();
  optim::Adam partial(fewer, optim::AdamOptions());
  expect_checkpoint_error([&] { fsdp::load_sharded_checkpoint(dir, *copy, &partial); },
                          {at + "the checkpoint's optimizer steps parameter 'transformer.ln_f.bias'"});
  auto stranger = std::make_shared<nn::Linear>(3, 3);
  optim::Adam foreign(stranger->parameters(), optim::AdamOptions());
  expect_checkpoint_error([&] { fsdp::save_sharded_checkpoint(shared / "x", *copy, &foreign); },
                          {"save_sharded_checkpoint: Adam's parameter 0 (group 0, shape [3, 3]) is not a parameter of "
                           "the module"});
  expect_checkpoint_error(
      [&] {
        fsdp::save_sharded_checkpoint(shared / "x", *copy, opt.get(), {{"optimizer", "mine"}});
      },
      {"save_sharded_checkpoint: metadata key 'optimizer' is reserved"});

  nn::GPTConfig wider = tiny_gpt();
  wider.n_embd = 32;
  nn::GPT other(wider);
  expect_checkpoint_error([&] { fsdp::load_sharded_checkpoint(dir, other, nullptr); },
                          {"load_pieces: '" + dir +
                           "': tensor 'model.transformer.wte.weight' has shape [29, 16] in the "
                           "checkpoint, but the caller expects [29, 32]"});
  const std::string model_only = shared / "model-only";
  fsdp::save_sharded_checkpoint(model_only, *copy, nullptr);
  expect_checkpoint_error([&] { fsdp::load_sharded_checkpoint(model_only, *copy, copy_opt.get()); },
                          {"load_sharded_checkpoint: '" + model_only + "': the checkpoint holds no optimizer state"});
  fsdp::load_sharded_checkpoint(model_only, *copy, nullptr);
}

// Persistent buffers are saved (once, whole) and loaded; others are not.
class Scaled : public nn::Module {
 public:
  Scaled() {
    fc = register_module("fc", std::make_shared<nn::Linear>(4, 3));
    register_buffer("scale", full({3}, 2.0));
    register_buffer("scratch", zeros({5}), /*persistent=*/false);
    to(DType::Float64);
  }
  Tensor forward(const Tensor& x) override { return (*fc)(x)*get_buffer("scale"); }
  std::shared_ptr<nn::Linear> fc;
};

TEST(FSDPStateDict, PersistentBuffersAreSavedAndLoaded) {
  SharedDir shared("fsdp-buffers");
  const std::string dir = shared / "ckpt";
  run_on_ranks(
      2,
      [&](int) {
        auto group = make_test_group("gloo", kTimeout);
        manual_seed(3);
        auto model = std::make_shared<Scaled>();
        Tensor scale = model->get_buffer("scale");
        ops::fill_(scale, 3.5);
        FSDPOptions options;
        options.group = group;
        auto fsdp = std::make_shared<FullyShardedDataParallel>(model, options);
        fsdp::save_sharded_checkpoint(dir, *fsdp, nullptr);
        const TensorDict full = fsdp::full_state_dict(*fsdp, false);
        EXPECT_EQ(full.keys(), (std::vector<std::string>{"scale", "fc.weight", "fc.bias"}));
      },
      slow_ranks());
  if (in_rank_process()) return;
  EXPECT_EQ(checkpoint::consolidate(dir).keys(),
            (std::vector<std::string>{"model.fc.weight", "model.fc.bias", "model.scale"}));
  manual_seed(4);
  Scaled plain;
  fsdp::load_sharded_checkpoint(dir, plain, nullptr);
  EXPECT_EQ(plain.get_buffer("scale").at<double>({2}), 3.5);
  manual_seed(3);
  Scaled original;
  EXPECT_TRUE(bit_equal(plain.fc->weight, original.fc->weight));
}

#ifdef KILN_WITH_CUDA
// A model and its Adam state on the GPU save as they would on the CPU, and
// a checkpoint loads onto either device.
TEST(FSDPStateDict, AModelOnTheGpuSavesAndLoadsAsOnTheCpu) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device on this machine (cuda::device_count() == 0)";
  SharedDir shared("fsdp-gpu");
  const Device gpu = cuda_device(0);
  auto on_gpu = make_gpt(11);
  on_gpu->to(gpu);
  auto gpu_opt = make_adam(*on_gpu);
  auto [x, y] = gpt_batch(0);
  gpu_opt->zero_grad();
  nn::GPT::loss_from_logits(on_gpu->forward(x.to(gpu)), y.to(gpu)).backward();
  gpu_opt->step();
  fsdp::save_sharded_checkpoint(shared / "from-gpu", *on_gpu, gpu_opt.get());

  auto on_cpu = make_gpt(12);
  auto cpu_opt = make_adam(*on_cpu);
  fsdp::load_sharded_checkpoint(shared / "from-gpu", *on_cpu, cpu_opt.get());
  expect_bit_equal(on_cpu->state_dict(), on_gpu->state_dict(), "GPU model loaded on the CPU");
  expect_bit_equal(cpu_opt->state_dict(), gpu_opt->state_dict(), "GPU optimizer loaded on the CPU");

  auto back = make_gpt(13);
  back->to(gpu);
  auto back_opt = make_adam(*back);
  fsdp::load_sharded_checkpoint(shared / "from-gpu", *back, back_opt.get());
  EXPECT_EQ(back->parameters()[0].device(), gpu);
  expect_bit_equal(back->state_dict(), on_gpu->state_dict(), "loaded back onto the GPU");
}
#endif

}  // namespace
}  // namespace kiln::distributed::testing

#endif  // KILN_WITH_GLOO
