// The GPT workloads of bench/gpt_vs_pytorch.sh, Kiln's side; bench/gpt_torch.py
// is PyTorch's, with the same model, data and optimizer:
// - training: nn::GPT (bias off, dropout 0, tied LM head) on random token
//   windows (vocab 65, fixed seed), AdamW (lr 6e-4, betas (0.9, 0.95),
//   weight decay 0.1 on the 2-d weights only), float32; a few warm-up steps,
//   then `steps` timed steps:
//     gpt_train threads=2 tok_s=..
// - generation (--generate): B prompts of one token grown to block_size
//   tokens one at a time, greedy, with the KV cache (GPT::generate), timed
//   `repeats` times after one warm-up:
//     gpt_generate threads=2 tok_s=..
// Configs: small (4 layers, 4 heads, width 128, block 128, batch 32) and
// baby (nanoGPT's Shakespeare-char: 6, 6, 384, 256, batch 64).
//
// Usage: build/bench/gpt [--config small|baby] [--generate] [--threads T] [--steps N]
//                        [--repeats N] [--batch B] [--device cpu|cuda]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bench/gpt_configs.h"
#include "kiln.h"
#include "nn/models/gpt.h"

namespace {

using Clock = std::chrono::steady_clock;
using kiln::Tensor;
using kiln::bench::kVocab;
using Config = kiln::bench::GPTBenchConfig;

constexpr int kWarmupSteps = 3;

struct Options {
  std::string config = "small";
  bool generate = false;
  int threads = 0;
  int steps = 20;
  int repeats = 3;
  int64_t batch = 0;
  kiln::Device device = kiln::kCPU;
};

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--config" && has_value) {
      options.config = argv[++i];
    } else if (arg == "--generate") {
      options.generate = true;
    } else if (arg == "--threads" && has_value) {
      options.threads = std::atoi(argv[++i]);
    } else if (arg == "--steps" && has_value) {
      options.steps = std::atoi(argv[++i]);
    } else if (arg == "--repeats" && has_value) {
      options.repeats = std::atoi(argv[++i]);
    } else if (arg == "--batch" && has_value) {
      options.batch = std::atoll(argv[++i]);
    } else if (arg == "--device" && has_value) {
      options.device = kiln::Device(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: gpt [--config small|baby] [--generate] [--threads T] [--steps N] [--repeats N] "
                   "[--batch B] [--device cpu|cuda]\n");
      std::exit(2);
    }
  }
  return options;
}

// Waits for the device: a value copied to the host is ready only when every
// kernel queued before it has run.
void finish(const Tensor& last) { (void)last.to(kiln::kCPU); }

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void train(const Options& options, const Config& config) {
  kiln::manual_seed(0);
  auto model = std::make_shared<kiln::nn::GPT>(config.model);
  model->to(options.device);
  kiln::optim::AdamW optimizer(kiln::optim::weight_decay_groups(model->parameters(), 0.1),
                               kiln::optim::AdamWOptions(6e-4).beta1(0.9).beta2(0.95));
  const int64_t block = config.model.block_size;
  kiln::Generator gen(1);
  const Tensor data = kiln::randint(0, kVocab, {options.steps + kWarmupSteps, config.batch, block + 1},
                                    kiln::TensorOptions(kiln::DType::Int64), &gen);

  auto step = [&](int64_t i) {
    const Tensor xy = data.select(0, i).to(options.device);
    Tensor loss = model->loss(xy.narrow(1, 0, block), xy.narrow(1, 1, block));
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    return loss.detach();
  };
  for (int i = 0; i + 1 < kWarmupSteps; ++i) step(i);
  finish(step(kWarmupSteps - 1));
  const auto start = Clock::now();
  Tensor loss;
  for (int i = 0; i < options.steps; ++i) loss = step(kWarmupSteps + i);
  finish(loss);
  const double tokens = static_cast<double>(options.steps) * config.batch * block;
  std::printf("gpt_train threads=%d tok_s=%.0f\n", kiln::get_num_threads(), tokens / seconds_since(start));
}

void generate(const Options& options, const Config& config) {
  kiln::manual_seed(0);
  auto model = std::make_shared<kiln::nn::GPT>(config.model);
  model->to(options.device);
  model->eval();
  const Tensor prompt = kiln::zeros({config.batch, 1}, kiln::TensorOptions(kiln::DType::Int64, options.device));
  const int64_t new_tokens = config.model.block_size - 1;
  const kiln::nn::GenerateOptions greedy{.temperature = 0.0, .use_kv_cache = true};
  finish(model->generate(prompt, new_tokens, greedy));  // warm-up
  const auto start = Clock::now();
  Tensor tokens_out;
  for (int r = 0; r < options.repeats; ++r) tokens_out = model->generate(prompt, new_tokens, greedy);
  finish(tokens_out);
  const double tokens = static_cast<double>(options.repeats) * config.batch * new_tokens;
  std::printf("gpt_generate threads=%d tok_s=%.0f\n", kiln::get_num_threads(), tokens / seconds_since(start));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options options = parse(argc, argv);
    if (options.threads > 0) kiln::set_num_threads(options.threads);
    Config config = kiln::bench::gpt_config_named(options.config, "gpt");
    if (options.batch > 0) config.batch = options.batch;
    if (options.generate) {
      generate(options, config);
    } else {
      train(options, config);
    }
    std::fflush(stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt: %s\n", e.what());
    return 1;
  }
}
