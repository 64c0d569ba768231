// kiln-gpt's flags, through CLI11. Range checks live in validate() rather
// than in CLI11 validators so that the library API (run_training,
// run_sampling) applies the same checks to options built in code.
#include "apps/gpt/options.h"

#include <cmath>
#include <numbers>

#include "apps/common/cli.h"
#include "apps/common/data_parallel_run.h"
#include "apps/common/pipeline_training.h"
#include "apps/common/run_setup.h"
#include "apps/common/sharded_training.h"
#include "tensor/error.h"

namespace kiln::apps::gpt {

namespace {

// No run comes near it; above it steps x tokens per step could overflow int64.
constexpr int64_t kMaxSteps = 1'000'000'000;

bool finite_at_least(double v, double lo) { return std::isfinite(v) && v >= lo; }

}  // namespace

void validate(const TrainOptions& o) {
  KILN_CHECK(o.tokenizer == "char" || o.tokenizer == "bpe", "--tokenizer: unknown tokenizer '", o.tokenizer,
             "' (expected char or bpe)");
  KILN_CHECK(o.vocab_size >= 256 && o.vocab_size <= (int64_t{1} << 20),
             "--vocab-size must be from 256 (the bytes) to 1048576, got ", o.vocab_size);
  KILN_CHECK(o.tokenizer == "bpe" || o.vocab_size == TrainOptions{}.vocab_size,
             "--vocab-size only goes with --tokenizer bpe (the char tokenizer's vocabulary is the corpus's "
             "characters)");
  KILN_CHECK(o.n_layer >= 1, "--layers must be at least 1, got ", o.n_layer);
  KILN_CHECK(o.n_head >= 1, "--heads must be at least 1, got ", o.n_head);
  KILN_CHECK(o.n_embd >= 1 && o.n_embd % o.n_head == 0, "--width must be a positive multiple of --heads (", o.n_head,
             "), got ", o.n_embd);
  KILN_CHECK(o.block_size >= 1, "--block-size must be at least 1, got ", o.block_size);
  KILN_CHECK(o.dropout >= 0 && o.dropout < 1, "--dropout must be in [0, 1), got ", o.dropout);
  KILN_CHECK(o.batch_size >= 1, "--batch-size must be at least 1, got ", o.batch_size);
  KILN_CHECK(o.steps >= 1 && o.steps <= kMaxSteps, "--steps must be from 1 to ", kMaxSteps, ", got ", o.steps);
  KILN_CHECK(finite_at_least(o.lr, 0) && o.lr > 0, "--lr must be positive and finite, got ", o.lr);
  KILN_CHECK(finite_at_least(o.min_lr, 0) && o.min_lr <= o.lr, "--min-lr must be in [0, --lr = ", o.lr, "], got ",
             o.min_lr);
  KILN_CHECK(o.warmup_steps >= 0 && o.warmup_steps <= o.steps, "--warmup-steps must be from 0 to --steps (", o.steps,
             "), got ", o.warmup_steps);
  KILN_CHECK(finite_at_least(o.weight_decay, 0), "--weight-decay must be non-negative and finite, got ",
             o.weight_decay);
  KILN_CHECK(o.beta1 >= 0 && o.beta1 < 1, "--beta1 must be in [0, 1), got ", o.beta1);
  KILN_CHECK(o.beta2 >= 0 && o.beta2 < 1, "--beta2 must be in [0, 1), got ", o.beta2);
  KILN_CHECK(finite_at_least(o.grad_clip, 0), "--grad-clip must be non-negative and finite (0: no clipping), got ",
             o.grad_clip);
  KILN_CHECK(o.eval_interval >= 1, "--eval-interval must be at least 1, got ", o.eval_interval);
  KILN_CHECK(o.eval_batches >= 1, "--eval-batches must be at least 1, got ", o.eval_batches);
  KILN_CHECK(o.threads >= 0, "--threads must be non-negative (0: all cores), got ", o.threads);
  check_device_flag(o.device);
  KILN_CHECK(!(o.ddp && o.fsdp),
             "--ddp and --fsdp exclude each other: DDP keeps the whole model on every "
             "process, FSDP shards it over them; give one");
  check_fsdp_flags(o.fsdp, o.fsdp_strategy, o.amp, o.device);
  KILN_CHECK(!o.fsdp_cpu_offload || (o.fsdp && o.device.starts_with("cuda")),
             "--fsdp-cpu-offload only goes with --fsdp on a CUDA --device (the shards move to host memory and each "
             "unit is gathered onto the GPU), got ", o.fsdp ? "" : "no --fsdp and ", "--device ", o.device);
  check_pipeline_flags(pipeline_flags(o), "--schedule", o.batch_size);
  if (o.pp > 0) {
    for (const auto& [flag, given] : {std::pair{"--ddp", o.ddp}, std::pair{"--fsdp", o.fsdp}}) {
      KILN_CHECK(!given, "--pp and ", flag, " exclude each other for now: a pipeline stage is not replicated or "
                 "sharded over a data-parallel group yet; give one");
    }
    for (const auto& [flag, path] : {std::pair{"--save", o.save}, std::pair{"--resume", o.resume}}) {
      KILN_CHECK(path.empty(), "--pp with ", flag, " is not supported yet: kiln-gpt does not write or read the "
                 "checkpoints of a model cut into pipeline stages");
    }
    KILN_CHECK(!o.amp, "--pp with --amp is not supported yet: the pipeline runs its stages in float32");
    KILN_CHECK(o.device == "cpu", "--pp runs on the CPU only for now (stages exchange activations over gloo), got "
               "--device ", o.device);
  }
  check_process_group_flags({.backend = o.backend, .timeout = o.timeout, .heartbeat_timeout = o.heartbeat_timeout},
                            o.ddp || o.fsdp || o.pp > 0);
}

PipelineFlags pipeline_flags(const TrainOptions& o) {
  return {.pp = o.pp, .schedule = o.pp_schedule, .micro_batches = o.micro_batches,
          .virtual_stages = o.virtual_stages};
}

double learning_rate(const TrainOptions& o, int64_t step) {
  if (step < o.warmup_steps) {
    return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps + 1);
  }
  if (step >= o.steps || o.steps == o.warmup_steps) return o.min_lr;
  const double decay = static_cast<double>(step - o.warmup_steps) / static_cast<double>(o.steps - o.warmup_steps);
  const double coefficient = 0.5 * (1.0 + std::cos(std::numbers::pi * decay));
  return o.min_lr + coefficient * (o.lr - o.min_lr);
}

void validate(const SampleOptions& o) {
  KILN_CHECK(!o.checkpoint.empty(), "--checkpoint must name a kiln-gpt checkpoint (kiln-gpt train --save FILE)");
  KILN_CHECK(!o.prompt.empty(), "--prompt must hold at least one character");
  KILN_CHECK(o.max_new_tokens >= 0, "--max-new-tokens must be non-negative, got ", o.max_new_tokens);
  KILN_CHECK(finite_at_least(o.temperature, 0), "--temperature must be non-negative and finite (0: greedy), got ",
             o.temperature);
  KILN_CHECK(o.top_k >= 0, "--top-k must be non-negative (0: every token), got ", o.top_k);
  KILN_CHECK(o.num_samples >= 1, "--num-samples must be at least 1, got ", o.num_samples);
  KILN_CHECK(o.threads >= 0, "--threads must be non-negative (0: all cores), got ", o.threads);
  check_device_flag(o.device);
}

namespace {

void add_train_flags(CLI::App& app, TrainOptions& o) {
  app.add_option("--data", o.data,
                 "a UTF-8 text file to train on (default: the fortunes corpus, "
                 "/usr/share/games/fortunes, from the Debian packages fortunes and fortunes-min)");
  app.add_option("--tokenizer", o.tokenizer,
                 "char (one token per character of the text) or bpe (byte-level BPE learned from the text)")
      ->capture_default_str();
  add_integer(app, "--vocab-size", o.vocab_size, "with --tokenizer bpe: 256 bytes + the merges to learn");
  add_integer(app, "--layers", o.n_layer, "transformer blocks");
  add_integer(app, "--heads", o.n_head, "attention heads per block");
  add_integer(app, "--width", o.n_embd, "embedding width (a multiple of --heads)");
  add_integer(app, "--block-size", o.block_size, "context length in tokens");
  app.add_option("--dropout", o.dropout, "dropout on embeddings, attention and residual branches")
      ->capture_default_str();
  app.add_flag("--bias,!--no-bias", o.bias, "biases in the Linear and LayerNorm layers (default on)");
  add_integer(app, "--batch-size", o.batch_size, "sequences per step");
  add_integer(app, "--steps", o.steps, "optimizer steps");
  app.add_option("--lr", o.lr, "peak learning rate (AdamW)")->capture_default_str();
  app.add_option("--min-lr", o.min_lr, "learning rate at the last step, after the cosine decay")->capture_default_str();
  add_integer(app, "--warmup-steps", o.warmup_steps, "steps of linear warmup to --lr");
  app.add_option("--weight-decay", o.weight_decay, "AdamW's decoupled decay of the weight matrices and embeddings")
      ->capture_default_str();
  app.add_option("--beta1", o.beta1, "AdamW's beta1")->capture_default_str();
  app.add_option("--beta2", o.beta2, "AdamW's beta2")->capture_default_str();
  app.add_option("--grad-clip", o.grad_clip, "clip the gradients' total norm to this (0: no clipping)")
      ->capture_default_str();
  add_integer(app, "--eval-interval", o.eval_interval, "steps between evaluations (and checkpoints)");
  add_integer(app, "--eval-batches", o.eval_batches, "batches of each split an evaluation averages");
  add_integer(app, "--seed", o.seed, "seeds the initial weights, the batches and dropout");
  add_integer(app, "--threads", o.threads, "threads of the CPU kernels (0: all cores)");
  app.add_option("--device", o.device, "cpu or cuda (cuda:N)")->capture_default_str();
  app.add_flag("--amp", o.amp,
               "mixed precision: matrix products in bfloat16 on the CPU, in float16 with dynamic loss scaling on "
               "CUDA; parameters and updates stay float32");
  app.add_option("--save", o.save,
                 "write a training checkpoint (model, optimizer, step, random state, tokenizer) to FILE at every "
                 "evaluation and on Ctrl-C (then exit with code 130)");
  app.add_option("--resume", o.resume, "continue the run saved in checkpoint FILE, with the same flags");
  app.add_option("--log", o.log, "write one JSON object per evaluation to FILE.jsonl (--resume appends)");
  app.add_option("--plot", o.plot, "write an SVG chart of the train and validation loss to FILE.svg");
  add_data_parallel_flags(app, {o.ddp, o.fsdp, o.fsdp_strategy, o.backend}, "kiln-gpt train");
  app.add_flag("--fsdp-cpu-offload", o.fsdp_cpu_offload,
               "with --fsdp on a CUDA --device: keep the shards, their gradients and AdamW's state in host memory "
               "and gather each unit onto the GPU to compute");
  add_integer(app, "--pp", o.pp,
              "pipeline parallelism over N processes (kiln-run --nproc-per-node N kiln-gpt train --pp N): the GPT "
              "cut into N stages by blocks, one per process; --batch-size is the whole batch, which every process "
              "reads; no --save, --resume, --amp, CUDA, --ddp or --fsdp yet (0: no pipeline)");
  add_pipeline_flags(app, {o.pp_schedule, o.micro_batches, o.virtual_stages}, "--schedule");
  app.add_option("--timeout", o.timeout,
                 "with --ddp, --fsdp or --pp: seconds the rendezvous and each collective may take (0: "
                 "KILN_DISTRIBUTED_TIMEOUT, else 300)")
      ->type_name("SECONDS");
  app.add_option("--heartbeat-timeout", o.heartbeat_timeout,
                 "with --ddp, --fsdp or --pp: seconds a silent peer is waited for before it is named (0: "
                 "KILN_HEARTBEAT_TIMEOUT, else 10)")
      ->type_name("SECONDS");
}

void add_sample_flags(CLI::App& app, SampleOptions& o) {
  app.add_option("--checkpoint", o.checkpoint, "a checkpoint of kiln-gpt train --save")->required();
  app.add_option("--prompt", o.prompt, "the text to continue (default: a newline)");
  add_integer(app, "--max-new-tokens", o.max_new_tokens, "tokens to generate per sample");
  app.add_option("--temperature", o.temperature, "divides the logits; below 1 is more conservative, 0 is greedy")
      ->capture_default_str();
  add_integer(app, "--top-k", o.top_k, "sample among the k most likely tokens only (0: all)");
  add_integer(app, "--num-samples", o.num_samples, "samples to print, one after another");
  add_integer(app, "--seed", o.seed, "seeds the sampling: the same seed prints the same text");
  app.add_option("--device", o.device, "cpu or cuda (cuda:N)")->capture_default_str();
  add_integer(app, "--threads", o.threads, "threads of the CPU kernels (0: all cores)");
}

}  // namespace

CommandLine parse_command_line(int argc, const char* const* argv) {
  TrainOptions train;
  SampleOptions sample;
  CLI::App app{
      "Trains a GPT on text and samples from it, as nanoGPT. `kiln-gpt train` with no flags runs the "
      "default recipe: a character-level GPT on the fortunes corpus, a few minutes on two CPU cores."};
  app.get_formatter()->column_width(34);
  app.require_subcommand(1);
  CLI::App* train_app = app.add_subcommand(
      "train", "train a GPT; the defaults are the recommended recipe (kiln-gpt train --help lists them)");
  CLI::App* sample_app = app.add_subcommand("sample", "print text a trained GPT generates from a prompt");
  add_train_flags(*train_app, train);
  add_sample_flags(*sample_app, sample);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return {std::nullopt, std::nullopt, app.exit(e)};
  }
  if (train_app->parsed()) {
    validate(train);
    return {train, std::nullopt, 0};
  }
  validate(sample);
  return {std::nullopt, sample, 0};
}

CommandLine parse_command_line(const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return parse_command_line(static_cast<int>(argv.size()), argv.data());
}

}  // namespace kiln::apps::gpt
