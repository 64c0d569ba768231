// fsdp: GPT training on several ranks over gloo, with Kiln's
// FullyShardedDataParallel or, for comparison, its DistributedDataParallel,
// in global tokens per second and per-rank peak memory. The anchor is
// PyTorch's FSDP on the same workload (bench/fsdp_torch.py);
// bench/fsdp_vs_pytorch.sh runs all three and prints the ratios.
//
// The workload, identical in both programs, is bench/gpt.cpp's training:
// - nn::GPT of a named config (bias off, dropout 0, tied LM head; small: 4
//   layers, 4 heads, width 128, block 128, global batch 32; baby: 6, 6, 384,
//   256, 64) on random token windows (vocabulary 65, Generator(1), the same
//   windows on every rank; rank r of N trains on rows [r B / N, (r + 1) B / N)
//   of each global batch of B), AdamW (lr 6e-4, betas (0.9, 0.95), weight
//   decay 0.1 on the 2-d weights only), float32, gradients set to none;
// - --mode fsdp: FullyShardedDataParallel with FULL_SHARD, every transformer
//   block a unit (wrap_by_class<nn::gpt::Block>), forward and backward
//   prefetch on (at most 2 gathers in flight: FSDPOptions' defaults);
//   --mode ddp: DistributedDataParallel with its default buckets;
// - one thread per rank (set_num_threads(1)).
// --warmup steps run first; then --steps steps, each timed on rank 0 from its
// start to the end of its optimizer step (every step gathers or reduces, so
// the ranks move in lockstep). tok_s is the global tokens of one step (B x
// block) over the median step time.
//
// Memory, per rank, the largest over the ranks:
// - peak_mib: the CPU allocator's peak (cpu_peak_allocated_bytes) from just
//   before the model is built to the end: every tensor the run holds at its
//   worst moment (parameters, gradients, AdamW's state, activations, gather
//   buffers), and nothing the allocator does not hand out;
// - rss_peak_mib: the growth of the process's resident memory over the same
//   span (the peak resident size, getrusage's ru_maxrss, minus the resident
//   size before the model), what bench/fsdp_torch.py measures for PyTorch,
//   whose CPU allocator keeps no such count.
//
// How the ranks start, as bench/ddp_lenet.cpp: without RANK in the
// environment it starts --world processes of itself, which meet through a
// file store in a temporary folder; with RANK set (kiln-run) it is that rank
// and meets through env://. Rank 0 prints one line:
//   fsdp_kiln mode=fsdp world=2 config=small batch_per_rank=16 steps=20 tok_s=.. step_ms=.. peak_mib=..
//             rss_peak_mib=.. units=5 loss_last=..
//
// Usage: build/bench/fsdp [--mode fsdp|ddp] [--world N] [--config small|baby] [--steps N] [--warmup N]
//                         [--batch B]
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "bench/gpt_configs.h"
#include "bench/rank_processes.h"
#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/fsdp/fully_sharded_data_parallel.h"
#include "distributed/init.h"
#include "kiln.h"
#include "nn/models/gpt.h"
#include "tensor/allocator.h"

namespace {

namespace dist = kiln::distributed;
using kiln::Tensor;
using Clock = std::chrono::steady_clock;
using kiln::bench::kVocab;

struct Options {
  std::string mode = "fsdp";
  int world = 2;  // the driver's; a rank takes WORLD_SIZE
  std::string config = "small";
  int64_t steps = 20;
  int64_t warmup = 3;
  int64_t batch = 0;  // global; 0: the config's
};

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: fsdp [--mode fsdp|ddp] [--world N] [--config small|baby] [--steps N] [--warmup N] [--batch B]\n"
               "       (see the top of bench/fsdp.cpp)\n");
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) usage();
    const char* value = argv[++i];
    if (arg == "--mode") {
      options.mode = value;
    } else if (arg == "--world") {
      options.world = std::atoi(value);
    } else if (arg == "--config") {
      options.config = value;
    } else if (arg == "--steps") {
      options.steps = std::atoll(value);
    } else if (arg == "--warmup") {
      options.warmup = std::atoll(value);
    } else if (arg == "--batch") {
      options.batch = std::atoll(value);
    } else {
      usage();
    }
  }
  KILN_CHECK(options.mode == "fsdp" || options.mode == "ddp", "fsdp: --mode must be fsdp or ddp, got '", options.mode,
             "'");
  KILN_CHECK(options.world >= 1, "fsdp: --world must be at least 1, got ", options.world);
  KILN_CHECK(options.steps >= 1 && options.warmup >= 0, "fsdp: --steps must be >= 1 and --warmup >= 0, got ",
             options.steps, " and ", options.warmup);
  return options;
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The process's resident memory now, and its peak so far, in bytes.
size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}
size_t peak_resident_bytes() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<size_t>(usage.ru_maxrss) * 1024;  // ru_maxrss is in KiB on Linux
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// The largest of each rank's values, on every rank.
std::vector<double> max_over_ranks(std::vector<double> values) {
  Tensor t = kiln::from_vector<double>(values, {static_cast<int64_t>(values.size())});
  dist::default_group().all_reduce(t, dist::ReduceOp::Max)->wait();
  for (size_t i = 0; i < values.size(); ++i) values[i] = t.data<double>()[i];
  return values;
}

int run_rank(const Options& options) {
  kiln::set_num_threads(1);
  kiln::bench::init_rank_process_group();
  const int world = dist::get_world_size();
  const int rank = dist::get_rank();
  kiln::bench::GPTBenchConfig config = kiln::bench::gpt_config_named(options.config, "fsdp");
  if (options.batch > 0) config.batch = options.batch;
  KILN_CHECK(config.batch % world == 0, "fsdp: the world size ", world, " must divide the global batch ", config.batch);
  const int64_t batch = config.batch / world, block = config.model.block_size;

  kiln::Generator gen(1);
  const int64_t steps = options.warmup + options.steps;
  const Tensor data = kiln::randint(0, kVocab, {steps, config.batch, block + 1},
                                    kiln::TensorOptions(kiln::DType::Int64), &gen);  // (S, B, T + 1)

  const size_t resident_before = resident_bytes();
  kiln::cpu_reset_peak_allocated_bytes();
  kiln::manual_seed(0);
  auto model = std::make_shared<kiln::nn::GPT>(config.model);
  kiln::optim::AdamW optimizer(kiln::optim::weight_decay_groups(model->parameters(), 0.1),
                               kiln::optim::AdamWOptions(6e-4).beta1(0.9).beta2(0.95));
  std::shared_ptr<kiln::nn::Module> wrapped;
  size_t units = 0;
  if (options.mode == "fsdp") {
    dist::fsdp::FSDPOptions fsdp_options;
    fsdp_options.strategy = dist::fsdp::ShardingStrategy::FullShard;
    fsdp_options.wrap_policy = dist::fsdp::wrap_by_class<kiln::nn::gpt::Block>();
    auto fsdp = std::make_shared<dist::fsdp::FullyShardedDataParallel>(model, fsdp_options);
    units = fsdp->units().size();
    wrapped = fsdp;
  } else {
    wrapped = std::make_shared<dist::DistributedDataParallel>(model);
  }
  wrapped->train();

  auto step = [&](int64_t s) {
    const Tensor xy = data.select(0, s).narrow(0, rank * batch, batch);  // (b, T + 1)
    optimizer.zero_grad();
    Tensor loss = kiln::nn::GPT::loss_from_logits((*wrapped)(xy.narrow(1, 0, block)), xy.narrow(1, 1, block));
    loss.backward();
    optimizer.step();
    return loss.item<double>();
  };
  for (int64_t s = 0; s < options.warmup; ++s) step(s);
  dist::barrier();
  std::vector<double> step_seconds;
  double loss = 0;
  for (int64_t s = options.warmup; s < steps; ++s) {
    const auto start = Clock::now();
    loss = step(s);
    step_seconds.push_back(seconds_between(start, Clock::now()));
  }
  const std::vector<double> peaks =
      max_over_ranks({static_cast<double>(kiln::cpu_peak_allocated_bytes()),
                      static_cast<double>(std::max(peak_resident_bytes(), resident_before) - resident_before)});
  if (rank == 0) {
    const double step_s = median(step_seconds);
    std::printf(
        "fsdp_kiln mode=%s world=%d config=%s batch_per_rank=%lld steps=%lld tok_s=%.0f step_ms=%.2f peak_mib=%.2f "
        "rss_peak_mib=%.2f units=%zu loss_last=%.4f\n",
        options.mode.c_str(), world, options.config.c_str(), static_cast<long long>(batch),
        static_cast<long long>(options.steps), static_cast<double>(config.batch * block) / step_s, step_s * 1e3,
        peaks[0] / (1 << 20), peaks[1] / (1 << 20), units, loss);
    std::fflush(stdout);
  }
  dist::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return kiln::bench::rank_program_main(argc, argv, "fsdp", parse, run_rank); }
