// ddp_lenet: LeNet-5 trained with DistributedDataParallel over gloo, in
// global images per second, and how much of the gradient all-reduce runs
// behind backward. The anchor is the same workload in PyTorch's DDP
// (bench/ddp_lenet_torch.py); bench/ddp_vs_pytorch.sh runs both and prints
// the ratios.
//
// The workload, identical in both programs, with bench/lenet.cpp's model,
// optimizer and data:
// - LeNet (nn/models/lenet.h) wrapped in DistributedDataParallel with its
//   default buckets (LeNet's 62,006 float32 gradients, 248 KB, fit the 1 MiB
//   first bucket: one all-reduce per step), SGD lr 0.01 momentum 0.9,
//   zero_grad setting gradients to none;
// - global batch 64, so 64 / world images per rank and step; each rank's
//   images come from a DistributedSampler (shuffled with seed 0 + epoch, the
//   same permutation on every rank) and are gathered with index_select from
//   the training set, held in memory as normalised float32;
// - one thread per rank (set_num_threads(1)), gloo: through shared memory on
//   one host (Note [Same-host all-reduce through shared memory]), over TCP
//   loopback with KILN_GLOO_SHM=0 (PyTorch's gloo always takes TCP).
// kWarmupSteps steps (the first batches) run before the clock starts; then
// --steps steps (default: one epoch, floor(N / 64)) are timed between a
// barrier and rank 0's last optimizer step. Every step all-reduces, so no
// rank can finish much before another.
//
// The overlap (Note [DDP buckets] in distributed/ddp/reducer.h): after each
// timed step rank 0 reads the reducer's BackwardTimeline. The communication
// of a step spans from its first bucket's launch to the end of finalize
// (every bucket reduced); the exposed part is finalize itself, where backward
// has nothing left to compute and waits for the network. So
//   hidden_share = 1 - sum(finalize_finished - finalize_started)
//                    / sum(finalize_finished - bucket_launched[0])
// over the timed steps: 1 when every byte moved while backward still ran,
// 0 when all of it came after. A high share can also mean that the training
// thread lost its core to the communication threads right after the launch,
// so read it beside backward_ms (docs/BENCHMARKS.md). Rank 0 also prints the mean time of each
// phase of a step: forward (the batch gather, zero_grad, the forward and the
// loss), backward up to finalize, the exposed wait, and optimizer (the rest
// of backward() after finalize, and the optimizer step).
//
// How the ranks start, either way:
// - the driver: `ddp_lenet --world N ...` without RANK in the environment
//   starts N processes of itself (same arguments) with RANK and WORLD_SIZE
//   set, which meet through init_process_group("gloo", "file://...") in a
//   temporary folder, as bench/allreduce.cpp does;
// - a launcher: with RANK set (kiln-run --nproc-per-node N, torchrun's
//   environment) it is that rank and meets through env://.
// Only rank 0 prints, one line:
//   ddp_lenet world=2 allreduce=shm|tcp batch_per_rank=32 steps=781 images_per_second=.. hidden_share=..
//             forward_ms=.. backward_ms=.. exposed_ms=.. comm_span_ms=.. optimizer_ms=.. loss_last100=..
//
// Usage: build/bench/ddp_lenet [--world N] [--steps S] [--cifar DIR] [--train-images N] [--bucket-kib K]
//        build/apps/kiln-run/kiln-run --nproc-per-node N build/bench/ddp_lenet [--steps S] ...
//        (default: world 2, synthetic data of N = 10000 images; --cifar DIR reads CIFAR-10's binary
//        format, all 50,000 training images unless --train-images says fewer; --bucket-kib sets both
//        bucket caps, to see the overlap with several buckets)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/rank_processes.h"
#include "data/cifar10.h"
#include "data/sampler.h"
#include "distributed/backends/gloo/process_group_gloo.h"
#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/init.h"
#include "kiln.h"

namespace {

namespace F = kiln::nn::functional;
namespace dist = kiln::distributed;
using kiln::Tensor;
using Clock = std::chrono::steady_clock;

constexpr int64_t kGlobalBatch = 64;
constexpr int64_t kWarmupSteps = 5;
constexpr int64_t kLossSteps = 100;  // the last steps whose mean loss is printed

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Options {
  int world = 2;         // the driver's; a rank takes WORLD_SIZE
  int64_t steps = -1;    // timed steps; -1: one epoch
  int64_t train_images = -1;  // -1: 10000 synthetic, or every image of --cifar
  std::string cifar;     // a CIFAR-10 binary folder, or empty for synthetic data
  int64_t bucket_kib = 0;  // 0: DDPOptions' default caps
};

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: ddp_lenet [--world N] [--steps S] [--cifar DIR] [--train-images N] [--bucket-kib K]\n"
               "       (see the top of bench/ddp_lenet.cpp)\n");
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) usage();
    const char* value = argv[++i];
    if (arg == "--world") {
      options.world = std::atoi(value);
    } else if (arg == "--steps") {
      options.steps = std::atoll(value);
    } else if (arg == "--cifar") {
      options.cifar = value;
    } else if (arg == "--train-images") {
      options.train_images = std::atoll(value);
    } else if (arg == "--bucket-kib") {
      options.bucket_kib = std::atoll(value);
    } else {
      usage();
    }
  }
  KILN_CHECK(options.world >= 1 && kGlobalBatch % options.world == 0, "--world must divide the global ",
             "batch ", kGlobalBatch, ", got ", options.world);
  KILN_CHECK(options.steps == -1 || options.steps >= 1, "--steps must be >= 1, got ", options.steps);
  KILN_CHECK(options.train_images == -1 || options.train_images >= kGlobalBatch,
             "--train-images must be >= ", kGlobalBatch, ", got ", options.train_images);
  KILN_CHECK(options.bucket_kib >= 0, "--bucket-kib must be >= 0, got ", options.bucket_kib);
  return options;
}

// ---- a rank process -----------------------------------------------------------------------

struct Data {
  Tensor images;  // (N, 3, 32, 32) float32, normalised
  Tensor labels;  // (N,) int64
};

// As bench/lenet.cpp: noise from a fixed seed, or CIFAR-10 normalised per
// channel (the pixels do not change the speed, but both sides see one data set).
Data load_data(const Options& options) {
  if (options.cifar.empty()) {
    const int64_t n = options.train_images == -1 ? 10000 : options.train_images;
    kiln::manual_seed(1);
    return {kiln::randn({n, 3, 32, 32}), kiln::randint(0, 10, {n})};
  }
  kiln::data::Cifar10Split split = kiln::data::load_cifar10(options.cifar, /*train=*/true);
  const int64_t n = options.train_images == -1 ? split.images.size(0) : options.train_images;
  KILN_CHECK(split.images.size(0) >= n, options.cifar, " holds ", split.images.size(0),
             " training images, fewer than the ", n, " asked for");
  Tensor mean = kiln::from_vector<float>({0.4914f, 0.4822f, 0.4465f}, {1, 3, 1, 1});
  Tensor std = kiln::from_vector<float>({0.2470f, 0.2435f, 0.2616f}, {1, 3, 1, 1});
  Tensor x = kiln::div(split.images.narrow(0, 0, n).to(kiln::DType::Float32), 255.0);
  return {kiln::div(kiln::sub(x, mean), std).contiguous(), split.labels.narrow(0, 0, n).contiguous()};
}

// This rank's batches: step s of an endless sequence of epochs, each the
// rank's DistributedSampler order cut into batches of `batch` (the last,
// partial batch dropped, so every rank takes the same number of steps).
class RankBatches {
 public:
  RankBatches(int64_t dataset_size, int world, int rank, int64_t batch)
      : sampler_(dataset_size, world, rank, /*shuffle=*/true, /*seed=*/0), batch_(batch) {
    KILN_CHECK(sampler_.size() >= batch, dataset_size, " images give rank ", rank, " only ",
               sampler_.size(), ", fewer than its batch of ", batch);
  }

  int64_t steps_per_epoch() const { return sampler_.size() / batch_; }

  // The dataset indices of step s: (batch,) int64.
  Tensor indices(int64_t step) {
    const int64_t epoch = step / steps_per_epoch();
    if (epoch != epoch_) {
      sampler_.set_epoch(epoch);
      order_ = sampler_.indices();
      epoch_ = epoch;
    }
    const auto first = order_.begin() + (step % steps_per_epoch()) * batch_;
    return kiln::from_vector<int64_t>(std::vector<int64_t>(first, first + batch_), {batch_});
  }

 private:
  kiln::data::DistributedSampler sampler_;
  int64_t batch_;
  int64_t epoch_ = -1;
  std::vector<int64_t> order_;
};

// Sums over the timed steps, in seconds.
struct StepTimes {
  double forward = 0, backward = 0, exposed = 0, comm_span = 0, optimizer = 0;
};

int run_rank(const Options& options) {
  kiln::set_num_threads(1);
  kiln::bench::init_rank_process_group();
  const int world = dist::get_world_size();
  const int rank = dist::get_rank();
  KILN_CHECK(kGlobalBatch % world == 0, "the world size ", world, " must divide the global batch ",
             kGlobalBatch);
  const int64_t batch = kGlobalBatch / world;

  const Data data = load_data(options);
  RankBatches batches(data.images.size(0), world, rank, batch);
  const int64_t steps = options.steps == -1 ? batches.steps_per_epoch() : options.steps;

  kiln::manual_seed(0);
  auto model = std::make_shared<kiln::nn::LeNet>();
  dist::DDPOptions ddp_options;
  if (options.bucket_kib > 0) {
    ddp_options.bucket_cap_bytes = ddp_options.first_bucket_cap_bytes = static_cast<size_t>(options.bucket_kib) << 10;
  }
  auto ddp = std::make_shared<dist::DistributedDataParallel>(model, ddp_options);
  ddp->train();
  kiln::optim::SGD optimizer(ddp->parameters(), kiln::optim::SGDOptions(0.01).momentum(0.9));

  StepTimes times;
  double loss_sum = 0;
  auto step = [&](int64_t s, bool timed) {
    const auto start = Clock::now();
    const Tensor index = batches.indices(s);                                     // (batch,)
    const Tensor x = kiln::ops::index_select(data.images, 0, index);             // (batch, 3, 32, 32)
    const Tensor y = kiln::ops::index_select(data.labels, 0, index);             // (batch,)
    optimizer.zero_grad();
    Tensor loss = F::cross_entropy(ddp->forward(x), y);
    const auto forward_done = Clock::now();
    loss.backward();
    const auto backward_done = Clock::now();
    optimizer.step();
    const auto step_done = Clock::now();
    if (!timed) return;
    const dist::BackwardTimeline& t = ddp->reducer().last_timeline();
    times.forward += seconds_between(start, forward_done);
    times.backward += seconds_between(forward_done, t.finalize_started);
    times.exposed += seconds_between(t.finalize_started, t.finalize_finished);
    times.comm_span += seconds_between(t.bucket_launched.front(), t.finalize_finished);
    // What backward() did after finalize (returning through the engine) counts with the optimizer.
    times.optimizer += seconds_between(t.finalize_finished, backward_done) + seconds_between(backward_done, step_done);
    if (s >= steps - kLossSteps) loss_sum += loss.item<double>();
  };

  for (int64_t s = 0; s < kWarmupSteps; ++s) step(s, /*timed=*/false);
  dist::barrier();
  const auto start = Clock::now();
  for (int64_t s = 0; s < steps; ++s) step(s, /*timed=*/true);
  const double seconds = seconds_between(start, Clock::now());

  if (rank == 0) {
    const double ms = 1e3 / static_cast<double>(steps);
    // Which way the gradients went (Note [Same-host all-reduce through shared memory]).
    const auto* gloo = dynamic_cast<const dist::ProcessGroupGloo*>(&dist::default_group());
    const char* path = world == 1 ? "none" : gloo != nullptr && gloo->uses_shared_memory() ? "shm" : "tcp";
    std::printf(
        "ddp_lenet world=%d allreduce=%s batch_per_rank=%lld steps=%lld images_per_second=%.0f hidden_share=%.3f "
        "forward_ms=%.3f backward_ms=%.3f exposed_ms=%.3f comm_span_ms=%.3f optimizer_ms=%.3f loss_last100=%.4f\n",
        world, path, static_cast<long long>(batch), static_cast<long long>(steps),
        static_cast<double>(steps * kGlobalBatch) / seconds, 1.0 - times.exposed / times.comm_span,
        times.forward * ms, times.backward * ms, times.exposed * ms, times.comm_span * ms, times.optimizer * ms,
        loss_sum / static_cast<double>(std::min(steps, kLossSteps)));
    std::fflush(stdout);
  }
  dist::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return kiln::bench::rank_program_main(argc, argv, "ddp_lenet", parse, run_rank); }
