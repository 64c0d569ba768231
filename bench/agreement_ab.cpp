// What the always-on agreement check costs over TCP (Note [Calls in the
// first message] in distributed/backends/gloo/call_exchange.h), measured
// end to end inside one process pair. Each rank makes two gloo groups over
// the same store, both on TCP (KILN_GLOO_SHM=0): "checked", as every
// program gets it, and "unchecked", made with
// ProcessGroupOptions::agreement_check off. It then times
//
//   all_reduce   one all_reduce(...)->wait() of each size on each group,
//                call by call in alternating order;
//   ddp_lenet    one training step of LeNet-5 under DistributedDataParallel
//                (one 248 KB bucket), a model on each group, step by step
//                in alternating order;
//
// and prints the median of the per-pair time ratios checked / unchecked,
// with its quartiles. "again" rows time the unchecked group against itself
// the same way: the noise of the method.
//
// Why in one process pair: from one pair of processes to the next, where
// the scheduler puts each rank's threads (the caller, the communication
// thread, gloo's event loop) moves an exchange's time by up to 2x on a 2-vCPU
// machine, for both builds alike; bench/agreement_cost.sh, which compares
// two builds in separate process pairs, cannot resolve 2% through that.
// Here both sides share the placement, and every pair of processes prints
// its own figures, so a lucky or unlucky placement shows as one line.
//
// Usage: build/bench/agreement_ab [--pairs 4] [--calls 400] [--steps 200]
//                                 [--sizes 262144,524288,1048576,4194304]
// Prints per process pair and benchmark:
//   agreement_ab pair=0 bench=all_reduce bytes=524288 unchecked_us=.. checked_us=.. ratio=.. q1=.. q3=.. again=..

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/rank_processes.h"
#include "distributed/backends/gloo/process_group_gloo.h"
#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/init.h"
#include "kiln.h"

namespace {

using namespace kiln;
namespace dist = kiln::distributed;
namespace F = kiln::nn::functional;
using Clock = std::chrono::steady_clock;

struct Options {
  int world = 2;
  int pairs = 4;
  int calls = 400;
  int steps = 200;
  std::vector<int64_t> sizes{262144, 524288, 1048576, 4194304};
};

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    KILN_CHECK(i + 1 < argc, "agreement_ab: ", flag, " needs a value");
    const std::string value = argv[++i];
    if (flag == "--pairs") {
      options.pairs = std::stoi(value);
    } else if (flag == "--calls") {
      options.calls = std::stoi(value);
    } else if (flag == "--steps") {
      options.steps = std::stoi(value);
    } else if (flag == "--sizes") {
      options.sizes.clear();
      for (size_t start = 0; start <= value.size();) {
        const size_t comma = std::min(value.find(',', start), value.size());
        options.sizes.push_back(std::stoll(value.substr(start, comma - start)));
        start = comma + 1;
      }
    } else {
      KILN_FAIL("agreement_ab: unknown flag ", flag, "; use --pairs N, --calls N, --steps N, --sizes BYTES[,BYTES...]");
    }
  }
  KILN_CHECK(options.pairs > 0 && options.calls > 0 && options.steps > 0,
             "agreement_ab: --pairs, --calls and --steps must be positive");
  return options;
}

double quantile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  const double position = q * static_cast<double>(values.size() - 1);
  const auto low = static_cast<size_t>(position);
  const size_t high = std::min(low + 1, values.size() - 1);
  return values[low] + (position - static_cast<double>(low)) * (values[high] - values[low]);
}

double seconds_of(const std::function<void()>& run) {
  const auto start = Clock::now();
  run();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Times `a` against `b` `n` times, the order alternating; returns each
// side's median seconds and the quartiles of the per-pair ratios a / b.
struct Comparison {
  double a_seconds, b_seconds, ratio, q1, q3;
};

Comparison compare(
    int n, const std::function<void()>& a, const std::function<void()>& b,
    const std::function<void()>& before_each = [] {}) {
  std::vector<double> a_times, b_times, ratios;
  for (int i = 0; i < n; ++i) {
    double ta = 0, tb = 0;
    for (int k = 0; k < 2; ++k) {
      const bool a_now = (k == 0) == (i % 2 == 0);
      before_each();
      (a_now ? ta : tb) = seconds_of(a_now ? a : b);
    }
    a_times.push_back(ta);
    b_times.push_back(tb);
    ratios.push_back(ta / tb);
  }
  return {quantile(a_times, 0.5), quantile(b_times, 0.5), quantile(ratios, 0.5), quantile(ratios, 0.25),
          quantile(ratios, 0.75)};
}

int run_rank(const Options& options, int pair) {
  kiln::set_num_threads(1);
  kiln::bench::init_rank_process_group();
  const int rank = dist::get_rank();
  const int world = dist::get_world_size();
  std::shared_ptr<dist::ProcessGroup> checked = dist::default_group_ptr();
  dist::ProcessGroupOptions unchecked_options;
  unchecked_options.name = "unchecked";
  unchecked_options.timeout = checked->timeout();
  unchecked_options.agreement_check = false;
  std::shared_ptr<dist::ProcessGroup> unchecked =
      dist::make_process_group("gloo", checked->store(), world, rank, unchecked_options);
  const auto* gloo = dynamic_cast<const dist::ProcessGroupGloo*>(checked.get());
  KILN_CHECK(gloo != nullptr && !gloo->uses_shared_memory(),
             "agreement_ab: the groups must go over TCP (the driver sets KILN_GLOO_SHM=0)");

  for (const int64_t bytes : options.sizes) {
    Tensor data = kiln::empty({bytes / 4});
    auto on = [&](dist::ProcessGroup& group) { return [&] { group.all_reduce(data)->wait(); }; };
    auto refill = [&] { data.fill_(1.0); };             // keeps the sums small, outside the timing
    compare(20, on(*checked), on(*unchecked), refill);  // warm-up
    const Comparison c = compare(options.calls, on(*checked), on(*unchecked), refill);
    const Comparison again = compare(options.calls, on(*unchecked), on(*unchecked), refill);
    if (rank == 0) {
      std::printf(
          "agreement_ab pair=%d bench=all_reduce bytes=%lld unchecked_us=%.1f checked_us=%.1f ratio=%.3f q1=%.3f "
          "q3=%.3f again=%.3f\n",
          pair, static_cast<long long>(bytes), c.b_seconds * 1e6, c.a_seconds * 1e6, c.ratio, c.q1, c.q3, again.ratio);
      std::fflush(stdout);
    }
  }

  // One LeNet per group, from the same seed; each rank trains on its own noise.
  constexpr int64_t kBatch = 32;
  struct Trainer {
    std::shared_ptr<dist::DistributedDataParallel> ddp;
    std::unique_ptr<kiln::optim::SGD> optimizer;
  };
  auto trainer_on = [&](const std::shared_ptr<dist::ProcessGroup>& group) {
    kiln::manual_seed(0);
    dist::DDPOptions ddp_options;
    ddp_options.group = group;
    Trainer t;
    t.ddp = std::make_shared<dist::DistributedDataParallel>(std::make_shared<kiln::nn::LeNet>(), ddp_options);
    t.ddp->train();
    t.optimizer = std::make_unique<kiln::optim::SGD>(t.ddp->parameters(), kiln::optim::SGDOptions(0.01).momentum(0.9));
    return t;
  };
  Trainer on_checked = trainer_on(checked), on_unchecked = trainer_on(unchecked);
  kiln::manual_seed(1 + rank);
  const Tensor x = kiln::randn({kBatch, 3, 32, 32});
  const Tensor y = kiln::randint(0, 10, {kBatch});
  auto step_of = [&](Trainer& t) {
    return [&] {
      t.optimizer->zero_grad();
      F::cross_entropy(t.ddp->forward(x), y).backward();
      t.optimizer->step();
    };
  };
  compare(10, step_of(on_checked), step_of(on_unchecked));  // warm-up
  const Comparison c = compare(options.steps, step_of(on_checked), step_of(on_unchecked));
  if (rank == 0) {
    std::printf(
        "agreement_ab pair=%d bench=ddp_lenet batch_per_rank=%lld unchecked_ms=%.3f checked_ms=%.3f ratio=%.3f "
        "q1=%.3f q3=%.3f\n",
        pair, static_cast<long long>(kBatch), c.b_seconds * 1e3, c.a_seconds * 1e3, c.ratio, c.q1, c.q3);
    std::fflush(stdout);
  }
  unchecked.reset();
  dist::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options options = parse(argc, argv);
    if (const char* pair = std::getenv("KILN_BENCH_PAIR")) return run_rank(options, std::atoi(pair));
    ::setenv("KILN_GLOO_SHM", "0", 1);
    for (int pair = 0; pair < options.pairs; ++pair) {
      ::setenv("KILN_BENCH_PAIR", std::to_string(pair).c_str(), 1);
      if (kiln::bench::run_self_on_ranks(argc, argv, options.world, "agreement_ab") != 0) return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    const char* rank = std::getenv("RANK");
    std::fprintf(stderr, "agreement_ab%s%s: %s\n", rank ? " rank " : "", rank ? rank : "", e.what());
    return 1;
  }
}
