// pipeline: GPT training cut into pipeline stages over gloo ranks, each
// schedule of distributed/pipeline/schedule.h, in global tokens per second
// and the measured bubble. The anchor is PyTorch's
// torch.distributed.pipelining on the same workload (bench/pipeline_torch.py);
// bench/pipeline_vs_pytorch.sh runs both and prints the ratios.
//
// The workload, identical in both programs, is bench/fsdp.cpp's:
// - nn::GPT of bench's small config (4 layers, 4 heads, width 128, block
//   128; bias off, dropout 0, tied LM head, vocabulary 65) on random token
//   windows (Generator(1), the same windows on every rank), a global batch
//   of --batch windows (default 32) per step, AdamW (lr 6e-4, betas (0.9,
//   0.95), weight decay 0.1 on the 2-d weights only), float32, one thread
//   per rank (set_num_threads(1));
// - every rank builds the same model from the same seed and keeps its
//   stages of nn::gpt::split_into_stages(model, even_balance(4, S)): S =
//   --world stages, one per rank, or S = 2 x --world for --schedule
//   interleaved (2 stages per rank, stage s on rank s % world). Stage 0
//   embeds, the last stage applies ln_f and the LM head; the tied
//   embedding / head weight lives on both ends and the pipeline sums its
//   two gradients after the step (PipelineOptions::tied);
// - the batch is cut into --micro-batches micro-batches (default 8); the
//   loss is GPT::loss_from_logits on the last stage; no gradient clipping.
//
// Timing. --warmup steps run first; then --steps steps, each timed on rank
// 0 from its start to the end of its optimizer step (stage 0 is on rank 0
// and its last backward waits for the last stage's, so rank 0 finishes the
// step last). tok_s is the global tokens of one step (B x block) over the
// median step time.
//
// Bubble. Each step every rank reads Pipeline::last_step_times(): the
// seconds of its step() and the seconds it spent computing (F, B, I and W
// actions). The measured bubble of a step is the share of the ranks' time
// not spent computing,
//   bubble = 1 - sum_r compute_r / (world x max_r seconds_r),
// which counts waiting for a neighbour (the schedule's idle time, and any
// imbalance between the stages) and the cost of sending; the figure is its
// median over the timed steps. Beside it: bubble_formula, the textbook
// figure (pp::bubble_formula: (p-1)/(m+p-1), (p-1)/(v m+p-1) interleaved,
// an upper bound for zero-bubble), and bubble_sim, the schedule run on paper
// (pp::simulate with its default costs F = 1, B = 2, I = W = 1): the idle
// time of the schedule alone, without sends or imbalance between the stages.
// bubble_sim_measured runs the schedule on paper with the step's measured
// mean F, B, I and W time of each stage (StepTimes::stage_costs): the bubble
// of a runtime that loses no time between actions on these unequal stages,
// so bubble_sim_measured - bubble_sim is the stages' imbalance, and
// runtime_overhead (the longest step() over that simulated makespan, less
// 1) is the runtime's own cost: transfers, waking threads, the step's size
// broadcast and tied exchange. Both are medians over the timed steps.
// compute_ms_per_rank is the mean compute time of a rank per step.
//
// Activation memory. act_peak_mib is, on the rank where it is largest, the
// CPU allocator's peak during the timed steps less what the rank held
// before them (parameters, gradients, AdamW's state): the activations the
// schedule keeps in flight, and the buffers of its messages.
// act_peak_mib_per_rank lists every rank's. GPipe holds all m micro-batches'
// activations on every rank; 1F1B at most p - r on rank r.
//
// How the ranks start, as bench/fsdp.cpp: without RANK in the environment
// it starts --world processes of itself, which meet through a file store in
// a temporary folder; with RANK set (kiln-run) it is that rank and meets
// through env://. Rank 0 prints one line:
//   pipeline_kiln schedule=1f1b stages=2 micro_batches=8 batch=32 steps=20 tok_s=.. step_ms=.. bubble=..
//                 bubble_formula=.. bubble_sim=.. bubble_sim_measured=.. runtime_overhead=..
//                 compute_ms_per_rank=.. act_peak_mib=.. act_peak_mib_per_rank=..
//                 loss_last=..
// and, on stderr, each rank's median step(), compute and receive-wait times.
//
// Usage: build/bench/pipeline [--schedule gpipe|1f1b|interleaved|zero-bubble] [--micro-batches M] [--batch B]
//                             [--steps N] [--warmup N] [--world N]
#include "distributed/pipeline/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/gpt_configs.h"
#include "bench/rank_processes.h"
#include "distributed/init.h"
#include "distributed/pipeline/schedule.h"
#include "kiln.h"
#include "nn/models/gpt.h"
#include "nn/models/gpt_stages.h"

namespace {

namespace dist = kiln::distributed;
namespace pp = kiln::distributed::pipeline;
using kiln::Tensor;
using Clock = std::chrono::steady_clock;
using kiln::bench::kVocab;

struct Options {
  std::string schedule = "1f1b";
  int world = 2;  // the driver's; a rank takes WORLD_SIZE
  int64_t micro_batches = 8;
  int64_t batch = 32;  // global
  int64_t steps = 20;
  int64_t warmup = 3;
};

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: pipeline [--schedule gpipe|1f1b|interleaved|zero-bubble] [--micro-batches M] [--batch B]\n"
               "                [--steps N] [--warmup N] [--world N]   (see the top of bench/pipeline.cpp)\n");
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) usage();
    const char* value = argv[++i];
    if (arg == "--schedule") {
      options.schedule = value;
    } else if (arg == "--world") {
      options.world = std::atoi(value);
    } else if (arg == "--micro-batches") {
      options.micro_batches = std::atoll(value);
    } else if (arg == "--batch") {
      options.batch = std::atoll(value);
    } else if (arg == "--steps") {
      options.steps = std::atoll(value);
    } else if (arg == "--warmup") {
      options.warmup = std::atoll(value);
    } else {
      usage();
    }
  }
  const auto& names = pp::schedule_names();
  KILN_CHECK(std::find(names.begin(), names.end(), options.schedule) != names.end(),
             "pipeline: --schedule must be gpipe, 1f1b, interleaved or zero-bubble, got '", options.schedule, "'");
  KILN_CHECK(options.world >= 1, "pipeline: --world must be at least 1, got ", options.world);
  KILN_CHECK(options.micro_batches >= 1 && options.batch >= options.micro_batches,
             "pipeline: --micro-batches must be >= 1 and at most --batch, got ", options.micro_batches, " and ",
             options.batch);
  KILN_CHECK(options.steps >= 1 && options.warmup >= 0, "pipeline: --steps must be >= 1 and --warmup >= 0, got ",
             options.steps, " and ", options.warmup);
  return options;
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

int run_rank(const Options& options) {
  kiln::set_num_threads(1);
  kiln::bench::init_rank_process_group();
  const int world = dist::get_world_size();
  const int rank = dist::get_rank();
  kiln::bench::GPTBenchConfig config = kiln::bench::gpt_config_named("small", "pipeline");
  config.batch = options.batch;
  const int64_t block = config.model.block_size;
  const int stages_per_rank = options.schedule == "interleaved" ? 2 : 1;
  const pp::Schedule schedule =
      pp::make_schedule(options.schedule, world, static_cast<int>(options.micro_batches), stages_per_rank);

  kiln::Generator gen(1);
  const int64_t steps = options.warmup + options.steps;
  const Tensor data = kiln::randint(0, kVocab, {steps, config.batch, block + 1},
                                    kiln::TensorOptions(kiln::DType::Int64), &gen);  // (S, B, T + 1)

  kiln::manual_seed(0);
  std::map<int, std::shared_ptr<kiln::nn::Module>> mine;
  kiln::nn::gpt::StageSplit split;
  {
    kiln::nn::GPT model(config.model);  // every rank the same weights; each keeps its stages
    split =
        kiln::nn::gpt::split_into_stages(model, kiln::nn::gpt::even_balance(config.model.n_layer, schedule.num_stages));
    for (int s : schedule.stages_of(rank)) mine[s] = split.stages[s];
  }
  pp::PipelineOptions pipe_options;
  pipe_options.tied = split.tied;
  split.stages.clear();  // drop the other ranks' stages
  for (auto& [s, stage] : mine) stage->train();
  pp::Pipeline pipe(
      schedule, mine,
      [](const pp::TensorList& out, const Tensor& y) { return kiln::nn::GPT::loss_from_logits(out[0], y); },
      dist::default_group_ptr(), pipe_options);
  kiln::optim::AdamW optimizer(kiln::optim::weight_decay_groups(pipe.parameters(), 0.1),
                               kiln::optim::AdamWOptions(6e-4).beta1(0.9).beta2(0.95));

  auto step = [&](int64_t s) {
    const Tensor xy = data.select(0, s);  // (B, T + 1)
    optimizer.zero_grad();
    Tensor loss = pipe.step({xy.narrow(1, 0, block)}, xy.narrow(1, 1, block));
    optimizer.step();
    return loss.defined() ? loss.item<double>() : 0.0;
  };
  for (int64_t s = 0; s < options.warmup; ++s) step(s);
  dist::barrier();
  // Activation memory: the allocator's peak during the timed steps above
  // what the rank held before them (parameters, gradients, AdamW's state).
  const size_t held_before = kiln::cpu_allocated_bytes();
  kiln::cpu_reset_peak_allocated_bytes();
  std::vector<double> step_seconds;
  // (steps, world, 3): each rank fills its own (seconds, compute_seconds, recv_seconds) per step.
  Tensor times = kiln::zeros({options.steps, world, 3}, kiln::TensorOptions(kiln::DType::Float64));
  double* t = times.data<double>();
  // (steps, stages, 4): each stage's rank fills its mean F, B, I and W seconds per step.
  const int stages = schedule.num_stages;
  Tensor costs = kiln::zeros({options.steps, stages, 4}, kiln::TensorOptions(kiln::DType::Float64));
  double* c = costs.data<double>();
  double loss = 0;
  for (int64_t s = options.warmup; s < steps; ++s) {
    const auto start = Clock::now();
    loss = step(s);
    step_seconds.push_back(seconds_between(start, Clock::now()));
    const pp::StepTimes& st = pipe.last_step_times();
    double* mine_t = t + ((s - options.warmup) * world + rank) * 3;
    mine_t[0] = st.seconds;
    mine_t[1] = st.compute_seconds;
    mine_t[2] = st.recv_seconds;
    for (const auto& [stage, cost] : st.stage_costs) {
      double* mine_c = c + ((s - options.warmup) * stages + stage) * 4;
      mine_c[0] = cost.forward;
      mine_c[1] = cost.backward;
      mine_c[2] = cost.backward_input;
      mine_c[3] = cost.backward_weight;
    }
  }
  dist::all_reduce(times);  // every slot is one rank's, the others add zeros
  dist::all_reduce(costs);
  Tensor activation_peak = kiln::zeros({world}, kiln::TensorOptions(kiln::DType::Float64));
  activation_peak.data<double>()[rank] =
      static_cast<double>(kiln::cpu_peak_allocated_bytes() - std::min(held_before, kiln::cpu_peak_allocated_bytes()));
  dist::all_reduce(activation_peak);
  // The last step's loss lives on the last stage's rank; rank 0 prints it.
  Tensor last_loss = kiln::from_vector<double>({pipe.holds_last_stage() ? loss : 0.0}, {1});
  dist::all_reduce(last_loss);
  loss = last_loss.data<double>()[0];
  std::vector<double> bubbles, bubbles_measured_sim, overheads;
  double compute_total = 0;
  std::vector<std::vector<double>> per_rank(world * 3);  // (rank, quantity) -> one value per step
  for (int64_t s = 0; s < options.steps; ++s) {
    double longest = 0, compute = 0;
    for (int r = 0; r < world; ++r) {
      const double* rt = t + (s * world + r) * 3;
      longest = std::max(longest, rt[0]);
      compute += rt[1];
      for (int q = 0; q < 3; ++q) per_rank[r * 3 + q].push_back(rt[q]);
    }
    compute_total += compute;
    bubbles.push_back(1 - compute / (world * longest));
    // The schedule on paper with this step's measured durations per stage.
    std::vector<pp::ActionCosts> stage_costs(static_cast<size_t>(stages));
    for (int st = 0; st < stages; ++st) {
      const double* sc = c + (s * stages + st) * 4;
      stage_costs[static_cast<size_t>(st)] = pp::ActionCosts{sc[0], sc[1], sc[2], sc[3]};
    }
    const pp::Timeline measured_sim = pp::simulate(schedule, stage_costs);
    bubbles_measured_sim.push_back(measured_sim.bubble_fraction);
    overheads.push_back(longest / measured_sim.makespan - 1);
  }
  if (rank == 0) {
    for (int r = 0; r < world; ++r) {
      std::fprintf(stderr, "pipeline_kiln rank %d (stages", r);
      for (int s : schedule.stages_of(r)) std::fprintf(stderr, " %d", s);
      std::fprintf(stderr, "): median step() %.2f ms, compute %.2f ms, waiting in receives %.2f ms\n",
                   median(per_rank[r * 3]) * 1e3, median(per_rank[r * 3 + 1]) * 1e3, median(per_rank[r * 3 + 2]) * 1e3);
    }
    const double step_s = median(step_seconds);
    double peak_max = 0;
    std::string per_rank_peaks;
    for (int r = 0; r < world; ++r) {
      const double peak = activation_peak.data<double>()[r];
      peak_max = std::max(peak_max, peak);
      char text[32];
      std::snprintf(text, sizeof text, "%s%.2f", r ? "," : "", peak / (1 << 20));
      per_rank_peaks += text;
    }
    const double sim = pp::simulate(schedule).bubble_fraction;
    std::printf(
        "pipeline_kiln schedule=%s stages=%d micro_batches=%lld batch=%lld steps=%lld tok_s=%.0f step_ms=%.2f "
        "bubble=%.4f bubble_formula=%.4f bubble_sim=%.4f bubble_sim_measured=%.4f runtime_overhead=%.4f "
        "compute_ms_per_rank=%.2f act_peak_mib=%.2f act_peak_mib_per_rank=%s loss_last=%.4f\n",
        options.schedule.c_str(), schedule.num_stages, static_cast<long long>(options.micro_batches),
        static_cast<long long>(config.batch), static_cast<long long>(options.steps),
        static_cast<double>(config.batch * block) / step_s, step_s * 1e3, median(bubbles), pp::bubble_formula(schedule),
        sim, median(bubbles_measured_sim), median(overheads), compute_total / (options.steps * world) * 1e3,
        peak_max / (1 << 20), per_rank_peaks.c_str(), loss);
    std::fflush(stdout);
  }
  dist::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return kiln::bench::rank_program_main(argc, argv, "pipeline", parse, run_rank); }
