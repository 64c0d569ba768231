// run_training: the step loop of `kiln-gpt train`, its evaluations and
// checkpoints (Note [Exact resume of kiln-gpt]) and its Ctrl-C handling.
#include "apps/gpt/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "apps/common/checkpoint_fields.h"
#include "apps/common/data_parallel_run.h"
#include "apps/common/jsonl.h"
#include "apps/common/pipeline_training.h"
#include "apps/common/progress.h"
#include "apps/common/run_setup.h"
#include "apps/common/sharded_training.h"
#include "apps/gpt/text_data.h"
#include "autograd/autocast.h"
#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/ddp/training_helpers.h"
#include "distributed/fsdp/fully_sharded_data_parallel.h"
#include "kiln.h"
#include "nn/models/gpt_stages.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/grad_scaler.h"
#include "optim/training_checkpoint.h"

namespace kiln::apps::gpt {

namespace {

using Clock = std::chrono::steady_clock;
namespace pp = distributed::pipeline;

// Every setting that shapes the trajectory: a checkpoint must have been made
// with the same (the evaluation settings, threads and device may differ).
// The batch is the global one (Note [kiln-gpt across processes]).
std::string recipe(const TrainOptions& o, int world_size) {
  return "tokenizer " + o.tokenizer + (o.tokenizer == "bpe" ? " vocab " + std::to_string(o.vocab_size) : "") + ", " +
         std::to_string(o.n_layer) + " layers, " + std::to_string(o.n_head) + " heads, width " +
         std::to_string(o.n_embd) + ", block " + std::to_string(o.block_size) + ", dropout " + exact_text(o.dropout) +
         ", bias " + (o.bias ? "on" : "off") + ", batch " + std::to_string(o.batch_size * world_size) + ", steps " +
         std::to_string(o.steps) + ", AdamW lr " + exact_text(o.lr) + " min lr " + exact_text(o.min_lr) + " warmup " +
         std::to_string(o.warmup_steps) + " weight decay " + exact_text(o.weight_decay) + " betas " +
         exact_text(o.beta1) + " " + exact_text(o.beta2) + ", grad clip " + exact_text(o.grad_clip) + ", seed " +
         std::to_string(o.seed) + (o.amp ? ", amp" : "");
}

nn::GPTConfig model_config(const TrainOptions& o, int64_t vocab_size) {
  return {.vocab_size = vocab_size,
          .block_size = o.block_size,
          .n_layer = o.n_layer,
          .n_head = o.n_head,
          .n_embd = o.n_embd,
          .dropout = o.dropout,
          .bias = o.bias};
}

// Where a run is, beside the tensors of its checkpoint.
struct Position {
  int64_t step = 0;  // optimizer steps taken
  std::vector<EvalRecord> history = {};
  int64_t loss_steps = 0;  // training steps since the last evaluation (their loss sum: Run::loss_sum)
};

// A checkpoint's metadata holds the extra strings under this prefix (optim/training_checkpoint.h).
constexpr const char* kExtraPrefix = "extra.";

// The extra strings among a checkpoint's metadata.
std::map<std::string, std::string> extra_strings(const std::map<std::string, std::string>& metadata) {
  std::map<std::string, std::string> extra;
  const std::string prefix = kExtraPrefix;
  for (const auto& [key, value] : metadata) {
    if (key.starts_with(prefix)) extra[key.substr(prefix.size())] = value;
  }
  return extra;
}

// Everything a run holds, set up step by step by the helpers below and used
// by run_training's step loop.
struct Run {
  Run(const TrainOptions& options, const TrainerHooks& hooks);

  const TrainOptions& o;
  const Clock::time_point start = Clock::now();
  DataParallelRun dp;
  DiscardingStream silent;
  std::ostream* out;  // rank 0: hooks.out; the others: silent
  std::ostream* err;
  std::ostream* rank_out;  // hooks.out on every rank: the memory lines
  bool interactive;
  std::function<bool(int64_t)> should_stop;
  Device device;
  DType amp_dtype;
  optim::GradScaler scaler;  // a disabled scaler (all but CUDA --amp) passes everything through

  Corpus corpus;
  TextData data;
  std::string tokenizer_text;  // its file, as the checkpoint stores it
  std::shared_ptr<nn::GPT> model;  // under FSDP, between steps, it holds this rank's shards; null under --pp
  int64_t parameters = 0;          // counted before FSDP shards them
  std::unique_ptr<optim::AdamW> optimizer;
  // What the training steps call: the model, or DDP or FSDP around it.
  std::shared_ptr<distributed::DistributedDataParallel> ddp;
  std::shared_ptr<distributed::fsdp::FullyShardedDataParallel> fsdp;
  nn::Module* trained = nullptr;
  // --pp (Note [Trainers under pipeline parallelism]): this rank's stages,
  // a Sequential holding them (for the train/eval mode and the memory
  // lines), the pipelines that train and evaluate them and the blocks of
  // each stage. The optimizer is null on a rank whose stages hold no parameters.
  std::map<int, std::shared_ptr<nn::Module>> stages;
  std::shared_ptr<nn::Sequential> held;
  std::unique_ptr<pp::Pipeline> pipe;
  std::unique_ptr<pp::Pipeline> eval_pipe;
  std::vector<int64_t> blocks_per_stage;

  Position pos;
  RunningLossSum loss_sum;    // of the training losses since the last evaluation
  double elapsed_before = 0;  // the wall time of the run a resume continues
  // Training since the last evaluation, for its tokens per second.
  int64_t stretch_tokens = 0;
  double stretch_seconds = 0;

  double elapsed() const { return elapsed_before + std::chrono::duration<double>(Clock::now() - start).count(); }
  // The processes a batch is shared by: under --pp every rank reads the whole batch.
  int data_world() const { return o.pp > 0 ? 1 : dp.world_size; }
  // This rank's rows of a batch of n windows: [r n / N, (r + 1) n / N)
  // (Note [kiln-gpt across processes]).
  std::pair<int64_t, int64_t> my_rows(int64_t n) const {
    return {dp.rank * n / dp.world_size, (dp.rank + 1) * n / dp.world_size};
  }
  // The running loss sum since the last evaluation, averaged over the ranks
  // (a collective under --ddp and --fsdp; under --pp every rank holds the same).
  double mean_loss_sum() const {
    if (!dp.group || o.pp > 0) return loss_sum.read();
    std::vector<double> sum = {loss_sum.read()};
    distributed::all_reduce_sum(sum, *dp.group);
    return sum[0] / static_cast<double>(dp.world_size);
  }
  std::map<std::string, std::string> extra() const {
    const nn::GPTConfig& c = model->config;
    return {{"recipe", recipe(o, data_world())},
            {"tokenizer", tokenizer_text},
            {"text_hash", std::to_string(corpus.hash)},
            {"text_bytes", std::to_string(corpus.text.size())},
            {"history", history_to_json(pos.history)},
            {"loss_sum", exact_text(mean_loss_sum())},
            {"loss_steps", std::to_string(pos.loss_steps)},
            {"elapsed_seconds", exact_text(elapsed())},
            {"vocab_size", std::to_string(c.vocab_size)},
            {"block_size", std::to_string(c.block_size)},
            {"n_layer", std::to_string(c.n_layer)},
            {"n_head", std::to_string(c.n_head)},
            {"n_embd", std::to_string(c.n_embd)},
            {"bias", c.bias ? "1" : "0"}};
  }
  // Every rank calls it; rank 0 writes (under FSDP from the state gathered to it).
  void save() {
    if (o.save.empty()) return;
    const std::map<std::string, std::string> fields = extra();
    if (fsdp) {
      save_gathered_training_checkpoint(o.save, *fsdp, *optimizer, nullptr, pos.step, fields, &scaler);
      return;
    }
    if (!dp.is_main()) return;
    SavingCheckpoint saving(o.save);
    optim::save_training_checkpoint(o.save, {*model, *optimizer, nullptr, pos.step, fields, &scaler});
  }
  // Under --ddp and --fsdp every rank stops at the same step.
  bool stop_now() {
    if (!dp.group) return should_stop(pos.step);
    return distributed::any_rank_wants(should_stop(pos.step), *dp.group);
  }
};

// Validates the options, joins the process group (--ddp, --fsdp) and tries
// the outputs before anything is read.
Run::Run(const TrainOptions& options, const TrainerHooks& hooks)
    : o((validate(options), options)),
      dp(o.ddp || o.fsdp || o.pp > 0
             ? start_data_parallel(
                   {.backend = o.backend, .timeout = o.timeout, .heartbeat_timeout = o.heartbeat_timeout},
                   o.fsdp ? "--fsdp" : o.ddp ? "--ddp" : "--pp")
             : DataParallelRun{}),
      out(dp.is_main() ? hooks.out : &silent),
      err(dp.is_main() ? hooks.err : &silent),
      rank_out(hooks.out),
      interactive(hooks.interactive),
      should_stop(hooks.should_stop ? hooks.should_stop : [](int64_t) { return interrupt_requested(); }),
      device(o.device),
      amp_dtype(autocast_dtype(device)),
      scaler({.enabled = o.amp && device.is_cuda()}) {
  if (o.pp > 0) check_pipeline_world_size(o.pp, dp.world_size, "kiln-gpt train");
  check_outputs_on_main({{"--save", o.save}, {"--log", o.log}, {"--plot", o.plot}}, dp);
  if (o.threads > 0) set_num_threads(o.threads);
  if (dp.is_main()) warn_if_oversubscribed(*err, "kiln-gpt", dp.local_world_size);
}

// The text, its tokenizer (a resumed run's from its checkpoint) and the batches.
void open_data(Run& run) {
  const TrainOptions& o = run.o;
  run.corpus = read_corpus(o.data);
  std::shared_ptr<data::Tokenizer> tokenizer;
  if (o.resume.empty()) {
    tokenizer = build_tokenizer(o, run.corpus.text);
  } else {
    std::map<std::string, std::string> metadata;
    load_safetensors(o.resume, &metadata);
    const std::map<std::string, std::string> extra = extra_strings(metadata);
    const CheckpointFields f(extra, o.resume, "kiln-gpt");
    f.check_recipe(recipe(o, run.data_world()));
    KILN_CHECK(f.text("text_hash") == std::to_string(run.corpus.hash), "--resume '", o.resume,
               "': the checkpoint was trained on another text (", f.text("text_bytes"), " bytes, hash ",
               f.text("text_hash"), ") than ", run.corpus.description, " (", run.corpus.text.size(), " bytes, hash ",
               run.corpus.hash, "); resume with the --data of the saved run");
    tokenizer = data::tokenizer_from_text(f.text("tokenizer"), "the tokenizer in --resume '" + o.resume + "'");
  }
  run.tokenizer_text = tokenizer->to_text();
  run.data = open_text_data(run.corpus, std::move(tokenizer), o, run.data_world());
}

// The GPT from manual_seed(seed), on its device; then, across processes,
// the generator dropout draws from seeded per rank (Note [kiln-gpt across
// processes]).
void build_model(Run& run) {
  manual_seed(run.o.seed);
  run.model = std::make_shared<nn::GPT>(model_config(run.o, run.data.tokenizer->vocab_size()));
  run.model->to(run.device);
  run.model->train();
  run.parameters = run.model->num_parameters(false);
  run.trained = run.model.get();
  if (run.dp.group && run.o.pp == 0) {
    default_generator().set_state(distributed::per_rank_seed(run.o.seed, run.dp.rank), 0);
  }
}

// --pp: the GPT cut into the schedule's stages by blocks (even_balance),
// this rank's kept and the rest dropped with the whole model; the
// pipelines that train and evaluate them (Note [Trainers under pipeline
// parallelism]).
void split_model(Run& run) {
  const pp::Schedule schedule = training_schedule(pipeline_flags(run.o), run.o.batch_size);
  run.blocks_per_stage = nn::gpt::even_balance(run.o.n_layer, schedule.num_stages);
  const nn::gpt::StageSplit split = nn::gpt::split_into_stages(*run.model, run.blocks_per_stage);
  run.held = std::make_shared<nn::Sequential>();
  for (int s : schedule.stages_of(run.dp.rank)) {
    run.stages[s] = split.stages[s];
    run.held->push_back(split.stages[s]);
  }
  pp::PipelineOptions options;
  options.tied = split.tied;
  auto loss = [](const nn::TensorList& outputs, const Tensor& target) {
    return nn::GPT::loss_from_logits(outputs[0], target);
  };
  run.pipe = std::make_unique<pp::Pipeline>(schedule, run.stages, loss, run.dp.group, options);
  run.eval_pipe =
      std::make_unique<pp::Pipeline>(evaluation_schedule(schedule), run.stages, loss, run.dp.group, options);
  run.model.reset();
  run.trained = run.held.get();
}

// --ddp or --fsdp: the wrapper the steps call, made once the optimizer (and
// a resumed run's state) is set up over the full parameters; under FSDP the
// optimizer's state is then cut to this rank's shards (Note [Trainers under
// FSDP]).
void wrap_model(Run& run) {
  if (run.o.ddp) {
    distributed::DDPOptions options;
    options.group = run.dp.group;
    run.ddp = std::make_shared<distributed::DistributedDataParallel>(run.model, options);
    run.trained = run.ddp.get();
  } else if (run.o.fsdp) {
    distributed::fsdp::FSDPOptions options;
    options.group = run.dp.group;
    options.strategy = distributed::fsdp::parse_sharding_strategy(run.o.fsdp_strategy);
    options.wrap_policy = distributed::fsdp::wrap_by_class<nn::gpt::Block>();
    options.cpu_offload = run.o.fsdp_cpu_offload;
    options.compute_device = run.device;
    run.fsdp = std::make_shared<distributed::fsdp::FullyShardedDataParallel>(run.model, options);
    run.trained = run.fsdp.get();
    shard_optimizer_state(*run.fsdp, *run.optimizer);
  }
}

// AdamW over nanoGPT's weight-decay groups, and the position: from --resume
// (Note [Exact resume of kiln-gpt]), or the start with a fresh log.
void set_up_training(Run& run) {
  const TrainOptions& o = run.o;
  // Under --pp, this rank's parameters (a middle stage of no blocks has none).
  const std::vector<Tensor> parameters = run.pipe ? run.pipe->parameters() : run.model->parameters();
  if (!parameters.empty()) {
    run.optimizer = std::make_unique<optim::AdamW>(
        optim::weight_decay_groups(parameters, o.weight_decay),
        optim::AdamWOptions(o.lr).beta1(o.beta1).beta2(o.beta2).weight_decay(o.weight_decay));
  }
  if (o.resume.empty()) {
    if (!o.log.empty() && run.dp.is_main()) start_jsonl(o.log);
    wrap_model(run);
    return;
  }
  const optim::LoadedCheckpoint loaded =
      optim::load_training_checkpoint(o.resume, {*run.model, *run.optimizer, nullptr, 0, {}, &run.scaler});
  // The checkpoint holds rank 0's generator; each rank goes on from its own
  // seed at the same offset (every rank has drawn as much).
  if (run.dp.group) {
    default_generator().set_state(distributed::per_rank_seed(o.seed, run.dp.rank), default_generator().offset());
  }
  const CheckpointFields f(loaded.extra, o.resume, "kiln-gpt");
  KILN_CHECK(loaded.step <= o.steps, "--resume '", o.resume, "': the checkpoint is at step ", loaded.step,
             " of a run of --steps ", o.steps);
  run.pos.step = loaded.step;
  run.pos.history = f.parsed("history", history_from_json);
  run.pos.loss_steps = f.integer("loss_steps", 0, loaded.step);
  run.loss_sum = RunningLossSum(f.number("loss_sum"));
  run.elapsed_before = f.number("elapsed_seconds");
  KILN_CHECK(!run.pos.history.empty(), "--resume '", o.resume, "': checkpoint field 'history' holds no evaluation");
  *run.out << "resuming " << o.resume << " at step " << run.pos.step << "/" << o.steps << "\n";
  wrap_model(run);
}

void print_header(const Run& run) {
  const TrainOptions& o = run.o;
  const TextData& d = run.data;
  *run.out << "GPT (" << run.parameters << " parameters: " << o.n_layer << " layers, " << o.n_head << " heads, width "
           << o.n_embd << ", block " << o.block_size << ") on " << run.corpus.description << ": " << d.tokenizer->name()
           << " tokenizer of " << d.tokenizer->vocab_size() << " tokens, " << d.train->num_tokens() << " training and "
           << d.val->num_tokens() << " validation tokens\n"
           << recipe(o, run.data_world()) << ", " << get_num_threads() << " threads, device " << run.device.str()
           << (o.amp ? ", mixed precision " + std::string(dtype_name(run.amp_dtype)) : std::string());
  if (run.pipe) {
    const pp::Schedule& s = run.pipe->schedule();
    *run.out << ", pipeline of " << s.num_stages << " stages over " << run.dp.world_size << " processes ("
             << run.dp.group->backend_name() << "), schedule " << s.name << ", " << s.num_micro_batches
             << " micro-batches, blocks per stage";
    for (int64_t b : run.blocks_per_stage) *run.out << " " << b;
  } else if (run.dp.group) {
    *run.out << ", " << run.dp.world_size << " processes (" << run.dp.group->backend_name() << ") of batch "
             << o.batch_size;
  }
  if (run.fsdp) {
    *run.out << ", FSDP " << distributed::fsdp::sharding_strategy_name(run.fsdp->options().strategy) << " in "
             << run.fsdp->units().size() << " units";
  }
  *run.out << "\n";
}

// Under --ddp and --fsdp every rank prints what it holds (Note [Trainers
// under FSDP]) before the first step, then restarts the allocator's peak so
// that the line at the end shows training's.
void print_memory_at_start(Run& run) {
  if (!run.dp.group) return;
  const nn::Module& held = run.held ? static_cast<const nn::Module&>(*run.held) : *run.model;
  print_memory_line(*run.rank_out, run.dp.rank, "at the start", held, run.optimizer.get(), run.device);
  reset_peak_memory(run.device);
}

void print_memory_at_end(Run& run) {
  if (!run.dp.group) return;
  const nn::Module& held = run.held ? static_cast<const nn::Module&>(*run.held) : *run.model;
  print_memory_line(*run.rank_out, run.dp.rank, "at the end", held, run.optimizer.get(), run.device);
}

// The mean loss over `batches` (each batch weighted by its windows) of
// `model`, in eval mode without gradients. Across processes each rank
// evaluates its rows of each batch and the sums are summed over the ranks; a
// rank with no rows of a batch runs the model on its first row, counting
// nothing, since under FSDP every rank runs the model as often as the others.
double mean_loss(Run& run, nn::Module& model, const data::FixedWindowBatches& batches) {
  std::vector<double> sums = {0, 0};  // loss x windows, windows
  for (int64_t k = 0; k < batches.num_batches(); ++k) {
    const data::Batch b = batches.batch(k);
    const auto [begin, end] = run.my_rows(b.data.size(0));
    const int64_t rows = end - begin;
    const Tensor x = b.data.narrow(0, rows > 0 ? begin : 0, std::max<int64_t>(rows, 1)).to(run.device);
    const Tensor y = b.target.narrow(0, rows > 0 ? begin : 0, std::max<int64_t>(rows, 1)).to(run.device);
    Tensor loss;
    {
      AutocastGuard autocast(run.device.type, run.amp_dtype, run.o.amp);
      loss = nn::GPT::loss_from_logits(model(x), y);
    }
    sums[0] += loss.item<double>() * static_cast<double>(rows);
    sums[1] += static_cast<double>(rows);
  }
  if (run.dp.group) distributed::all_reduce_sum(sums, *run.dp.group);
  return sums[0] / sums[1];
}

// The same under --pp: each batch whole through the evaluation pipeline,
// whose loss exists on the last stage's rank; the sums are summed over the
// ranks (the others add zeros), so every rank ends with the one-process value.
double pipeline_mean_loss(Run& run, const data::FixedWindowBatches& batches) {
  std::vector<double> sums = {0, 0};  // loss x windows, windows
  for (int64_t k = 0; k < batches.num_batches(); ++k) {
    const data::Batch b = batches.batch(k);
    const Tensor loss = run.eval_pipe->evaluate({b.data}, b.target);
    if (!loss.defined()) continue;
    sums[0] += loss.item<double>() * static_cast<double>(b.data.size(0));
    sums[1] += static_cast<double>(b.data.size(0));
  }
  distributed::all_reduce_sum(sums, *run.dp.group);
  return sums[0] / sums[1];
}

// Evaluates both splits, prints the line, then writes the checkpoint first,
// the log and the chart (a chart that cannot be written is warned about;
// it is redrawn whole at the next evaluation).
void record_evaluation(Run& run) {
  const TrainOptions& o = run.o;
  Position& pos = run.pos;
  EvalRecord r{.step = pos.step, .lr = pos.step > 0 ? learning_rate(o, pos.step - 1) : 0.0};
  if (run.pipe) {
    run.held->eval();
    r.train_loss = pipeline_mean_loss(run, *run.data.train_eval);
    r.val_loss = pipeline_mean_loss(run, *run.data.val_eval);
    run.held->train();
  } else {
    NoGradGuard no_grad;
    // Through FSDP, whose units gather their shards; otherwise the plain
    // model (DDP's replica is the model itself).
    nn::Module& model = run.fsdp ? static_cast<nn::Module&>(*run.fsdp) : *run.model;
    model.eval();
    r.train_loss = mean_loss(run, model, *run.data.train_eval);
    r.val_loss = mean_loss(run, model, *run.data.val_eval);
    model.train();
  }
  r.tokens_per_second = run.stretch_seconds > 0 ? static_cast<double>(run.stretch_tokens) / run.stretch_seconds : 0.0;
  r.elapsed_seconds = run.elapsed();
  run.stretch_tokens = 0, run.stretch_seconds = 0;
  pos.history.push_back(r);
  pos.loss_steps = 0;
  run.loss_sum = RunningLossSum();
  char line[256];
  std::snprintf(line, sizeof line, "step %lld/%lld  train loss %.4f  val loss %.4f  lr %.3g  %.0f tok/s  elapsed %s",
                static_cast<long long>(r.step), static_cast<long long>(o.steps), r.train_loss, r.val_loss, r.lr,
                r.tokens_per_second, format_duration(r.elapsed_seconds).c_str());
  *run.out << line << "\n" << std::flush;
  run.save();
  if (!run.dp.is_main()) return;
  if (!o.log.empty()) append_jsonl(o.log, to_json_line(r));
  if (o.plot.empty()) return;
  try {
    write_chart_svg(o.plot, loss_chart(pos.history));
  } catch (const Error& e) {
    *run.err << "kiln-gpt: warning: " << e.message() << "; training goes on\n" << std::flush;
  }
}

// One optimizer step on training batch pos.step under --pp: the whole batch
// through the pipeline (stage 0's rank reads its inputs, the last stage's
// rank its targets), the clip by the norm over every stage, AdamW on this
// rank's parameters; the loss comes from the last stage's rank.
void pipeline_train_step(Run& run) {
  const TrainOptions& o = run.o;
  const Clock::time_point start = Clock::now();
  if (run.optimizer) {
    const double lr = learning_rate(o, run.pos.step);
    for (size_t g = 0; g < run.optimizer->num_param_groups(); ++g) run.optimizer->set_lr(g, lr);
  }
  const data::Batch batch = run.data.batches->batch(run.pos.step);  // (B, T) Int64 each
  const Tensor loss = run.pipe->step({batch.data}, batch.target);
  if (o.grad_clip > 0) run.pipe->clip_grad_norm_(o.grad_clip);
  if (run.optimizer) {
    run.optimizer->step();
    run.optimizer->zero_grad();
  }
  run.loss_sum.add(loss_from_last_stage(loss, *run.pipe, *run.dp.group), 1);
  ++run.pos.loss_steps;
  ++run.pos.step;
  run.stretch_tokens += batch.data.numel();
  run.stretch_seconds += std::chrono::duration<double>(Clock::now() - start).count();
}

// One optimizer step on training batch pos.step (this rank's rows of it):
// the lr of the schedule, forward under autocast, backward, gradient
// clipping, AdamW.
void train_step(Run& run) {
  if (run.pipe) return pipeline_train_step(run);
  const TrainOptions& o = run.o;
  const Clock::time_point start = Clock::now();
  const double lr = learning_rate(o, run.pos.step);
  for (size_t g = 0; g < run.optimizer->num_param_groups(); ++g) run.optimizer->set_lr(g, lr);
  const data::Batch batch = run.data.batches->batch(run.pos.step);  // (G, T): the global batch
  const auto [begin, end] = run.my_rows(batch.data.size(0));
  Tensor x = batch.data.narrow(0, begin, end - begin).to(run.device);    // (B, T) Int64
  Tensor y = batch.target.narrow(0, begin, end - begin).to(run.device);  // (B, T) Int64
  Tensor loss;
  {
    AutocastGuard autocast(run.device.type, run.amp_dtype, o.amp);
    loss = nn::GPT::loss_from_logits((*run.trained)(x), y);
  }
  run.scaler.scale(loss).backward();
  if (o.grad_clip > 0) {
    run.scaler.unscale_(*run.optimizer);
    if (run.fsdp) {
      run.fsdp->clip_grad_norm_(o.grad_clip);  // the norm over every rank's shards
    } else {
      optim::clip_grad_norm_(run.model->parameters(), o.grad_clip);
    }
  }
  run.scaler.step(*run.optimizer);
  run.scaler.update();
  run.optimizer->zero_grad();
  run.loss_sum.add(loss, 1);
  ++run.pos.loss_steps;
  ++run.pos.step;
  run.stretch_tokens += batch.data.numel();
  run.stretch_seconds += std::chrono::duration<double>(Clock::now() - start).count();
}

// At step 0, every eval_interval steps and after the last step, unless
// the history has this step already (a run resumed from an evaluation's
// checkpoint). A run interrupted at an evaluation's step evaluates when it
// resumes, so its history is the uninterrupted run's.
bool evaluation_due(const Run& run) {
  const Position& pos = run.pos;
  if (pos.history.empty()) return true;
  return pos.history.back().step != pos.step && (pos.step % run.o.eval_interval == 0 || pos.step == run.o.steps);
}

// Trains up to the next evaluation's step, with a progress line of its own
// (the speed and the time left leave the evaluations out). Returns false
// when asked to stop after a step before the last.
bool train_until_evaluation(Run& run) {
  const TrainOptions& o = run.o;
  Position& pos = run.pos;
  ProgressLine progress(*run.out, run.interactive, "train", o.steps, pos.step);
  progress.set_unit("tok");
  progress.set_plain_lines(4 * ((o.steps + o.eval_interval - 1) / o.eval_interval));
  int64_t tokens = 0;
  do {
    train_step(run);
    tokens += o.batch_size * run.data_world() * o.block_size;
    // Rank 0's running loss: reading the others' would be a collective per update.
    progress.update(
        pos.step, [&] { return run.loss_sum.read() / static_cast<double>(pos.loss_steps); }, tokens);
    if (pos.step < o.steps && run.stop_now()) {
      progress.finish();
      return false;
    }
  } while (pos.step % o.eval_interval != 0 && pos.step < o.steps);
  progress.finish();
  return true;
}

// The end of training: every rank's memory line and, under FSDP, the model
// the run returns, a plain GPT with the gathered parameters; then the
// process group is left (if this run joined it).
TrainingResult end_run(Run& run, RunStatus status) {
  print_memory_at_end(run);
  if (run.fsdp) {
    auto plain = std::make_shared<nn::GPT>(run.model->config);
    plain->to(run.device);
    load_gathered_state(*run.fsdp, *plain);
    run.model = plain;
  }
  if (run.pipe) {
    // Every rank gathers the whole trained GPT from the stages' ranks.
    auto whole = std::make_shared<nn::GPT>(model_config(run.o, run.data.tokenizer->vocab_size()));
    gather_stages(run.stages, nn::gpt::split_into_stages(*whole, run.blocks_per_stage).stages,
                  run.pipe->schedule(), *run.dp.group);
    run.model = whole;
  }
  finish_data_parallel(run.dp);
  return {.status = status,
          .history = run.pos.history,
          .model = run.model,
          .tokenizer = run.data.tokenizer,
          .step = run.pos.step};
}

// Stops the run at its position, writing the checkpoint (with --save).
TrainingResult interrupted(Run& run) {
  run.save();
  *run.out << "interrupted at step " << run.pos.step << "/" << run.o.steps;
  if (!run.o.save.empty()) {
    *run.out << "; checkpoint saved to " << run.o.save << " (continue with --resume " << run.o.save << ")";
  }
  *run.out << "\n" << std::flush;
  return end_run(run, RunStatus::Interrupted);
}

TrainingResult finished(Run& run) {
  const EvalRecord& last = run.pos.history.back();
  *run.out << "trained " << run.o.steps << " steps in " << format_duration(last.elapsed_seconds) << ": validation loss "
           << last.val_loss;
  if (!run.o.save.empty()) *run.out << "; sample with kiln-gpt sample --checkpoint " << run.o.save;
  *run.out << "\n" << std::flush;
  return end_run(run, RunStatus::Finished);
}

}  // namespace

TrainingResult run_training(const TrainOptions& o, const TrainerHooks& hooks) {
  Run run(o, hooks);
  open_data(run);
  build_model(run);
  if (o.pp > 0) split_model(run);
  set_up_training(run);
  print_header(run);
  print_memory_at_start(run);
  for (;;) {
    if (evaluation_due(run)) record_evaluation(run);
    if (run.pos.step == o.steps) return finished(run);
    if (!train_until_evaluation(run)) return interrupted(run);
  }
}

CheckpointModel read_checkpoint_model(const std::string& path) {
  std::map<std::string, std::string> metadata;
  TensorDict tensors = load_safetensors(path, &metadata);
  const std::map<std::string, std::string> extra = extra_strings(metadata);
  const CheckpointFields f(extra, path, "kiln-gpt", "--checkpoint");
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  CheckpointModel m;
  m.config = {.vocab_size = f.integer("vocab_size", 1, kMax),
              .block_size = f.integer("block_size", 1, kMax),
              .n_layer = f.integer("n_layer", 1, kMax),
              .n_head = f.integer("n_head", 1, kMax),
              .n_embd = f.integer("n_embd", 1, kMax),
              .dropout = 0.0,
              .bias = f.integer("bias", 0, 1) == 1};
  m.tokenizer = data::tokenizer_from_text(f.text("tokenizer"), "the tokenizer in --checkpoint '" + path + "'");
  KILN_CHECK(m.tokenizer->vocab_size() == m.config.vocab_size, "--checkpoint '", path, "': its tokenizer has ",
             m.tokenizer->vocab_size(), " tokens but its model ", m.config.vocab_size);
  const std::string prefix = "model.";
  for (const auto& [name, tensor] : tensors) {
    if (name.starts_with(prefix)) m.weights.insert(name.substr(prefix.size()), tensor);
  }
  return m;
}

}  // namespace kiln::apps::gpt
