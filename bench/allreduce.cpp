// allreduce: Kiln's gloo all_reduce against PyTorch's, in the same run.
//
// Bandwidth as nccl-tests defines it, for an all_reduce of S bytes over n
// ranks taking t seconds:
//   algbw = S / t                      (what the caller sees)
//   busbw = algbw * 2 (n - 1) / n      (what each link carries in a ring:
//                                       reduce-scatter then all-gather, each
//                                       moving (n-1)/n of the data)
// busbw does not depend on n for a bandwidth-optimal algorithm, which is
// what makes figures of different world sizes comparable.
//
// The driver (this program without --rank) starts `ranks` processes of
// itself, which meet through init_process_group("gloo", "file://...") and
// time Kiln's all_reduce at every size, then `ranks` processes of
// bench/allreduce_torch.py (Debian's python3-torch, /usr/bin/python3), which
// time torch.distributed.all_reduce on the gloo backend the same way: a
// warm-up, one timed call to size the loop to about --budget seconds, rank 0
// broadcasting the iteration count, a barrier, then the timed loop. Every
// rank process runs one thread (as the benchmark asks). Rounds
// alternate Kiln and PyTorch so that both see the same machine state, and
// each size's figure is the median over rounds. On a small VM the time of
// an all_reduce up to a few MB is mostly the latency of handing work between
// a rank's threads (the caller, the communication thread and gloo's event
// loop, which polls while another thread holds a connection's lock), and
// it is bimodal: from one process to the next it varies up to 5x, for both
// sides alike, with where the scheduler puts those threads. So there are
// many short rounds (each a new set of processes) and the median of them;
// the best round would report one lucky placement. The ranks are not
// pinned to cores: pinned, each rank's threads share one core and gloo's
// polling loop takes most of it. KILN_BENCH_VERBOSE=1 prints every round.
//
// Usage: build/bench/allreduce [--ranks 2] [--rounds 15] [--budget 0.1]
//                              [--python /usr/bin/python3] [--script bench/allreduce_torch.py]
// Kiln runs twice a round: as a program gets it (on one host, through shared
// memory: Note [Same-host all-reduce through shared memory]) and with
// KILN_GLOO_SHM=0 (over Gloo's TCP pairs, as PyTorch's gloo backend always
// goes). Prints one line per size, ratio = kiln / pytorch and tcp_ratio =
// kiln_tcp / pytorch:
//   allreduce bytes=4096 kiln_busbw=.. kiln_tcp_busbw=.. pytorch_busbw=.. ratio=.. tcp_ratio=..

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench/rank_processes.h"
#include "distributed/init.h"
#include "kiln.h"

namespace {

using namespace kiln;
namespace dist = kiln::distributed;

// 4 KB to 64 MB in factors of 4.
std::vector<int64_t> bench_sizes() {
  std::vector<int64_t> sizes;
  for (int64_t bytes = 4096; bytes <= (int64_t{64} << 20); bytes *= 4) sizes.push_back(bytes);
  return sizes;
}

std::string join_sizes(const std::vector<int64_t>& sizes) {
  std::string text;
  for (int64_t s : sizes) {
    if (!text.empty()) text += ',';
    text += std::to_string(s);
  }
  return text;
}

// ---- a rank process: Kiln's side ----------------------------------------------------------

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Seconds per all_reduce of `tensor`, timed as allreduce_torch.py times it.
double time_all_reduce(const Tensor& tensor, double budget_seconds) {
  auto& group = dist::default_group();
  for (int i = 0; i < 2; ++i) group.all_reduce(tensor)->wait();
  auto start = std::chrono::steady_clock::now();
  group.all_reduce(tensor)->wait();
  const double once = seconds_since(start);
  Tensor count = full({1}, double(std::clamp(static_cast<int64_t>(budget_seconds / std::max(once, 1e-6)),
                                             int64_t{3}, int64_t{1000})),
                      DType::Int64);
  group.broadcast(count, 0)->wait();
  const int64_t iterations = count.at<int64_t>({0});
  group.barrier()->wait();
  start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iterations; ++i) group.all_reduce(tensor)->wait();
  return seconds_since(start) / static_cast<double>(iterations);
}

int run_rank(int rank, int world_size, const std::string& store, const std::vector<int64_t>& sizes, double budget) {
  set_num_threads(1);
  dist::init_process_group("gloo", store, world_size, rank, std::chrono::seconds(60));
  for (int64_t bytes : sizes) {
    Tensor tensor = ones({bytes / 4}, DType::Float32);
    const double seconds = time_all_reduce(tensor, budget);
    if (rank == 0) std::printf("bytes=%lld seconds=%.9f\n", static_cast<long long>(bytes), seconds);
    std::fflush(stdout);
  }
  dist::destroy_process_group();
  return 0;
}

// ---- the driver ---------------------------------------------------------------------------

// Runs `argv` as the ranks of one round (bench/rank_processes.h) and returns
// rank 0's output; exits if a rank fails.
std::string run_ranks(const std::vector<std::string>& argv, int world_size, const std::string& store,
                      const std::vector<int64_t>& sizes, double budget, const std::string& shm = "1") {
  const bench::RankRun run = bench::run_ranks(argv, world_size,
                                              {{"KILN_BENCH_STORE", store},
                                               {"KILN_BENCH_SIZES", join_sizes(sizes)},
                                               {"KILN_BENCH_BUDGET", std::to_string(budget)},
                                               {"KILN_GLOO_SHM", shm}},
                                              /*capture_rank0=*/true);
  if (run.failed_rank >= 0) {
    std::fprintf(stderr, "allreduce: rank %d of %s failed; rank 0's output:\n%s\n", run.failed_rank,
                 argv[0].c_str(), run.rank0_output.c_str());
    std::exit(1);
  }
  return run.rank0_output;
}

// "bytes=N seconds=S" lines into {N: S}.
std::map<int64_t, double> parse_times(const std::string& output) {
  std::map<int64_t, double> times;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    long long bytes = 0;
    double seconds = 0;
    if (std::sscanf(line.c_str(), "bytes=%lld seconds=%lf", &bytes, &seconds) == 2) times[bytes] = seconds;
  }
  return times;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::string self_path() {
  return std::filesystem::read_symlink("/proc/self/exe").string();
}

int run_driver(int world_size, int rounds, double budget, const std::string& python, const std::string& script) {
  const auto sizes = bench_sizes();
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("kiln_allreduce_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::map<int64_t, std::vector<double>> kiln_times, kiln_tcp_times, torch_times;
  for (int round = 0; round < rounds; ++round) {
    const std::string kiln_store = "file://" + (dir / ("kiln" + std::to_string(round))).string();
    const std::string kiln_tcp_store = "file://" + (dir / ("kiln_tcp" + std::to_string(round))).string();
    const std::string torch_store = "file://" + (dir / ("torch" + std::to_string(round))).string();
    for (auto [bytes, s] : parse_times(run_ranks({self_path(), "--rank"}, world_size, kiln_store, sizes, budget))) {
      kiln_times[bytes].push_back(s);
    }
    for (auto [bytes, s] :
         parse_times(run_ranks({self_path(), "--rank"}, world_size, kiln_tcp_store, sizes, budget, "0"))) {
      kiln_tcp_times[bytes].push_back(s);
    }
    for (auto [bytes, s] : parse_times(run_ranks({python, script}, world_size, torch_store, sizes, budget))) {
      torch_times[bytes].push_back(s);
    }
  }
  std::filesystem::remove_all(dir);
  const double bus_factor = 2.0 * (world_size - 1) / world_size;
  std::printf(
      "# all_reduce float32 sum, %d ranks on one host, gloo backend, 1 thread per rank, median of %d rounds;\n"
      "# kiln: shared memory (the default on one host), kiln_tcp: KILN_GLOO_SHM=0, pytorch: its gloo over TCP\n",
      world_size, rounds);
  for (int64_t bytes : sizes) {
    if (kiln_times[bytes].empty() || kiln_tcp_times[bytes].empty() || torch_times[bytes].empty()) {
      std::fprintf(stderr, "allreduce: no time for %lld bytes\n", static_cast<long long>(bytes));
      return 1;
    }
    if (std::getenv("KILN_BENCH_VERBOSE")) {
      std::printf("# %lld bytes, ms per all_reduce by round: kiln", static_cast<long long>(bytes));
      for (double t : kiln_times[bytes]) std::printf(" %.2f", t * 1e3);
      std::printf("; kiln_tcp");
      for (double t : kiln_tcp_times[bytes]) std::printf(" %.2f", t * 1e3);
      std::printf("; pytorch");
      for (double t : torch_times[bytes]) std::printf(" %.2f", t * 1e3);
      std::printf("\n");
    }
    const double kiln_busbw = bytes / median(kiln_times[bytes]) * bus_factor / 1e9;
    const double kiln_tcp_busbw = bytes / median(kiln_tcp_times[bytes]) * bus_factor / 1e9;
    const double torch_busbw = bytes / median(torch_times[bytes]) * bus_factor / 1e9;
    std::printf(
        "allreduce bytes=%lld kiln_busbw=%.3fGB/s kiln_tcp_busbw=%.3fGB/s pytorch_busbw=%.3fGB/s ratio=%.2f "
        "tcp_ratio=%.2f\n",
        static_cast<long long>(bytes), kiln_busbw, kiln_tcp_busbw, torch_busbw, kiln_busbw / torch_busbw,
        kiln_tcp_busbw / torch_busbw);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc >= 2 && std::string(argv[1]) == "--rank") {
      std::vector<int64_t> sizes;
      std::istringstream list(std::getenv("KILN_BENCH_SIZES"));
      for (std::string s; std::getline(list, s, ',');) sizes.push_back(std::stoll(s));
      return run_rank(std::atoi(std::getenv("RANK")), std::atoi(std::getenv("WORLD_SIZE")),
                      std::getenv("KILN_BENCH_STORE"), sizes, std::atof(std::getenv("KILN_BENCH_BUDGET")));
    }
    int ranks = 2, rounds = 15;
    double budget = 0.1;
    std::string python = "/usr/bin/python3";
    std::string script = std::string(KILN_SOURCE_DIR) + "/bench/allreduce_torch.py";
    for (int i = 1; i < argc; ++i) {
      const std::string flag = argv[i];
      if (i + 1 >= argc) {
        std::fprintf(stderr, "allreduce: %s needs a value\n", flag.c_str());
        return 2;
      }
      const std::string value = argv[++i];
      if (flag == "--ranks") {
        ranks = std::stoi(value);
      } else if (flag == "--rounds") {
        rounds = std::stoi(value);
      } else if (flag == "--budget") {
        budget = std::stod(value);
      } else if (flag == "--python") {
        python = value;
      } else if (flag == "--script") {
        script = value;
      } else {
        std::fprintf(stderr, "allreduce: unknown flag %s (see the usage at the top of bench/allreduce.cpp)\n",
                     flag.c_str());
        return 2;
      }
    }
    if (ranks < 2 || rounds < 1 || budget <= 0) {
      std::fprintf(stderr, "allreduce: need --ranks >= 2, --rounds >= 1 and --budget > 0\n");
      return 2;
    }
    return run_driver(ranks, rounds, budget, python, script);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce: %s\n", e.what());
    return 1;
  }
}
